"""The reply machine alone: events in, typed frames out; no event loop, no database."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from holdback.detect import DetectorSet
from holdback.errors import WIRE_ERRORS
from holdback.providers.events import (
    End,
    Event,
    StreamError,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
)
from holdback.reply import ReplyMachine, ReplyState
from holdback.reply.frames import FINISH_REASONS, AssistantDelta, AssistantDone, ErrorFrame, Frame
from holdback.stream import Guard, ReplyFilter, Restorer
from holdback.stream.projection import ProjectionMode
from holdback.stream.restorer import json_escape
from holdback.vault import Vault

DETECTORS = DetectorSet.from_config()
INJECTED = "intruder.canary@injected-leak.example"
CARD = "4556 7375 8689 9855"


def machine(mode: str = "redact") -> ReplyMachine:
    vault = Vault()
    vault.assign("email", "sarah@acme.com")

    def make(projection: ProjectionMode, json_values: bool) -> ReplyFilter:
        guard = Guard(DETECTORS, vault=vault, mode=mode, projection=projection)  # type: ignore[arg-type]
        return ReplyFilter(
            guard, Restorer(vault.index(), escape=json_escape if json_values else None)
        )

    return ReplyMachine("conv", "msg", make, call_prefix="call_x")


def play(m: ReplyMachine, events: list[Event], stored: bool = True) -> list[dict[str, object]]:
    frames: list[Frame] = [m.start()]
    for e in events:
        frames += m.receive(e)
    frames += m.interrupt()
    frames += m.done(stored=stored)
    return [f.wire() for f in frames]


def text_of(frames: list[dict[str, object]], channel: str = "content") -> str:
    return "".join(
        str(f["text"]) for f in frames if f["type"] == "assistant_delta" and f["channel"] == channel
    )


def test_a_reply_restores_and_screens_and_ends_once() -> None:
    m = machine()
    frames = play(
        m, [TextDelta("content", "To <EMAIL_"), TextDelta("content", "1> ok"), End("stop", None)]
    )
    assert text_of(frames) == "To sarah@acme.com ok"
    assert frames[-1] == {
        "type": "assistant_done",
        "conversation_id": "conv",
        "message_id": "msg",
        "finish_reason": "stop",
        "status": "complete",
    }
    assert m.state is ReplyState.DONE
    assert m.outcome().text == "To <EMAIL_1> ok"


@pytest.mark.parametrize(
    ("upstream", "ours"),
    [
        ("stop", "stop"),
        ("end_turn", "stop"),
        ("max_tokens", "length"),
        ("tool_use", "tool_calls"),
        ("content_filter", "content_filter"),
        (f"mail {INJECTED}", "other"),
        (CARD, "other"),
        (None, "other"),
    ],
)
def test_finish_reasons_come_from_a_closed_vocabulary(upstream: str | None, ours: str) -> None:
    frames = play(machine(), [End(upstream, None)])
    assert frames[-1]["finish_reason"] == ours
    assert ours in FINISH_REASONS


def test_upstream_error_text_is_never_forwarded() -> None:
    m = machine()
    frames = play(
        m, [TextDelta("content", "Hi"), StreamError("upstream_error", f"bad {INJECTED}", False)]
    )
    errors = [f for f in frames if f["type"] == "error"]
    assert errors == [
        {
            "type": "error",
            "code": "upstream_error",
            "message": WIRE_ERRORS["upstream_error"],
            "conversation_id": "conv",
            "message_id": "msg",
        }
    ]
    assert INJECTED not in json.dumps(frames)
    assert frames[-1]["status"] == "incomplete"
    assert frames[-1]["finish_reason"] == "error"


@pytest.mark.parametrize(
    "name",
    [
        CARD.replace(" ", ""),
        "send_to_" + INJECTED,
        "x" * 65,
        "tool name",
        "",
        "ｓｅｎｄ",
        "sk_live_" + "a1B2" * 6,
    ],
)
def test_tool_names_are_screened_and_limited(name: str) -> None:
    frames = play(
        machine(),
        [
            ToolCallStart(INJECTED, name, 0),
            ToolCallDelta(INJECTED, "{}"),
            ToolCallEnd(INJECTED),
            End("tool_calls", None),
        ],
    )
    calls = [f for f in frames if f["type"] == "assistant_delta"]
    assert calls
    for f in calls:
        assert re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", str(f["name"]))
        assert f["name"] == "tool"
        assert f["call_id"] == "call_x_1"  # minted, never the upstream's id
    assert INJECTED not in json.dumps(frames)


def test_a_plain_tool_name_is_kept_and_arguments_are_screened_as_json() -> None:
    args = '{"to": "ann\\u0040example.org", "me": "<EMAIL_1>"}'
    m = machine()
    frames = play(
        m,
        [
            ToolCallStart("u1", "send_mail", 0),
            *[ToolCallDelta("u1", c) for c in args],
            ToolCallEnd("u1"),
            End("tool_calls", None),
        ],
    )
    assert {f["name"] for f in frames if f["type"] == "assistant_delta"} == {"send_mail"}
    shown = json.loads("".join(str(f["text"]) for f in frames if f["type"] == "assistant_delta"))
    assert shown == {"to": "[redacted email]", "me": "sarah@acme.com"}
    stored = json.loads(m.outcome().parts["tool_calls"])
    assert stored == [
        {
            "call_id": "call_x_1",
            "name": "send_mail",
            "arguments": '{"to": "[redacted email]", "me": "<EMAIL_1>"}',
        }
    ]


def test_block_mode_sends_the_safe_prefix_then_stops() -> None:
    m = machine(mode="block")
    frames = play(
        m,
        [
            TextDelta("content", f"Fine. Now {INJECTED} and more"),
            TextDelta("content", "ignored"),
            End("stop", None),
        ],
    )
    assert text_of(frames) == "Fine. Now "
    assert [f["code"] for f in frames if f["type"] == "error"] == ["blocked"]
    assert frames[-1]["status"] == "blocked"
    assert frames[-1]["finish_reason"] == "content_filter"
    assert m.outcome().blocked == {"email": 1}


def test_an_interrupted_reply_redacts_what_it_held() -> None:
    m = machine()
    frames = play(m, [TextDelta("content", "Write to <EMAIL_")])
    assert text_of(frames) == "Write to [redacted token]_"  # the `_` renders as nothing
    assert frames[-1]["status"] == "incomplete"


def test_a_failed_store_ends_with_storage_failed() -> None:
    frames = play(machine(), [End("stop", None)], stored=False)
    assert [f.get("code") for f in frames[-2:]] == ["storage_failed", None]
    assert frames[-1]["status"] == "incomplete"


def test_nothing_follows_the_end() -> None:
    m = machine()
    m.receive(End("stop", None))
    assert m.receive(TextDelta("content", INJECTED)) == []
    assert m.interrupt() == []
    assert m.fail() == []


EVENTS = st.lists(
    st.one_of(
        st.builds(TextDelta, st.sampled_from(["content", "reasoning"]), st.text(max_size=12)),
        st.builds(ToolCallStart, st.sampled_from(["a", "b"]), st.text(max_size=8), st.just(0)),
        st.builds(ToolCallDelta, st.sampled_from(["a", "b"]), st.text(max_size=8)),
        st.builds(ToolCallEnd, st.sampled_from(["a", "b"])),
        st.builds(End, st.one_of(st.none(), st.text(max_size=10)), st.none()),
        st.builds(StreamError, st.just("upstream_error"), st.text(max_size=10), st.booleans()),
    ),
    max_size=12,
)


@given(events=EVENTS, stored=st.booleans())
def test_every_frame_field_is_screened_or_from_a_closed_vocabulary(
    events: list[Event], stored: bool
) -> None:
    m = machine()
    frames: list[Frame] = [m.start()]
    for e in events:
        frames += m.receive(e)
    frames += m.done(stored=stored)
    done = [f for f in frames if isinstance(f, AssistantDone)]
    assert len(done) == 1
    assert frames[-1] is done[0]
    assert done[0].finish_reason in FINISH_REASONS
    for f in frames:
        if isinstance(f, ErrorFrame):
            assert f.code in WIRE_ERRORS
            assert f.wire()["message"] == WIRE_ERRORS[f.code]
        if isinstance(f, AssistantDelta) and f.channel == "tool_call":
            assert f.call_id is not None
            assert f.call_id.startswith("call_x_")
            assert f.name is not None
            assert re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", f.name)


def test_block_mode_blocks_on_a_value_in_a_tool_name() -> None:
    frames = play(
        machine(mode="block"),
        [ToolCallStart("u", "pay_" + CARD.replace(" ", ""), 0), End("stop", None)],
    )
    assert [f["code"] for f in frames if f["type"] == "error"] == ["blocked"]
    assert frames[-1]["status"] == "blocked"
    assert CARD.replace(" ", "") not in json.dumps(frames)
