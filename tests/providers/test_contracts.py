"""The shared contract: request validation, the event union, and the one system prompt."""

from __future__ import annotations

import dataclasses

import pytest

from holdback.errors import HoldbackError
from holdback.providers import SYSTEM_PROMPT, Provider, make_provider, system_text
from holdback.providers.base import ChatMessage, ChatRequest, InvalidRequestError, ToolSpec
from holdback.providers.events import (
    End,
    Event,
    StreamError,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    Usage,
    is_terminal,
)


def test_bad_role_is_refused() -> None:
    with pytest.raises(InvalidRequestError, match="role must be one of") as caught:
        ChatMessage("tool", "x")  # type: ignore[arg-type]
    assert isinstance(caught.value, HoldbackError)


def test_content_must_be_text() -> None:
    with pytest.raises(InvalidRequestError, match="must be a string"):
        ChatMessage("user", None)  # type: ignore[arg-type]


def test_a_request_needs_a_turn() -> None:
    with pytest.raises(InvalidRequestError, match="at least one user or assistant turn"):
        ChatRequest([])
    with pytest.raises(InvalidRequestError):
        ChatRequest([ChatMessage("system", "be brief")])


def test_tool_and_limit_validation() -> None:
    hi = [ChatMessage("user", "hi")]
    with pytest.raises(InvalidRequestError, match="unique"):
        ChatRequest(hi, tools=[ToolSpec("a"), ToolSpec("a")])
    with pytest.raises(InvalidRequestError, match="tool names"):
        ToolSpec("send email")
    with pytest.raises(InvalidRequestError, match="max_output_tokens"):
        ChatRequest(hi, max_output_tokens=0)


def test_turns_and_instructions_are_separated() -> None:
    request = ChatRequest(
        [ChatMessage("system", "A"), ChatMessage("user", "u"), ChatMessage("system", "B")]
    )
    assert request.turns() == [ChatMessage("user", "u")]
    assert request.extra_instructions() == ["A", "B"]


def test_events_are_frozen_and_slotted() -> None:
    events: list[Event] = [
        TextDelta("content", "a"),
        ToolCallStart("c", "n", 0),
        ToolCallDelta("c", "{}"),
        ToolCallEnd("c"),
        End("stop", Usage(1, 2)),
        StreamError("upstream_error", "m", False),
    ]
    for event in events:
        assert not hasattr(event, "__dict__")
        field = dataclasses.fields(event)[0].name
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(event, field, "x")
    assert [is_terminal(e) for e in events] == [False] * 4 + [True, True]


def test_the_system_prompt_explains_tokens() -> None:
    assert "<EMAIL_1>" in SYSTEM_PROMPT
    assert "verbatim" in SYSTEM_PROMPT
    assert "tool-call arguments" in SYSTEM_PROMPT
    assert system_text() == SYSTEM_PROMPT
    assert system_text(["Be brief.", "  "]) == SYSTEM_PROMPT + "\n\nBe brief."


def test_every_provider_satisfies_the_protocol() -> None:
    env = {"OPENAI_API_KEY": "k", "ANTHROPIC_API_KEY": "k"}
    for spec in ("demo", "openai:m", "openai-responses:m", "anthropic:m"):
        assert isinstance(make_provider(spec, env=env), Provider)
