"""Capacity and verdicts: latency alone is not enough when the load generator is closed-loop."""

from __future__ import annotations

from typing import Any

from server import report


def _row(server: str, n: int, p99: float, chunks_per_s: float, cpu: float = 0.3) -> dict[str, Any]:
    return {
        "server": server,
        "n": n,
        "rate": 20.0,
        "added_p99_ms": p99,
        "undelivered": 0,
        "chunks_per_s": chunks_per_s,
        "cpu_per_chunk_ms": cpu,
        "frames_per_s": chunks_per_s,
    }


def test_a_server_that_carries_too_few_streams_does_not_sustain_n() -> None:
    assert report.sustains(_row("relay", 100, 5.0, 1990.0))
    assert not report.sustains(_row("holdback", 200, 12.0, 1100.0))  # low latency, half load
    assert not report.sustains(_row("relay", 300, 263.0, 6000.0))


def test_capacity_counts_up_and_stops_at_the_first_failure() -> None:
    rows = {
        50: _row("x", 50, 3.0, 1000.0),
        100: _row("x", 100, 6.0, 1990.0),
        200: _row("x", 200, 12.0, 1100.0),
        300: _row("x", 300, 20.0, 6000.0),
    }
    assert report.capacity(rows) == 100
    assert report.capacity({}) is None


def test_verdicts_compare_at_the_ns_the_relay_sustains() -> None:
    results = [
        _row("relay", 50, 2.0, 1000.0, cpu=0.3),
        _row("relay", 100, 4.0, 2000.0, cpu=0.3),
        _row("holdback", 50, 2.2, 1000.0, cpu=0.36),
        _row("holdback", 100, 20.0, 1500.0, cpu=0.6),
    ]
    text = report.verdicts(results)
    assert "worst 2.00 → FAIL" in text  # CPU ratio 0.6 / 0.3
    assert "worst 5.00 → FAIL" in text  # p99 ratio 20 / 4
    assert "relay 100" in text
    assert "holdback 50" in text
    assert "ratio 0.50" in text
