"""Upstream faults, for every HTTP provider, over a real loopback server: each becomes one
clear `StreamError` that leaks nothing, and retries happen only before the first event."""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import aclosing
from dataclasses import dataclass

import pytest

from holdback.providers.anthropic import AnthropicProvider
from holdback.providers.base import ChatMessage, ChatRequest, Provider
from holdback.providers.events import Event, StreamError, TextDelta
from holdback.providers.http import RetryPolicy, StreamSettings
from holdback.providers.openai_chat import OpenAIChatProvider
from holdback.providers.openai_responses import OpenAIResponsesProvider
from tests.providers.fakeserver import FakeUpstream, Reply, unused_port
from tests.providers.streams import capture, collect
from tests.providers.test_anthropic import EXPECTED as ANTHROPIC_EXPECTED
from tests.providers.test_openai_chat import EXPECTED as CHAT_EXPECTED
from tests.providers.test_openai_responses import EXPECTED as RESPONSES_EXPECTED

SECRET_KEY = "sk-live-7f3b9c1d2e4a5b6c7d8e9f0a1b2c3d4e"
SECRET_TEXT = "Dear <PERSON_1>, my PIN is in the attachment"
REQUEST = ChatRequest([ChatMessage("user", SECRET_TEXT)])


@dataclass(frozen=True)
class Kind:
    label: str
    make: Callable[[str, StreamSettings], Provider]
    ok_body: bytes
    ok_events: list[Event]
    auth_error: dict[str, object]
    auth_kind: str


def _openai_error(message: str, type_: str, code: str | None) -> dict[str, object]:
    return {"error": {"message": message, "type": type_, "param": None, "code": code}}


OPENAI_AUTH = _openai_error(
    f"Incorrect API key provided: {SECRET_KEY}. You can find your API key at "
    "https://platform.openai.com/account/api-keys.",
    "invalid_request_error",
    "invalid_api_key",
)

KINDS = [
    Kind(
        "openai",
        lambda url, s: OpenAIChatProvider("gpt-4o", base_url=url, api_key=SECRET_KEY, settings=s),
        capture("openai_chat/openai_python_content_logprobs.sse"),
        CHAT_EXPECTED["openai_python_content_logprobs.sse"],
        OPENAI_AUTH,
        "invalid_api_key",
    ),
    Kind(
        "openai-responses",
        lambda url, s: OpenAIResponsesProvider(
            "o4-mini", base_url=url, api_key=SECRET_KEY, settings=s
        ),
        capture("openai_responses/responses_reasoning_summary_and_text.sse"),
        RESPONSES_EXPECTED["responses_reasoning_summary_and_text.sse"],
        OPENAI_AUTH,
        "invalid_api_key",
    ),
    Kind(
        "anthropic",
        lambda url, s: AnthropicProvider(
            "claude-sonnet-4-5", base_url=url, api_key=SECRET_KEY, settings=s
        ),
        capture("anthropic/anthropic_docs_basic_streaming.sse"),
        ANTHROPIC_EXPECTED["anthropic_docs_basic_streaming.sse"],
        {
            "type": "error",
            "error": {"type": "authentication_error", "message": f"invalid x-api-key {SECRET_KEY}"},
            "request_id": "req_011CV",
        },
        "authentication_error",
    ),
]


@pytest.fixture(params=KINDS, ids=[k.label for k in KINDS])
def kind(request: pytest.FixtureRequest) -> Kind:
    k: Kind = request.param
    return k


def assert_clean(error: Event) -> StreamError:
    """A StreamError that carries neither the request text nor the key."""
    assert isinstance(error, StreamError)
    assert SECRET_KEY not in error.message
    assert "sk-live" not in error.message
    assert SECRET_TEXT not in error.message
    assert "PIN" not in error.message
    assert len(error.message) < 300
    return error


def after_first_delta(kind: Kind) -> int:
    """The offset just past the event that carries the reply's first text delta."""
    first = next(e for e in kind.ok_events if isinstance(e, TextDelta))
    at = kind.ok_body.index(first.text.encode("unicode_escape"))
    return kind.ok_body.index(b"\n\n", at) + 2


pytestmark = pytest.mark.anyio


async def test_connection_refused(kind: Kind, fast: StreamSettings) -> None:
    port = unused_port()
    began = time.monotonic()
    [error] = await collect(kind.make(f"http://127.0.0.1:{port}", fast), REQUEST)
    error = assert_clean(error)
    assert error.code == "upstream_unreachable"
    assert error.retryable
    assert error.message == (
        f"{kind.label}: cannot connect to 127.0.0.1:{port} (connection refused after 3 attempts)"
    )
    assert time.monotonic() - began < 2


async def test_401_is_final_and_names_the_error_type(
    kind: Kind, upstream: FakeUpstream, fast: StreamSettings
) -> None:
    upstream.enqueue(Reply.json(401, kind.auth_error), Reply.sse(kind.ok_body))
    [error] = await collect(kind.make(upstream.url, fast), REQUEST)
    error = assert_clean(error)
    assert error.code == "upstream_auth"
    assert not error.retryable
    assert error.message.startswith(f"{kind.label}: upstream returned 401 {kind.auth_kind}: ")
    assert "[redacted]" in error.message
    assert len(upstream.requests) == 1


async def test_429_is_retried_before_the_first_event(
    kind: Kind, upstream: FakeUpstream, fast: StreamSettings
) -> None:
    rate = _openai_error("Rate limit reached", "requests", "rate_limit_exceeded")
    upstream.enqueue(Reply.json(429, rate), Reply.sse(kind.ok_body))
    assert await collect(kind.make(upstream.url, fast), REQUEST) == kind.ok_events
    assert len(upstream.requests) == 2
    assert upstream.requests[0].body == upstream.requests[1].body


async def test_retry_after_is_honoured(kind: Kind, upstream: FakeUpstream) -> None:
    settings = StreamSettings(stall_timeout=2, retry=RetryPolicy(3, base_delay=0.01, max_delay=1))
    upstream.enqueue(
        Reply.json(429, {"error": {"type": "rate_limit_error"}}, headers={"retry-after": "0.3"}),
        Reply.sse(kind.ok_body),
    )
    began = time.monotonic()
    assert await collect(kind.make(upstream.url, settings), REQUEST) == kind.ok_events
    assert time.monotonic() - began >= 0.3


async def test_5xx_is_retried_then_reported(
    kind: Kind, upstream: FakeUpstream, fast: StreamSettings
) -> None:
    body = {"type": "error", "error": {"type": "api_error", "message": "Internal server error"}}
    upstream.enqueue(*[Reply.json(500, body)] * 3, Reply.sse(kind.ok_body))
    [error] = await collect(kind.make(upstream.url, fast), REQUEST)
    error = assert_clean(error)
    assert error == StreamError(
        "upstream_error",
        f"{kind.label}: upstream returned 500 api_error: Internal server error",
        True,
    )
    assert len(upstream.requests) == 3


async def test_503_then_success(kind: Kind, upstream: FakeUpstream, fast: StreamSettings) -> None:
    upstream.enqueue(
        Reply(status=503, chunks=[b"<html>Service Unavailable</html>"], headers={}),
        Reply.sse(kind.ok_body),
    )
    assert await collect(kind.make(upstream.url, fast), REQUEST) == kind.ok_events
    assert len(upstream.requests) == 2


async def test_other_4xx_is_final(kind: Kind, upstream: FakeUpstream, fast: StreamSettings) -> None:
    body = _openai_error("Unknown parameter: 'foo'.", "invalid_request_error", None)
    upstream.enqueue(Reply.json(400, body), Reply.sse(kind.ok_body))
    [error] = await collect(kind.make(upstream.url, fast), REQUEST)
    assert assert_clean(error) == StreamError(
        "upstream_error",
        f"{kind.label}: upstream returned 400 invalid_request_error: Unknown parameter: 'foo'.",
        False,
    )
    assert len(upstream.requests) == 1


async def test_non_json_error_body_is_a_short_sanitized_excerpt(
    kind: Kind, upstream: FakeUpstream, fast: StreamSettings
) -> None:
    page = b"<html>\r\n<h1>Bad gateway</h1>\x00" + b" padding" * 200 + b"</html>"
    settings = StreamSettings(stall_timeout=1, retry=RetryPolicy(attempts=1))
    upstream.enqueue(Reply(status=502, chunks=[page], headers={"content-type": "text/html"}))
    [error] = await collect(kind.make(upstream.url, settings), REQUEST)
    error = assert_clean(error)
    assert error.code == "upstream_error"
    assert error.message.startswith(f"{kind.label}: upstream returned 502: <html> <h1>Bad gateway")
    assert error.message.endswith("…")
    assert "\x00" not in error.message
    assert "\n" not in error.message


async def test_stream_cut_mid_event_after_deltas_is_not_retried(
    kind: Kind, upstream: FakeUpstream, fast: StreamSettings
) -> None:
    body = kind.ok_body
    first_delta = next(e for e in kind.ok_events if isinstance(e, TextDelta))
    # Everything up to the middle of the event after the first delta, then a dropped line.
    cut = after_first_delta(kind) + 20
    upstream.enqueue(Reply(chunks=[body[:cut], body[cut:]], cut_after=1), Reply.sse(kind.ok_body))
    events = await collect(kind.make(upstream.url, fast), REQUEST)
    assert events[0] == first_delta
    error = assert_clean(events[-1])
    assert error == StreamError(
        "upstream_protocol", f"{kind.label}: upstream closed the connection mid-stream", True
    )
    assert len(upstream.requests) == 1


async def test_connection_dropped_before_the_first_event_is_retried(
    kind: Kind, upstream: FakeUpstream, fast: StreamSettings
) -> None:
    cut = after_first_delta(kind) - 30  # inside the event that carries the first delta
    upstream.enqueue(Reply(chunks=[kind.ok_body[:cut], b""], cut_after=1), Reply.sse(kind.ok_body))
    assert await collect(kind.make(upstream.url, fast), REQUEST) == kind.ok_events
    assert len(upstream.requests) == 2


async def test_connection_dropped_before_the_first_event_on_every_attempt(
    kind: Kind, upstream: FakeUpstream, fast: StreamSettings
) -> None:
    upstream.enqueue(*[Reply(chunks=[b": hello\n\n"], cut_after=1)] * 3)
    [error] = await collect(kind.make(upstream.url, fast), REQUEST)
    assert error == StreamError(
        "upstream_protocol",
        f"{kind.label}: upstream closed the connection before the stream began",
        True,
    )
    assert len(upstream.requests) == 3


async def test_stream_ending_mid_event_without_framing_is_a_protocol_error(
    kind: Kind, upstream: FakeUpstream, fast: StreamSettings
) -> None:
    body = kind.ok_body
    cut = body.index(b"}", len(body) // 2)  # inside a JSON payload
    upstream.enqueue(Reply(chunks=[body[:cut]], framing="close"))
    events = await collect(kind.make(upstream.url, fast), REQUEST)
    error = assert_clean(events[-1])
    assert error.code == "upstream_protocol"
    assert error.message == f"{kind.label}: malformed JSON in the event stream"


async def test_stall_mid_stream_times_out(
    kind: Kind, upstream: FakeUpstream, fast: StreamSettings
) -> None:
    body = kind.ok_body
    cut = body.index(b"\n\n", len(body) // 2) + 2
    upstream.enqueue(Reply(chunks=[body[:cut], body[cut:]], stall_after=1))
    began = time.monotonic()
    events = await collect(kind.make(upstream.url, fast), REQUEST)
    elapsed = time.monotonic() - began
    assert events[-1] == StreamError(
        "upstream_timeout", f"{kind.label}: upstream sent nothing for 0.3 s (mid-stream)", True
    )
    assert events[:-1] == kind.ok_events[: len(events) - 1]
    assert 0.3 <= elapsed < 2
    assert len(upstream.requests) == 1


async def test_a_slow_steady_body_is_no_stall(
    kind: Kind, upstream: FakeUpstream, fast: StreamSettings
) -> None:
    """Bytes every 0.15 s for well past the 0.3 s stall timeout: silence is what times out,
    never the length of the body."""
    body = kind.ok_body
    step = max(1, len(body) // 8)
    pieces = [body[i : i + step] for i in range(0, len(body), step)]
    upstream.enqueue(Reply(chunks=pieces, chunk_delay=0.15))
    events = await collect(kind.make(upstream.url, fast), REQUEST)
    assert events == kind.ok_events
    assert len(pieces) * 0.15 > 0.6


async def test_stall_before_the_first_byte_times_out(
    kind: Kind, upstream: FakeUpstream, fast: StreamSettings
) -> None:
    upstream.enqueue(Reply(chunks=[kind.ok_body], stall_after=0))
    [error] = await collect(kind.make(upstream.url, fast), REQUEST)
    assert error == StreamError(
        "upstream_timeout",
        f"{kind.label}: upstream sent nothing for 0.3 s (before the first event)",
        True,
    )


async def test_slow_but_steady_stream_is_not_a_stall(
    kind: Kind, upstream: FakeUpstream, fast: StreamSettings
) -> None:
    body = kind.ok_body
    pieces = [body[i : i + len(body) // 4 + 1] for i in range(0, len(body), len(body) // 4 + 1)]
    upstream.enqueue(Reply(chunks=pieces, chunk_delay=0.15))
    began = time.monotonic()
    assert await collect(kind.make(upstream.url, fast), REQUEST) == kind.ok_events
    assert time.monotonic() - began > fast.stall_timeout  # longer than the stall timeout in all


async def test_json_instead_of_a_stream_is_a_protocol_error(
    kind: Kind, upstream: FakeUpstream, fast: StreamSettings
) -> None:
    upstream.enqueue(Reply.json(200, {"id": "x", "choices": []}))
    [error] = await collect(kind.make(upstream.url, fast), REQUEST)
    assert error == StreamError(
        "upstream_protocol",
        f"{kind.label}: upstream returned 200 (JSON, not an event stream)",
        False,
    )


async def test_stopping_early_closes_the_stream(
    kind: Kind, upstream: FakeUpstream, fast: StreamSettings
) -> None:
    cut = after_first_delta(kind)
    upstream.enqueue(Reply(chunks=[kind.ok_body[:cut], kind.ok_body[cut:]], stall_after=1))
    began = time.monotonic()
    stream = kind.make(upstream.url, fast).stream(REQUEST)
    async with aclosing(stream):  # type: ignore[type-var]
        async for _ in stream:
            break
    assert time.monotonic() - began < fast.stall_timeout


@pytest.mark.parametrize(
    ("make", "variable"),
    [
        (lambda: OpenAIChatProvider("gpt-4o"), "OPENAI_API_KEY"),
        (lambda: OpenAIResponsesProvider("gpt-4o"), "OPENAI_API_KEY"),
        (lambda: AnthropicProvider("claude-sonnet-4-5"), "ANTHROPIC_API_KEY"),
    ],
)
async def test_missing_key_for_the_vendor_is_reported_without_a_request(
    make: Callable[[], Provider], variable: str
) -> None:
    [error] = await collect(make(), REQUEST)
    assert isinstance(error, StreamError)
    assert error.code == "upstream_auth"
    assert variable in error.message
