"""`openai-responses:<model>`: Responses API streams, replayed from a loopback server whole
and re-chunked at random byte boundaries, become exactly the events a reading expects.

The streams are hand-written from OpenAI's event reference (see fixtures SOURCES.md)."""

from __future__ import annotations

import random

import pytest

from holdback.providers.base import ChatMessage, ChatRequest
from holdback.providers.events import End, Event, StreamError, Usage
from holdback.providers.http import StreamSettings
from holdback.providers.openai_responses import OpenAIResponsesParser, OpenAIResponsesProvider
from tests.providers.fakeserver import FakeUpstream, Reply, rechunk
from tests.providers.streams import args, capture, collect, content, end, reasoning, replay, start

REQUEST = ChatRequest([ChatMessage("user", "Write to <PERSON_1> about the invoice.")])

WEATHER = "call_Wn4Zb6mJ0lq5o0nYb1HqK3dT"
EMAIL = "call_P2cR8sVd1XyZt7uWq0aLm4Ke"

EXPECTED: dict[str, list[Event]] = {
    "responses_reasoning_summary_and_text.sse": [
        *reasoning(
            "**Drafting a reply**\n\nThe user wants a short note to ",
            "<PERSON_1>",
            " about the invoice; I should reuse the placeholder.",
        ),
        *content(
            "Here is a short note for ",
            "<PER",
            "SON_1>: your invoice is ready.",
            " Best, <PERSON_2>",
        ),
        End("completed", Usage(182, 96)),
    ],
    # Call ids are the items' call_id; the deltas name the items by their item id.
    "responses_function_calls_parallel.sse": [
        *content("Checking now."),
        *start(WEATHER, "get_weather", 1),
        *start(EMAIL, "send_email", 2),
        *args(WEATHER, '{"ci', 'ty":"', "<LOCATION_1>", '"}'),
        *args(EMAIL, '{"to":"<EM', 'AIL_1>","subj', 'ect":"Weather"}'),
        *end(WEATHER),
        *end(EMAIL),
        End("completed", Usage(311, 57)),
    ],
    "responses_refusal_incomplete.sse": [
        *content("I can't help", " with that"),
        End("max_output_tokens", Usage(40, 16)),
    ],
    "responses_failed.sse": [
        StreamError(
            "upstream_error",
            "openai-responses: upstream sent an error mid-stream server_error: "
            "The server had an error processing your request. Sorry about that!",
            True,
        )
    ],
    "responses_error_event.sse": [
        StreamError(
            "upstream_rate_limited",
            "openai-responses: upstream sent an error mid-stream rate_limit_exceeded: "
            "Rate limit reached for o4-mini on tokens per min (TPM). Please try again in 1.2s.",
            True,
        )
    ],
}


@pytest.mark.anyio
@pytest.mark.parametrize("name", list(EXPECTED))
@pytest.mark.parametrize("seed", [None, 1, 2, 3])
async def test_stream_over_loopback(
    upstream: FakeUpstream, fast: StreamSettings, name: str, seed: int | None
) -> None:
    body = capture(f"openai_responses/{name}")
    chunks = [body] if seed is None else rechunk(body, random.Random(seed))
    upstream.enqueue(Reply(chunks=chunks))
    provider = OpenAIResponsesProvider(
        "o4-mini", base_url=upstream.url + "/v1", api_key="sk-test", settings=fast
    )
    assert await collect(provider, REQUEST) == EXPECTED[name]
    assert [r.path for r in upstream.requests] == ["/v1/responses"]


@pytest.mark.parametrize("name", list(EXPECTED))
def test_stream_sans_io_in_one_byte_chunks(name: str) -> None:
    body = capture(f"openai_responses/{name}")
    assert (
        replay(OpenAIResponsesParser, [body[i : i + 1] for i in range(len(body))])
        == (EXPECTED[name])
    )


def data(payload: str) -> bytes:
    return b"data: " + payload.encode() + b"\n\n"


COMPLETED = data('{"type":"response.completed","response":{"status":"completed"}}')


def test_arguments_sent_only_whole_in_done_are_relayed_once() -> None:
    stream = (
        data(
            '{"type":"response.output_item.added","output_index":0,"item":{"type":"function_call",'
            '"id":"fc_1","call_id":"call_1","name":"lookup","arguments":""}}'
        )
        + data(
            '{"type":"response.function_call_arguments.done","item_id":"fc_1","output_index":0,'
            '"arguments":"{\\"q\\":\\"<EMAIL_1>\\"}"}'
        )
        + data(
            '{"type":"response.output_item.done","output_index":0,"item":{"type":"function_call",'
            '"id":"fc_1","call_id":"call_1","name":"lookup","arguments":"{\\"q\\":\\"<EMAIL_1>\\"}"}}'
        )
        + COMPLETED
    )
    assert replay(OpenAIResponsesParser, [stream]) == [
        *start("call_1", "lookup", 0),
        *args("call_1", '{"q":"<EMAIL_1>"}'),
        *end("call_1"),
        End("completed", None),
    ]


def test_raw_reasoning_text_goes_to_the_reasoning_channel() -> None:
    stream = (
        data('{"type":"response.reasoning_text.delta","item_id":"rs_1","delta":"hmm"}')
        + data('{"type":"response.output_text.delta","item_id":"m","delta":"ok"}')
        + COMPLETED
    )
    assert replay(OpenAIResponsesParser, [stream]) == [
        *reasoning("hmm"),
        *content("ok"),
        End("completed", None),
    ]


def test_a_call_left_open_ends_at_completion() -> None:
    stream = (
        data(
            '{"type":"response.output_item.added","output_index":0,"item":{"type":"function_call",'
            '"id":"fc_1","call_id":"call_1","name":"f"}}'
        )
        + data('{"type":"response.function_call_arguments.delta","item_id":"fc_1","delta":"{}"}')
        + COMPLETED
    )
    assert replay(OpenAIResponsesParser, [stream]) == [
        *start("call_1", "f", 0),
        *args("call_1", "{}"),
        *end("call_1"),
        End("completed", None),
    ]


def test_arguments_for_an_unknown_call_are_a_protocol_error() -> None:
    stream = data('{"type":"response.function_call_arguments.delta","item_id":"x","delta":"{"}')
    [error] = replay(OpenAIResponsesParser, [stream])
    assert isinstance(error, StreamError)
    assert error.code == "upstream_protocol"


def test_stream_cut_before_completion_is_a_protocol_error() -> None:
    body = capture("openai_responses/responses_reasoning_summary_and_text.sse")
    cut = body[: body.index(b"event: response.completed")]
    events = replay(OpenAIResponsesParser, [cut])
    assert events[-1] == StreamError(
        "upstream_protocol",
        "openai-responses: stream ended before the reply finished (no response.completed)",
        True,
    )
