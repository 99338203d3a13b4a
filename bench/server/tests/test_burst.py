"""The new-conversation workload: its figures from synthetic records, and a real run per relay."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from server import analysis, driver

MS = 1_000_000
VALUES = {"<EMAIL_1>": "sam@ex-mail.com"}
TEXT = "Hi <EMAIL_1>, done."
RESTORED = "Hi sam@ex-mail.com, done."


def _record(key: str, text: str, outcome: str = "done:complete", **ms: float) -> dict[str, Any]:
    times = {"accepted": 5.0, "first": 40.0, "done": 300.0, **ms}
    record: dict[str, Any] = {"key": key, "outcome": outcome, "text": text, "connect_ns": 10 * MS}
    record["values"] = dict(VALUES)
    for name, at in times.items():
        if at >= 0:
            record[f"{name}_ns"] = 10 * MS + int(at * MS)
    return record


def _streams(*keys: str) -> list[dict[str, Any]]:
    return [{"key": k, "text": TEXT, "sizes": [3, 9, 7]} for k in keys]


def test_burst_figures_time_from_connect_and_check_the_restored_text() -> None:
    records = [
        _record("k1", RESTORED),
        _record("k2", RESTORED, first=60.0, done=500.0),
        _record("k3", "Hi sam@ex-mail.com, dune."),  # complete, but not what was sent
        _record("k4", "Hi", outcome="timeout", done=-1),
    ]
    fig = analysis.burst_figures(records, _streams("k1", "k2", "k3", "k4"), restores=True)
    assert (fig["conversations"], fig["complete"], fig["mismatches"], fig["leaks"]) == (4, 3, 1, 0)
    assert fig["outcomes"] == {"done:complete": 3, "timeout": 1}
    assert fig["accepted_p50_ms"] == pytest.approx(5.0)
    assert (fig["start_p50_ms"], fig["start_p99_ms"]) == pytest.approx((40.0, 60.0))
    assert (fig["end_p50_ms"], fig["end_p99_ms"]) == pytest.approx((300.0, 500.0))


def test_burst_figures_for_a_relay_count_its_raw_tokens_as_leaks() -> None:
    records = [_record("k1", TEXT), _record("k2", TEXT)]
    fig = analysis.burst_figures(records, _streams("k1", "k2"), restores=False)
    assert (fig["complete"], fig["mismatches"], fig["leaks"]) == (2, 0, 2)
    lost = analysis.burst_figures(records, _streams("k1"), restores=False)
    assert lost["mismatches"] == 1  # a complete reply the upstream never logged


@pytest.mark.server
@pytest.mark.slow
@pytest.mark.parametrize("kind", ["relay-aiohttp", "relay"])
def test_a_burst_against_a_relay_completes_every_conversation(tmp_path: Path, kind: str) -> None:
    settings = driver.Settings(burst_chars=85, burst_rounds=2, work=tmp_path)
    upstream = driver.Upstream(settings, chars=settings.burst_chars)
    try:
        r = driver.measure_burst(kind, 4, 1, upstream, settings)
    finally:
        upstream.stop()
    assert upstream.child.proc.poll() is not None
    assert r["outcomes"] == {"done:complete": 8}
    assert (r["conversations"], r["complete"], r["mismatches"]) == (8, 8, 0)
    assert r["leaks"] > 0  # the relay forwards the raw tokens (these keys' replies mention them)
    assert 0 < r["accepted_p50_ms"] <= r["start_p50_ms"] <= r["end_p50_ms"]
    assert 0 < r["accepted_p99_ms"] <= r["start_p99_ms"] <= r["end_p99_ms"]
    assert r["cpu_per_conversation_ms"] > 0
    assert r["chunks_per_reply"] > 5
