"""The chat WebSocket (`/ws`): checks the handshake, validates frames, routes them, and sends.

The rule: bad input never crashes the server and never loses a stored message. Every bad frame
gets an `error` frame with a code and the connection stays usable, except a frame over the size
limit, after which the connection closes with 1009. The handshake is refused with HTTP 403 when
the host or origin is foreign or nobody is signed in.

A socket is bounded like every other resource (docs/limits.md): more than `ws_frame_rate`
frames in a second get `too_many_frames` and close 1008; a socket silent for `ws_idle_timeout`
with no reply streaming to it, and watching no conversation, closes 1000 (`idle`). Its
credential is checked again before every frame and every `ws_recheck` seconds of silence, and
logging out ends it at once: a socket whose credential is gone gets `session_ended` and closes
1008. Replies it started go on and are stored.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math

from starlette.types import Message
from starlette.websockets import WebSocket

from holdback.app import ws_frames
from holdback.app.auth import credential_key
from holdback.app.limits import FrameRate
from holdback.app.pipeline import Reply
from holdback.app.runtime import Runtime
from holdback.app.sender import Sender
from holdback.app.ws_frames import error_frame
from holdback.errors import describe
from holdback.store.records import User

log = logging.getLogger("holdback.ws")


async def admit(websocket: WebSocket) -> User | None:
    """The user a handshake may open a socket for, or None (the handshake is then refused
    with HTTP 403): the Host, the Origin and the credential are all checked."""
    runtime: Runtime = websocket.app.state.runtime
    if not (runtime.auth.origin_allowed(websocket) and runtime.auth.host_allowed(websocket)):
        await websocket.close(code=1008)  # before accept: the handshake gets HTTP 403
        return None
    user = await runtime.auth.user(websocket)
    if user is None:
        await websocket.close(code=1008)
        return None
    return user


class _Watch:
    """What ends a socket besides its client: its credential ending, or silence."""

    def __init__(self, runtime: Runtime, websocket: WebSocket, user: User) -> None:
        self.runtime = runtime
        self.websocket = websocket
        self.user = user
        settings = runtime.settings
        self.checks = settings.auth != "none"
        self.idle = settings.ws_idle_timeout
        self.recheck = settings.ws_recheck
        self.ended = asyncio.Event()
        self.key = credential_key(websocket) if self.checks else None
        loop = asyncio.get_running_loop()
        self.clock = loop.time
        self.last_frame = self.clock()
        self.last_check = self.last_frame
        self.watches = False  # the socket watches a conversation (`watch` frames)

    def end(self) -> None:
        self.ended.set()

    async def still_valid(self) -> bool:
        """The credential that opened the socket still names its user."""
        self.last_check = self.clock()
        if self.ended.is_set():
            return False
        if not self.checks:
            return True
        user = await self.runtime.auth.user(self.websocket)
        return user is not None and user.id == self.user.id

    async def next(self, watching: list[Reply]) -> Message | str:
        """The client's next message, or why the socket ends: "session_ended" or "idle".

        Silence is counted from the client's last frame, or from the end of the last reply
        streaming to it, whichever is later: a socket watching a reply is never idle."""
        receiving = asyncio.ensure_future(self.websocket.receive())
        ending = asyncio.ensure_future(self.ended.wait())
        try:
            while True:
                streaming = {r.task for r in watching if r.task is not None and not r.task.done()}
                now = self.clock()
                due = self.last_check + self.recheck if self.checks else math.inf
                # A socket that watches a conversation waits for its replies: never idle.
                idle_at = math.inf if streaming or self.watches else self.last_frame + self.idle
                wake = min(due, idle_at)
                done, _ = await asyncio.wait(
                    {receiving, ending, *streaming},
                    timeout=None if wake == math.inf else max(0.0, wake - now),
                    return_when=asyncio.FIRST_COMPLETED,
                )
                if receiving in done:
                    self.last_frame = self.clock()
                    return receiving.result()
                if ending in done:
                    return "session_ended"
                if done & streaming:
                    self.last_frame = self.clock()  # a reply ended: silence starts now
                    continue
                now = self.clock()
                if now >= due and not await self.still_valid():
                    return "session_ended"
                if now >= idle_at:
                    return "idle"
        finally:
            for waiting in (receiving, ending):
                if not waiting.done():
                    waiting.cancel()


async def chat_socket(websocket: WebSocket) -> None:
    runtime: Runtime = websocket.app.state.runtime
    user = await admit(websocket)
    if user is None:
        return
    await websocket.accept()
    settings = runtime.settings
    sender = Sender(websocket, settings.send_queue_bytes, settings.watch_interval)
    writer = asyncio.create_task(sender.run())
    watch = _Watch(runtime, websocket, user)
    if watch.key is not None:
        runtime.auth.sockets.add(watch.key, watch.end)
    rate = FrameRate(settings.ws_frame_rate)
    watching: list[Reply] = []
    try:
        while not sender.closed:
            message = await watch.next(watching)
            if message == "idle":
                await sender.drain()
                await websocket.close(code=1000, reason="idle")
                break
            if message == "session_ended":
                await _close_with(sender, websocket, "session_ended", 1008)
                break
            assert isinstance(message, dict)
            if message["type"] == "websocket.disconnect":
                break
            if not rate.allow():
                await _close_with(sender, websocket, "too_many_frames", 1008)
                break
            if not await watch.still_valid():  # every frame: the credential may be gone
                await _close_with(sender, websocket, "session_ended", 1008)
                break
            if message.get("bytes") is not None:
                sender.send(
                    error_frame("bad_frame", "binary frames are not accepted; send JSON text")
                )
                continue
            text = message.get("text") or ""
            if len(text.encode("utf-8", "surrogatepass")) > settings.max_frame_bytes:
                sender.send(
                    error_frame(
                        "frame_too_large",
                        f"frames are limited to {settings.max_frame_bytes} bytes",
                    )
                )
                await sender.drain()
                await websocket.close(code=1009)
                break
            reply = await _handle(runtime, user.id, text, sender, watch)
            watching = [r for r in watching if r.task is None or not r.task.done()]
            if reply is not None:
                watching.append(reply)
    except Exception as exc:
        log.error("chat socket failed: %s", describe(exc))
    finally:
        if watch.key is not None:
            runtime.auth.sockets.remove(watch.key, watch.end)
        runtime.service.unwatch(sender.send)
        for reply in list(runtime.service.replies.values()):
            reply.detach(sender.send)
            reply.detach(sender.send_watched)
        sender.stop()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(writer, timeout=5)


async def _close_with(sender: Sender, websocket: WebSocket, code: str, close_code: int) -> None:
    """An error frame for why, then the close."""
    sender.send(error_frame(code))
    await sender.drain()
    with contextlib.suppress(Exception):
        await websocket.close(code=close_code)


async def _handle(
    runtime: Runtime, user_id: str, text: str, sender: Sender, watch: _Watch
) -> Reply | None:
    frame, refusal = ws_frames.parse(text)
    if frame is None:
        assert refusal is not None
        sender.send(refusal)
        return None
    if frame["type"] in ws_frames.WATCHING:
        watch.watches = True
    return await ws_frames.route(runtime.service, user_id, frame, sender)
