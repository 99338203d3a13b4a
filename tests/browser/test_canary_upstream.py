"""The fake model server plays its scripts, and the inbox check catches an original value.

The rule these tests keep: the browser tests' claims rest on the fake model doing what its
scripts say (cutting tokens where asked, inventing values) and on the "never received an
original value" check being able to fail; both are checked here over real loopback HTTP.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest

from tests.browser.canaries import INJECTED_VALUES, USER_VALUES, XSS_PAYLOADS
from tests.browser.canary_upstream import (
    CanaryUpstream,
    parse_script,
    running_canary_upstream,
)
from tests.browser.chat_page import assert_upstream_never_saw_originals


@pytest.fixture
def upstream() -> Iterator[CanaryUpstream]:
    with running_canary_upstream() as server:
        yield server


def ask(upstream: CanaryUpstream, text: str) -> tuple[int, list[dict[str, Any]]]:
    """Post a chat request; the status and the decoded SSE deltas of the reply."""
    body = {
        "model": "canary",
        "stream": True,
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "an earlier turn"},
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": text},
        ],
    }
    with httpx.Client(trust_env=False, timeout=10) as client:
        response = client.post(f"{upstream.url}/v1/chat/completions", json=body)
    if response.status_code != 200:
        return response.status_code, []
    deltas = []
    for line in response.text.splitlines():
        if line.startswith("data: {"):
            choice = orjson.loads(line[6:])["choices"][0]
            if choice["delta"] and "role" not in choice["delta"]:
                deltas.append(choice["delta"])
    assert response.text.rstrip().endswith("data: [DONE]")
    return 200, deltas


def contents(deltas: list[dict[str, Any]], field: str = "content") -> list[str]:
    return [str(d[field]) for d in deltas if field in d]


def test_echo_cuts_the_body_into_small_pieces(upstream: CanaryUpstream) -> None:
    status, deltas = ask(upstream, "canary:echo Mail <EMAIL_1> and <PHONE_1> today.")
    assert status == 200
    pieces = contents(deltas)
    assert "".join(pieces) == "Mail <EMAIL_1> and <PHONE_1> today."
    assert all(1 <= len(p) <= 5 for p in pieces)
    assert "<EMAIL_1>" not in pieces


@pytest.mark.parametrize("k", [1, 5, 9, 12])
def test_split_cuts_once_where_asked(upstream: CanaryUpstream, k: int) -> None:
    body = "Hi <EMAIL_1>!"
    _, deltas = ask(upstream, f"canary:split:{k} {body}")
    assert contents(deltas) == [body[:k], body[k:]]


def test_think_streams_reasoning_then_the_answer(upstream: CanaryUpstream) -> None:
    _, deltas = ask(upstream, "canary:think <IBAN_1> is fine")
    assert "".join(contents(deltas, "reasoning_content")) == "<IBAN_1> is fine"
    assert "".join(contents(deltas)) == "<IBAN_1> is fine"
    assert "content" not in deltas[0]


def test_inject_invents_values_and_keeps_the_users_token(upstream: CanaryUpstream) -> None:
    _, deltas = ask(upstream, "canary:inject write to <EMAIL_1>")
    text = "".join(contents(deltas))
    assert text.startswith("Noted <EMAIL_1>.")
    for value in INJECTED_VALUES.values():
        assert value in text


def test_xss_payloads_arrive_whole_only_when_joined(upstream: CanaryUpstream) -> None:
    _, deltas = ask(upstream, "canary:xss")
    pieces = contents(deltas)
    for payload in XSS_PAYLOADS:
        assert payload in "".join(pieces)
        assert not any(payload in p for p in pieces)


def test_an_unknown_script_is_refused_with_a_clear_error(upstream: CanaryUpstream) -> None:
    status, _ = ask(upstream, "canary:nosuch hello")
    assert status == 400


def test_a_message_without_marker_is_echoed(upstream: CanaryUpstream) -> None:
    assert parse_script("plain text").name == "echo"
    _, deltas = ask(upstream, "plain text")
    assert "".join(contents(deltas)) == "plain text"


def test_the_inbox_check_catches_an_original_value(upstream: CanaryUpstream) -> None:
    ask(upstream, "canary:echo Mail <EMAIL_1>.")
    assert_upstream_never_saw_originals(upstream)
    for kind in ("email", "phone", "credit_card", "client"):
        ask(upstream, f"canary:echo {USER_VALUES[kind]}")
        with pytest.raises(AssertionError, match=kind):
            assert_upstream_never_saw_originals(upstream)
        upstream.requests.clear()


def test_the_inbox_check_catches_a_number_without_its_punctuation(
    upstream: CanaryUpstream,
) -> None:
    ask(upstream, "canary:echo call 4155552671")
    with pytest.raises(AssertionError, match="phone"):
        assert_upstream_never_saw_originals(upstream)
