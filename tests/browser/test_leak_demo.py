"""The leak demonstration (`/demo`) proves both of its claims, on the wire.

The rule these tests keep: the naive pane's WebSocket really carries split tokens (fragments
such as `<EMAIL_` then `1>`) and values the model made up, and the holdback pane's never does,
judged from the frames Chromium received, not from what the page says. A *leak* is what
docs/ui.md defines: a whole token, or a substring of one of length >= 2 that holds `<`, `>` or
`_`, in a frame's decoded `text`. The page's own leak counters must agree with that count.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from holdback.detect import detect
from tests.browser.chromium import NEEDS_CHROMIUM
from tests.browser.wire import WireTap, leak_ranges

pytestmark = [pytest.mark.browser, NEEDS_CHROMIUM]


def delta_texts(tap: WireTap, pipeline: str) -> list[str]:
    frames = tap.received_json(f"/demo/ws/{pipeline}")
    assert frames, f"no frame of the {pipeline} pipeline was captured"
    assert frames[-1]["type"] == "assistant_done"
    return [str(f["text"]) for f in frames if f["type"] == "assistant_delta"]


def invented_values(text: str, script: dict[str, Any]) -> list[str]:
    """Detector findings in `text` that are not values of the script (the model made them up)."""
    return [f.value for f in detect(text) if f.value not in script["values"]]


def test_leak_demo_naive_wire_leaks_and_holdback_wire_never_does(
    page: Page, tap: WireTap, artifacts: Path
) -> None:
    page.goto("/demo")
    script: dict[str, Any] = page.request.get("/demo/script").json()
    tokens = [str(t) for t in script["tokens"]]
    assert tokens
    page.get_by_role("button", name="Run demo").click()
    for pipeline in ("naive", "holdback"):
        expect(page.get_by_test_id(f"status-{pipeline}")).to_have_text("done")

    naive, held = delta_texts(tap, "naive"), delta_texts(tap, "holdback")
    naive_leaks = sum(len(leak_ranges(t, tokens)) for t in naive)
    held_leaks = sum(len(leak_ranges(t, tokens)) for t in held)

    # The naive wire: fragments of split tokens, in frames that hold no whole token.
    split = [t for t in naive if leak_ranges(t, tokens) and not any(k in t for k in tokens)]
    assert split, "the naive pipeline sent no split token"
    assert any(token in "".join(naive) for token in tokens)
    assert naive_leaks > 0
    # ... and the values the model invented, unscreened.
    assert invented_values("".join(naive), script)
    assert "[redacted" not in "".join(naive)

    # The holdback wire: no fragment in any frame, nor in all of them joined.
    assert held_leaks == 0
    joined = "".join(held)
    assert leak_ranges(joined, tokens) == []
    for value in script["values"]:
        assert value in joined
    assert invented_values(joined, script) == []
    assert "[redacted email]" in joined
    assert "[redacted]" in joined

    # The page counts what the wire carried, and renders the restored reply.
    expect(page.get_by_test_id("leak-count-naive")).to_have_text(str(naive_leaks))
    expect(page.get_by_test_id("leak-count-holdback")).to_have_text("0")
    expect(page.get_by_test_id("frame-log-holdback").locator("li")).to_have_count(len(held) + 1)
    expect(page.get_by_test_id("frame-log-naive").locator("li")).to_have_count(len(naive) + 1)
    expect(page.get_by_test_id("frame-log-holdback").locator("mark.leak")).to_have_count(0)
    reply = page.get_by_test_id("reply-holdback")
    for value in script["values"]:
        expect(reply).to_contain_text(value)
    expect(reply.locator("mark.token")).to_have_count(0)
    page.screenshot(path=artifacts / "leak-demo.png", full_page=True)
