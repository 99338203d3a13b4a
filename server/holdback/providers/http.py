"""The one async pump between an upstream HTTP stream and a sans-I/O stream parser.

The rules it keeps:

- every upstream fault becomes exactly one `StreamError` event, and the stream ends there;
  nothing is raised to the caller for anything the upstream or the network did. The faults
  are the named `holdback.errors.UpstreamError`s the client (`transport.py`) and the decoder
  (`sse.py`) raise, and each keeps its own code: a malformed response is a framing error,
  never "closed before the stream began";
- a request is retried only before anything was yielded from it: after a refused or timed-out
  connection, an HTTP 429 or 5xx answer, or a connection that closed or was reset before the
  first event, with exponential backoff (a `Retry-After` the upstream sent wins, capped at the
  policy's ceiling). A 401, a 4xx, a redirect (never followed), a framing error, a size limit,
  or any fault after the stream opened is final: once the first event is out, a retry could
  repeat text the user already saw;
- a stall is a read that waits longer than `stall_timeout` for the next bytes; it ends the
  stream with `upstream_timeout`. The clock restarts with every chunk, so a slow but steady
  stream (including an upstream's keep-alive pings) is never cut;
- every reply is bounded (`UpstreamLimits`): its line and event sizes, its text and tool-call
  arguments together (`max_reply_chars`), its total time from the first request to the last
  event, retries and waits included (`reply_timeout`), and the wait for each response head
  (`head_timeout`, interim 1xx heads included). A reply that reaches a bound ends with the
  bound's named error after the events it already yielded, none of which is cut.
"""

from __future__ import annotations

import asyncio
import email.utils
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import ClassVar, Protocol
from urllib.parse import urlsplit

import orjson

from holdback.errors import (
    ConfigurationError,
    UpstreamClientClosedError,
    UpstreamDisconnectedError,
    UpstreamError,
    UpstreamFramingError,
    UpstreamHeadTimeoutError,
    UpstreamReplyTimeoutError,
    UpstreamReplyTooLargeError,
    UpstreamTimeoutError,
    UpstreamTooLargeError,
    UpstreamUnreachableError,
)
from holdback.providers.base import ChatRequest
from holdback.providers.events import Event, StreamError, TextDelta, ToolCallDelta
from holdback.providers.faults import error_from_status, protocol_error
from holdback.providers.limits import UpstreamLimits
from holdback.providers.sse import SSEDecoder, SSEvent
from holdback.providers.transport import UpstreamClient, UpstreamResponse

MAX_ERROR_BODY = 64 * 1024


class InvalidStreamSettingError(ConfigurationError):
    """A timeout or retry setting is out of range."""


class StreamParser(Protocol):
    """A sans-I/O adapter: SSE events in, provider events out."""

    @property
    def done(self) -> bool:
        """Whether the terminal event has been emitted (nothing may follow it)."""
        ...

    def feed(self, event: SSEvent) -> list[Event]:
        """The provider events one SSE event yields."""
        ...

    def finish(self) -> list[Event]:
        """The byte stream ended: the events that close the reply, terminal event last."""
        ...


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often and how patiently a request is retried before its first event."""

    attempts: int = 3
    base_delay: float = 0.5
    max_delay: float = 8.0

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise InvalidStreamSettingError("retry attempts must be at least 1")
        if not (0 <= self.base_delay <= self.max_delay):
            raise InvalidStreamSettingError("retry delays must satisfy 0 <= base <= max")

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        """Seconds to wait after failed attempt number `attempt` (counting from 1)."""
        if retry_after is not None:
            return min(max(retry_after, 0.0), self.max_delay)
        return min(self.base_delay * 2.0 ** (attempt - 1), self.max_delay)


@dataclass(frozen=True, slots=True)
class StreamSettings:
    """Timeouts, retries and limits for one upstream; every time is in seconds."""

    connect_timeout: float = 10.0
    stall_timeout: float = 60.0
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    limits: UpstreamLimits = field(default_factory=UpstreamLimits)

    def __post_init__(self) -> None:
        if not (self.connect_timeout > 0 and self.stall_timeout > 0):
            raise InvalidStreamSettingError("connect and stall timeouts must be positive seconds")


@dataclass(frozen=True, slots=True)
class UpstreamCall:
    """One prepared HTTP request to an upstream. `secrets` are scrubbed from error messages."""

    provider: str
    url: str
    headers: Mapping[str, str]
    body: bytes
    secrets: tuple[str, ...] = ()


def json_post(
    provider: str,
    url: str,
    body: Mapping[str, object],
    *,
    api_key: str | None,
    key_header: tuple[str, str] | None,
    extra_headers: Mapping[str, str] | None = None,
) -> UpstreamCall:
    """A streamed JSON POST; the API key (if any) goes in `key_header` and never in errors."""
    headers = {"content-type": "application/json", "accept": "text/event-stream"}
    headers.update(extra_headers or {})
    if api_key and key_header is not None:
        headers[key_header[0]] = key_header[1]
    return UpstreamCall(
        provider=provider,
        url=url,
        headers=headers,
        body=orjson.dumps(body),
        secrets=(api_key,) if api_key else (),
    )


def retry_after_seconds(headers: Mapping[str, str]) -> float | None:
    """The upstream's `retry-after-ms` or `Retry-After` (seconds or HTTP date), if any."""
    raw_ms = headers.get("retry-after-ms")
    if raw_ms:
        try:
            return float(raw_ms) / 1000.0
        except ValueError:
            pass
    raw = headers.get("retry-after")
    if not raw:
        return None
    try:
        return float(raw)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    return max(when.timestamp() - time.time(), 0.0)


def _where(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.hostname or '?'}:{parts.port or (443 if parts.scheme == 'https' else 80)}"


class _Retry(Exception):
    """Internal signal: leave the response, wait `delay`, try again."""

    def __init__(self, delay: float) -> None:
        super().__init__()
        self.delay = delay


def _unreachable(call: UpstreamCall, exc: UpstreamUnreachableError, attempt: int) -> StreamError:
    return StreamError(
        "upstream_unreachable",
        f"{call.provider}: cannot connect to {_where(call.url)} ({exc} after {attempt} attempts)",
        exc.retryable,
    )


def _reply_timeout(call: UpstreamCall, limits: UpstreamLimits) -> StreamError:
    return StreamError(
        "upstream_timeout",
        f"{call.provider}: the reply ran past its {limits.reply_timeout:g} s time limit",
        True,
    )


async def stream_events(
    call: UpstreamCall,
    new_parser: Callable[[], StreamParser],
    settings: StreamSettings,
    client: UpstreamClient | None = None,
) -> AsyncGenerator[Event, None]:
    """POST `call` and yield the parser's events; ends with exactly one terminal event."""
    own_client = client is None
    http = client if client is not None else UpstreamClient()
    policy = settings.retry
    limits = settings.limits
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limits.reply_timeout
    try:
        attempt = 0
        while True:
            attempt += 1
            may_retry = attempt < policy.attempts
            delay: float | None = None
            try:
                attempt_events = _one_attempt(
                    call,
                    new_parser,
                    http,
                    settings,
                    policy if may_retry else None,
                    attempt,
                    deadline,
                )
                async with aclosing(attempt_events):
                    async for event in attempt_events:
                        yield event
                return
            except _Retry as retry:
                delay = retry.delay
            except UpstreamClientClosedError as exc:
                yield _unreachable(call, exc, attempt)
                return
            except UpstreamUnreachableError as exc:
                if not may_retry:
                    yield _unreachable(call, exc, attempt)
                    return
                delay = policy.delay(attempt)
            if loop.time() + delay >= deadline:
                yield _reply_timeout(call, limits)
                return
            await asyncio.sleep(delay)
    finally:
        if own_client:
            await http.aclose()


async def _one_attempt(
    call: UpstreamCall,
    new_parser: Callable[[], StreamParser],
    http: UpstreamClient,
    settings: StreamSettings,
    retry: RetryPolicy | None,
    attempt: int,
    deadline: float,
) -> AsyncGenerator[Event, None]:
    """One request. Raises `_Retry` or an unreachable error only before anything was yielded.

    `retry` is None on the last attempt: its faults are final.
    """
    limits = settings.limits
    provider = call.provider
    started = False
    response: UpstreamResponse | None = None
    try:
        remaining = deadline - asyncio.get_running_loop().time()
        if remaining <= 0:
            raise UpstreamReplyTimeoutError("the reply ran past its time limit")
        try:
            response = await http.request(
                "POST",
                call.url,
                headers=call.headers,
                body=call.body,
                connect=settings.connect_timeout,
                read=settings.stall_timeout,
                head=min(limits.head_timeout, remaining),
                limits=limits,
            )
        except UpstreamError as exc:
            if remaining < limits.head_timeout and isinstance(exc, UpstreamHeadTimeoutError):
                raise UpstreamReplyTimeoutError("the reply ran past its time limit") from None
            raise
        response.expire_at(deadline)
        status = response.status
        if not 200 <= status < 300:
            body = await response.read_limited(MAX_ERROR_BODY)
            error = error_from_status(provider, status, body, secrets=call.secrets)
            if error.retryable and retry is not None:
                raise _Retry(retry.delay(attempt, retry_after_seconds(response.headers)))
            if 300 <= status < 400:
                error = StreamError(
                    error.code, error.message + " (redirects are not followed)", False
                )
            yield error
            return
        if response.headers.get("content-type", "").startswith("application/json"):
            # The upstream ignored `stream: true` or reported a failure with a 200.
            body = await response.read_limited(MAX_ERROR_BODY)
            error = error_from_status(provider, status, body, secrets=call.secrets)
            yield protocol_error(
                provider,
                error.message.removeprefix(f"{provider}: ") + " (JSON, not an event stream)",
                retryable=False,
            )
            return
        decoder = SSEDecoder(max_line=limits.max_line_chars, max_event=limits.max_event_chars)
        parser = new_parser()
        budget = limits.max_reply_chars
        ended = False
        while not ended:
            chunk = await response.read()
            if chunk:
                sses = decoder.feed(chunk)
            else:
                sses = decoder.flush()
                ended = True
            for sse in sses:
                for event in parser.feed(sse):
                    if isinstance(event, TextDelta):
                        budget -= len(event.text)
                    elif isinstance(event, ToolCallDelta):
                        budget -= len(event.arguments)
                    if budget < 0:
                        raise UpstreamReplyTooLargeError(
                            f"the reply exceeds {limits.max_reply_chars} characters"
                        )
                    started = True
                    yield event
                if parser.done:
                    return
            if decoder.failure is not None:
                raise decoder.failure
        for event in parser.finish():
            yield event
    except (_Retry, UpstreamUnreachableError):
        raise  # before anything was sent back: the caller decides whether to retry
    except UpstreamReplyTimeoutError:
        yield _reply_timeout(call, limits)
    except UpstreamTimeoutError as exc:
        if type(exc) is UpstreamTimeoutError:
            phase = "mid-stream" if started else "before the first event"
            message = f"upstream sent nothing for {settings.stall_timeout:g} s ({phase})"
        else:
            message = f"upstream sent {exc}"
        yield StreamError("upstream_timeout", f"{provider}: {message}", True)
    except UpstreamDisconnectedError:
        if not started and retry is not None:
            # Nothing reached the caller yet (a dropped or stale connection): safe to retry.
            raise _Retry(retry.delay(attempt)) from None
        yield protocol_error(
            provider,
            "upstream closed the connection mid-stream"
            if started
            else "upstream closed the connection before the stream began",
        )
    except UpstreamFramingError as exc:
        yield protocol_error(provider, str(exc), retryable=False)
    except UpstreamTooLargeError as exc:
        yield StreamError("upstream_too_large", f"{provider}: {exc}", False)
    except UpstreamError as exc:
        yield StreamError("upstream_error", f"{provider}: {exc}", True)
    finally:
        if response is not None:
            await response.aclose()


class HTTPProvider:
    """What every HTTP provider shares: its settings, the missing-key check, and the pump.

    A subclass names its wire (`provider`, `default_base_url`, `key_variable`) and supplies
    the two sans-I/O halves: `build()` makes the request, `parser()` reads the stream.
    """

    provider: ClassVar[str]
    default_base_url: ClassVar[str]
    key_variable: ClassVar[str]

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        settings: StreamSettings | None = None,
        client: UpstreamClient | None = None,
    ) -> None:
        self.model = model
        self.base_url = base_url or self.default_base_url
        self._api_key = api_key or None
        self.settings = settings or StreamSettings()
        self._client = client

    @property
    def name(self) -> str:
        return f"{self.provider}:{self.model}"

    def build(self, request: ChatRequest) -> UpstreamCall:
        raise NotImplementedError

    def parser(self, secrets: tuple[str, ...]) -> StreamParser:
        raise NotImplementedError

    async def stream(self, request: ChatRequest) -> AsyncIterator[Event]:
        if self._api_key is None and self.base_url.rstrip("/") == self.default_base_url:
            yield StreamError(
                "upstream_auth",
                f"{self.provider}: no API key configured (set {self.key_variable})",
                False,
            )
            return
        call = self.build(request)
        events = stream_events(call, lambda: self.parser(call.secrets), self.settings, self._client)
        async with aclosing(events):
            async for event in events:
                yield event
