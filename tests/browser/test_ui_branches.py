"""Versions, retries and resumed replies in Chromium (issue 18).

The rules these tests keep (docs/ui.md, docs/protocol.md): regenerating a reply or editing a
message makes a sibling, and `‹ 2/2 ›` pages between them, keeping every branch (the one
picked survives a reload); a failed reply offers Retry, a reply cut by `length` offers
Continue, shown joined to it; a reply being written when the page reloads is resumed and its
text shown at once, with nothing doubled; stopped by you, the model failing, a lost
connection and a block each have their own state, and a reload shows the same. Every frame
on each of these paths obeys the wire rules, and the model never receives an original value.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect

from tests.browser.chat_page import (
    assert_upstream_never_saw_originals,
    assert_wire_clean,
    assistant_message,
    message_text,
    open_chat,
    send,
    send_and_wait,
)
from tests.browser.chromium import NEEDS_CHROMIUM
from tests.browser.server_process import ServerProcess, start_server
from tests.browser.ui_support import (
    CARD,
    EMAIL,
    PHONE,
    UiUpstream,
    assert_answer_clean,
    assert_no_value_outside_text,
    conversation_json,
    rules_for,
    running,
    screenshot,
)
from tests.browser.wire import WireTap

pytestmark = [pytest.mark.browser, NEEDS_CHROMIUM]


@pytest.fixture(scope="module")
def upstream() -> Iterator[UiUpstream]:
    server = UiUpstream()
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, upstream: UiUpstream
) -> Iterator[ServerProcess]:
    yield from running(upstream, tmp_path_factory.mktemp("branches"))


@pytest.fixture
def ui(browser: Browser, server: ServerProcess) -> Iterator[BrowserContext]:
    ctx = browser.new_context(base_url=server.url, viewport={"width": 1100, "height": 820})
    ctx.set_default_timeout(15_000)
    try:
        yield ctx
    finally:
        ctx.close()


def page_with_tap(ctx: BrowserContext) -> tuple[Page, WireTap]:
    page = ctx.new_page()
    return page, WireTap().attach(page)


def shown(page: Page, role: str) -> list[str]:
    items = page.locator(
        f'[data-testid="message"][data-role="{role}"] [data-testid="message-content"]'
    )
    return [" ".join(t.split()) for t in items.all_inner_texts()]


def test_regenerate_makes_a_version_and_the_one_picked_is_kept(
    ui: BrowserContext, upstream: UiUpstream
) -> None:
    page, tap = page_with_tap(ui)
    open_chat(page)
    first = send_and_wait(page, tap, f"canary:echo Mail {EMAIL} now")
    page.get_by_role("button", name="Regenerate").click()
    second = tap.done_frame(page, 1)
    assert second["message_id"] != first["message_id"]
    reply = assistant_message(page, str(second["message_id"]))
    expect(reply).to_have_attribute("data-status", "complete")
    expect(reply.get_by_test_id("branch-position")).to_have_text("2/2")
    expect(page.locator('[data-testid="message"][data-role="assistant"]')).to_have_count(1)
    sent = [f.json() for f in tap.frames if f.direction == "sent"]
    assert {"type": "regenerate", "message_id": first["message_id"]}.items() <= sent[-1].items()

    reply.get_by_role("button", name="Previous version").click()
    older = assistant_message(page, str(first["message_id"]))
    expect(older.get_by_test_id("branch-position")).to_have_text("1/2")
    assert shown(page, "assistant") == [f"Mail {EMAIL} now"]
    # The branch picked is the server's too: a reload shows it.
    page.wait_for_timeout(300)
    page.reload()
    expect(
        assistant_message(page, str(first["message_id"])).get_by_test_id("branch-position")
    ).to_have_text("1/2")
    body = conversation_json(page, str(first["conversation_id"]))
    assert body["current_path"][-1] == first["message_id"]
    assert_answer_clean(body, rules_for(tap, upstream), "the conversation")
    assert_upstream_never_saw_originals(upstream)
    assert_wire_clean(tap, upstream)


def test_edit_makes_a_sibling_message_with_its_own_reply(
    ui: BrowserContext, upstream: UiUpstream
) -> None:
    page, tap = page_with_tap(ui)
    open_chat(page)
    send_and_wait(page, tap, f"canary:echo Call {PHONE} please")
    user = page.locator('[data-testid="message"][data-role="user"]').last
    user.get_by_role("button", name="Edit").click()
    box = page.get_by_label("Edit message")
    expect(box).to_have_value(f"canary:echo Call {PHONE} please")
    box.fill(f"canary:echo Mail {EMAIL} instead")
    page.get_by_role("button", name="Send edited message").click()
    done = tap.done_frame(page, 1)
    expect(assistant_message(page, str(done["message_id"]))).to_have_attribute(
        "data-status", "complete"
    )
    assert shown(page, "user") == [f"canary:echo Mail {EMAIL} instead"]
    assert shown(page, "assistant") == [f"Mail {EMAIL} instead"]
    edited = page.locator('[data-testid="message"][data-role="user"]').last
    expect(edited.get_by_test_id("branch-position")).to_have_text("2/2")
    expect(edited.locator("mark.masked")).to_have_text(EMAIL)
    sent = [f.json() for f in tap.frames if f.direction == "sent"]
    assert [f["type"] for f in sent if f["type"] != "watch"][-1] == "edit"
    edited.get_by_role("button", name="Previous version").click()
    assert shown(page, "user") == [f"canary:echo Call {PHONE} please"]
    assert shown(page, "assistant") == [f"Call {PHONE} please"]
    screenshot(page, "versions.png")
    assert_no_value_outside_text(page)
    assert_upstream_never_saw_originals(upstream)
    assert_wire_clean(tap, upstream)


def test_a_failed_reply_offers_retry_and_a_cut_one_continue(
    ui: BrowserContext, upstream: UiUpstream
) -> None:
    page, tap = page_with_tap(ui)
    open_chat(page)
    failed = send_and_wait(page, tap, "canary:fail Card please")
    reply = assistant_message(page, str(failed["message_id"]))
    expect(reply).to_have_attribute("data-state", "model-failed")
    expect(reply.get_by_test_id("message-state")).to_have_text(
        "The model failed: this reply is incomplete."
    )
    reply.get_by_role("button", name="Retry").click()
    again = tap.done_frame(page, 1)
    retried = assistant_message(page, str(again["message_id"]))
    expect(retried).to_have_attribute("data-state", "model-failed")
    expect(retried.get_by_test_id("branch-position")).to_have_text("2/2")
    page.reload()
    expect(assistant_message(page, str(again["message_id"]))).to_have_attribute(
        "data-state", "model-failed"
    )
    expect(page.get_by_role("button", name="Retry")).to_be_visible()

    page.get_by_role("button", name="New chat").click()
    cut = send_and_wait(page, tap, f"canary:cut Mail {EMAIL} the whole report today")
    first = assistant_message(page, str(cut["message_id"]))
    expect(first).to_have_attribute("data-state", "cut-off")
    first.get_by_role("button", name="Continue").click()
    more = tap.done_frame(page, tap.of_type("assistant_done").index(cut) + 1)
    joined = assistant_message(page, str(more["message_id"]))
    expect(joined).to_have_class("msg msg-assistant msg-continuation")
    sent = [f.json() for f in tap.frames if f.direction == "sent"]
    assert {"type": "continue", "message_id": cut["message_id"]}.items() <= sent[-1].items()
    assert_upstream_never_saw_originals(upstream)
    assert_wire_clean(tap, upstream)


def test_a_reload_mid_reply_resumes_it_at_once_with_nothing_doubled(
    ui: BrowserContext, upstream: UiUpstream
) -> None:
    page, tap = page_with_tap(ui)
    body = f"Card {CARD} for {EMAIL}."
    expected = "".join(f"Part {i + 1}: {body}\n\n" for i in range(30))
    open_chat(page)
    send(page, f"canary:slow:30 {body}")
    tap.wait_for(page, lambda: len(tap.of_type("assistant_delta")) >= 6, "the reply to stream")
    message_id = str(tap.of_type("assistant_start")[0]["message_id"])
    page.reload()
    reply = assistant_message(page, message_id)
    # The replay shows what was written before the reload while the reply goes on.
    expect(reply).to_have_attribute("data-status", "streaming")
    expect(reply.get_by_test_id("message-content")).to_contain_text("Part 1:")
    resumes = [f.json() for f in tap.frames if f.direction == "sent" and '"resume"' in f.payload]
    assert resumes == [
        {
            "type": "resume",
            "conversation_id": resumes[0]["conversation_id"],
            "message_id": message_id,
            "after_seq": 0,
        }
    ]
    expect(page.get_by_role("button", name="Stop")).to_be_visible()
    expect(reply).to_have_attribute("data-status", "complete", timeout=20_000)
    assert " ".join(message_text(page, message_id).split()) == " ".join(expected.split())
    # The new socket got the reply once, numbered without a gap or a repeat.
    start = max(i for i, f in enumerate(tap.frames) if '"resume"' in f.payload)
    seqs = [f.json().get("seq") for f in tap.frames[start + 1 :] if f.direction == "received"]
    seqs = [n for n in seqs if isinstance(n, int)]
    assert seqs[0] == 1
    assert seqs == sorted(set(seqs))
    assert_upstream_never_saw_originals(upstream)
    assert_wire_clean(tap, upstream)


def test_stopped_failed_and_lost_each_say_so(ui: BrowserContext, upstream: UiUpstream) -> None:
    page, tap = page_with_tap(ui)
    open_chat(page)
    send(page, f"canary:slow:40 Call {PHONE}.")
    tap.wait_for(page, lambda: len(tap.of_type("assistant_delta")) >= 3, "the reply to stream")
    message_id = str(tap.of_type("assistant_start")[0]["message_id"])
    reply = assistant_message(page, message_id)
    page.context.set_offline(True)
    expect(reply).to_have_attribute("data-state", "connection-lost")
    expect(reply.get_by_test_id("message-state")).to_contain_text("Connection lost")
    page.context.set_offline(False)
    expect(reply).to_have_attribute("data-state", "")
    page.get_by_role("button", name="Stop").click()
    expect(reply).to_have_attribute("data-state", "stopped")
    expect(reply.get_by_test_id("message-state")).to_have_text("Stopped by you.")
    page.reload()
    expect(assistant_message(page, message_id).get_by_test_id("message-state")).to_have_text(
        "Stopped by you."
    )
    assert_wire_clean(tap, upstream)


@pytest.fixture(scope="module")
def blocking_server(
    tmp_path_factory: pytest.TempPathFactory, upstream: UiUpstream
) -> Iterator[ServerProcess]:
    yield from running(upstream, tmp_path_factory.mktemp("block"), "--guard-mode", "block")


def test_a_block_keeps_its_reason_after_a_reload(
    browser: Browser, blocking_server: ServerProcess, upstream: UiUpstream
) -> None:
    ctx = browser.new_context(base_url=blocking_server.url)
    ctx.set_default_timeout(15_000)
    try:
        page, tap = page_with_tap(ctx)
        open_chat(page)
        done = send_and_wait(page, tap, f"canary:inject Mail {EMAIL}")
        assert done["status"] == "blocked"
        reply = assistant_message(page, str(done["message_id"]))
        expect(reply).to_have_attribute("data-state", "blocked")
        detail = reply.get_by_test_id("message-state-detail").inner_text()
        assert "output guard" in detail
        page.reload()
        again = assistant_message(page, str(done["message_id"]))
        expect(again.get_by_test_id("message-state")).to_have_text("Blocked by the output guard.")
        expect(again.get_by_test_id("message-state-detail")).to_have_text(detail)
        expect(again.get_by_role("button", name="Retry")).to_be_visible()
        assert_wire_clean(tap, upstream)
    finally:
        ctx.close()


def test_a_reply_cut_by_a_server_restart_says_so(
    browser: Browser, tmp_path_factory: pytest.TempPathFactory, upstream: UiUpstream
) -> None:
    """The server stops mid-reply; started again on the same data, the reply is shown
    interrupted (ended by the server), never as stopped by the user."""
    root = tmp_path_factory.mktemp("restart")
    first = start_server(root, upstream.url)
    try:
        ctx = browser.new_context(base_url=first.url)
        ctx.set_default_timeout(15_000)
        page, tap = page_with_tap(ctx)
        open_chat(page)
        send(page, f"canary:slow:200 Call {PHONE}.")
        tap.wait_for(page, lambda: len(tap.of_type("assistant_delta")) >= 3, "the reply to stream")
        start = tap.of_type("assistant_start")[0]
        ctx.close()
    finally:
        first.stop()
    again = start_server(root, upstream.url)
    try:
        ctx = browser.new_context(base_url=again.url)
        ctx.set_default_timeout(15_000)
        page, tap = page_with_tap(ctx)
        open_chat(page, f"/#/c/{start['conversation_id']}")
        reply = assistant_message(page, str(start["message_id"]))
        expect(reply).to_have_attribute("data-state", "interrupted")
        expect(reply.get_by_test_id("message-state")).to_contain_text("Interrupted")
        expect(reply.get_by_role("button", name="Retry")).to_be_visible()
        ctx.close()
    finally:
        again.stop()
