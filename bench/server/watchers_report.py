"""Markdown for the watchers workload (`watchers.py`): one reply, 1 to K viewers, three policies.

The rule it keeps: every figure comes from one run's rounds, and each cost is stated against
what it is measured from. "One reply" is the server's CPU for a round with the owner alone
(K = 0). A viewer past the first of its policy is set against the round with one viewer per
policy (K = 3), a viewer bringing a new policy against the owner alone. A figure that could
not be measured is shown as missing, and a target with nothing to judge is not met.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from .report import fmt
from .watchers import POLICIES, group_of

Row = Mapping[str, Any]
TARGET_USED = 0.10

TARGETS = (
    f"each extra viewer with an already-used policy costs ≤ {TARGET_USED * 100:g} % of one reply",
    "every connection got the whole reply, and no viewer was sent a value its policy hides",
)


def _pct(value: float | None, err: float | None = None) -> str:
    if value is None or math.isnan(value):
        return "-"
    text = f"{value * 100:.1f} %"
    if err is not None and not math.isnan(err):
        text += f" ± {err * 100:.1f}"
    return text


def _viewers(group: str, top: int) -> str:
    members = [str(i) for i in range(top) if group_of(i) == group]
    return ", ".join(members) or "-"


def policy_table(result: Row) -> str:
    top = max(result["ks"], default=0)
    lines = ["| group | email | phone | viewers (0-based) |", "|---|---|---|---|"]
    for group, levels in result["groups"].items():
        lines.append(
            f"| {group} | {levels['email']} | {levels['phone']} | {_viewers(group, top)} |"
        )
    return "\n".join(lines)


def _extra(row: Row) -> str:
    if row["extra_kind"] == "none":
        return "(one reply)"
    what = "new policies" if row["extra_kind"] == "new" else "already-used policies"
    return (
        f"{_pct(row['extra_per_viewer'], row['extra_stderr'])} "
        f"({what}, against K = {row['extra_against']})"
    )


def k_table(result: Row) -> str:
    lines = [
        "| viewers K | viewer policies | rounds | delta frames delivered / round | "
        "server CPU / round ms (min-max) | CPU / delivered chunk ms | vs 1 viewer | "
        "extra CPU / viewer, of one reply | whole replies | saw a hidden value | raw tokens |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in sorted(result["rows"], key=lambda r: r["k"]):
        lines.append(
            f"| {row['k']} | {row['policies']} | {row['rounds']} | "
            f"{fmt(row['frames_per_round'], 1)} | {fmt(row['cpu_ms'], 1)} "
            f"({fmt(row['cpu_min_ms'], 1)}-{fmt(row['cpu_max_ms'], 1)}) | "
            f"{fmt(row['cpu_per_chunk_ms'], 3)} | {fmt(row['chunk_vs_one'])} | {_extra(row)} | "
            f"{row['whole']} / {row['records']} | {row['hidden_seen']} | {row['raw_tokens']} |"
        )
    return "\n".join(lines)


def checks(result: Row) -> list[tuple[str, bool]]:
    """(what was found, met) for each of `TARGETS`."""
    rows = result["rows"]
    used = [r for r in rows if r["extra_kind"] == "used"]
    if used:
        worst = max(
            used,
            key=lambda r: math.inf if math.isnan(r["extra_per_viewer"]) else r["extra_per_viewer"],
        )
        found = (
            f"worst {_pct(worst['extra_per_viewer'], worst['extra_stderr'])} at K = {worst['k']}"
        )
        met = all(
            not math.isnan(r["extra_per_viewer"]) and r["extra_per_viewer"] <= TARGET_USED
            for r in used
        )
    else:
        found, met = f"not measured (no K above {POLICIES})", False
    records = sum(r["records"] for r in rows)
    whole = sum(r["whole"] for r in rows)
    hidden = sum(r["hidden_seen"] for r in rows)
    failed = sum(result.get("failures", {}).values())
    seen = f"{whole} / {records} whole; {hidden} saw a hidden value"
    if failed:
        seen += f"; {failed} rounds failed"
    return [(found, met), (seen, records > 0 and whole == records and not hidden and not failed)]


def targets_table(result: Row) -> str:
    lines = ["| target | found | verdict |", "|---|---|---|"]
    for target, (found, met) in zip(TARGETS, checks(result), strict=True):
        lines.append(f"| {target} | {found} | {'met' if met else '**not met**'} |")
    return "\n".join(lines)


def _intro(results: Sequence[Row]) -> str:
    first = results[0]
    return (
        "Each round is a new conversation: its owner sends one message, and K viewers, "
        "connected beforehand with API tokens (`--auth password`), send `watch` for it as "
        "soon as it is accepted and shared with their groups; the reply is "
        f"{fmt(first['chunks_per_reply'], 1)} chunks ({first['chars']} characters at "
        f"{fmt(first['rate'], 0)} chunks/s). Viewer i is a member of group i mod "
        f"{POLICIES}; the organisation's default is label for both kinds. The K "
        "configurations take turns within each round, after one warm-up round. The server's "
        "CPU is read from its CPU-time clock (`clock_gettime`: every thread's, to the "
        "nanosecond) just before the owner sends and just after every connection got "
        "`assistant_done`.\n\n"
        "*One reply* is the CPU of a round with the owner alone (K = 0). *Extra CPU per "
        "viewer* is, paired by round, (CPU(K) - CPU(0)) / K while every viewer brings a new "
        f"policy (K ≤ {POLICIES}), and (CPU(K) - CPU({POLICIES})) / (K - {POLICIES}) for the "
        f"viewers past the first {POLICIES}, whose policy is already used; both over one "
        "reply, ± the standard error over rounds. *CPU per delivered chunk* is the server's "
        "CPU over every delta frame delivered, to the owner and to the viewers (a frame may "
        "carry several of the model's chunks); *vs 1 viewer* is its ratio to K = 1's. "
        "*Whole replies* and *saw a hidden value* are checked by the rig without holdback's "
        "code: each connection's text is the model's reply with "
        "every token shown one way throughout (the value itself where the policy is plain), "
        "and no frame a viewer got holds a value of the owner's message of a kind its policy "
        "does not show plain."
    )


def watchers_report(results: Sequence[Row]) -> str:
    """The watchers workload's sections, one table of Ks and targets per server."""
    if not results:
        return ""
    title = "### One reply, many viewers (watch)"
    parts = [f"{title}\n\n{_intro(results)}\n\n" + policy_table(results[0])]
    for result in results:
        parts.append(f"#### {result['server']}: per K\n\n" + k_table(result))
        parts.append(f"#### {result['server']}: targets\n\n" + targets_table(result))
    return "\n\n".join(parts)
