"""Bounds on what one client can make the server hold, and the headers every response carries.

The rules:
- A request body is bounded per route (`body_limit`; `/api/uploads` takes a file of up to
  `max_upload_bytes`, and is refused as `upload_too_large`): a declared `Content-Length` over the
  bound is refused with 413 before a byte of the body is read, and a body that grows past it
  while it arrives is refused the moment it does, so no more than the bound is ever held. The
  whole body must arrive within `body_timeout` seconds, or the request gets 408. Both close the
  connection, since the rest of the body is never read.
- A WebSocket client may send at most `ws_frame_rate` frames in any one second (`FrameRate`).
- Every HTTP response (pages, files and API) carries a strict Content-Security-Policy that
  forbids framing and inline script, `nosniff` and `no-referrer`.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from holdback.app.settings import Settings
from holdback.errors import HoldbackError, wire_message

# The pages need nothing but their own origin: scripts and styles are files (no inline script
# or style), images come from the same origin only, the sockets are same-origin. No page may
# be framed by another site (clickjacking), which a <meta> policy cannot forbid.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; img-src 'self'; style-src 'self'; script-src 'self'; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)
SECURITY_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),  # frame-ancestors for browsers that predate it
)


# The route that takes files, and what a multipart body may add to its file: the boundaries
# and each part's headers (the file's name is at most a few hundred bytes of them).
UPLOAD_PATH = "/api/uploads"
MULTIPART_OVERHEAD = 16 * 1024


def body_limit(settings: Settings, path: str) -> int:
    """The largest request body, in bytes, that `path` accepts."""
    if path == "/api/login":
        return settings.max_login_body_bytes
    if path == UPLOAD_PATH:
        return settings.max_upload_bytes + MULTIPART_OVERHEAD
    return settings.max_body_bytes


def too_large_code(path: str) -> str:
    """The code a body over `path`'s limit is refused with: an upload's names the file."""
    return "upload_too_large" if path == UPLOAD_PATH else "body_too_large"


class BodyTooLargeError(HoldbackError):
    """A request body is larger than its route accepts."""

    code = "body_too_large"


class BodyTimeoutError(HoldbackError):
    """A request body did not arrive within the body timeout."""

    code = "body_timeout"


async def refuse(send: Send, status: int, code: str, **extra: object) -> None:
    """An error response that also ends the connection (the request may still be arriving)."""
    body = orjson.dumps({"code": code, "message": wire_message(code), **extra})
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class RequestLimits:
    """ASGI middleware: the body size and body time bounds of every HTTP request."""

    def __init__(self, app: ASGIApp, settings: Settings) -> None:
        self.app = app
        self.settings = settings

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = body_limit(self.settings, scope.get("path", ""))
        declared = _content_length(scope)
        if declared is not None and declared > limit:
            await refuse(send, 413, too_large_code(scope.get("path", "")), limit=limit)
            return
        deadline = asyncio.get_running_loop().time() + self.settings.body_timeout
        received = 0
        body_done = False
        started = False

        async def limited_receive() -> Message:
            nonlocal received, body_done
            if body_done:
                return await receive()
            try:
                async with asyncio.timeout_at(deadline):
                    message = await receive()
            except TimeoutError:
                raise BodyTimeoutError("the request body did not arrive in time") from None
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise BodyTooLargeError("the request body is over its route's limit")
                body_done = not message.get("more_body", False)
            else:
                body_done = True
            return message

        async def watch(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, watch)
        except BodyTooLargeError:
            if started:
                raise
            await refuse(send, 413, too_large_code(scope.get("path", "")), limit=limit)
        except BodyTimeoutError:
            if started:
                raise
            await refuse(send, 408, "body_timeout")


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None  # the HTTP parser refuses it before the app is called
    return None


class SecurityHeaders:
    """ASGI middleware: the security headers on every HTTP response, whoever made it."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                present = {name.lower() for name, _ in message.get("headers", ())}
                extra = [h for h in SECURITY_HEADERS if h[0] not in present]
                message = {**message, "headers": [*message.get("headers", ()), *extra]}
            await send(message)

        await self.app(scope, receive, with_headers)


class FrameRate:
    """At most `per_second` frames in any window of one second (a sliding window)."""

    def __init__(self, per_second: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.per_second = per_second
        self.clock = clock
        self._times: deque[float] = deque(maxlen=per_second)

    def allow(self) -> bool:
        now = self.clock()
        if len(self._times) == self.per_second and now - self._times[0] < 1.0:
            return False
        self._times.append(now)
        return True
