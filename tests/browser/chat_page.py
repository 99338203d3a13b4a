"""Driving the chat page, and the checks every canary conversation ends with.

The rule it keeps: the tests use the page only through the hooks docs/ui.md promises (labels,
`data-testid`s), and each conversation is judged three ways: the wire (see `wire.py`), the
fake model's inbox (no original value may ever reach it, in any spelling), and the server's
log (no original value may be written there either).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson
from playwright.sync_api import Locator, Page, expect

from holdback.tokens import TOKEN_RE
from tests.browser.canaries import FORBIDDEN_TERMS, INJECTED_VALUES, USER_VALUES, spellings
from tests.browser.canary_upstream import CanaryUpstream
from tests.browser.server_process import ServerProcess
from tests.browser.wire import LeakRules, WireTap, strip_own_tokens, wire_findings


def open_chat(page: Page, path: str = "/") -> None:
    page.goto(path)
    expect(page.get_by_test_id("connection-state")).to_have_text("connected")


def composer(page: Page) -> Locator:
    return page.get_by_label("Message", exact=True)


def send(page: Page, text: str) -> None:
    """Type a message and press Enter, once the page is ready to send it."""
    box = composer(page)
    box.fill(text)
    expect(page.get_by_role("button", name="Send", exact=True)).to_be_enabled()
    box.press("Enter")
    expect(box).to_have_value("")


def send_and_wait(page: Page, tap: WireTap, text: str, timeout: float = 15.0) -> dict[str, Any]:
    """Send a message; return its reply's `assistant_done` frame once the page shows it."""
    before = len(tap.of_type("assistant_done"))
    send(page, text)
    done = tap.done_frame(page, before, timeout)
    expect(assistant_message(page, str(done["message_id"]))).to_have_attribute(
        "data-status", str(done["status"])
    )
    return done


def assistant_message(page: Page, message_id: str) -> Locator:
    return page.locator(
        f'[data-testid="message"][data-role="assistant"][data-message-id="{message_id}"]'
    )


def message_text(page: Page, message_id: str) -> str:
    content = assistant_message(page, message_id).get_by_test_id("message-content")
    return content.inner_text()


def reply_text(tap: WireTap, message_id: str, channel: str = "content") -> str:
    return "".join(
        str(f["text"])
        for f in tap.of_type("assistant_delta")
        if f.get("message_id") == message_id and f.get("channel") == channel
    )


def known_tokens(tap: WireTap, upstream: CanaryUpstream) -> frozenset[str]:
    """Every token in play: those the user was told about, and every one the model was sent."""
    tokens = {str(m["token"]) for f in tap.of_type("message_accepted") for m in f["masked"]}
    for body in upstream.bodies():
        tokens.update(m.group(0) for m in TOKEN_RE.finditer(body.decode("utf-8")))
    return frozenset(tokens)


def leak_rules(tap: WireTap, upstream: CanaryUpstream) -> LeakRules:
    return LeakRules(
        known_tokens=known_tokens(tap, upstream),
        forbidden_terms=FORBIDDEN_TERMS,
        hidden_values=tuple(INJECTED_VALUES.values()),
    )


def assert_wire_clean(tap: WireTap, upstream: CanaryUpstream) -> None:
    assert tap.received(), "no frame was captured: the wire check would prove nothing"
    problems = wire_findings(tap, leak_rules(tap, upstream))
    assert not problems, "the wire carried what it must not:\n" + "\n".join(problems)


def _value_hits(text: str, values: Iterable[str]) -> list[int]:
    lowered = text.lower()
    return [
        i
        for i, value in enumerate(values)
        if any(form.lower() in lowered for form in spellings(value))
    ]


def assert_upstream_never_saw_originals(upstream: CanaryUpstream) -> None:
    """No request to the model holds a user's value, as bytes or as decoded JSON text."""
    bodies = upstream.bodies()
    assert bodies, "the fake model received no request"
    values = list(USER_VALUES.values())
    for n, body in enumerate(bodies):
        decoded = "\n".join(
            str(m.get("content", "")) for m in orjson.loads(body).get("messages", [])
        )
        hits = _value_hits(body.decode("utf-8"), values) + _value_hits(decoded, values)
        kinds = sorted({list(USER_VALUES)[i] for i in hits})
        assert not kinds, f"request {n} to the model carried original values of kinds {kinds}"


def assert_log_clean(server: ServerProcess) -> None:
    log = server.log_text()
    assert "holdback is serving" in log
    hits = _value_hits(log, [*USER_VALUES.values(), *INJECTED_VALUES.values(), *FORBIDDEN_TERMS])
    assert not hits, f"the server log holds protected values (canary #{hits})"


def assert_http_view_clean(page: Page, conversation_id: str, rules: LeakRules) -> dict[str, Any]:
    """The restored HTTP view of a conversation obeys the wire's rules too."""
    response = page.request.get(f"/api/conversations/{conversation_id}")
    assert response.ok, response.status
    body: dict[str, Any] = response.json()
    messages = [strip_own_tokens({"type": "message_accepted", **m}) for m in body["messages"]]
    text = orjson.dumps({**body, "messages": messages}).decode()
    problems = rules.findings(text)
    assert not problems, f"GET /api/conversations/{conversation_id}: {problems}"
    return body
