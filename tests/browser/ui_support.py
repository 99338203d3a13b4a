"""Shared pieces of the issue-18 UI tests: a fake model with two more scripts, extra servers,
and the leak checks for HTTP answers and the page itself.

The rule it keeps: every new path of the page (resume, regenerate, edit, documents,
instructions, export, search) is judged as the wire capture judges a chat: no token text, no
forbidden term and no value the viewer may not see, in any frame or answer; the fake model
never receives an original value; a value never sits in `document.title`, the address or an
attribute (only in text the user may read). Screenshots for docs/ui.md go to docs/img/ when
HOLDBACK_DOC_SCREENSHOTS=1 (viewport only, so they stay small), else to test-artifacts/.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
from playwright.sync_api import Page

from tests.browser.canaries import FORBIDDEN_TERMS, INJECTED_VALUES, USER_VALUES
from tests.browser.canary_upstream import (
    CanaryUpstream,
    _event,
    last_user_text,
    parse_script,
    scripted_reply,
)
from tests.browser.chat_page import leak_rules
from tests.browser.server_process import ServerProcess, start_server
from tests.browser.wire import LeakRules, WireTap, strip_own_tokens
from tests.providers.fakeserver import RecordedRequest, Reply

REPO = Path(__file__).resolve().parents[2]
# Screenshots for docs/ui.md: refreshed with HOLDBACK_DOC_SCREENSHOTS=1, else kept as artifacts.
SHOTS = REPO / (
    "docs/img" if os.environ.get("HOLDBACK_DOC_SCREENSHOTS") == "1" else "test-artifacts"
)
EMAIL = USER_VALUES["email"]
PHONE = USER_VALUES["phone"]
CARD = USER_VALUES["credit_card"]


class UiUpstream(CanaryUpstream):
    """The canary model, plus `cut` (the body back, ended for `length`, as a model that hit
    its token limit) and `fail` (HTTP 500 before a word)."""

    def reply_for(self, request: RecordedRequest) -> Reply:
        script = parse_script(last_user_text(request))
        if script.name == "fail":
            return Reply.json(500, {"error": {"message": "boom", "type": "server_error"}})
        if script.name == "cut":
            events = [_event({"role": "assistant", "content": ""})]
            events += [_event({"content": piece}) for piece in script.body.split(" ")[:4]]
            events += [_event({"content": " …"}), _event({}, "length"), b"data: [DONE]\n\n"]
            return Reply(chunks=events, chunk_delay=0.002)
        return scripted_reply(request)


def running(upstream: CanaryUpstream, root: Path, *extra: str) -> Iterator[ServerProcess]:
    server = start_server(root, upstream.url, extra_args=extra)
    try:
        yield server
    finally:
        server.stop()


def screenshot(page: Page, name: str, **kwargs: Any) -> None:
    """A PNG for docs/ui.md (viewport only unless asked, so the files stay small)."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=SHOTS / name, **kwargs)


def rules_for(tap: WireTap, upstream: CanaryUpstream) -> LeakRules:
    return leak_rules(tap, upstream)


def assert_answer_clean(body: Any, rules: LeakRules, what: str) -> None:
    """An HTTP answer the page read obeys the wire's rules (its `masked[].token` aside)."""
    if isinstance(body, dict) and isinstance(body.get("messages"), list):
        body = {
            **body,
            "messages": [
                strip_own_tokens({"type": "message_accepted", **m}) for m in body["messages"]
            ],
        }
    text = body if isinstance(body, str) else orjson.dumps(body).decode()
    problems = rules.findings(text)
    assert not problems, f"{what}: {problems}"


PAGE_PRIVACY_JS = """() => {
  const attrs = [];
  for (const el of document.querySelectorAll('*')) {
    for (const a of el.attributes) {
      if (['class', 'style', 'data-testid'].includes(a.name)) continue;
      attrs.push([a.name, a.value]);
    }
  }
  return { title: document.title, url: location.href, attrs };
}"""


def assert_no_value_outside_text(page: Page) -> None:
    """No value in the tab's title or the address; none in a link, a source or a data
    attribute; and no value the viewer may not see (or forbidden term) in any attribute. (A
    tooltip may show the user their own value, as the sidebar does with a title.)"""
    state = page.evaluate(PAGE_PRIVACY_JS)
    assert state["title"] == "holdback", state["title"]
    hidden = (*INJECTED_VALUES.values(), *FORBIDDEN_TERMS)
    for value in (*USER_VALUES.values(), *hidden):
        low = value.lower()
        assert low not in state["url"].lower(), "a value is in the address"
        hits = [
            name
            for name, text in state["attrs"]
            if low in text.lower() and (name != "title" or value in hidden)
        ]
        assert not hits, f"a value sits in attribute(s) {sorted(set(hits))}"


def conversation_json(page: Page, conversation_id: str, view: str = "") -> dict[str, Any]:
    response = page.request.get(
        f"/api/conversations/{conversation_id}" + ("?view=model" if view else "")
    )
    assert response.ok, response.status
    body: dict[str, Any] = response.json()
    return body
