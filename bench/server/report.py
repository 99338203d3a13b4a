"""Markdown for the benchmark's results: tables per N, ratios, capacity, targets, soak.

The rule it keeps: every ratio is holdback/relay from the same run, every verdict names the
target it checks, and a figure that could not be measured is shown as missing, never guessed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

LIMIT_MS = 100.0
TARGET_CPU = 1.25
TARGET_P99 = 1.2
TARGET_CAPACITY = 0.8
CARRIED = 0.9


def _f(value: float | None, digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.{digits}f}"


def _ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0 or math.isnan(a) or math.isnan(b):
        return None
    return a / b


def by_server(results: Sequence[Mapping[str, Any]]) -> dict[str, dict[int, Mapping[str, Any]]]:
    out: dict[str, dict[int, Mapping[str, Any]]] = {}
    for r in results:
        out.setdefault(r["server"], {})[r["n"]] = r
    return out


def carried(row: Mapping[str, Any]) -> bool:
    """The server carried its offered load: at least 90 % of N streams' chunks were sent.

    The generator is closed-loop (a client sends its next message only after the reply), so a
    saturated server that accepts messages late carries fewer streams than N, and its latency
    can look fine while its throughput falls. Both are checked.
    """
    offered = row["n"] * row.get("rate", 20.0)
    return bool(row["chunks_per_s"] >= CARRIED * offered)


def sustains(row: Mapping[str, Any]) -> bool:
    return bool(row["added_p99_ms"] < LIMIT_MS and row["undelivered"] == 0 and carried(row))


def capacity(rows: Mapping[int, Mapping[str, Any]]) -> int | None:
    """The largest N, counting up, that the server sustains (see `sustains`)."""
    best = None
    for n in sorted(rows):
        if sustains(rows[n]):
            best = n
        else:
            break
    return best


def results_table(results: Sequence[Mapping[str, Any]]) -> str:
    lines = [
        "| N | server | CPU/chunk ms | added p50 ms | added p99 ms | visible p50 ms | "
        "visible p99 ms | frames/s | chunks/s | RSS/conn KB | leaks | server CPU % | "
        "upstream CPU % | generator CPU % | other CPU % |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in sorted(results, key=lambda r: (r["n"], r["server"] != "relay")):
        leaks = str(r["leaks"])
        if r["server"] == "relay":
            leaks += " (raw tokens)"
        lines.append(
            f"| {r['n']} | {r['server']} | {_f(r['cpu_per_chunk_ms'], 3)} | "
            f"{_f(r['added_p50_ms'])} | {_f(r['added_p99_ms'])} | {_f(r['visible_p50_ms'])} | "
            f"{_f(r['visible_p99_ms'])} | {_f(r['frames_per_s'], 0)} | "
            f"{_f(r['chunks_per_s'], 0)} | {_f(r['rss_per_conn_kb'], 0)} | {leaks} | "
            f"{_f(r['server_cpu_pct'], 0)} | {_f(r['upstream_cpu_pct'], 0)} | "
            f"{_f(r['generator_cpu_pct'], 0)} | {_f(r.get('background_cpu_pct'), 0)} |"
        )
    return "\n".join(lines)


def ratio_table(results: Sequence[Mapping[str, Any]]) -> str:
    servers = by_server(results)
    relay = servers.get("relay", {})
    lines = [
        "| N | server | CPU/chunk ratio (≤ 1.25) | p99 added ratio (≤ 1.2) | frames/s ratio | "
        "relay sustains N | server sustains N |",
        "|---|---|---|---|---|---|---|",
    ]
    for kind in sorted(k for k in servers if k != "relay"):
        rows = servers[kind]
        for n in sorted(set(relay) & set(rows)):
            r, h = relay[n], rows[n]
            lines.append(
                f"| {n} | {kind} | {_f(_ratio(h['cpu_per_chunk_ms'], r['cpu_per_chunk_ms']))} | "
                f"{_f(_ratio(h['added_p99_ms'], r['added_p99_ms']))} | "
                f"{_f(_ratio(h['frames_per_s'], r['frames_per_s']))} | "
                f"{'yes' if sustains(r) else 'no'} | {'yes' if sustains(h) else 'no'} |"
            )
    return "\n".join(lines)


def health_table(results: Sequence[Mapping[str, Any]]) -> str:
    """Evidence that the upstream and the generator kept up, and that matching was sound."""
    lines = [
        "| N | server | upstream lag p99 / max µs | generator loop lag p99 / max µs | "
        "chunks measured | undelivered | early | text mismatches | outcomes | failures |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in sorted(results, key=lambda r: (r["n"], r["server"] != "relay")):
        up, gen = r["upstream_lag_us"], r["generator_lag_us"]
        outcomes = ", ".join(f"{k}: {v}" for k, v in sorted(r["outcomes"].items()))
        failures = ", ".join(f"{k}: {v}" for k, v in sorted(r["generator_failures"].items()))
        lines.append(
            f"| {r['n']} | {r['server']} | {up['p99']} / {up['max']} | "
            f"{gen['p99']} / {gen['max']} | {r['chunks_measured']} | {r['undelivered']} | "
            f"{r['early']} | {r['mismatches']} | {outcomes} | {failures or '-'} |"
        )
    return "\n".join(lines)


def verdicts(results: Sequence[Mapping[str, Any]]) -> str:
    servers = by_server(results)
    relay = servers.get("relay", {})
    others = sorted(k for k in servers if k != "relay")
    if not relay or not others:
        return "Targets: not evaluated (the relay and a holdback server are both needed)."
    return "\n\n".join(_verdicts(kind, relay, servers[kind]) for kind in others)


def _verdicts(
    kind: str, relay: Mapping[int, Mapping[str, Any]], holdback: Mapping[int, Mapping[str, Any]]
) -> str:
    sustained = [n for n in sorted(set(relay) & set(holdback)) if sustains(relay[n])]
    cpu_ratios = [
        _ratio(holdback[n]["cpu_per_chunk_ms"], relay[n]["cpu_per_chunk_ms"]) for n in sustained
    ]
    p99_ratios = [_ratio(holdback[n]["added_p99_ms"], relay[n]["added_p99_ms"]) for n in sustained]
    cap_r, cap_h = capacity(relay), capacity(holdback)
    cpu_ok = bool(cpu_ratios) and all(r is not None and r <= TARGET_CPU for r in cpu_ratios)
    p99_ok = bool(p99_ratios) and all(r is not None and r <= TARGET_P99 for r in p99_ratios)
    cap_ratio = _ratio(float(cap_h or 0), float(cap_r)) if cap_r else None
    cap_ok = cap_ratio is not None and cap_ratio >= TARGET_CAPACITY
    worst_cpu = max((r for r in cpu_ratios if r is not None), default=None)
    worst_p99 = max((r for r in p99_ratios if r is not None), default=None)
    at = ", ".join(map(str, sustained)) or "none"
    return "\n".join(
        [
            f"**{kind}** (Ns the relay sustains: {at})",
            "",
            f"- CPU per chunk ≤ {TARGET_CPU}× relay: worst {_f(worst_cpu)} → "
            f"{'PASS' if cpu_ok else 'FAIL'}",
            f"- p99 added latency ≤ {TARGET_P99}× relay: worst {_f(worst_p99)} → "
            f"{'PASS' if p99_ok else 'FAIL'}",
            f"- Capacity (largest N with p99 added < {LIMIT_MS:g} ms and ≥ {CARRIED:.0%} of the "
            f"offered chunks carried): relay {cap_r}, "
            f"{kind} {cap_h}, ratio {_f(cap_ratio)} (≥ {TARGET_CAPACITY}) → "
            f"{'PASS' if cap_ok else 'FAIL'}",
        ]
    )


def bench_report(results: Sequence[Mapping[str, Any]], header: str) -> str:
    return "\n\n".join(
        [
            header,
            "### Per N\n\n" + results_table(results),
            "### holdback / relay\n\n" + ratio_table(results),
            "### Targets\n\n" + verdicts(results),
            "### Load-rig health\n\n" + health_table(results),
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
        f"- RSS: {_f(rss['first_mb'], 1)} MB after warm-up → {_f(rss['last_mb'], 1)} MB at the "
        f"end; slope after warm-up {_f(rss['slope_mb_per_min'], 3)} MB/min "
        f"(flat if < {rss['flat_limit_mb_per_min']} MB/min) → "
        f"{'FLAT' if rss['flat'] else 'GROWING'}",
        f"- Server CPU {_f(soak['server_cpu_pct'], 0)} %, "
        f"upstream {_f(soak['upstream_cpu_pct'], 0)} %, "
        f"generator {_f(soak['generator_cpu_pct'], 0)} %",
        f"- Verdict: {'PASS' if soak['passed'] else 'FAIL'}",
        "",
        "RSS samples (MB, every 10 s): " + " ".join(_f(x, 1) for x in rss["samples_mb"]),
    ]
    return "\n".join(lines)
