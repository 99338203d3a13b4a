"""Canary conversations in real Chromium, judged by every WebSocket frame the page received.

The rule these tests keep (docs/protocol.md): reply text on the wire is always restored and
screened. For each conversation, every received frame, and all of them joined, must hold no
token text (the tokens of the user's own values in `message_accepted.masked[].token` are the
one exception, by design: they show the user what the model saw), no forbidden term, and no
value the viewer may not see (values the model invented). The page must show the user's values
restored, the model must never have received one of them, and the server log neither.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from holdback.tokens import TOKEN_RE, kind_label
from tests.browser.canaries import (
    EVERY_KIND_TEXT,
    INJECTED_VALUES,
    INVENTED_TOKENS,
    USER_VALUES,
)
from tests.browser.canary_upstream import CanaryUpstream, last_user_text
from tests.browser.chat_page import (
    assert_http_view_clean,
    assert_log_clean,
    assert_upstream_never_saw_originals,
    assert_wire_clean,
    assistant_message,
    composer,
    leak_rules,
    message_text,
    open_chat,
    reply_text,
    send,
    send_and_wait,
)
from tests.browser.chromium import NEEDS_CHROMIUM
from tests.browser.server_process import ServerProcess
from tests.browser.wire import WireTap

pytestmark = [pytest.mark.browser, NEEDS_CHROMIUM]

# A short text with two tokens once the model sees it: "<CLIENT_1>: <EMAIL_1>."
SPLIT_TEXT = f"{USER_VALUES['client']}: {USER_VALUES['email']}."


def squash(text: str) -> str:
    return " ".join(text.split())


def test_every_detector_kind_is_masked_for_the_model_and_restored_on_the_wire(
    page: Page,
    tap: WireTap,
    canary_upstream: CanaryUpstream,
    holdback_server: ServerProcess,
    artifacts: Path,
) -> None:
    open_chat(page)
    echoed = send_and_wait(page, tap, "canary:echo " + EVERY_KIND_TEXT)
    one_by_one = send_and_wait(page, tap, "canary:chars " + EVERY_KIND_TEXT)
    thought = send_and_wait(page, tap, "canary:think " + EVERY_KIND_TEXT)

    # The model saw one token per kind, and none of the values.
    seen = last_user_text(canary_upstream.requests[-1])
    for kind in USER_VALUES:
        assert re.search(rf"<{kind_label(kind)}_[1-9][0-9]*>", seen), f"no {kind} token sent"
    assert_upstream_never_saw_originals(canary_upstream)

    # The user was told which of their values were masked: every kind, with its token.
    accepted = tap.of_type("message_accepted")
    assert {m["kind"] for m in accepted[0]["masked"]} == set(USER_VALUES)
    user_marks = page.locator('[data-testid="message"][data-role="user"] mark.masked')
    expect(user_marks).to_have_count(3 * len(USER_VALUES))

    # Every reply reaches the wire, and the page, exactly as the user wrote the values.
    for done in (echoed, one_by_one, thought):
        assert done["status"] == "complete"
        message_id = str(done["message_id"])
        assert reply_text(tap, message_id) == EVERY_KIND_TEXT
        shown = squash(message_text(page, message_id))
        for kind, value in USER_VALUES.items():
            assert value in shown, f"the page does not show the restored {kind}"
        assert not TOKEN_RE.search(shown)

    # The reasoning channel has its own filter, and is restored just the same.
    thought_id = str(thought["message_id"])
    assert reply_text(tap, thought_id, "reasoning") == EVERY_KIND_TEXT
    reasoning = assistant_message(page, thought_id).get_by_test_id("reasoning")
    reasoning.locator("summary").click()
    shown_reasoning = squash(reasoning.inner_text())
    for kind, value in USER_VALUES.items():
        assert value in shown_reasoning, f"the reasoning does not show the restored {kind}"

    assert_wire_clean(tap, canary_upstream)
    assert_log_clean(holdback_server)
    page.screenshot(path=artifacts / "chat-every-kind.png", full_page=True)


def test_values_split_at_every_boundary_are_restored_whole(
    page: Page, tap: WireTap, canary_upstream: CanaryUpstream
) -> None:
    open_chat(page)
    first = send_and_wait(page, tap, f"canary:split:1 {SPLIT_TEXT}")
    tokenized = last_user_text(canary_upstream.requests[-1]).split(" ", 1)[1]
    assert tokenized == "<CLIENT_1>: <EMAIL_1>."
    replies = [first]
    for k in range(2, len(tokenized)):
        replies.append(send_and_wait(page, tap, f"canary:split:{k} {SPLIT_TEXT}"))

    # One run per cut position, each a fresh reply of exactly two deltas from the model.
    assert len(replies) == len(tokenized) - 1
    for k, done in enumerate(replies, start=1):
        assert done["status"] == "complete", f"cut at {k}"
        message_id = str(done["message_id"])
        assert reply_text(tap, message_id) == SPLIT_TEXT, f"cut at {k}"
        assert squash(message_text(page, message_id)) == SPLIT_TEXT, f"cut at {k}"

    assert_upstream_never_saw_originals(canary_upstream)
    assert_wire_clean(tap, canary_upstream)


def test_values_and_forbidden_terms_the_model_invents_never_reach_the_page(
    page: Page,
    tap: WireTap,
    canary_upstream: CanaryUpstream,
    holdback_server: ServerProcess,
    artifacts: Path,
) -> None:
    open_chat(page)
    done = send_and_wait(page, tap, f"canary:inject Please write to {USER_VALUES['email']}")
    assert done["status"] == "complete"
    message_id = str(done["message_id"])

    text = reply_text(tap, message_id)
    assert text.startswith(f"Noted {USER_VALUES['email']}.")
    for kind in INJECTED_VALUES:
        assert f"[redacted {kind}]" in text, f"the invented {kind} was not redacted"
    assert text.count("[redacted]") == 2  # the two forbidden terms

    message = assistant_message(page, message_id)
    expect(message.locator("span.redaction")).to_have_count(len(INJECTED_VALUES) + 2)
    shown = message_text(page, message_id)
    assert USER_VALUES["email"] in shown
    body_text = page.locator("body").inner_text()
    for kind, value in INJECTED_VALUES.items():
        assert value.lower() not in body_text.lower(), f"the page shows the invented {kind}"

    assert_upstream_never_saw_originals(canary_upstream)
    assert_wire_clean(tap, canary_upstream)
    assert_log_clean(holdback_server)
    assert_http_view_clean(page, str(done["conversation_id"]), leak_rules(tap, canary_upstream))
    page.screenshot(path=artifacts / "chat-injected-values.png", full_page=True)


def test_tokens_the_model_invents_never_reach_the_wire(
    page: Page, tap: WireTap, canary_upstream: CanaryUpstream
) -> None:
    """A placeholder in no vault (the model made it up) is token text all the same."""
    open_chat(page)
    done = send_and_wait(page, tap, f"canary:invent Hello {USER_VALUES['email']}.")
    message_id = str(done["message_id"])
    assert reply_text(tap, message_id).startswith(f"Hello {USER_VALUES['email']}.")
    assert_wire_clean(tap, canary_upstream)
    shown = message_text(page, message_id)
    for token in INVENTED_TOKENS:
        assert token not in shown, f"the page shows the invented token {token}"


def test_a_cancelled_reply_stops_clean(
    page: Page, tap: WireTap, canary_upstream: CanaryUpstream
) -> None:
    open_chat(page)
    send(page, f"canary:slow:200 Call {USER_VALUES['phone']} about {USER_VALUES['client']}.")
    tap.wait_for(page, lambda: len(tap.of_type("assistant_delta")) >= 8, "the reply to stream")
    page.get_by_role("button", name="Stop", exact=True).click()

    done = tap.done_frame(page)
    message_id = str(done["message_id"])
    assert done["status"] == "incomplete"
    assert done["finish_reason"] == "other"
    assert tap.frames[-1].direction == "received"
    sent = [f.json() for f in tap.frames if f.direction == "sent"]
    assert sent[-1] == {"type": "cancel", "conversation_id": done["conversation_id"]}

    message = assistant_message(page, message_id)
    expect(message).to_have_attribute("data-status", "incomplete")
    expect(page.get_by_role("button", name="Stop", exact=True)).to_be_hidden()
    expect(page.get_by_role("button", name="Send", exact=True)).to_be_visible()

    # Nothing follows the end, and what did arrive is restored text, cut mid-reply.
    deltas = len(tap.of_type("assistant_delta"))
    page.wait_for_timeout(600)
    assert len(tap.of_type("assistant_delta")) == deltas
    partial = reply_text(tap, message_id)
    assert partial.startswith(f"Part 1: Call {USER_VALUES['phone']}")
    assert "Part 200:" not in partial
    assert squash(message_text(page, message_id)) == squash(partial)

    assert_upstream_never_saw_originals(canary_upstream)
    assert_wire_clean(tap, canary_upstream)


def _slow_reply(repeats: int, body: str) -> str:
    return "".join(f"Part {i + 1}: {body}\n\n" for i in range(repeats))


def test_a_reply_finished_while_reconnecting_is_shown_in_full(
    page: Page, tap: WireTap, canary_upstream: CanaryUpstream
) -> None:
    """Reload mid-reply: the socket drops, the reply completes server-side, the page shows it."""
    body = f"Mail {USER_VALUES['email']} re {USER_VALUES['project']}."
    open_chat(page)
    send(page, f"canary:slow:8 {body}")
    tap.wait_for(page, lambda: len(tap.of_type("assistant_delta")) >= 3, "the reply to stream")
    start = tap.of_type("assistant_start")[0]
    message_id = str(start["message_id"])
    assert tap.of_type("assistant_done") == []

    page.reload()
    expect(page.get_by_test_id("connection-state")).to_have_text("connected")
    assert len(tap.sockets) == 2, tap.sockets

    # The reply does not belong to the connection: it completes and is stored in full.
    rules = leak_rules(tap, canary_upstream)
    conversation_id = str(start["conversation_id"])
    deadline = time.monotonic() + 15
    stored = assert_http_view_clean(page, conversation_id, rules)["messages"][-1]
    while stored["status"] != "complete" and time.monotonic() < deadline:
        page.wait_for_timeout(200)
        stored = assert_http_view_clean(page, conversation_id, rules)["messages"][-1]
    assert stored["id"] == message_id
    assert stored["status"] == "complete"
    assert stored["text"] == _slow_reply(8, body)

    # The reconnected page shows it without another reload (docs/ui.md polls every 2 s).
    message = assistant_message(page, message_id)
    expect(message).to_have_attribute("data-status", "complete", timeout=6_000)
    assert squash(message_text(page, message_id)) == squash(_slow_reply(8, body))
    assert_upstream_never_saw_originals(canary_upstream)
    assert_wire_clean(tap, canary_upstream)


def test_send_waits_while_another_connection_receives_the_reply(
    page: Page, tap: WireTap, canary_upstream: CanaryUpstream
) -> None:
    """Reload mid-reply: the old socket's reply still streams, so Send waits until it ends
    (the server would refuse the message as `busy`), then works again."""
    body = f"Call {USER_VALUES['phone']}."
    open_chat(page)
    send(page, f"canary:slow:40 {body}")
    tap.wait_for(page, lambda: len(tap.of_type("assistant_delta")) >= 3, "the reply to stream")
    message_id = str(tap.of_type("assistant_start")[0]["message_id"])

    page.reload()
    expect(page.get_by_test_id("connection-state")).to_have_text("connected")
    composer(page).fill("And one more thing")
    send_button = page.get_by_role("button", name="Send", exact=True)
    expect(send_button).to_be_disabled()
    expect(page.locator("#composer-reason")).to_contain_text("still being written")
    composer(page).press("Enter")  # refused by the page itself: nothing goes out
    assert not [f for f in tap.frames if f.direction == "sent" and "one more" in f.payload]

    message = assistant_message(page, message_id)
    expect(message).to_have_attribute("data-status", "complete", timeout=20_000)
    expect(send_button).to_be_enabled(timeout=5_000)
    expect(page.locator("#composer-reason")).to_have_text("")
    assert tap.of_type("error") == []
    assert_wire_clean(tap, canary_upstream)


def test_an_offline_blip_mid_reply_loses_and_doubles_nothing(
    page: Page, tap: WireTap, canary_upstream: CanaryUpstream
) -> None:
    body = f"Card {USER_VALUES['credit_card']} for {USER_VALUES['client']}."
    open_chat(page)
    send(page, f"canary:slow:6 {body}")
    tap.wait_for(page, lambda: len(tap.of_type("assistant_delta")) >= 3, "the reply to stream")
    page.context.set_offline(True)
    expect(page.get_by_test_id("connection-state")).to_have_text("offline")
    page.wait_for_timeout(400)
    page.context.set_offline(False)
    expect(page.get_by_test_id("connection-state")).to_have_text("connected")

    done = tap.done_frame(page)
    message_id = str(done["message_id"])
    assert done["status"] == "complete"
    assert reply_text(tap, message_id) == _slow_reply(6, body)
    expect(assistant_message(page, message_id)).to_have_attribute("data-status", "complete")
    assert squash(message_text(page, message_id)) == squash(_slow_reply(6, body))
    expect(composer(page)).to_be_editable()
    assert_wire_clean(tap, canary_upstream)
