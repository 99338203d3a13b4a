"""The soak's verdict: errors against the plan, the store audit and the RSS slope."""

from __future__ import annotations

from typing import Any

import pytest

from server import soak


def test_slope_per_minute() -> None:
    assert soak.slope_per_min([(0.0, 100.0), (60.0, 101.0), (120.0, 102.0)]) == pytest.approx(1.0)
    assert soak.slope_per_min([(0.0, 5.0)]) == 0.0
    assert soak.slope_per_min([(0.0, 5.0), (0.0, 6.0)]) == 0.0


def _rounds(outcomes: list[tuple[str, str]]) -> list[dict[str, Any]]:
    return [
        {"key": f"k{i}", "plan": plan, "outcome": outcome, "text": "fine", "user_message_id": "u"}
        for i, (plan, outcome) in enumerate(outcomes)
    ]


def _summary(rounds: list[dict[str, Any]], samples: list[tuple[float, float]]) -> dict[str, Any]:
    stored = {
        "stored_user_ok": len(rounds),
        "stored_reply_ok": len(rounds),
        "replies_expected": len(rounds),
        "stored_status": {"complete": len(rounds)},
        "stored_text_mismatch": 0,
    }
    return soak.summarize(1.0, 2, rounds, stored, samples, {}, [1.0, 1.0, 1.0], {})


FLAT = [(float(t), 80e6) for t in range(0, 600, 10)]


def test_injected_faults_explain_their_errors() -> None:
    rounds = _rounds(
        [
            ("normal", "done:complete"),
            ("upstream_500", "error:upstream_error"),
            ("upstream_cut", "error:upstream_protocol"),
            ("client_cancel", "done:incomplete"),
        ]
    )
    result = _summary(rounds, FLAT)
    assert (result["unexpected_errors"], result["missing_errors"]) == (0, 0)
    assert result["passed"]


def test_an_error_without_a_fault_fails_the_soak() -> None:
    result = _summary(_rounds([("normal", "error:busy"), ("normal", "done:complete")]), FLAT)
    assert result["unexpected_errors"] == 1
    assert result["errors"] == {"busy": 1}
    assert not result["passed"]


def test_a_fault_without_its_error_fails_the_soak() -> None:
    result = _summary(_rounds([("upstream_cut", "done:complete")]), FLAT)
    assert result["missing_errors"] == 1
    assert not result["passed"]


def test_growing_rss_fails_the_soak() -> None:
    growing = [(float(t), 80e6 + t * 50_000) for t in range(0, 600, 10)]  # 3 MB/min
    result = _summary(_rounds([("normal", "done:complete")]), growing)
    assert result["rss"]["slope_mb_per_min"] == pytest.approx(3e6 / 2**20, rel=0.01)
    assert not result["rss"]["flat"]
    assert not result["passed"]


def test_a_leak_fails_the_soak() -> None:
    rounds = _rounds([("client_cancel", "done:incomplete")])
    rounds[0]["text"] = "I will write to <EMA"
    result = _summary(rounds, FLAT)
    assert result["leaks"] == 1
    assert not result["passed"]
