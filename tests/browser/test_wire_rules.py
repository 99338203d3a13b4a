"""The leak rules the browser tests apply catch what they claim to (no browser needed).

The rule these tests keep: a checker that cannot fail proves nothing, so each kind of leak the
wire tests look for is planted in hand-made frames and must be found, in a frame alone or only
once frames are joined, while the one field that may carry tokens by design does not trip it.
"""

from __future__ import annotations

import orjson
import pytest

from tests.browser.canaries import FORBIDDEN_TERMS, INJECTED_VALUES, spellings
from tests.browser.wire import Frame, LeakRules, WireTap, leak_ranges, wire_findings

RULES = LeakRules(
    known_tokens=frozenset({"<EMAIL_1>", "<CREDIT_CARD_1>"}),
    forbidden_terms=FORBIDDEN_TERMS,
    hidden_values=tuple(INJECTED_VALUES.values()),
)


def tap_of(*frames: dict[str, object]) -> WireTap:
    return WireTap(
        frames=[Frame("ws://x/ws", "received", orjson.dumps(f).decode()) for f in frames]
    )


def delta(text: str, message_id: str = "m1") -> dict[str, object]:
    return {"type": "assistant_delta", "message_id": message_id, "channel": "content", "text": text}


def accepted(title: str) -> dict[str, object]:
    return {
        "type": "message_accepted",
        "message_id": "u1",
        "masked": [{"start": 5, "end": 20, "kind": "email", "token": "<EMAIL_1>"}],
        "title": title,
    }


def test_clean_frames_and_the_users_own_masked_tokens_pass() -> None:
    tap = tap_of(accepted("Mail sarah@example.org"), delta("Mail "), delta("sarah@example.org"))
    assert wire_findings(tap, RULES) == []


@pytest.mark.parametrize(
    "text",
    [
        "write to <EMAIL_1> now",
        "write to <EMAIL_9> now",  # a token in no vault is token text too
        "write to &lt;EMAIL_1&gt; now",
        "write to EMAIL_1 now",
        "write to email\\_1 now",
        "card <CREDIT\\_CARD\\_1>",
    ],
)
def test_token_text_in_a_reply_is_found(text: str) -> None:
    assert wire_findings(tap_of(delta(text)), RULES)


def test_a_token_in_a_message_accepted_field_other_than_masked_is_found() -> None:
    assert wire_findings(tap_of(accepted("Mail <EMAIL_1>")), RULES)


def test_an_escaped_token_in_the_raw_frame_is_found() -> None:
    raw = '{"type":"assistant_delta","message_id":"m1","channel":"content","text":"\\u003cEMAIL_1\\u003e"}'
    assert wire_findings(WireTap(frames=[Frame("ws://x/ws", "received", raw)]), RULES)


def test_a_token_split_over_two_frames_is_found_once_joined() -> None:
    findings = wire_findings(tap_of(delta("to <EMAIL_"), delta("1> now")), RULES)
    assert findings
    assert all("joined" in f for f in findings)


def test_forbidden_terms_are_found_in_any_case_and_split() -> None:
    assert wire_findings(tap_of(delta("host DB01.Corp.Internal")), RULES)
    assert wire_findings(tap_of(delta("host db01.corp"), delta(".internal")), RULES)


@pytest.mark.parametrize("kind", sorted(INJECTED_VALUES))
def test_hidden_values_are_found(kind: str) -> None:
    for form in spellings(INJECTED_VALUES[kind]):
        assert wire_findings(tap_of(delta(f"see {form}.")), RULES), form


def test_a_hidden_number_is_found_however_it_is_punctuated() -> None:
    assert wire_findings(tap_of(delta("call 212-555-0147 please")), RULES)
    assert wire_findings(tap_of(delta("card 5555-5555-"), delta("5555-4444")), RULES)


def test_frames_the_page_sent_are_not_judged() -> None:
    sent = Frame("ws://x/ws", "sent", orjson.dumps(delta("<EMAIL_1>")).decode())
    assert wire_findings(WireTap(frames=[sent, *tap_of(delta("ok")).frames]), RULES) == []


def test_leak_fragments_follow_the_demo_pages_definition() -> None:
    tokens = ["<EMAIL_1>", "<PHONE_1>"]
    assert leak_ranges("mail <EMA", tokens) == [(5, 9)]
    assert leak_ranges("IL_1> now", tokens) == [(0, 5)]
    assert leak_ranges("1>", tokens) == [(0, 2)]
    assert leak_ranges("EMAIL and PHONE", tokens) == []  # no structural character
    assert leak_ranges("a_b <b> x>y", tokens) == []  # structural, but in no token
    assert leak_ranges("<EMAIL_1><PHONE_1>", tokens) == [(0, 9), (9, 18)]  # two leaks
