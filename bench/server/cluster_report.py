"""Markdown for the cluster workload (`cluster.py`): 1 and 2 processes on one PostgreSQL.

The rule it keeps: every figure comes from one run, each cost is named with the clock it was
read from and what it is divided by, and the machine's share of every part (holdback, the
database, the clients, the upstream) is shown beside the replies per second, so a figure
measured on a saturated machine says so. What the run cannot show (more cores than it had)
is stated as arithmetic on the measured costs, labelled as such, never as a measurement.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from . import cluster_load
from .report import fmt

Row = Mapping[str, Any]
SATURATED = 0.9  # a machine busy this share of its cores has no idle core to give
QUIET = cluster_load.QUIET  # % of a core busy beside the processes measured


def _pct(value: float | None) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.0f} %"


def _ms(value: float | None, digits: int = 3) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.{digits}f} ms"


def _label(r: Row) -> str:
    return f"{r['processes']} on {'PostgreSQL' if r['engine'] == 'postgresql' else 'SQLite'}"


def _one_pg(rows: Sequence[Row]) -> Row | None:
    return next((r for r in rows if r["engine"] == "postgresql" and r["processes"] == 1), None)


def throughput_table(rows: Sequence[Row]) -> str:
    base = _one_pg(rows)
    lines = [
        "| processes | replies / s (median; min-max of rounds) | vs 1 on PostgreSQL | "
        "completion p50 / p99 | CPU / chunk, holdback (all processes) | CPU / chunk, "
        "PostgreSQL | CPU / reply, holdback + PostgreSQL | rounds | complete | "
        "mismatches / leaks |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        chunk, reply = r["per_chunk_ms"], r["per_reply_ms"]
        vs = (
            fmt(r["replies_per_s"] / base["replies_per_s"]) + "×"
            if base and base["replies_per_s"]
            else "-"
        )
        lines.append(
            f"| {_label(r)} | {fmt(r['replies_per_s'], 1)} ({fmt(r['replies_per_s_min'], 1)}-"
            f"{fmt(r['replies_per_s_max'], 1)}) | {vs} | {fmt(r['end_p50_ms'] / 1e3)} / "
            f"{fmt(r['end_p99_ms'] / 1e3)} s | {_ms(chunk.get('servers'))} | "
            f"{_ms(chunk.get('postgres'))} | {_ms(reply.get('servers'), 1)} + "
            f"{_ms(reply.get('postgres'), 1)} | {len(r['rounds'])} of "
            f"{r.get('rounds_total', len(r['rounds']))} | {r['complete']} / {r['conversations']} | "
            f"{r['mismatches']} / {r['leaks']} |"
        )
    return "\n".join(lines)


def machine_table(rows: Sequence[Row]) -> str:
    """Each part's CPU as a share of one core, over the rounds' time."""
    lines = [
        "| processes | holdback, each process | holdback, all | PostgreSQL | clients | "
        "upstream | other (beside these) | machine busy (of cores × 100 %) | replies per process |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        share = r["share_pct"]
        each = ", ".join(_pct(share.get("abcdefgh"[i])) for i in range(r["processes"]))
        lines.append(
            f"| {_label(r)} | {each} | {_pct(share.get('servers'))} | "
            f"{_pct(share.get('postgres')) if r['engine'] == 'postgresql' else '-'} | "
            f"{_pct(share.get('clients'))} | {_pct(share.get('upstream'))} | "
            f"{_pct(share.get('other'))} | "
            f"{_pct(share.get('machine'))} (of {r['cores'] * 100} %) | "
            f"{', '.join(map(str, r['replies_by_process']))} |"
        )
    return "\n".join(lines)


def fanout_table(result: Row) -> str:
    lines = [
        "| viewers K | on | rounds | frames to the viewers / round | A CPU / round | "
        "B CPU / round | PostgreSQL CPU / round | extra CPU on the watchers' process, per "
        "connection | of one reply | per frame | per connection past the 3 policies | "
        "whole replies | saw a hidden value | other CPU |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in result["rows"]:
        on = "-" if row["k"] == 0 else row["watched_on"]
        extra = "(one reply)" if row["k"] == 0 else _err(row["extra_ms"], row["extra_err"])
        past = _err(row["past_ms"], row["past_err"]) if not math.isnan(row["past_ms"]) else "-"
        share = row.get("extra_of_reply", float("nan"))
        lines.append(
            f"| {row['k']} | {on} | {row['rounds']} | {fmt(row['viewer_frames'], 1)} | "
            f"{_ms(row['a_ms'], 1)} | {_ms(row['b_ms'], 1)} | {_ms(row['postgres_ms'], 1)} | "
            f"{extra} | {'-' if math.isnan(share) else f'{share * 100:.1f} %'} | "
            f"{_ms(row['per_frame_ms'])} | {past} | {row['whole']} / {row['records']} | "
            f"{row['hidden_seen']} | {_pct(row.get('other_pct'))} |"
        )
    return "\n".join(lines)


def _err(value: float, err: float) -> str:
    if math.isnan(value):
        return "-"
    return f"{value:.2f} ms" + ("" if math.isnan(err) else f" ± {err:.2f}")


def reading(rows: Sequence[Row]) -> str:
    """What the machine showed, and arithmetic on the measured costs for more cores."""
    pgs = [r for r in rows if r["engine"] == "postgresql"]
    if not pgs:
        return ""
    cores = pgs[0]["cores"]
    out = []
    for r in rows:
        busy = r["share_pct"].get("machine", float("nan"))
        full = busy >= SATURATED * cores * 100
        other = r["share_pct"].get("other", float("nan"))
        line = (
            f"- {_label(r)}: {fmt(r['replies_per_s'], 1)} replies/s with the machine "
            f"{_pct(busy)} busy of {cores * 100} %" + (" (saturated)" if full else "")
        )
        if other > QUIET:
            line += f", {_pct(other)} of it other work: **not a quiet machine**"
        out.append(line + ".")
    left = list(rows[0].get("left_out", ()))
    if left:
        what = ", ".join(f"round {x['round'] + 1}" for x in left)
        out.append(
            f"- Left out, for every configuration: {what} (other work beside a configuration "
            f"over {QUIET:g} % of a core)."
        )
    one, top = _one_pg(pgs), max(pgs, key=lambda r: r["processes"])
    if one is not None and top is not one:
        gain = top["replies_per_s"] / one["replies_per_s"]
        out.append(
            f"- {top['processes']} processes give {fmt(gain)}× the replies per second of one, "
            f"at {fmt(_ratio(top, one, 'servers'))}× the "
            "holdback CPU per chunk and "
            f"{fmt(_ratio(top, one, 'postgres'))}× PostgreSQL's."
        )
    per = top["per_reply_ms"]
    holdback = per.get("servers", float("nan"))
    database = per.get("postgres", float("nan"))
    whole = sum(per.get(p, 0.0) for p in ("servers", "postgres", "clients", "upstream"))
    out.append(
        f"- Arithmetic, not a measurement: at {top['processes']} processes a reply costs "
        f"{fmt(holdback, 1)} ms of holdback CPU and {fmt(database, 1)} ms of PostgreSQL's "
        f"({fmt(whole, 1)} ms with the clients and the upstream). With a core for each "
        f"process and PostgreSQL's cores apart, the processes' ceiling is "
        f"{fmt(1e3 / holdback, 0)} replies/s per core, and PostgreSQL's "
        f"{fmt(1e3 / database, 0)} replies/s per core it is given, if nothing else "
        "(locks, the shared NOTIFY queue, connections) is the limit first."
    )
    return "\n".join(out)


def _ratio(a: Row, b: Row, part: str) -> float:
    x, y = a["per_chunk_ms"].get(part), b["per_chunk_ms"].get(part)
    return x / y if x and y else float("nan")


def _intro(result: Row) -> str:
    t = result["throughput"][0]
    return (
        f"Every holdback process is a real `holdback serve` on loopback; those of one "
        f"measurement share one throwaway PostgreSQL {result.get('postgres', '')} "
        "(`tests/support/postgres.py`'s: fsync off, on this machine) through "
        "`HOLDBACK_DATABASE_URL` and one `HOLDBACK_VAULT_KEY`, each measurement on a new "
        f"database. *Replies per second*: rounds of {t['n']} new conversations opened at "
        "once, conversation i on process i mod P, each with one message (an e-mail address "
        f"and a phone number) and a reply of {fmt(t['chunks_per_reply'], 1)} chunks at "
        f"{fmt(t['rate'], 0)} chunks/s; a round's rate is its complete replies over its "
        "time, from the first connect to the last close. CPU is read from each process's "
        "own clock at each round's edges (PostgreSQL: the postmaster and every backend, "
        "those that exited too), so nothing of the pauses between rounds is counted; *CPU "
        "/ chunk* divides by the chunks the upstream streamed in those rounds. The clients "
        "(one process) and the fake upstream run on the same machine."
    )


def _fan_intro(result: Row) -> str:
    stagger = result.get("stagger") or 0.0
    arrive = (
        "all send `watch` at once, as soon as it is shared"
        if not stagger
        else f"viewer i sends `watch` i × {stagger:g} s after it is shared"
    )
    return (
        "*Fan-out*: each round is a new conversation whose owner is on process A; K "
        "viewers (API tokens, three policies: viewer i in group i mod 3) watch it from "
        f"process B (*on B*) or, for comparison, from A itself (*on A*), and {arrive}; the "
        f"reply is {fmt(result['chunks_per_reply'], 1)} chunks at "
        f"{fmt(result['rate'], 0)} chunks/s. "
        "K = 0 (the owner alone, B idle) is the baseline of every round; configurations "
        "take turns within each round. *Extra CPU per connection* is, paired by round, "
        "(W(K) - W(0)) / K on the watchers' process W; *per frame* divides the same "
        "difference by the delta frames the K viewers were delivered; *past the 3 "
        "policies* is (W(K) - W(3)) / (K - 3), connections whose policy W already renders. "
        f"*One reply* is A's CPU for K = 0: {fmt(result['reply_ms'], 1)} ms."
    )


def _fan_left(fan: Row) -> str:
    if not fan.get("quiet", True):
        return "\n\nMost rounds had other work beside them; **not a quiet machine**."
    left = fan.get("left_out") or ()
    if not left:
        return ""
    return (
        f"\n\n{len(left)} rounds left out (other work beside them over {QUIET:g} % of a core): "
        + ", ".join(f"K = {x['k']} {x['where']} round {x['round'] + 1}" for x in left)
        + "."
    )


def cluster_report(results: Sequence[Row]) -> str:
    if not results:
        return ""
    parts = ["### Several processes on one PostgreSQL (cluster)"]
    for result in results:
        rows = result["throughput"]
        if rows:
            parts.append(_intro(result))
            title = f"#### {result['server']}: replies per second"
            parts.append(f"{title}\n\n" + throughput_table(rows))
            parts.append(f"#### {result['server']}: the machine\n\n" + machine_table(rows))
            parts.append(f"#### {result['server']}: reading\n\n" + reading(rows))
        for fan in result.get("fanout") or ():
            title = f"#### {result['server']}: fan-out to another process"
            if fan.get("stagger"):
                title += f", watches {fan['stagger']:g} s apart"
            parts.append(f"{title}\n\n{_fan_intro(fan)}\n\n" + fanout_table(fan) + _fan_left(fan))
    return "\n\n".join(parts)
