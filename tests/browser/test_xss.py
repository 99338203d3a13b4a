"""Model output is never inserted as HTML without sanitization (docs/ui.md, security rules).

The rule these tests keep: script payloads in a reply, including payloads split across
deltas, in the user's own message, and in the model view, are shown as text and never run.
Every payload sets `window.__xss` if it runs; it must stay undefined, and no element the
payloads describe (an `img`, `script` or `svg`, an event-handler attribute, a `javascript:`
link) may exist in the DOM.
"""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from tests.browser.canaries import XSS_PAYLOADS
from tests.browser.canary_upstream import CanaryUpstream
from tests.browser.chat_page import (
    assert_wire_clean,
    assistant_message,
    message_text,
    open_chat,
    reply_text,
    send_and_wait,
)
from tests.browser.chromium import NEEDS_CHROMIUM
from tests.browser.wire import WireTap

pytestmark = [pytest.mark.browser, NEEDS_CHROMIUM]

# Everything a payload could have put into the document, were it inserted as HTML.
DANGEROUS_IN_MESSAGES = (
    '[data-testid="message"] script, [data-testid="message"] img, '
    '[data-testid="message"] svg, [data-testid="message"] iframe, '
    '[data-testid="message"] object, [data-testid="message"] embed'
)
DANGEROUS_ANYWHERE = (
    '[onerror], [onload], [onclick], a[href^="javascript:" i], [src="x"], '
    'script:not([type="module"][src])'
)


def assert_nothing_ran(page: Page) -> None:
    page.wait_for_timeout(300)  # image errors and svg loads fire asynchronously
    assert page.evaluate("() => typeof window.__xss") == "undefined"
    expect(page.locator(DANGEROUS_IN_MESSAGES)).to_have_count(0)
    expect(page.locator(DANGEROUS_ANYWHERE)).to_have_count(0)


def test_script_payloads_split_across_deltas_are_shown_never_run(
    page: Page, tap: WireTap, canary_upstream: CanaryUpstream
) -> None:
    open_chat(page)
    done = send_and_wait(page, tap, "canary:xss Show me some HTML.")
    assert done["status"] == "complete"
    message_id = str(done["message_id"])

    # The payloads really crossed the wire, cut over several deltas. (The server may coalesce
    # deltas for a client that falls behind, so a given payload can also arrive whole: the
    # claim is that the page is safe either way, and that split payloads were exercised.)
    text = reply_text(tap, message_id)
    deltas = [f["text"] for f in tap.of_type("assistant_delta")]
    for payload in XSS_PAYLOADS:
        assert payload in text
    split = [p for p in XSS_PAYLOADS if not any(p in d for d in deltas)]
    assert split, f"no payload arrived split across deltas: {deltas}"

    # They are displayed as the characters the model wrote, and nothing ran.
    shown = message_text(page, message_id)
    assert '<img src=x onerror="window.__xss=1">' in shown
    assert "<script>window.__xss=2</script>" in shown
    assert '<svg onload="window.__xss=4"></svg>' in shown
    links = assistant_message(page, message_id).locator("a")
    for i in range(links.count()):
        href = links.nth(i).get_attribute("href") or ""
        assert not href.strip().lower().startswith("javascript:"), href
    assert_nothing_ran(page)
    for i in range(links.count()):
        links.nth(i).click(modifiers=[])
    assert_nothing_ran(page)
    assert len(page.context.pages) == 1

    # The model view renders the same text through the same sanitizer.
    page.get_by_label("Show what the model saw").check()
    expect(assistant_message(page, message_id)).to_have_class("msg msg-assistant model-mode")
    expect(assistant_message(page, message_id).get_by_test_id("message-content")).to_contain_text(
        "<script>window.__xss=2</script>"
    )
    assert_nothing_ran(page)
    assert_wire_clean(tap, canary_upstream)


def test_script_payloads_in_the_users_own_message_stay_text(
    page: Page, tap: WireTap, canary_upstream: CanaryUpstream
) -> None:
    payloads = " and ".join(XSS_PAYLOADS)
    open_chat(page)
    done = send_and_wait(page, tap, f"canary:echo {payloads}")
    user = page.locator('[data-testid="message"][data-role="user"]').get_by_test_id(
        "message-content"
    )
    expect(user).to_have_text(f"canary:echo {payloads}")
    assert XSS_PAYLOADS[0] in message_text(page, str(done["message_id"]))
    # The title (the start of the message) is shown as text in the sidebar too.
    expect(page.get_by_test_id("conversation").first).to_contain_text("canary:echo <img")
    assert_nothing_ran(page)
    assert_wire_clean(tap, canary_upstream)
