"""The one async pump between an upstream HTTP stream and a sans-I/O stream parser.

The rules it keeps:

- every upstream fault becomes exactly one `StreamError` event, and the stream ends there;
  nothing is raised to the caller for anything the upstream or the network did;
- a request is retried only before anything was yielded from it: after a refused or timed-out
  connection, an HTTP 429 or 5xx answer, or a connection dropped before the first event, with
  exponential backoff (a `Retry-After` the
  upstream sent wins, capped at the policy's ceiling). A 401, a 4xx, or any fault after the
  stream opened is final: once the first event is out, a retry could repeat text the user
  already saw;
- a stall is a read that waits longer than `stall_timeout` for the next bytes; it ends the
  stream with `upstream_timeout`. The clock restarts with every chunk, so a slow but steady
  stream (including an upstream's keep-alive pings) is never cut.
"""

from __future__ import annotations

import email.utils
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import ClassVar, Protocol
from urllib.parse import urlsplit

import anyio
import httpx
import orjson

from holdback.errors import ConfigurationError
from holdback.providers.base import ChatRequest
from holdback.providers.events import Event, StreamError
from holdback.providers.faults import error_from_status, protocol_error
from holdback.providers.sse import SSEDecoder, SSEvent

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
    """Timeouts and retries for one upstream; every value is in seconds."""

    connect_timeout: float = 10.0
    stall_timeout: float = 60.0
    retry: RetryPolicy = field(default_factory=RetryPolicy)

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


def retry_after_seconds(headers: httpx.Headers) -> float | None:
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


async def _read_limited(response: httpx.Response, limit: int = MAX_ERROR_BODY) -> bytes:
    body = bytearray()
    async for chunk in response.aiter_bytes():
        body += chunk
        if len(body) >= limit:
            break
    return bytes(body[:limit])


class _Retry(Exception):
    """Internal signal: leave the response context, wait `delay`, try again."""

    def __init__(self, delay: float) -> None:
        super().__init__()
        self.delay = delay


async def stream_events(
    call: UpstreamCall,
    new_parser: Callable[[], StreamParser],
    settings: StreamSettings,
    client: httpx.AsyncClient | None = None,
) -> AsyncGenerator[Event, None]:
    """POST `call` and yield the parser's events; ends with exactly one terminal event."""
    own_client = client is None
    http = client if client is not None else httpx.AsyncClient()
    timeout = httpx.Timeout(
        connect=settings.connect_timeout,
        read=settings.stall_timeout,
        write=settings.stall_timeout,
        pool=settings.connect_timeout,
    )
    policy = settings.retry
    try:
        attempt = 0
        while True:
            attempt += 1
            may_retry = attempt < policy.attempts
            try:
                attempt_events = _one_attempt(
                    call, new_parser, http, timeout, policy if may_retry else None, attempt
                )
                async with aclosing(attempt_events):
                    async for event in attempt_events:
                        yield event
                return
            except _Retry as retry:
                await anyio.sleep(retry.delay)
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                if may_retry:
                    await anyio.sleep(policy.delay(attempt))
                    continue
                reason = "timed out" if isinstance(exc, httpx.ConnectTimeout) else "refused"
                yield StreamError(
                    "upstream_unreachable",
                    f"{call.provider}: cannot connect to {_where(call.url)} "
                    f"(connection {reason} after {attempt} attempts)",
                    True,
                )
                return
    finally:
        if own_client:
            await http.aclose()


async def _one_attempt(
    call: UpstreamCall,
    new_parser: Callable[[], StreamParser],
    http: httpx.AsyncClient,
    limits: httpx.Timeout,
    retry: RetryPolicy | None,
    attempt: int,
) -> AsyncGenerator[Event, None]:
    """One request. Raises `_Retry` or a connect error only before anything was yielded.

    `retry` is None on the last attempt: its faults are final.
    """
    started = False
    try:
        async with http.stream(
            "POST", call.url, headers=dict(call.headers), content=call.body, timeout=limits
        ) as response:
            status = response.status_code
            if not 200 <= status < 300:
                body = await _read_limited(response)
                error = error_from_status(call.provider, status, body, secrets=call.secrets)
                if error.retryable and retry is not None:
                    raise _Retry(retry.delay(attempt, retry_after_seconds(response.headers)))
                yield error
                return
            if response.headers.get("content-type", "").startswith("application/json"):
                # The upstream ignored `stream: true` or reported a failure with a 200.
                body = await _read_limited(response)
                error = error_from_status(call.provider, status, body, secrets=call.secrets)
                yield protocol_error(
                    call.provider,
                    error.message.removeprefix(f"{call.provider}: ")
                    + " (JSON, not an event stream)",
                    retryable=False,
                )
                return
            decoder = SSEDecoder()
            parser = new_parser()
            async for chunk in response.aiter_bytes():
                for sse in decoder.feed(chunk):
                    for event in parser.feed(sse):
                        started = True
                        yield event
                    if parser.done:
                        return
            for sse in decoder.flush():
                for event in parser.feed(sse):
                    started = True
                    yield event
                if parser.done:
                    return
            for event in parser.finish():
                yield event
    except (httpx.ConnectError, httpx.ConnectTimeout):
        raise  # before anything was sent back: the caller decides whether to retry
    except httpx.TimeoutException:
        yield StreamError(
            "upstream_timeout",
            f"{call.provider}: upstream sent nothing for {limits.read:g} s "
            f"({'mid-stream' if started else 'before the first event'})",
            True,
        )
    except (httpx.RemoteProtocolError, httpx.ReadError):
        if not started and retry is not None:
            # Nothing reached the caller yet (a dropped or stale connection): safe to retry.
            raise _Retry(retry.delay(attempt)) from None
        yield protocol_error(
            call.provider,
            "upstream closed the connection mid-stream"
            if started
            else "upstream closed the connection before the stream began",
        )
    except httpx.HTTPError as exc:
        yield StreamError(
            "upstream_error",
            f"{call.provider}: HTTP failure talking to upstream ({type(exc).__name__})",
            True,
        )


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
        client: httpx.AsyncClient | None = None,
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
