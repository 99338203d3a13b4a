"""`anthropic:<model>`: every Messages capture, replayed from a loopback server whole and
re-chunked at random byte boundaries, becomes exactly the events a reading of it expects."""

from __future__ import annotations

import random

import pytest

from holdback.providers.anthropic import AnthropicParser, AnthropicProvider
from holdback.providers.base import ChatMessage, ChatRequest
from holdback.providers.events import End, Event, StreamError, Usage
from holdback.providers.http import StreamSettings
from tests.providers.fakeserver import FakeUpstream, Reply, rechunk
from tests.providers.streams import (
    args,
    capture,
    collect,
    content,
    end,
    reasoning,
    replay,
    start,
)

REQUEST = ChatRequest([ChatMessage("user", "Weather for <LOCATION_1>, please.")])

TAX_LINES = (
    '", "lines_of_text": [\n"# COMPREHENSIVE TAX GUIDE FOR INDIVIDUALS WITH MULTIPLE W-2s",'
    '\n"",\n"## INTRODUCTION",\n"",'
)

EXPECTED: dict[str, list[Event]] = {
    "anthropic_docs_basic_streaming.sse": [
        *content("Hello", "!"),
        End("end_turn", Usage(25, 15)),
    ],
    # The capture ends without the blank line that closes its event: still dispatched.
    "anthropic_docs_error_event.sse": [
        StreamError(
            "upstream_error",
            "anthropic: upstream sent an error mid-stream overloaded_error: Overloaded",
            True,
        ),
    ],
    # signature_delta is ignored; neither message_start nor message_delta carries usage.
    "anthropic_docs_extended_thinking_streaming.sse": [
        *reasoning(
            "Let me solve this step by step:\n\n1. First break down 27 * 453",
            "\n2. 453 = 400 + 50 + 3",
            "\n3. 27 * 400 = 10,800",
            "\n4. 27 * 50 = 1,350",
            "\n5. 27 * 3 = 81",
            "\n6. 10,800 + 1,350 + 81 = 12,231",
        ),
        *content("27 * 453 = 12,231"),
        End("end_turn", None),
    ],
    # The empty first input_json_delta carries nothing and yields nothing.
    "anthropic_docs_tool_use_streaming.sse": [
        *content(
            "Okay",
            ",",
            " let",
            "'s",
            " check",
            " the",
            " weather",
            " for",
            " San",
            " Francisco",
            ",",
            " CA",
            ":",
        ),
        *start("toolu_01T1x1fJ34qAmk2tNTrN7Up6", "get_weather", 1),
        *args(
            "toolu_01T1x1fJ34qAmk2tNTrN7Up6",
            '{"location":',
            ' "San',
            " Francisc",
            "o,",
            ' CA"',
            ", ",
            '"unit": "fah',
            'renheit"}',
        ),
        *end("toolu_01T1x1fJ34qAmk2tNTrN7Up6"),
        End("tool_use", Usage(472, 89)),
    ],
    "anthropic_sdk_python_tool_use_response.sse": [
        *content("I", "'ll check the current weather in Paris for you."),
        *start("toolu_01NRLabsLyVHZPKxbKvkfSMn", "get_weather", 1),
        *args("toolu_01NRLabsLyVHZPKxbKvkfSMn", '{"locati', 'on": "P', "ar", 'is"}'),
        *end("toolu_01NRLabsLyVHZPKxbKvkfSMn"),
        End("tool_use", Usage(377, 65)),
    ],
    # Cut by max_tokens inside the tool call: no content_block_stop, so the call ends at
    # message_stop. The payloads are padded with spaces; the last line has no line end.
    "anthropic_sdk_python_incomplete_partial_json_response.sse": [
        *content(
            "I",
            "'ll create a comprehensive tax guide for",
            " someone with multiple W2s an",
            "d save it in a file called taxes.txt. Let",
            " me do that for you now.",
        ),
        *start("toolu_01EKqbqmZrGRXy18eN7m9kvY", "make_file", 1),
        *args(
            "toolu_01EKqbqmZrGRXy18eN7m9kvY",
            '{"filename": "taxes.txt',
            TAX_LINES,
            '\n"Filing taxes',
        ),
        *end("toolu_01EKqbqmZrGRXy18eN7m9kvY"),
        End("max_tokens", Usage(450, 124)),
    ],
}


@pytest.mark.anyio
@pytest.mark.parametrize("name", list(EXPECTED))
@pytest.mark.parametrize("seed", [None, 1, 2, 3])
async def test_capture_over_loopback(
    upstream: FakeUpstream, fast: StreamSettings, name: str, seed: int | None
) -> None:
    body = capture(f"anthropic/{name}")
    chunks = [body] if seed is None else rechunk(body, random.Random(seed))
    upstream.enqueue(Reply(chunks=chunks))
    provider = AnthropicProvider(
        "claude-sonnet-4-5", base_url=upstream.url, api_key="sk-ant-test", settings=fast
    )
    assert await collect(provider, REQUEST) == EXPECTED[name]
    assert [r.path for r in upstream.requests] == ["/v1/messages"]


@pytest.mark.parametrize("name", list(EXPECTED))
def test_capture_sans_io_in_one_byte_chunks(name: str) -> None:
    body = capture(f"anthropic/{name}")
    assert replay(AnthropicParser, [body[i : i + 1] for i in range(len(body))]) == EXPECTED[name]


def event(kind: str, payload: str) -> bytes:
    return b"event: %s\ndata: %s\n\n" % (kind.encode(), payload.encode())


START = event(
    "message_start",
    '{"type":"message_start","message":{"id":"m","usage":{"input_tokens":10,'
    '"cache_creation_input_tokens":5,"cache_read_input_tokens":100,"output_tokens":1}}}',
)
STOP = event("message_stop", '{"type":"message_stop"}')


def test_cached_input_tokens_count_as_input() -> None:
    stream = START + event(
        "message_delta",
        '{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":7}}',
    )
    assert replay(AnthropicParser, [stream + STOP]) == [End("end_turn", Usage(115, 7))]


@pytest.mark.parametrize(
    ("error_type", "code", "retryable"),
    [
        ("rate_limit_error", "upstream_rate_limited", True),
        ("authentication_error", "upstream_auth", False),
        ("permission_error", "upstream_auth", False),
        ("api_error", "upstream_error", True),
        ("overloaded_error", "upstream_error", True),
        ("invalid_request_error", "upstream_error", False),
    ],
)
def test_error_events_mid_stream(error_type: str, code: str, retryable: bool) -> None:
    stream = (
        START
        + event(
            "content_block_start",
            '{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}',
        )
        + event(
            "content_block_delta",
            '{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}',
        )
        + event("error", '{"type":"error","error":{"type":"' + error_type + '","message":"boom"}}')
        + STOP
    )
    assert replay(AnthropicParser, [stream]) == [
        *content("Hi"),
        StreamError(
            code,  # type: ignore[arg-type]
            f"anthropic: upstream sent an error mid-stream {error_type}: boom",
            retryable,
        ),
    ]


def test_unknown_events_and_deltas_are_ignored() -> None:
    stream = (
        START
        + event("ping", '{"type":"ping"}')
        + event("future_event", '{"type":"future_event","x":1}')
        + event(
            "content_block_start",
            '{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}',
        )
        + event(
            "content_block_delta",
            '{"type":"content_block_delta","index":0,"delta":{"type":"citations_delta",'
            '"citation":{"cited_text":"x"}}}',
        )
        + event(
            "content_block_start",
            '{"type":"content_block_start","index":1,"content_block":{"type":"redacted_thinking",'
            '"data":"abc"}}',
        )
        + STOP
    )
    assert replay(AnthropicParser, [stream]) == [End(None, Usage(115, 1))]


def test_arguments_for_a_block_that_is_not_a_tool_call_are_a_protocol_error() -> None:
    stream = START + event(
        "content_block_delta",
        '{"type":"content_block_delta","index":3,"delta":{"type":"input_json_delta",'
        '"partial_json":"{}"}}',
    )
    [error] = replay(AnthropicParser, [stream])
    assert isinstance(error, StreamError)
    assert error.code == "upstream_protocol"


def test_stream_cut_before_message_stop_is_a_protocol_error() -> None:
    body = capture("anthropic/anthropic_sdk_python_tool_use_response.sse")
    cut = body[: body.index(b"event: message_delta")]
    events = replay(AnthropicParser, [cut])
    assert events[-1] == StreamError(
        "upstream_protocol",
        "anthropic: stream ended before the reply finished (no message_stop)",
        True,
    )
    assert events[:-1] == EXPECTED["anthropic_sdk_python_tool_use_response.sse"][:-1]
    # Cut inside a JSON payload instead.
    mid = body[: body.index(b"current weather")]
    events = replay(AnthropicParser, [mid])
    assert isinstance(events[-1], StreamError)
    assert "malformed JSON" in events[-1].message
