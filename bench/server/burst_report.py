"""Markdown for the new-conversation workload (`burst.py`): a table per N, ratios, targets.

The rule it keeps, as `report.py`'s: every holdback figure is set against each relay measured
in the same run, targets are judged against `relay-aiohttp` (or `relay`, with a note), and a
figure that could not be measured is shown as missing. Every latency runs from the moment the
client began to connect: `accepted` to `message_accepted`, reply start to the first delta,
reply end (completion) to `assistant_done`. The completion target counts only conversations
that completed, so it is met only when every conversation of the server completed too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from .report import (
    RELAYS,
    Check,
    Row,
    baselines,
    by_server,
    fmt,
    leaks_cell,
    pairs,
    ratio,
    server_order,
    target_note,
    targets_table,
    under_test,
    within,
    worst,
)

TARGET_CPU = 2.0
TARGET_END_P99 = 1.2

BURST_TARGETS = (
    (f"CPU per conversation ≤ {TARGET_CPU:g}× the relay's, at every N", True),
    (
        f"p99 completion (connect to `assistant_done`) ≤ {TARGET_END_P99:g}× the relay's, "
        "at every N, every conversation complete",
        True,
    ),
)


def _pair(row: Row, low: str, high: str) -> str:
    return f"{fmt(row[low])} / {fmt(row[high])}"


def n_table(rows: Sequence[Row]) -> str:
    """One N: every server's figures, relays first."""
    lines = [
        "| server | CPU/conversation ms | accepted p50 / p99 ms | reply start p50 / p99 ms | "
        "reply end p50 / p99 ms | complete / conversations | other outcomes | mismatches | "
        "leaks | upstream lag p99 µs |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in sorted(rows, key=lambda r: server_order(r["server"])):
        others = ", ".join(
            f"{k}: {v}" for k, v in sorted(r["outcomes"].items()) if k != "done:complete"
        )
        lines.append(
            f"| {r['server']} | {fmt(r['cpu_per_conversation_ms'])} | "
            f"{_pair(r, 'accepted_p50_ms', 'accepted_p99_ms')} | "
            f"{_pair(r, 'start_p50_ms', 'start_p99_ms')} | "
            f"{_pair(r, 'end_p50_ms', 'end_p99_ms')} | {r['complete']} / {r['conversations']} | "
            f"{others or '-'} | {r['mismatches']} | {leaks_cell(r)} | "
            f"{r['upstream_lag_us'].get('p99', '-')} |"
        )
    return "\n".join(lines)


def tables(results: Sequence[Row]) -> str:
    parts = []
    for n in sorted({r["n"] for r in results}):
        rows = [r for r in results if r["n"] == n]
        rounds = max(r["rounds"] for r in rows)
        chunks = max(r["chunks_per_reply"] for r in rows)
        parts.append(
            f"#### N = {n}: {rounds} rounds of {n} new conversations opened at once, "
            f"{fmt(chunks, 1)} chunks per reply\n\n" + n_table(rows)
        )
    return "\n\n".join(parts)


def ratio_table(results: Sequence[Row]) -> str:
    """One row per (N, server under test, relay): the server's figure over that relay's."""
    servers = by_server(results)
    lines = [
        f"| N | server | against | CPU/conversation ratio (≤ {TARGET_CPU:g}) | "
        f"p99 completion ratio (≤ {TARGET_END_P99:g}) | p99 reply start ratio |",
        "|---|---|---|---|---|---|",
    ]
    for n, kind, base in pairs(servers):
        r, h = servers[base][n], servers[kind][n]
        lines.append(
            f"| {n} | {kind} | {base} | "
            f"{fmt(ratio(h['cpu_per_conversation_ms'], r['cpu_per_conversation_ms']))} | "
            f"{fmt(ratio(h['end_p99_ms'], r['end_p99_ms']))} | "
            f"{fmt(ratio(h['start_p99_ms'], r['start_p99_ms']))} |"
        )
    return "\n".join(lines)


def burst_checks(relay: Mapping[int, Row], server: Mapping[int, Row]) -> list[Check]:
    """One server's `BURST_TARGETS` against one relay, at every N both were measured at."""
    ns = sorted(set(relay) & set(server))
    cpu = [
        ratio(server[n]["cpu_per_conversation_ms"], relay[n]["cpu_per_conversation_ms"]) for n in ns
    ]
    end = [ratio(server[n]["end_p99_ms"], relay[n]["end_p99_ms"]) for n in ns]
    incomplete = {n: server[n]["conversations"] - server[n]["complete"] for n in ns}
    found = f"worst {fmt(worst(end))}"
    if any(incomplete.values()):
        found += "; incomplete: " + ", ".join(f"{v} at N = {n}" for n, v in incomplete.items() if v)
    return [
        Check(f"worst {fmt(worst(cpu))}", within(cpu, TARGET_CPU)),
        Check(found, within(end, TARGET_END_P99) and not any(incomplete.values())),
    ]


def verdicts(results: Sequence[Row]) -> str:
    servers = by_server(results)
    bases, kinds = baselines(servers), under_test(servers)
    if not bases or not kinds:
        return "Targets: not evaluated (a relay and a holdback server are both needed)."
    parts = [target_note(servers)]
    for kind in kinds:
        checks = {b: burst_checks(servers[b], servers[kind]) for b in bases}
        parts.append(targets_table(kind, BURST_TARGETS, checks))
    return "\n\n".join(parts)


def burst_report(results: Sequence[Row]) -> str:
    """The new-conversation workload's sections."""
    title = "### New conversations (burst)"
    intro = (
        "N clients open a new conversation at the same instant and send one message; each "
        "round uses new conversations. Latencies run from the start of the connect. A relay's "
        f"leaks are the raw tokens it forwards (relays: {', '.join(RELAYS)})."
    )
    return "\n\n".join(
        [
            f"{title}: per N\n\n{intro}\n\n" + tables(results),
            f"{title}: server / relay\n\n" + ratio_table(results),
            f"{title}: targets\n\n" + verdicts(results),
        ]
    )
