"""`openai:<model>`: every real Chat Completions capture, replayed from a loopback server whole
and re-chunked at random byte boundaries, becomes exactly the events a reading of it expects;
plus the compatible servers' variants (reasoning fields, mid-stream errors, no [DONE])."""

from __future__ import annotations

import random

import pytest

from holdback.providers.base import ChatMessage, ChatRequest
from holdback.providers.events import End, Event, StreamError, TextDelta, Usage
from holdback.providers.http import StreamSettings
from holdback.providers.openai_chat import OpenAIChatParser, OpenAIChatProvider
from tests.providers.fakeserver import FakeUpstream, Reply, rechunk
from tests.providers.streams import (
    args,
    capture,
    coalesce,
    collect,
    content,
    end,
    reasoning,
    replay,
    start,
    text_of,
)

REQUEST = ChatRequest([ChatMessage("user", "What's the weather in <LOCATION_1>?")])

LONG_JSON = (
    '\n  {\n    "location": "San Francisco, CA",\n    "weather": {\n      "temperature": "18°C",'
    '\n      "condition": "Partly Cloudy",\n      "humidity": "72%",\n      "windSpeed": "15 km/h",'
    '\n      "windDirection": "NW"\n    },\n    "forecast": [\n      {\n        "day": "Monday",'
    '\n        "high": "20°C",\n        "low": "14°C",\n        "condition": "Sunny"\n      },'
    '\n      {\n        "day": "Tuesday",\n        "high": "19°C",\n        "low": "15°C",'
    '\n        "condition": "Mostly Cloudy"\n      },\n      {\n        "day": "Wednesday",'
    '\n        "high": "18°C",\n        "low": "14°C",\n        "condition": "Cloudy"\n      }'
    "\n    ]\n  }\n"
)

CITY_JSON = ('{"', "city", '":"', "San", " Francisco", '","', "temperature", '":')

EXPECTED: dict[str, list[Event]] = {
    "openai_python_content_logprobs.sse": [
        *content("Foo", "!"),
        End("stop", Usage(9, 2)),
    ],
    "openai_python_plain_content.sse": [
        *content(
            "I'm",
            " unable",
            " to",
            " provide",
            " real",
            "-time",
            " weather",
            " updates",
            ".",
            " To",
            " get",
            " the",
            " current",
            " weather",
            " in",
            " San",
            " Francisco",
            ",",
            " I",
            " recommend",
            " checking",
            " a",
            " reliable",
            " weather",
            " website",
            " or",
            " a",
            " weather",
            " app",
            ".",
        ),
        End("stop", Usage(14, 30)),
    ],
    "openai_python_json_schema_content.sse": [
        *content(*CITY_JSON, "61", ',"', "units", '":"', "f", '"}'),
        End("stop", Usage(79, 14)),
    ],
    "openai_python_max_tokens_finish_length.sse": [
        *content('{"'),
        End("length", Usage(79, 1)),
    ],
    # n=3: only choice 0 is relayed (its temperature is 65; choices 1 and 2 say 61 and 59).
    "openai_python_multiple_choices_n3.sse": [
        *content(*CITY_JSON, "65", ',"', "units", '":"', "f", '"}'),
        End("stop", Usage(79, 42)),
    ],
    # Refusals are what the user reads: the content channel.
    "openai_python_refusal_deltas.sse": [
        *content(
            "I'm", " sorry", ",", " I", " can't", " assist", " with", " that", " request", "."
        ),
        End("stop", Usage(79, 11)),
    ],
    "openai_python_refusal_logprobs.sse": [
        *content(
            "I'm", " very", " sorry", ",", " but", " I", " can't", " assist", " with", " that", "."
        ),
        End("stop", Usage(79, 12)),
    ],
    "openai_python_tool_call_non_strict.sse": [
        *start("call_4XzlGBLtUe9dy3GVNV4jhq7h", "get_weather", 0),
        *args("call_4XzlGBLtUe9dy3GVNV4jhq7h", '{"', "city", '":"', "New", " York", " City", '"}'),
        *end("call_4XzlGBLtUe9dy3GVNV4jhq7h"),
        End("tool_calls", Usage(44, 16)),
    ],
    "openai_python_tool_call_single.sse": [
        *start("call_c91SqDXlYFuETYv8mUHzz6pp", "GetWeatherArgs", 0),
        *args(
            "call_c91SqDXlYFuETYv8mUHzz6pp",
            '{"',
            "city",
            '":"',
            "Ed",
            "inburgh",
            '","',
            "country",
            '":"',
            "UK",
            '","',
            "units",
            '":"',
            "c",
            '"}',
        ),
        *end("call_c91SqDXlYFuETYv8mUHzz6pp"),
        End("tool_calls", Usage(76, 24)),
    ],
    "openai_python_tool_call_strict.sse": [
        *start("call_CTf1nWJLqSeRgDqaCG27xZ74", "get_weather", 0),
        *args(
            "call_CTf1nWJLqSeRgDqaCG27xZ74",
            '{"',
            "city",
            '":"',
            "San",
            " Francisco",
            '","',
            "state",
            '":"',
            "CA",
            '"}',
        ),
        *end("call_CTf1nWJLqSeRgDqaCG27xZ74"),
        End("tool_calls", Usage(48, 19)),
    ],
    "openai_python_tool_calls_parallel_two.sse": [
        *start("call_JMW1whyEaYG438VE1OIflxA2", "GetWeatherArgs", 0),
        *args(
            "call_JMW1whyEaYG438VE1OIflxA2",
            '{"ci',
            'ty": ',
            '"Edinb',
            "urgh",
            '", "c',
            "ountry",
            '": "',
            'GB", ',
            '"units',
            '": "',
            'c"}',
        ),
        *start("call_DNYTawLBoN8fj3KN6qU9N1Ou", "get_stock_price", 1),
        *args(
            "call_DNYTawLBoN8fj3KN6qU9N1Ou",
            '{"ti',
            'cker"',
            ': "AAP',
            'L", ',
            '"exch',
            'ange":',
            ' "NA',
            'SDAQ"',
            "}",
        ),
        *end("call_JMW1whyEaYG438VE1OIflxA2"),
        *end("call_DNYTawLBoN8fj3KN6qU9N1Ou"),
        End("tool_calls", Usage(149, 60)),
    ],
}

CAPTURES = [*EXPECTED, "openai_python_json_object_long_content.sse"]


def expect(name: str, events: list[Event]) -> None:
    if name == "openai_python_json_object_long_content.sse":
        # 177 content deltas (the usage counts 177 completion tokens), then the end.
        assert len(events) == 178
        assert all(isinstance(e, TextDelta) and e.channel == "content" for e in events[:-1])
        assert coalesce(events) == [*content(LONG_JSON), End("stop", Usage(19, 177))]
    else:
        assert events == EXPECTED[name]


@pytest.mark.anyio
@pytest.mark.parametrize("name", CAPTURES)
@pytest.mark.parametrize("seed", [None, 1, 2, 3])
async def test_capture_over_loopback(
    upstream: FakeUpstream, fast: StreamSettings, name: str, seed: int | None
) -> None:
    body = capture(f"openai_chat/{name}")
    chunks = [body] if seed is None else rechunk(body, random.Random(seed))
    upstream.enqueue(Reply(chunks=chunks))
    provider = OpenAIChatProvider(
        "gpt-4o-2024-08-06", base_url=upstream.url + "/v1", api_key="sk-test", settings=fast
    )
    expect(name, await collect(provider, REQUEST))
    assert [r.path for r in upstream.requests] == ["/v1/chat/completions"]


@pytest.mark.parametrize("name", CAPTURES)
def test_capture_sans_io_in_one_byte_chunks(name: str) -> None:
    body = capture(f"openai_chat/{name}")
    expect(name, replay(OpenAIChatParser, [body[i : i + 1] for i in range(len(body))]))


def chunk(delta: str, *, finish: str | None = None, index: int = 0) -> bytes:
    return (
        b'data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":%d,"delta":%s,'
        b'"finish_reason":%s}]}\n\n'
        % (index, delta.encode(), (b'"%s"' % finish.encode()) if finish else b"null")
    )


def test_reasoning_content_and_reasoning_go_to_the_reasoning_channel() -> None:
    stream = (
        chunk('{"role":"assistant","reasoning_content":"Think <EMAIL_1>"}')
        + chunk('{"reasoning":" more"}')
        # A server that sends both fields in one delta sends the same text twice.
        + chunk('{"reasoning_content":" once","reasoning":" once"}')
        + chunk('{"content":"Answer"}', finish="stop")
        + b"data: [DONE]\n\n"
    )
    assert replay(OpenAIChatParser, [stream]) == [
        *reasoning("Think <EMAIL_1>", " more", " once"),
        *content("Answer"),
        End("stop", None),
    ]


def test_unknown_fields_are_ignored() -> None:
    stream = (
        b'data: {"choices":[{"index":0,"delta":{"content":"a"},"logprobs":null,'
        b'"obfuscation":"Zx9"}],"x_groq":{"id":"req_1"},"service_tier":"default"}\n\n'
        b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],'
        b'"x_groq":{"usage":{"queue_time":0.1}},"usage":{"prompt_tokens":3,'
        b'"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":0}}}\n\n'
        b"data: [DONE]\n\n"
    )
    assert replay(OpenAIChatParser, [stream]) == [*content("a"), End("stop", Usage(3, 1))]


def test_tool_call_without_id_or_with_late_name_and_whole_object_arguments() -> None:
    stream = (
        chunk('{"tool_calls":[{"index":0,"function":{"arguments":"{\\"q\\":"}}]}')
        + chunk('{"tool_calls":[{"index":0,"function":{"name":"lookup","arguments":"1}"}}]}')
        # Some servers send a whole call at once, arguments as an object, with no index.
        + chunk('{"tool_calls":[{"id":"c2","function":{"name":"b","arguments":{"x":[1]}}}]}')
        + chunk("{}", finish="tool_calls")
        + b"data: [DONE]\n\n"
    )
    assert replay(OpenAIChatParser, [stream]) == [
        *start("call_0", "lookup", 0),
        *args("call_0", '{"q":', "1}"),
        *start("c2", "b", 1),
        *args("c2", '{"x":[1]}'),
        *end("call_0"),
        *end("c2"),
        End("tool_calls", None),
    ]


def test_mid_stream_error_payload_becomes_a_stream_error() -> None:
    stream = (
        chunk('{"content":"partial"}')
        + b'data: {"error":{"message":"The server had an error while processing your request",'
        b'"type":"server_error","code":null}}\n\n' + chunk('{"content":"never relayed"}')
    )
    events = replay(OpenAIChatParser, [stream])
    assert events[:-1] == content("partial")
    assert events[-1] == StreamError(
        "upstream_error",
        "openai: upstream sent an error mid-stream server_error: "
        "The server had an error while processing your request",
        True,
    )


def test_sse_error_event_becomes_a_stream_error() -> None:
    stream = (
        b"event: error\n"
        b'data: {"error":{"message":"Rate limit reached","type":"rate_limit_exceeded"}}\n\n'
    )
    [error] = replay(OpenAIChatParser, [stream])
    assert isinstance(error, StreamError)
    assert error.code == "upstream_rate_limited"
    assert error.retryable


def test_missing_done_after_finish_reason_still_ends() -> None:
    stream = chunk('{"content":"hi"}') + chunk("{}", finish="stop")
    assert replay(OpenAIChatParser, [stream]) == [*content("hi"), End("stop", None)]


def test_stream_cut_before_finish_is_a_protocol_error() -> None:
    body = capture("openai_chat/openai_python_tool_call_single.sse")
    cut = body[: body.index(b'"Ed"') + 2]  # inside an event, inside a JSON string
    events = replay(OpenAIChatParser, [cut])
    assert isinstance(events[-1], StreamError)
    assert events[-1].code == "upstream_protocol"
    assert "malformed JSON" in events[-1].message
    # Cut on an event boundary instead: the JSON is whole but the reply never finished.
    boundary = body[: body.index(b"\n\n", body.index(b'"Ed"')) + 2]
    events = replay(OpenAIChatParser, [boundary])
    assert events[-1] == StreamError(
        "upstream_protocol",
        "openai: stream ended before the reply finished (no [DONE])",
        True,
    )


def test_nothing_follows_the_terminal_event() -> None:
    parser = OpenAIChatParser()
    stream = chunk("{}", finish="stop") + b"data: [DONE]\n\n" + chunk('{"content":"late"}')
    assert replay(lambda: parser, [stream]) == [End("stop", None)]
    assert parser.done
    assert parser.finish() == []


def test_text_is_relayed_unchanged() -> None:
    body = capture("openai_chat/openai_python_plain_content.sse")
    assert text_of(replay(OpenAIChatParser, [body])) == (
        "I'm unable to provide real-time weather updates. To get the current weather in San "
        "Francisco, I recommend checking a reliable weather website or a weather app."
    )
