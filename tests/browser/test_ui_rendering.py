"""Rendering in Chromium (issue 18): highlighted code in light and dark, the theme toggle kept,
restored values marked in replies, each masked value listed once, redactions in words, a tab
title and an address without values, dates in the list, and a phone's touch targets.

The rules these tests keep (docs/ui.md): highlighting changes how code looks, never its text;
a restored value is marked where the page already shows it to this user, with no value and no
token in the marker's attributes; the tab title is always "holdback"; on a touch screen
nothing is hover-only and the controls named in the issue are at least 44 px square.
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Browser, FloatRect, Locator, Page, expect

from tests.browser.canary_upstream import CanaryUpstream
from tests.browser.chat_page import (
    assert_upstream_never_saw_originals,
    assert_wire_clean,
    assistant_message,
    message_text,
    open_chat,
    send_and_wait,
)
from tests.browser.chromium import NEEDS_CHROMIUM
from tests.browser.server_process import ServerProcess
from tests.browser.ui_support import (
    CARD,
    EMAIL,
    PHONE,
    assert_no_value_outside_text,
    screenshot,
)
from tests.browser.wire import WireTap

pytestmark = [pytest.mark.browser, NEEDS_CHROMIUM]

CODE = f"""Here:

```python
def notify(user):
    # write to the owner
    return send("{EMAIL}", retries=3)
```
"""

COLOR_JS = """(selector) => getComputedStyle(document.querySelector(selector)).color"""


def test_code_is_highlighted_in_light_and_dark_and_the_choice_is_kept(
    page: Page, tap: WireTap, canary_upstream: CanaryUpstream
) -> None:
    open_chat(page)
    done = send_and_wait(page, tap, "canary:echo " + CODE)
    message = assistant_message(page, str(done["message_id"]))
    code = message.locator("pre code.hljs")
    expect(code).to_have_attribute("data-language", "python")
    expect(code.locator(".hljs-keyword").first).to_have_text("def")
    expect(code.locator(".hljs-comment")).to_have_text("# write to the owner")
    # Highlighting changed nothing of the text; the value in a string is one marker.
    assert code.text_content() == CODE.split("```python\n")[1].split("```")[0]
    expect(code.locator("mark.restored")).to_have_text(EMAIL)
    light = page.evaluate(COLOR_JS, "pre code .hljs-keyword")
    screenshot(page, "code-light.png")

    toggle = page.get_by_role("button", name="Dark mode")
    expect(toggle).to_have_attribute("aria-pressed", "false")
    toggle.click()
    expect(page.locator("html")).to_have_attribute("data-theme", "dark")
    expect(toggle).to_have_attribute("aria-pressed", "true")
    dark = page.evaluate(COLOR_JS, "pre code .hljs-keyword")
    assert dark != light
    page.reload()
    expect(page.locator("html")).to_have_attribute("data-theme", "dark")
    expect(page.locator("pre code.hljs .hljs-keyword").first).to_be_visible()
    assert page.evaluate(COLOR_JS, "pre code .hljs-keyword") == dark
    screenshot(page, "code-dark.png")
    assert page.evaluate("() => localStorage.getItem('holdback-theme')") == "dark"
    page.get_by_role("button", name="Dark mode").click()
    assert page.evaluate("() => localStorage.getItem('holdback-theme')") == "light"
    assert_wire_clean(tap, canary_upstream)


def test_restored_values_are_marked_and_each_masked_value_is_listed_once(
    page: Page, tap: WireTap, canary_upstream: CanaryUpstream
) -> None:
    open_chat(page)
    text = f"Mail {EMAIL} or {EMAIL} again, and call {PHONE}; {EMAIL} once more."
    done = send_and_wait(page, tap, "canary:echo " + text)
    user = page.locator('[data-testid="message"][data-role="user"]').last
    expect(user.locator("mark.masked")).to_have_count(4)
    note = user.locator(".privacy-note")
    expect(note).to_have_text(re.compile(r"^2 values masked; the model saw <\w+_\d+>, <\w+_\d+>$"))
    expect(note.locator("code")).to_have_count(2)

    reply = assistant_message(page, str(done["message_id"]))
    marks = reply.locator("mark.restored")
    expect(marks).to_have_count(4)
    assert sorted(marks.all_text_contents()) == sorted([EMAIL, EMAIL, EMAIL, PHONE])
    expect(reply.locator('mark.restored[data-kind="email"]')).to_have_count(3)
    for title in [m.get_attribute("title") or "" for m in marks.all()]:
        assert not [c for c in ("<", EMAIL, PHONE) if c in title], title
    # The marks wrap the reply's own text: it reads exactly as restored.
    assert " ".join(message_text(page, str(done["message_id"])).split()) == text
    assert_no_value_outside_text(page)
    assert_upstream_never_saw_originals(canary_upstream)
    assert_wire_clean(tap, canary_upstream)


def test_redactions_read_in_words(
    page: Page, tap: WireTap, canary_upstream: CanaryUpstream
) -> None:
    open_chat(page)
    done = send_and_wait(page, tap, f"canary:inject Card {CARD} for me")
    reply = assistant_message(page, str(done["message_id"]))
    expect(reply.locator('.redaction[data-kind="credit_card"]')).to_have_text(
        "[redacted card number]"
    )
    expect(reply.locator('.redaction[data-kind="email"]')).to_have_text("[redacted email address]")
    expect(reply.locator('.redaction[data-kind="us_ssn"]')).to_have_text(
        "[redacted social security number]"
    )
    expect(reply.locator(".redaction:not([data-kind])").first).to_have_text("[redacted]")
    assert "credit_card" not in message_text(page, str(done["message_id"]))
    assert_no_value_outside_text(page)
    assert_wire_clean(tap, canary_upstream)


def test_the_tab_title_and_the_address_never_carry_a_value(
    page: Page, tap: WireTap, canary_upstream: CanaryUpstream, holdback_server: ServerProcess
) -> None:
    open_chat(page)
    done = send_and_wait(page, tap, f"canary:echo Please mail {EMAIL} today")
    conversation_id = str(done["conversation_id"])
    # The page shows the title restored, in the sidebar and the header, never in the tab.
    item = page.locator(f'[data-testid="conversation"][data-conversation-id="{conversation_id}"]')
    expect(item.locator(".conv-link")).to_contain_text(EMAIL)
    expect(page.locator("#conversation-title")).to_contain_text(EMAIL)
    expect(page).to_have_title("holdback")
    assert page.url.endswith(f"#/c/{conversation_id}")
    page.reload()
    expect(page.locator("#conversation-title")).to_contain_text(EMAIL)
    expect(page).to_have_title("holdback")
    assert_no_value_outside_text(page)
    assert_wire_clean(tap, canary_upstream)


def test_the_list_is_grouped_by_date(page: Page, tap: WireTap) -> None:
    open_chat(page)
    send_and_wait(page, tap, "canary:echo dated")
    groups = page.get_by_test_id("conversation-group")
    expect(groups.first).to_have_text("Today")
    expect(groups.first).to_have_attribute("data-group", "today")
    date = page.get_by_test_id("conversation").first.get_by_test_id("conversation-date")
    expect(date).to_have_text(re.compile(r"^\d{1,2}:\d{2}"))
    assert re.match(r"\d{4}-\d\d-\d\dT", date.get_attribute("datetime") or "")
    groups_js = "() => import('/conversations.js').then((m) => [m.dateGroup(new Date(Date.now() - 3 * 864e5).toISOString()), m.dateGroup('2001-02-03T04:05:06'), m.dateGroup(null)])"
    assert page.evaluate(groups_js) == ["week", "older", "older"]


def assert_target(page: Page, target: Locator) -> None:
    """A touch target: at least 44 px square (measured once the page re-rendered it)."""
    box: FloatRect | None = None
    for _ in range(40):
        box = target.bounding_box()
        if box is not None:
            break
        page.wait_for_timeout(50)
    assert box is not None
    assert min(box["width"], box["height"]) >= 44, box


def test_a_phone_gets_touch_targets_a_visible_copy_button_and_touch_wording(
    browser: Browser, holdback_server: ServerProcess
) -> None:
    ctx = browser.new_context(
        base_url=holdback_server.url,
        viewport={"width": 390, "height": 780},
        device_scale_factor=1,
        is_mobile=True,
        has_touch=True,
    )
    ctx.set_default_timeout(15_000)
    try:
        page = ctx.new_page()
        tap = WireTap().attach(page)
        open_chat(page)
        expect(page.locator(".empty-state .on-touch")).to_be_visible()
        expect(page.locator(".empty-state .on-hover")).to_be_hidden()
        expect(page.locator(".touch-keys")).to_have_text("Tap the arrow to send")
        send_and_wait(page, tap, "canary:echo " + CODE)
        copy = page.get_by_role("button", name="Copy code")
        expect(copy).to_be_visible()
        assert (
            page.evaluate("() => getComputedStyle(document.querySelector('.copy-code')).opacity")
            == "1"
        )
        switch = page.get_by_label("Show what the model saw")
        for target in (copy, switch.locator("xpath=..")):
            assert_target(page, target)
        screenshot(page, "phone-chat.png")
        page.get_by_role("button", name="Menu").click()
        item = page.get_by_test_id("conversation").first
        for name in ("Rename", "Delete"):
            assert_target(page, item.get_by_role("button", name=name))
        screenshot(page, "phone-sidebar.png")
    finally:
        ctx.close()
