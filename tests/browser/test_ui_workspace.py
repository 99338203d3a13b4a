"""Models, instructions, documents, search and export in Chromium (issue 18).

The rules these tests keep (docs/ui.md, docs/protocol.md): the header shows the conversation's
model and a switch is kept per conversation, and the next request asks for it; custom
instructions and a system prompt may hold values, which the model only ever receives as
tokens, and the model view shows what it got; the dialogs keep nothing once closed; a
document is read by the server and shown with its masked values counted, a refused one says
why; search finds a conversation by an original value and shows its snippet restored, and
export downloads the branch shown, restored. Every frame and every answer the page read
obeys the wire rules, and the model never receives an original value.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import orjson
import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect

from tests.browser.canary_upstream import CanaryUpstream
from tests.browser.chat_page import (
    assert_log_clean,
    assert_upstream_never_saw_originals,
    assert_wire_clean,
    assistant_message,
    open_chat,
    send_and_wait,
)
from tests.browser.chromium import NEEDS_CHROMIUM
from tests.browser.server_process import ServerProcess
from tests.browser.ui_support import (
    CARD,
    EMAIL,
    PHONE,
    assert_answer_clean,
    assert_no_value_outside_text,
    conversation_json,
    rules_for,
    running,
    screenshot,
)
from tests.browser.wire import WireTap

pytestmark = [pytest.mark.browser, NEEDS_CHROMIUM]

OTHER_MODEL = "openai:canary-large"


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, canary_upstream: CanaryUpstream
) -> Iterator[ServerProcess]:
    yield from running(
        canary_upstream, tmp_path_factory.mktemp("workspace"), "--model", OTHER_MODEL
    )


@pytest.fixture
def ui(browser: Browser, server: ServerProcess) -> Iterator[BrowserContext]:
    ctx = browser.new_context(
        base_url=server.url, viewport={"width": 1180, "height": 820}, accept_downloads=True
    )
    ctx.set_default_timeout(15_000)
    try:
        yield ctx
    finally:
        ctx.close()


def page_with_tap(ctx: BrowserContext) -> tuple[Page, WireTap]:
    page = ctx.new_page()
    return page, WireTap().attach(page)


def model_asked(upstream: CanaryUpstream) -> str:
    return str(orjson.loads(upstream.bodies()[-1]).get("model"))


def test_the_model_is_shown_and_switched_per_conversation(
    ui: BrowserContext, canary_upstream: CanaryUpstream
) -> None:
    page, tap = page_with_tap(ui)
    open_chat(page)
    picker = page.get_by_label("Model", exact=True)
    expect(picker.locator("option")).to_have_count(2)
    expect(picker).to_have_value("openai:canary")
    done = send_and_wait(page, tap, "canary:echo first")
    assert model_asked(canary_upstream) == "canary"
    picker.select_option(OTHER_MODEL)
    page.wait_for_timeout(200)
    body = conversation_json(page, str(done["conversation_id"]))
    assert body["model"] == OTHER_MODEL
    send_and_wait(page, tap, "canary:echo second")
    assert model_asked(canary_upstream) == "canary-large"
    sent = [f.json() for f in tap.frames if f.direction == "sent" and '"user_message"' in f.payload]
    assert sent[-1]["model"] == OTHER_MODEL
    page.reload()
    expect(page.get_by_label("Model", exact=True)).to_have_value(OTHER_MODEL)
    labels = page.get_by_test_id("message-model")
    expect(labels).to_have_count(2)
    expect(labels.last).to_contain_text("canary-large")
    expect(labels.first).not_to_contain_text("canary-large")
    page.get_by_role("button", name="New chat").click()
    expect(page.get_by_label("Model", exact=True)).to_have_value("openai:canary")
    assert_wire_clean(tap, canary_upstream)


def test_instructions_and_a_system_prompt_reach_the_model_as_tokens(
    ui: BrowserContext, canary_upstream: CanaryUpstream, server: ServerProcess
) -> None:
    page, tap = page_with_tap(ui)
    open_chat(page)
    page.get_by_role("button", name="Settings").click()
    box = page.get_by_label("Custom instructions")
    expect(box).to_be_enabled()
    box.fill(f"I am reachable at {EMAIL}. Answer briefly.")
    page.get_by_role("button", name="Save settings").click()
    expect(page.get_by_test_id("settings-dialog")).to_be_hidden()
    assert page.evaluate("() => document.getElementById('instructions').value") == ""
    done = send_and_wait(page, tap, "canary:echo hello")
    conversation_id = str(done["conversation_id"])

    page.get_by_role("button", name="System prompt").click()
    page.get_by_label("System prompt text").fill(f"The customer's card is {CARD}.")
    page.get_by_role("button", name="Save system prompt").click()
    expect(page.get_by_test_id("system-prompt-dialog")).to_be_hidden()
    send_and_wait(page, tap, "canary:echo again")

    system = "\n".join(
        str(m.get("content", ""))
        for m in orjson.loads(canary_upstream.bodies()[-1])["messages"]
        if m.get("role") == "system"
    )
    assert re.search(r"<EMAIL_\d+>", system)
    assert re.search(r"<CREDIT_CARD_\d+>", system)
    assert_upstream_never_saw_originals(canary_upstream)

    page.get_by_label("Show what the model saw").check()
    block = page.get_by_test_id("system-view")
    expect(block).to_be_visible()
    expect(block.locator("mark.token")).to_have_count(2)
    assert EMAIL not in block.inner_text()
    assert CARD not in block.inner_text()
    screenshot(page, "model-view-instructions.png")
    # The owner reads the prompt restored, and it is shown in the editor only.
    assert (
        conversation_json(page, conversation_id)["system_prompt"]
        == f"The customer's card is {CARD}."
    )
    rules = rules_for(tap, canary_upstream)
    assert_answer_clean(page.request.get("/api/me/instructions").json(), rules, "instructions")
    page.get_by_label("Show what the model saw").uncheck()
    assert_no_value_outside_text(page)
    assert_wire_clean(tap, canary_upstream)
    assert_log_clean(server)


def test_documents_are_attached_masked_and_refusals_say_why(
    ui: BrowserContext, canary_upstream: CanaryUpstream
) -> None:
    page, tap = page_with_tap(ui)
    open_chat(page)
    text = f"Contacts\n{EMAIL}\n{PHONE}\n{EMAIL}\n"
    with page.expect_response("**/api/uploads") as uploaded:
        page.get_by_test_id("attach-input").set_input_files(
            files=[{"name": "contacts.txt", "mimeType": "text/plain", "buffer": text.encode()}]
        )
    assert uploaded.value.status == 201
    assert_answer_clean(
        {k: v for k, v in uploaded.value.json().items() if k not in ("masked", "preview")},
        rules_for(tap, canary_upstream),
        "the upload's answer",
    )
    chip = page.get_by_test_id("attachment-tray").get_by_test_id("attachment")
    expect(chip.locator(".attachment-name")).to_have_text("contacts.txt")
    expect(chip.get_by_test_id("attachment-masked")).to_have_text("2 values masked")
    screenshot(page, "document-chip.png")
    done = send_and_wait(page, tap, "canary:echo Summarize this.")
    sent = [f.json() for f in tap.frames if f.direction == "sent" and '"user_message"' in f.payload]
    assert sent[-1]["attachments"] == [uploaded.value.json()["id"]]
    expect(page.get_by_test_id("attachment-tray")).to_be_hidden()
    model_text = orjson.loads(canary_upstream.bodies()[-1])["messages"][-1]["content"]
    assert "contacts.txt" in model_text
    assert re.search(r"<EMAIL_\d+>", model_text)
    assert_upstream_never_saw_originals(canary_upstream)
    # Stored and shown back: the typed text, then the document folded away, values marked.
    page.reload()
    document = page.get_by_test_id("document")
    expect(document.locator("summary")).to_have_text("contacts.txt")
    document.locator("summary").click()
    expect(document.locator("mark.masked")).to_have_count(3)
    expect(assistant_message(page, str(done["message_id"]))).to_be_visible()

    for name, mime, payload, said in (
        ("photo.png", "image/png", b"\x89PNG\r\n\x1a\n0000", "of a type this server cannot read"),
        ("broken.txt", "text/plain", b"\xff\xfe\xfa not utf-8 \xc3", "could not be read"),
    ):
        page.get_by_test_id("attach-input").set_input_files(
            files=[{"name": name, "mimeType": mime, "buffer": payload}]
        )
        expect(page.get_by_test_id("toast").filter(has_text=name)).to_contain_text(said)
    expect(page.get_by_test_id("attachment-tray")).to_be_hidden()

    # A document alone is a message: Send works with nothing typed.
    page.get_by_test_id("attach-input").set_input_files(
        files=[{"name": "note.md", "mimeType": "text/markdown", "buffer": f"Call {PHONE}".encode()}]
    )
    expect(page.get_by_test_id("attachment-tray").get_by_test_id("attachment")).to_be_visible()
    before = len(tap.of_type("assistant_done"))
    page.get_by_role("button", name="Send", exact=True).click()
    tap.done_frame(page, before)
    sent = [f.json() for f in tap.frames if f.direction == "sent" and '"user_message"' in f.payload]
    assert sent[-1]["text"] == ""
    assert len(sent[-1]["attachments"]) == 1
    assert_upstream_never_saw_originals(canary_upstream)
    assert_wire_clean(tap, canary_upstream)


def test_search_finds_a_value_and_export_downloads_it_restored(
    ui: BrowserContext, canary_upstream: CanaryUpstream, server: ServerProcess
) -> None:
    page, tap = page_with_tap(ui)
    open_chat(page)
    done = send_and_wait(page, tap, f"canary:echo The invoice goes to {EMAIL} on Friday")
    conversation_id = str(done["conversation_id"])
    page.get_by_role("button", name="New chat").click()
    rules = rules_for(tap, canary_upstream)

    with page.expect_response(re.compile(r"/api/search\?q=")) as answered:
        page.get_by_label("Search conversations").fill(EMAIL)
    assert_answer_clean(answered.value.json(), rules, "search results")
    # The message and its reply (other tests' conversations hold the address too).
    result = page.locator(
        f'[data-testid="search-result"][data-conversation-id="{conversation_id}"]'
    ).first
    expect(result).to_be_visible()
    expect(result.get_by_test_id("search-snippet")).to_contain_text(EMAIL)
    expect(result.locator("mark.search-hit")).to_have_text(EMAIL)
    screenshot(page, "search.png")
    assert_no_value_outside_text(page)
    result.locator("a").click()
    expect(page).to_have_url(re.compile(rf"#/c/{conversation_id}$"))
    page.get_by_label("Search conversations").press("Escape")
    expect(page.get_by_test_id("search-results")).to_be_hidden()

    page.get_by_role("button", name="Export").click()
    for testid, fmt in (("export-md", "md"), ("export-json", "json")):
        link = page.get_by_test_id(testid)
        assert (
            link.get_attribute("href")
            == f"/api/conversations/{conversation_id}/export?format={fmt}"
        )
        with page.expect_download() as download:
            if not link.is_visible():
                page.get_by_role("button", name="Export").click()
            link.click()
        path = download.value.path()
        content = path.read_text("utf-8")
        assert EMAIL in content
        if fmt == "json":  # the user's own masked spans name their tokens, as in GET
            assert_answer_clean(orjson.loads(content), rules, "the JSON export")
        else:
            assert not re.search(r"<EMAIL_\d+>", content)
        assert EMAIL not in download.value.suggested_filename
    assert_wire_clean(tap, canary_upstream)
    assert_log_clean(server)  # the query held a value: no access line may show it
