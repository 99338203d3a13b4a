"""The watchers workload: its checks and figures on synthetic rounds, and a tiny real run."""

from __future__ import annotations

import math
import os
import threading
from pathlib import Path
from typing import Any

import pytest
import server_load

from server import driver, script, watchers, watchers_report

VALUES = {"<EMAIL_1>": "user.aab@acme-mail.com", "<PHONE_1>": "+1 415 555 0101"}
MODEL = "Write to <EMAIL_1> today. Call <PHONE_1> or <EMAIL_1> again."


def _record(viewer: int | None, text: str, outcome: str = "done:complete") -> dict[str, Any]:
    role = "owner" if viewer is None else "viewer"
    seen = [watchers.token_kind(t) for t, v in VALUES.items() if v in text]
    return {"role": role, "viewer": viewer, "outcome": outcome, "text": text, "seen": seen}


def test_cpu_is_read_to_the_nanosecond_with_exited_threads() -> None:
    before = watchers.cpu_seconds(os.getpid())
    worker = threading.Thread(target=lambda: sum(range(3_000_000)))
    worker.start()
    worker.join()
    spent = watchers.cpu_seconds(os.getpid()) - before
    assert spent > 0.01  # the thread is gone, its time is not
    assert spent != round(spent, 2)  # not in clock ticks


def test_policies_are_three_and_distinct() -> None:
    levels = {tuple(watchers.level_of(i, k) for k in watchers.KINDS) for i in range(3)}
    assert len(levels) == watchers.POLICIES == 3
    assert ("plain", "plain") not in levels  # no viewer sees like the owner
    assert watchers.level_of(None, "email") == "plain"
    assert [watchers.group_of(i) for i in range(4)] == ["watch-a", "watch-b", "watch-c", "watch-a"]
    assert watchers.configs((1, 5, 20)) == [0, 1, 3, 5, 20]
    assert watchers.configs((2,)) == [0, 2]


def test_the_owner_gets_the_reply_restored_exactly() -> None:
    restored, _ = script.restore_offsets(MODEL, VALUES)
    assert watchers.check_record(_record(None, restored), MODEL, VALUES)["whole"]
    assert not watchers.check_record(_record(None, restored[:-1]), MODEL, VALUES)["whole"]


def test_a_viewer_is_checked_for_hidden_values_and_a_whole_reply() -> None:
    # Viewer 0 (watch-a): e-mail masked, phone plain.
    good = "Write to u***@acme-mail.com today. Call +1 415 555 0101 or u***@acme-mail.com again."
    verdict = watchers.check_record(_record(0, good), MODEL, VALUES)
    assert verdict == {"whole": True, "hidden_seen": [], "raw_tokens": 0}
    # The plain e-mail address is hidden from viewer 0.
    leaked = good.replace("u***@acme-mail.com", VALUES["<EMAIL_1>"])
    assert watchers.check_record(_record(0, leaked), MODEL, VALUES)["hidden_seen"] == ["email"]
    # A hidden form that changes between mentions, or a phone not plain, is not the reply.
    two_forms = good.replace("u***@acme-mail.com again", "[email address] again")
    assert not watchers.check_record(_record(0, two_forms), MODEL, VALUES)["whole"]
    masked_phone = good.replace(VALUES["<PHONE_1>"], "**** 01")
    assert not watchers.check_record(_record(0, masked_phone), MODEL, VALUES)["whole"]
    # Viewer 1 (watch-b) may not see the phone number plain; a raw token is counted.
    raw = "Write to [email address] today. Call <PHONE_1> or [email address] again."
    verdict = watchers.check_record(_record(1, raw), MODEL, VALUES)
    assert verdict["raw_tokens"] == 1
    assert verdict["whole"]  # to the pattern a raw token is one more form: counted apart
    cut = watchers.check_record(_record(1, "Write to", "timeout"), MODEL, VALUES)
    assert not cut["whole"]


FORMS = {  # what each group's viewers are shown, e-mail then phone
    "watch-a": ("u***@acme-mail.com", VALUES["<PHONE_1>"]),
    "watch-b": ("[email address]", "**** 01"),
    "watch-c": ("[email address]", "[phone number]"),
}


def _shown(viewer: int) -> str:
    email, phone = FORMS[watchers.group_of(viewer)]
    return MODEL.replace("<EMAIL_1>", email).replace("<PHONE_1>", phone)


def _round(k: int, number: int, cpu_ms: float, frames: int = 100) -> dict[str, Any]:
    restored, _ = script.restore_offsets(MODEL, VALUES)
    records = [_record(None, restored)] + [_record(i, _shown(i)) for i in range(k)]
    for rec in records:
        rec["frames"] = frames
    return {
        "k": k,
        "key": f"key{k}x{number}",
        "round": number,
        "values": VALUES,
        "cpu_s": cpu_ms / 1e3,
        "seconds": 5.0,
        "records": records,
    }


def test_figures_separate_new_policies_from_used_ones() -> None:
    # One reply 100 ms; a new policy costs 30 ms, a viewer of a used policy 4 ms.
    cost = {0: 100.0, 1: 130.0, 3: 190.0, 5: 198.0, 20: 258.0}
    rounds = [_round(k, r, cpu) for r in range(3) for k, cpu in cost.items()]
    streams = [{"key": rnd["key"], "text": MODEL} for rnd in rounds]
    result = watchers.figures({"configs": sorted(cost), "rounds": rounds}, streams)
    rows = {row["k"]: row for row in result["rows"]}
    assert rows[0]["extra_kind"] == "none"
    assert math.isclose(rows[1]["extra_per_viewer"], 0.30)
    assert math.isclose(rows[3]["extra_per_viewer"], 0.30)
    assert (rows[5]["extra_kind"], rows[5]["extra_against"]) == ("used", 3)
    assert math.isclose(rows[5]["extra_per_viewer"], 0.04)
    assert math.isclose(rows[20]["extra_per_viewer"], 0.04)
    assert math.isclose(rows[1]["chunk_vs_one"], 1.0)
    assert rows[20]["hidden_seen"] == 0
    assert rows[20]["whole"] == rows[20]["records"] == 21 * 3
    run = dict(result, server="holdback", ks=[1, 5, 20], chunks_per_reply=100.0, chars=350, rate=20)
    text = watchers_report.watchers_report([run])
    assert "| each extra viewer with an already-used policy costs ≤ 10 % of one reply" in text
    assert "worst 4.0 % ± 0.0 at K = 5 | met |" in text
    assert "| watch-a | masked | plain | 0, 3, 6, 9, 12, 15, 18 |" in text
    rendered = server_load.render("## H", {"turns": [], "burst": [], "watchers": [run]})
    assert "### One reply, many viewers (watch)" in rendered


def test_a_costly_viewer_or_a_leak_is_not_met() -> None:
    cost = {0: 100.0, 3: 190.0, 5: 230.0}
    rounds = [_round(k, 0, cpu) for k, cpu in cost.items()]
    leaked = rounds[-1]["records"][2]  # viewer 1: e-mail label, phone masked
    leaked["text"] = leaked["text"].replace("**** 01", VALUES["<PHONE_1>"])
    leaked["seen"] = ["phone"]
    streams = [{"key": rnd["key"], "text": MODEL} for rnd in rounds]
    result = watchers.figures({"configs": [0, 3, 5], "rounds": rounds}, streams)
    result.update(server="holdback", ks=[5])
    (cost, cost_met), (found, clean) = watchers_report.checks(result)
    assert cost == "worst 20.0 % at K = 5"
    assert not cost_met
    assert "1 saw a hidden value" in found
    assert not clean


@pytest.mark.server
@pytest.mark.slow
def test_a_tiny_real_run(tmp_path: Path) -> None:
    if not driver.holdback_available():
        pytest.skip("holdback serve is not available in this checkout")
    settings = driver.Settings(work=tmp_path, watch_chars=60, rate=40.0)
    upstream = driver.Upstream(settings, chars=settings.watch_chars)
    try:
        result = driver.measure_watchers("holdback", (2,), 1, 1, upstream, settings)
    finally:
        upstream.stop()
    rows = {row["k"]: row for row in result["rows"]}
    assert set(rows) == {0, 2}
    assert rows[2]["records"] == 3
    assert rows[2]["whole"] == 3, rows[2]["outcomes"]
    assert rows[0]["whole"] == 1
    assert rows[2]["hidden_seen"] == 0
    assert rows[2]["raw_tokens"] == 0
    assert rows[2]["viewer_frames_per_round"] > 0
    assert rows[0]["cpu_ms"] > 0
    assert not result["failures"]
    assert not list(tmp_path.glob("tokens-*"))  # the team's tokens are not left behind
    assert not list(tmp_path.glob("watch-*.json"))
    assert "#### holdback: targets" in watchers_report.watchers_report([result])
