"""Markdown for the 10-turn workload's results: tables per N, ratios, capacity, targets, soak.

The rule it keeps: every holdback figure is set against each relay measured in the same run
(`relay-aiohttp`, the strongest baseline, and `relay` on httpx), as a ratio; every verdict
names the target and the relay it is judged against; targets are judged against
`relay-aiohttp`, or against `relay` with a note when the run has no aiohttp relay, and the
other relays' cells are for information only. A figure that could not be measured is shown as
missing, never guessed. The new-conversation workload's tables are in `burst_report.py`,
built on the helpers here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

LIMIT_MS = 100.0
TARGET_CPU = 1.0
TARGET_P99 = 1.2
TARGET_CAPACITY = 0.8
CARRIED = 0.9
# The bare relays; targets are judged against the first one the run measured.
RELAYS = ("relay-aiohttp", "relay")

Row = Mapping[str, Any]


def fmt(value: float | None, digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.{digits}f}"


def ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0 or math.isnan(a) or math.isnan(b):
        return None
    return a / b


def worst(ratios: Sequence[float | None]) -> float | None:
    return max((r for r in ratios if r is not None), default=None)


def within(ratios: Sequence[float | None], limit: float) -> bool:
    """Every ratio was measured and is at most `limit` (no ratio at all is not a pass)."""
    return bool(ratios) and all(r is not None and r <= limit for r in ratios)


def is_relay(kind: str) -> bool:
    return kind in RELAYS or kind.startswith("relay")


def server_order(kind: str) -> tuple[int, str]:
    """Relays first (the judged one first), then the servers under test by name."""
    rank = RELAYS.index(kind) if kind in RELAYS else len(RELAYS) + (not is_relay(kind))
    return (rank, kind)


def by_server(results: Sequence[Row]) -> dict[str, dict[int, Row]]:
    out: dict[str, dict[int, Row]] = {}
    for r in results:
        out.setdefault(r["server"], {})[r["n"]] = r
    return out


def baselines(servers: Mapping[str, Any]) -> list[str]:
    """The relays present, the one the targets are judged against first."""
    return sorted((k for k in servers if is_relay(k)), key=server_order)


def under_test(servers: Mapping[str, Any]) -> list[str]:
    return sorted(k for k in servers if not is_relay(k))


def target_note(servers: Mapping[str, Any]) -> str:
    """Which relay the targets are judged against, with a note when it is not the strongest."""
    found = baselines(servers)
    if found and found[0] != RELAYS[0]:
        return (
            f"Note: {RELAYS[0]} was not measured in this run, so the targets are judged "
            f"against {found[0]}."
        )
    others = ", ".join(found[1:]) or "none"
    return f"Judged against {RELAYS[0]}; other relays ({others}) for information."


def leaks_cell(row: Row) -> str:
    """A relay does not restore: what it counts are the raw tokens it forwards."""
    return f"{row['leaks']} (raw tokens)" if is_relay(row["server"]) else str(row["leaks"])


def carried(row: Row) -> bool:
    """The server carried its offered load: at least 90 % of N streams' chunks were sent.

    The generator is closed-loop (a client sends its next message only after the reply), so a
    saturated server that accepts messages late carries fewer streams than N, and its latency
    can look fine while its throughput falls. Both are checked.
    """
    offered = row["n"] * row.get("rate", 20.0)
    return bool(row["chunks_per_s"] >= CARRIED * offered)


def sustains(row: Row) -> bool:
    return bool(row["added_p99_ms"] < LIMIT_MS and row["undelivered"] == 0 and carried(row))


def capacity(rows: Mapping[int, Row]) -> int | None:
    """The largest N, counting up, that the server sustains (see `sustains`)."""
    best = None
    for n in sorted(rows):
        if sustains(rows[n]):
            best = n
        else:
            break
    return best


def sorted_rows(results: Sequence[Row]) -> list[Row]:
    return sorted(results, key=lambda r: (r["n"], server_order(r["server"])))


def pairs(servers: Mapping[str, Mapping[int, Row]]) -> list[tuple[int, str, str]]:
    """(N, server under test, relay) for every N both were measured at, in table order."""
    found = [
        (n, kind, base)
        for kind in under_test(servers)
        for base in baselines(servers)
        for n in set(servers[base]) & set(servers[kind])
    ]
    return sorted(found, key=lambda x: (x[0], x[1], server_order(x[2])))


def results_table(results: Sequence[Row]) -> str:
    lines = [
        "| N | server | CPU/chunk ms | added p50 ms | added p99 ms | visible p50 ms | "
        "visible p99 ms | frames/s | chunks/s | RSS/conn KB | leaks | server CPU % | "
        "upstream CPU % | generator CPU % | other CPU % |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in sorted_rows(results):
        lines.append(
            f"| {r['n']} | {r['server']} | {fmt(r['cpu_per_chunk_ms'], 3)} | "
            f"{fmt(r['added_p50_ms'])} | {fmt(r['added_p99_ms'])} | {fmt(r['visible_p50_ms'])} | "
            f"{fmt(r['visible_p99_ms'])} | {fmt(r['frames_per_s'], 0)} | "
            f"{fmt(r['chunks_per_s'], 0)} | {fmt(r['rss_per_conn_kb'], 0)} | {leaks_cell(r)} | "
            f"{fmt(r['server_cpu_pct'], 0)} | {fmt(r['upstream_cpu_pct'], 0)} | "
            f"{fmt(r['generator_cpu_pct'], 0)} | {fmt(r.get('background_cpu_pct'), 0)} |"
        )
    return "\n".join(lines)


def ratio_table(results: Sequence[Row]) -> str:
    """One row per (N, server under test, relay): the server's figure over that relay's."""
    servers = by_server(results)
    lines = [
        f"| N | server | against | CPU/chunk ratio (≤ {TARGET_CPU:g}) | "
        f"p99 added ratio (≤ {TARGET_P99:g}) | frames/s ratio | relay sustains N | "
        "server sustains N |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for n, kind, base in pairs(servers):
        r, h = servers[base][n], servers[kind][n]
        lines.append(
            f"| {n} | {kind} | {base} | "
            f"{fmt(ratio(h['cpu_per_chunk_ms'], r['cpu_per_chunk_ms']))} | "
            f"{fmt(ratio(h['added_p99_ms'], r['added_p99_ms']))} | "
            f"{fmt(ratio(h['frames_per_s'], r['frames_per_s']))} | "
            f"{'yes' if sustains(r) else 'no'} | {'yes' if sustains(h) else 'no'} |"
        )
    return "\n".join(lines)


def health_table(results: Sequence[Row]) -> str:
    """Evidence that the upstream and the generator kept up, and that matching was sound."""
    lines = [
        "| N | server | upstream lag p99 / max µs | generator loop lag p99 / max µs | "
        "chunks measured | undelivered | early | text mismatches | outcomes | failures |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in sorted_rows(results):
        up, gen = r["upstream_lag_us"], r["generator_lag_us"]
        outcomes = ", ".join(f"{k}: {v}" for k, v in sorted(r["outcomes"].items()))
        failures = ", ".join(f"{k}: {v}" for k, v in sorted(r["generator_failures"].items()))
        lines.append(
            f"| {r['n']} | {r['server']} | {up['p99']} / {up['max']} | "
            f"{gen['p99']} / {gen['max']} | {r['chunks_measured']} | {r['undelivered']} | "
            f"{r['early']} | {r['mismatches']} | {outcomes} | {failures or '-'} |"
        )
    return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class Check:
    """One target against one relay: what was found (`worst 0.95`) and whether it is met."""

    found: str
    met: bool


def targets_table(
    kind: str, targets: Sequence[tuple[str, bool]], checks: Mapping[str, Sequence[Check]]
) -> str:
    """Rows are targets (name, judged); columns are relays, the first the judged one.

    A judged target against the first relay gets PASS or FAIL; every other cell says only
    whether the figure meets the bound, for information.
    """
    bases = list(checks)
    head = [f"vs {b} ({'judged' if i == 0 else 'for information'})" for i, b in enumerate(bases)]
    lines = [f"| {kind}: target | " + " | ".join(head) + " |", "|---" * (len(bases) + 1) + "|"]
    for t, (name, judged) in enumerate(targets):
        cells = []
        for i, base in enumerate(bases):
            c = checks[base][t]
            if i == 0 and judged:
                cells.append(f"{c.found} → {'PASS' if c.met else 'FAIL'}")
            else:
                cells.append(f"{c.found} ({'met' if c.met else 'not met'})")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


TURN_TARGETS = (
    (f"CPU per chunk ≤ {TARGET_CPU:g}× the relay's, at every N the relay sustains", True),
    (f"p99 added latency ≤ {TARGET_P99:g}× the relay's, at those Ns (informational)", False),
    (
        f"capacity (largest N with p99 added < {LIMIT_MS:g} ms and ≥ {CARRIED:.0%} of the "
        f"offered chunks carried) ≥ {TARGET_CAPACITY:g}× the relay's",
        True,
    ),
)


def turn_checks(relay: Mapping[int, Row], server: Mapping[int, Row]) -> list[Check]:
    """One server's `TURN_TARGETS` against one relay."""
    sustained = [n for n in sorted(set(relay) & set(server)) if sustains(relay[n])]
    cpu = [ratio(server[n]["cpu_per_chunk_ms"], relay[n]["cpu_per_chunk_ms"]) for n in sustained]
    p99 = [ratio(server[n]["added_p99_ms"], relay[n]["added_p99_ms"]) for n in sustained]
    cap_r, cap_s = capacity(relay), capacity(server)
    cap_ratio = ratio(float(cap_s or 0), float(cap_r)) if cap_r else None
    return [
        Check(f"worst {fmt(worst(cpu))}", within(cpu, TARGET_CPU)),
        Check(f"worst {fmt(worst(p99))}", within(p99, TARGET_P99)),
        Check(
            f"relay {cap_r}, server {cap_s}: ratio {fmt(cap_ratio)}",
            cap_ratio is not None and cap_ratio >= TARGET_CAPACITY,
        ),
    ]


def verdicts(results: Sequence[Row]) -> str:
    servers = by_server(results)
    bases, kinds = baselines(servers), under_test(servers)
    if not bases or not kinds:
        return "Targets: not evaluated (a relay and a holdback server are both needed)."
    sustained = "; ".join(
        b
        + " "
        + (", ".join(str(n) for n in sorted(servers[b]) if sustains(servers[b][n])) or "none")
        for b in bases
    )
    parts = [f"{target_note(servers)} Ns each relay sustains: {sustained}."]
    for kind in kinds:
        checks = {b: turn_checks(servers[b], servers[kind]) for b in bases}
        parts.append(targets_table(kind, TURN_TARGETS, checks))
    return "\n\n".join(parts)


def bench_report(results: Sequence[Row], header: str | None = None) -> str:
    """The 10-turn workload's sections, after `header` when one is given."""
    title = "### 10-turn conversations"
    return "\n\n".join(
        ([header] if header else [])
        + [
            f"{title}: per N\n\n" + results_table(results),
            f"{title}: server / relay\n\n" + ratio_table(results),
            f"{title}: targets\n\n" + verdicts(results),
            f"{title}: load-rig health\n\n" + health_table(results),
        ]
    )


def soak_report(soak: Mapping[str, Any], header: str) -> str:
    rss = soak["rss"]
    lines = [
        header,
        f"- Duration {soak['minutes']:g} min at N = {soak['n']}; "
        f"{soak['rounds']} user messages sent, {soak['accepted']} accepted.",
        "- Disturbances planned: "
        + ", ".join(f"{k}: {v}" for k, v in sorted(soak["planned"].items())),
        "- Outcomes: " + ", ".join(f"{k}: {v}" for k, v in sorted(soak["outcomes"].items())),
        "- Error frames by code: "
        + (", ".join(f"{k}: {v}" for k, v in sorted(soak["errors"].items())) or "none"),
        f"- Errors not explained by an injected fault: {soak['unexpected_errors']}; "
        f"injected faults without an error frame: {soak['missing_errors']}",
        f"- Stored: {soak['stored_user_ok']}/{soak['accepted']} user messages found with their "
        f"text; {soak['stored_reply_ok']}/{soak['replies_expected']} replies found "
        f"(statuses: {', '.join(f'{k}: {v}' for k, v in sorted(soak['stored_status'].items()))}); "
        f"complete replies whose stored text differs from what the client saw: "
        f"{soak['stored_text_mismatch']}",
        f"- Leaks in assistant deltas: {soak['leaks']}",
        f"- RSS: {fmt(rss['first_mb'], 1)} MB after warm-up → {fmt(rss['last_mb'], 1)} MB at the "
        f"end; slope after warm-up {fmt(rss['slope_mb_per_min'], 3)} MB/min "
        f"(flat if < {rss['flat_limit_mb_per_min']} MB/min) → "
        f"{'FLAT' if rss['flat'] else 'GROWING'}",
        f"- Server CPU {fmt(soak['server_cpu_pct'], 0)} %, "
        f"upstream {fmt(soak['upstream_cpu_pct'], 0)} %, "
        f"generator {fmt(soak['generator_cpu_pct'], 0)} %",
        f"- Verdict: {'PASS' if soak['passed'] else 'FAIL'}",
        "",
        "RSS samples (MB, every 10 s): " + " ".join(fmt(x, 1) for x in rss["samples_mb"]),
    ]
    return "\n".join(lines)
