"""Capacity, ratios and verdicts against both relays, for both workloads, on synthetic rows."""

from __future__ import annotations

from typing import Any

import server_load

from server import burst_report, report


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


def _full(row: dict[str, Any]) -> dict[str, Any]:
    """A row with every column the tables print."""
    return {
        **row,
        "added_p50_ms": 1.0,
        "visible_p50_ms": 1.0,
        "visible_p99_ms": row["added_p99_ms"],
        "rss_per_conn_kb": 80.0,
        "leaks": 7 if row["server"].startswith("relay") else 0,
        "server_cpu_pct": 50.0,
        "upstream_cpu_pct": 10.0,
        "generator_cpu_pct": 20.0,
        "upstream_lag_us": {"p99": 100, "max": 200},
        "generator_lag_us": {"p99": 100, "max": 200},
        "chunks_measured": 10,
        "early": 0,
        "mismatches": 0,
        "outcomes": {"done:complete": 4},
        "generator_failures": {},
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


TURNS = [
    _row("relay-aiohttp", 50, 2.0, 1000.0, cpu=0.2),
    _row("relay-aiohttp", 100, 4.0, 2000.0, cpu=0.2),
    _row("relay", 50, 2.0, 1000.0, cpu=0.4),
    _row("relay", 100, 200.0, 2000.0, cpu=0.4),  # the httpx relay does not sustain 100
    _row("holdback", 50, 2.2, 1000.0, cpu=0.3),
    _row("holdback", 100, 20.0, 1500.0, cpu=0.36),
]


def test_turn_verdicts_are_judged_against_the_aiohttp_relay_the_httpx_one_informs() -> None:
    text = report.verdicts(TURNS)
    assert "Ns each relay sustains: relay-aiohttp 50, 100; relay 50." in text
    table = text.split("\n\n")[1].splitlines()
    assert table[0] == (
        "| holdback: target | vs relay-aiohttp (judged) | vs relay (for information) |"
    )
    cpu, p99, cap = table[2:]
    assert "| worst 1.80 → FAIL | worst 0.75 (met) |" in cpu  # 0.36 / 0.2, then 0.3 / 0.4
    assert "| worst 5.00 (not met) | worst 1.10 (met) |" in p99  # informational on both
    assert "relay 100, server 50: ratio 0.50 → FAIL" in cap
    assert "relay 50, server 50: ratio 1.00 (met)" in cap


def test_turn_targets_fall_back_to_the_httpx_relay_with_a_note() -> None:
    rows = [r for r in TURNS if r["server"] != "relay-aiohttp"]
    text = report.verdicts(rows)
    assert "relay-aiohttp was not measured in this run" in text
    assert "vs relay (judged)" in text
    assert "worst 0.75 → PASS" in text
    assert report.verdicts(TURNS[:4]).startswith("Targets: not evaluated")


def test_turn_ratio_table_has_a_row_per_n_server_and_relay() -> None:
    rows = report.ratio_table(TURNS).splitlines()[2:]
    assert [r.split(" | ")[:3] for r in rows] == [
        ["| 50", "holdback", "relay-aiohttp"],
        ["| 50", "holdback", "relay"],
        ["| 100", "holdback", "relay-aiohttp"],
        ["| 100", "holdback", "relay"],
    ]
    assert rows[2].startswith("| 100 | holdback | relay-aiohttp | 1.80 | 5.00 | 0.75 | yes | no |")


def test_results_table_lists_relays_first_and_labels_their_leaks() -> None:
    rows = report.results_table([_full(r) for r in TURNS]).splitlines()[2:4]
    assert rows[0].startswith("| 50 | relay-aiohttp |")
    assert rows[1].startswith("| 50 | relay |")
    assert all("7 (raw tokens)" in r for r in rows)


def _burst(server: str, n: int, cpu: float, end_p99: float, complete: int = 20) -> dict[str, Any]:
    return {
        "server": server,
        "workload": "burst",
        "n": n,
        "rounds": 2,
        "cpu_per_conversation_ms": cpu,
        "accepted_p50_ms": 5.0,
        "accepted_p99_ms": 9.0,
        "start_p50_ms": 50.0,
        "start_p99_ms": end_p99 / 4,
        "end_p50_ms": end_p99 / 2,
        "end_p99_ms": end_p99,
        "complete": complete,
        "conversations": 20,
        "mismatches": 0,
        "leaks": 40 if server.startswith("relay") else 0,
        "outcomes": {
            "done:complete": complete,
            **({"timeout": 20 - complete} if complete < 20 else {}),
        },
        "chunks_per_reply": 29.5,
        "upstream_lag_us": {"p99": 120, "max": 300},
    }


BURST = [
    _burst("relay-aiohttp", 10, 4.0, 1000.0),
    _burst("relay", 10, 8.0, 1100.0),
    _burst("holdback", 10, 7.0, 1150.0),
]


def test_burst_table_per_n() -> None:
    text = burst_report.tables(BURST)
    assert text.startswith("#### N = 10: 2 rounds of 10 new conversations opened at once, 29.5")
    lines = text.splitlines()
    assert lines[4].startswith("| relay-aiohttp | 4.00 | 5.00 / 9.00 | 50.00 / 250.00 |")
    assert "| 500.00 / 1000.00 | 20 / 20 | - | 0 | 40 (raw tokens) | 120 |" in lines[4]
    assert lines[6].startswith("| holdback | 7.00 |")


def test_burst_ratios_and_verdicts_against_both_relays() -> None:
    rows = burst_report.ratio_table(BURST).splitlines()[2:]
    assert rows == [
        "| 10 | holdback | relay-aiohttp | 1.75 | 1.15 | 1.15 |",
        "| 10 | holdback | relay | 0.88 | 1.05 | 1.05 |",
    ]
    text = burst_report.verdicts(BURST)
    cpu, end = text.split("\n\n")[1].splitlines()[2:]
    assert "| worst 1.75 → PASS | worst 0.88 (met) |" in cpu
    assert "| worst 1.15 → PASS | worst 1.05 (met) |" in end


def test_a_burst_with_incomplete_conversations_fails_completion() -> None:
    rows = [*BURST[:2], _burst("holdback", 10, 3.0, 900.0, complete=18)]
    text = burst_report.verdicts(rows)
    assert "worst 0.90; incomplete: 2 at N = 10 → FAIL" in text
    assert "timeout: 2" in burst_report.tables(rows)


def test_render_reads_old_plain_lists_and_both_workloads() -> None:
    turns = [_full(r) for r in TURNS]
    old = server_load.render("## H", turns)
    assert "### 10-turn conversations: targets" in old
    assert "New conversations" not in old
    both = server_load.render("## H", {"turns": turns, "burst": BURST})
    assert "### New conversations (burst): targets" in both
    burst_only = server_load.render("## H", {"turns": [], "burst": BURST})
    assert "10-turn" not in burst_only
