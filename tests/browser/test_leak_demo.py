"""The leak demonstration (`/demo`) in Chromium: what the page says is what the wire carried.

The rules these tests keep: for every scenario and every naive design, the naive side's leak
panel lists its leaks and holdback's lists none; the frames Chromium received, judged by the
server-side oracle (`demo_oracle`, which shares no code with the page's `leaks.js`), have
exactly the leaks `holdback demo --verify` counts, none on holdback's side, and holdback's
rendered DOM shows no secret in any decoded form. A leak in the panel scrolls to its frame;
step-by-step pace shows nothing until asked; a downloaded run holds the frames as captured.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from holdback.app import demo
from holdback.app.demo_oracle import judge, views
from holdback.app.demo_pipelines import NAIVE, TITLES
from holdback.app.demo_scenarios import SCENARIOS, Scenario
from tests.browser.chromium import NEEDS_CHROMIUM
from tests.browser.wire import WireTap

pytestmark = [pytest.mark.browser, NEEDS_CHROMIUM]
TABLE = demo.table()


def open_demo(page: Page, scenario: Scenario, pace: str = "realtime") -> None:
    page.goto("/demo")
    expect(page.get_by_role("button", name="Run demo")).to_be_enabled()
    page.get_by_label("Scenario").select_option(scenario.id)
    page.get_by_label("Pace").select_option(pace)
    expect(page.get_by_test_id("scenario-title")).to_have_text(scenario.title)


def play(page: Page, tap: WireTap, naive: str) -> tuple[list[str], list[str]]:
    """Run once; the raw frames each side received in this run."""
    before = {p: len(tap.received(f"/demo/ws/{p}")) for p in (naive, "holdback")}
    page.get_by_label("Naive design").select_option(naive)
    page.get_by_role("button", name="Run demo").click()
    expect(page.locator("#script-status")).to_contain_text("Done.")
    return tuple(  # type: ignore[return-value]
        [f.payload for f in tap.received(f"/demo/ws/{p}")[before[p] :]] for p in (naive, "holdback")
    )


def shows_no_secret(text: str, scenario: Scenario) -> bool:
    return not any(
        secret.casefold() in view.casefold()
        for secret in scenario.secrets
        for _, view in views(text)
    )


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.id for s in SCENARIOS])
def test_each_scenario_naive_leaks_in_the_panel_and_holdback_shows_none(
    page: Page, tap: WireTap, scenario: Scenario
) -> None:
    open_demo(page, scenario)
    expect(page.get_by_test_id("upstream-sent")).to_have_text(scenario.upstream_sent)
    for value in scenario.vault.values():
        expect(page.get_by_test_id("upstream-sent")).not_to_contain_text(value)
    for naive in NAIVE:
        naive_raw, held_raw = play(page, tap, naive)
        expected = TABLE[scenario.id][naive]
        assert naive_raw[-1].find('"assistant_done"') != -1
        # The wire, judged on the server's side: the same counts as --verify.
        wire = judge(naive_raw, scenario.secrets, list(scenario.vault))
        assert [(f.frame, f.text, f.form) for f in wire.leaks] == [
            (f.frame, f.text, f.form) for f in expected.leaks
        ]
        held = judge(held_raw, scenario.secrets, list(scenario.vault))
        assert held.leaks == []
        assert held.corruption == []
        # The page, judged in the browser: the same counts again.
        expect(page.get_by_test_id("title-naive")).to_have_text(TITLES[naive])
        expect(page.get_by_test_id("leak-count-naive")).to_have_text(str(len(expected.leaks)))
        naive_list = page.get_by_test_id("leak-list-naive").locator("button")
        expect(naive_list).to_have_count(len(expected.leaks))
        for i, finding in enumerate(expected.leaks):
            expect(naive_list.nth(i)).to_contain_text(f"frame {finding.frame}, ")
            expect(naive_list.nth(i)).to_contain_text(finding.text)
        expect(page.get_by_test_id("corruption-count-naive")).to_have_text(
            str(len(expected.corruption))
        )
        expect(page.get_by_test_id("leak-count-holdback")).to_have_text("0")
        expect(page.get_by_test_id("leak-list-holdback").locator("button")).to_have_count(0)
        expect(page.get_by_test_id("corruption-count-holdback")).to_have_text("0")
        expect(page.get_by_test_id("frame-log-naive").locator("li")).to_have_count(len(naive_raw))
        log = page.get_by_test_id("frame-log-holdback")
        expect(log.locator("li")).to_have_count(len(held_raw))
        expect(log.locator("mark.leak")).to_have_count(0)
        rendered = page.get_by_test_id("reply-holdback").inner_text()
        assert shows_no_secret(rendered, scenario), rendered
        assert shows_no_secret(log.inner_text(), scenario)
    # Clicking a leak brings its frame into view.
    first = page.get_by_test_id("leak-list-naive").locator("button").first
    if first.count():
        frame = first.get_attribute("data-frame")
        first.click()
        target = page.get_by_test_id("frame-log-naive").locator(f'li[data-frame="{frame}"]')
        expect(target).to_be_in_viewport()
        expect(target).to_have_class("has-leak flash")


def test_step_pace_shows_frames_one_at_a_time_and_the_run_downloads(
    page: Page, tap: WireTap, artifacts: Path
) -> None:
    scenario = next(s for s in SCENARIOS if s.id == "encoded")
    open_demo(page, scenario, pace="step")
    page.get_by_label("Naive design").select_option("per_chunk")
    page.get_by_role("button", name="Run demo").click()
    tap.wait_for(
        page,
        lambda: any('"assistant_done"' in f.payload for f in tap.received("/demo/ws/holdback")),
        "the holdback run",
    )
    logs = [page.get_by_test_id(f"frame-log-{p}").locator("li") for p in ("naive", "holdback")]
    for log in logs:
        expect(log).to_have_count(0)
    step = page.get_by_role("button", name="Next frame")
    step.click()
    for log in logs:
        expect(log).to_have_count(1)
    # Slow motion, paused: nothing moves but Next frame, one frame per side per click.
    page.get_by_label("Pace").select_option("slow")
    page.get_by_role("button", name="Pause").click()
    expect(page.get_by_role("button", name="Resume")).to_be_visible()
    shown = logs[1].count()
    step.click()
    expect(logs[1]).to_have_count(shown + 1)
    page.get_by_role("button", name="Resume").click()
    page.get_by_label("Pace").select_option("realtime")
    expect(page.locator("#script-status")).to_contain_text("Done.")
    expect(page.get_by_test_id("leak-count-naive")).to_have_text("2")
    page.screenshot(path=artifacts / "leak-demo.png", full_page=True)

    with page.expect_download() as info:
        page.get_by_role("button", name="Download run").click()
    lines = [json.loads(line) for line in Path(info.value.path()).read_text().splitlines()]
    head = lines[0]
    assert head["kind"] == "scenario"
    assert head["id"] == scenario.id
    assert head["upstream_sent"] == scenario.upstream_sent
    assert head["pipelines"] == ["per_chunk", "holdback"]
    for pipeline in ("per_chunk", "holdback"):
        raw = [x["raw"] for x in lines if x["kind"] == "frame" and x["pipeline"] == pipeline]
        assert raw == [f.payload for f in tap.received(f"/demo/ws/{pipeline}")]
        verdict = judge(raw, head["secrets"], head["tokens"])  # anyone's judge would do
        assert len(verdict.leaks) == len(TABLE[scenario.id][pipeline].leaks)
    browser_verdicts = {x["pipeline"]: x for x in lines if x["kind"] == "verdict"}
    assert len(browser_verdicts["per_chunk"]["leaks"]) == 2
    assert browser_verdicts["holdback"]["leaks"] == []
