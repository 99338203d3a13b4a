"""Policy moderation in Chromium: a withheld sentence's text never reaches the wire or the
page, a blocked reply stops with its category shown, and what the page keeps after a reload
says the same. Every raw frame the page receives is recorded; the oracle is plain search of
the decoded frames and the rendered DOM."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from playwright.sync_api import BrowserContext, expect

from tests.browser.canary_upstream import CanaryUpstream
from tests.browser.chat_page import assistant_message, open_chat, send_and_wait
from tests.browser.chromium import NEEDS_CHROMIUM
from tests.browser.server_process import ServerProcess, start_server
from tests.browser.wire import WireTap

pytestmark = [NEEDS_CHROMIUM, pytest.mark.browser]

RULES = """
[categories.plans]
action = "withhold"
phrases = ["project nightingale"]

[categories.violence]
action = "block"
phrases = ["build a bomb"]
"""


@pytest.fixture(scope="module")
def moderated_server(
    tmp_path_factory: pytest.TempPathFactory, canary_upstream: CanaryUpstream
) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("moderated")
    rules = root / "rules.toml"
    rules.write_text(RULES)
    server = start_server(root, canary_upstream.url, extra_args=("--moderation", f"rules:{rules}"))
    try:
        yield server
    finally:
        server.stop()


def reply_frames(tap: WireTap) -> str:
    """Every frame received about replies (not the user's own accepted message), decoded."""
    kinds = ("assistant_start", "assistant_delta", "assistant_done", "error")
    return json.dumps([f for f in tap.received_json() if f.get("type") in kinds]).lower()


def test_a_withheld_sentence_never_reaches_the_wire_or_the_page(
    context: BrowserContext, moderated_server: ServerProcess
) -> None:
    page = context.new_page()
    tap = WireTap().attach(page)
    open_chat(page, moderated_server.url + "/")
    send_and_wait(page, tap, "canary:echo Hello there.")
    done = send_and_wait(
        page,
        tap,
        "canary:chars The weather is fine. Project  NIGHTINGALE launches soon. Goodbye.",
    )
    assert done["status"] == "complete"
    wire = reply_frames(tap)
    assert "nightingale" not in wire
    assert "[withheld by policy: plans]" in wire
    reply = assistant_message(page, str(done["message_id"]))
    assert reply.locator('.withheld[data-category="plans"]').count() == 1  # shown distinctly
    shown = reply.inner_text()
    assert "ightingale" not in shown.lower()
    assert "withheld by policy" in shown
    assert "The weather is fine." in shown
    assert "Goodbye." in shown
    page.reload()
    page.wait_for_timeout(300)
    body = page.locator("body").inner_text().lower()
    assert body.count("nightingale") == body.count("project  nightingale launches")  # typed only


def test_a_blocked_reply_stops_and_names_its_category(
    context: BrowserContext, moderated_server: ServerProcess
) -> None:
    page = context.new_page()
    tap = WireTap().attach(page)
    open_chat(page, moderated_server.url + "/")
    send_and_wait(page, tap, "canary:echo Hello there.")
    done = send_and_wait(page, tap, "canary:echo Fine. Now build a bomb with me. Never shown.")
    assert (done["status"], done["finish_reason"]) == ("blocked", "content_filter")
    errors = [f for f in tap.of_type("error") if f.get("message_id") == done["message_id"]]
    assert [(e["code"], e.get("category")) for e in errors] == [("moderation_blocked", "violence")]
    wire = reply_frames(tap)
    assert "bomb" not in wire
    assert "never shown" not in wire
    blocked = assistant_message(page, str(done["message_id"]))
    expect(blocked).to_have_attribute("data-state", "blocked-by-policy")
    expect(blocked).to_contain_text("Blocked by this team's policy: violence.")
    page.reload()  # the reason is kept
    expect(assistant_message(page, str(done["message_id"]))).to_contain_text(
        "Blocked by this team's policy: violence."
    )
