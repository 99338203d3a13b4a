"""The demo model: deterministic, offline, reuses the tokens it was given, reasons first,
calls a tool when asked, and streams in 1–6 character chunks that split tokens."""

from __future__ import annotations

import json
import math
import time

import pytest

from holdback.providers.base import ChatMessage, ChatRequest, ToolSpec
from holdback.providers.demo import INTRO, DemoModel, DemoProvider, InvalidDemoSettingError
from holdback.providers.events import (
    End,
    Event,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    Usage,
)
from holdback.tokens import find_tokens
from tests.providers.streams import arguments_of, collect, text_of


def ask(*texts: str, tools: tuple[ToolSpec, ...] = ()) -> ChatRequest:
    roles = ["user", "assistant"]
    return ChatRequest(
        [ChatMessage(roles[i % 2], t) for i, t in enumerate(texts)],  # type: ignore[arg-type]
        tools=tools,
    )


def tokens_in(text: str) -> list[str]:
    return [m.group(0) for m in find_tokens(text)]


EMAIL = ask("Please email <EMAIL_1> and tell <PERSON_1> the meeting moved to <DATE_1>.")


def test_same_conversation_same_reply_and_chunking() -> None:
    assert DemoModel().reply(EMAIL) == DemoModel().reply(EMAIL)
    other = ask("Please email <EMAIL_1> and tell <PERSON_1> the meeting moved to <DATE_1>!")
    assert DemoModel().reply(other) != DemoModel().reply(EMAIL)


def test_email_reply_refers_back_to_the_tokens_verbatim() -> None:
    events = DemoModel().reply(EMAIL)
    text = text_of(events)
    assert text.startswith(INTRO + "\n\nI'll draft the email to <EMAIL_1>.")
    assert "Hi <PERSON_1>," in text
    assert "You mentioned <EMAIL_1>, <PERSON_1> and <DATE_1>" in text
    assert set(tokens_in(text)) == {"<EMAIL_1>", "<PERSON_1>", "<DATE_1>"}
    assert events[-1] == End("stop", events[-1].usage)  # type: ignore[union-attr]


def test_reasoning_comes_first_and_is_short() -> None:
    events = DemoModel().reply(EMAIL)
    channels = [e.channel for e in events if isinstance(e, TextDelta)]
    first_content = channels.index("content")
    assert channels[:first_content] == ["reasoning"] * first_content
    assert "reasoning" not in channels[first_content:]
    thought = text_of(events, "reasoning")
    assert 0 < len(thought) < 300
    assert "<EMAIL_1>" in thought


def test_every_reply_opens_by_saying_it_is_an_offline_demo() -> None:
    for request in (EMAIL, ask("Hi"), ask("", "Noted.", "Summarize this, please")):
        text = text_of(DemoModel().reply(request))
        assert text.startswith(INTRO + "\n\n")
        assert text.count(INTRO) == 1
    assert "offline demo" in INTRO
    assert "no LLM is connected" in INTRO
    assert tokens_in(INTRO) == []


def test_no_tokens_and_no_invented_tokens() -> None:
    events = DemoModel().reply(ask("What is a good name for a cat?"))
    text = text_of(events)
    assert "no masked values" in text
    assert tokens_in(text) == []
    assert tokens_in(text_of(events, "reasoning")) == []


def test_earlier_turns_are_remembered() -> None:
    request = ask("My number is <PHONE_1>.", "Noted.", "And my mail is <EMAIL_1>, thanks")
    text = text_of(DemoModel().reply(request))
    assert "Earlier you also mentioned <PHONE_1>." in text
    assert "This is message 2 of our conversation." in text


def test_no_tool_call_unless_asked() -> None:
    events = DemoModel().reply(EMAIL)
    assert not any(isinstance(e, ToolCallStart | ToolCallDelta | ToolCallEnd) for e in events)


def tool_call(events: list[Event]) -> tuple[str, str, dict[str, object]]:
    [begin] = [e for e in events if isinstance(e, ToolCallStart)]
    [finish] = [e for e in events if isinstance(e, ToolCallEnd)]
    assert finish.call_id == begin.call_id
    # Start, then only deltas of that call, then End, then the terminal End.
    i = events.index(begin)
    assert all(isinstance(e, ToolCallDelta) for e in events[i + 1 : events.index(finish)])
    assert events[events.index(finish) + 1 :] == [events[-1]]
    assert isinstance(events[-1], End)
    assert events[-1].finish_reason == "tool_calls"
    return begin.call_id, begin.name, json.loads(arguments_of(events, begin.call_id))


def test_lookup_tool_when_asked() -> None:
    events = DemoModel().reply(ask("Can you look up <PHONE_1> for <PERSON_2>?"))
    call_id, name, arguments = tool_call(events)
    assert name == "lookup"
    assert arguments == {
        "query": "Can you look up <PHONE_1> for <PERSON_2>?",
        "mentions": ["<PHONE_1>", "<PERSON_2>"],
    }
    assert call_id.startswith("call_demo_")
    assert "I'm calling the lookup tool now." in text_of(events)


def test_send_email_tool_when_asked_to_send() -> None:
    events = DemoModel().reply(ask("Send an email to <EMAIL_1> about <PROJECT_3>."))
    _, name, arguments = tool_call(events)
    assert name == "send_email"
    assert arguments["to"] == "<EMAIL_1>"
    assert "<PROJECT_3>" in str(arguments["body"])


def test_request_tools_are_preferred() -> None:
    tools = (ToolSpec("calendar"), ToolSpec("crm_search"))
    events = DemoModel().reply(ask("Use the crm_search tool on <ORG_1>", tools=tools))
    _, name, arguments = tool_call(events)
    assert name == "crm_search"
    assert arguments["mentions"] == ["<ORG_1>"]
    events = DemoModel().reply(ask("search for <ORG_1>", tools=tools))
    assert tool_call(events)[1] == "calendar"


def test_chunks_are_one_to_six_characters_and_split_tokens() -> None:
    split = 0
    for i in range(10):
        request = ask(f"Draft a mail {i} to <EMAIL_1>, <EMAIL_2> and <PERSON_{i + 1}>; look it up")
        events = DemoModel().reply(request)
        pieces = [e.text if isinstance(e, TextDelta) else e.arguments for e in events
                  if isinstance(e, TextDelta | ToolCallDelta)]  # fmt: skip
        assert all(1 <= len(p) <= 6 for p in pieces)
        # A token is split when it is in the joined text but in no single piece.
        joined = "".join(pieces)
        split += sum(1 for t in tokens_in(joined) if not any(t in p for p in pieces))
    assert split > 10


def test_usage_counts_words() -> None:
    events = DemoModel().reply(ask("one two three"))
    end = events[-1]
    assert isinstance(end, End)
    assert isinstance(end.usage, Usage)
    assert end.usage.input_tokens > 3
    words = len(text_of(events).split()) + len(text_of(events, "reasoning").split())
    assert end.usage.output_tokens == words


@pytest.mark.anyio
async def test_provider_streams_the_model_reply_at_its_pace() -> None:
    request = ask("hi <PERSON_1>")
    expected = DemoModel().reply(request)
    assert await collect(DemoProvider(chunk_delay=0), request) == expected
    began = time.monotonic()
    assert await collect(DemoProvider(chunk_delay=0.002), request) == expected
    assert time.monotonic() - began >= 0.9 * 0.002 * (len(expected) - 1)
    assert DemoProvider().name == "demo"


@pytest.mark.parametrize("delay", [-0.1, math.nan])
def test_bad_pace_is_refused(delay: float) -> None:
    with pytest.raises(InvalidDemoSettingError, match="chunk_delay"):
        DemoProvider(chunk_delay=delay)
