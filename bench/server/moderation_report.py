"""Markdown for the moderation workload (`moderation.py`): moderation off beside a webhook
moderator at each latency, the same replies.

The rule it keeps: every moderated figure is printed beside moderation off's from the same
run, and every "added" or "extra" figure is paired (the same sentence, the same
conversation, the same round, with moderation off), as `moderation_figures` computes it.
The target is judged on the delay from the chunk that carries a sentence's terminator, the
reader's view; the delay from the window's close, and the added delay beyond the wait for the
next character, are shown beside it for what they explain, never judged instead. A figure
that could not be measured is shown as missing, and a target with nothing to judge is not met.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from .report import fmt

Row = Mapping[str, Any]
TARGET_LATENCY_MS = 50.0
TARGET_FACTOR = 1.5

TARGETS = (
    f"p99 added delay per sentence at {TARGET_LATENCY_MS:g} ms ≤ {TARGET_FACTOR:g} × the "
    f"moderator's latency ({TARGET_LATENCY_MS * TARGET_FACTOR:g} ms)",
    "every reply whole in every mode; every moderated reply checked, no window sent in "
    "clear, every window a piece of the model's tokenized text",
)


def _pair(row: Row, name: str, digits: int = 1) -> str:
    p50, p99 = row.get(f"{name}_p50_ms"), row.get(f"{name}_p99_ms")
    if not row.get(f"{name}_n"):
        return "-"
    return f"{fmt(p50, digits)} / {fmt(p99, digits)}"


def _mode(row: Row) -> str:
    if row["latency_ms"] is None:
        return "off"
    return f"http, {row['latency_ms']:g} ms"


def latency_table(result: Row) -> str:
    lines = [
        "| moderation | sentences | first visible text p50 / p99 ms | its extra over off "
        "p50 / p99 | per-sentence delay p50 / p99 ms | added over off p50 / p99 | "
        "from the window's close: delay p50 / p99 | added beyond the wait p50 / p99 |",
        "|---|---:|---|---|---|---|---|---|",
    ]
    for row in result["rows"]:
        off = row["latency_ms"] is None
        lines.append(
            f"| {_mode(row)} | {row['sentences']} | {_pair(row, 'ttft')} | "
            f"{'—' if off else _pair(row, 'ttft_extra')} | {_pair(row, 'delay')} | "
            f"{'—' if off else _pair(row, 'added')} | {_pair(row, 'close')} | "
            f"{'—' if off else _pair(row, 'beyond')} |"
        )
    return "\n".join(lines)


def cost_table(result: Row) -> str:
    lines = [
        "| moderation | whole replies | moderator calls / reply | sentences / reply | "
        "delta frames / reply | moderator's own latency p50 / p99 ms | server CPU / chunk ms | "
        "vs off | extra CPU / moderator call ms | windows in clear | "
        "windows not in the model's text |",
        "|---|---|---:|---:|---:|---|---:|---:|---:|---:|---:|",
    ]
    for row in result["rows"]:
        off = row["latency_ms"] is None
        lines.append(
            f"| {_mode(row)} | {row['whole']} / {row['replies']} | "
            f"{fmt(row['calls_per_reply'], 2)} | {fmt(row['sentences_per_reply'], 2)} | "
            f"{fmt(row['frames_per_reply'], 1)} | "
            f"{'—' if off else _pair(row, 'moderator')} | {fmt(row['cpu_per_chunk_ms'], 3)} | "
            f"{'—' if off else fmt(row.get('cpu_vs_off'))} | "
            f"{'—' if off else fmt(row.get('extra_cpu_per_call_ms'), 3)} | "
            f"{row['clear']} | {row['foreign']} |"
        )
    return "\n".join(lines)


def _judged(result: Row) -> Row | None:
    return next((r for r in result["rows"] if r["latency_ms"] == TARGET_LATENCY_MS), None)


def checks(result: Row) -> list[tuple[str, bool]]:
    """(what was found, met) for each of `TARGETS`."""
    row = _judged(result)
    limit = TARGET_LATENCY_MS * TARGET_FACTOR
    if row is None or not row.get("added_n"):
        first = ("not measured (no moderator at 50 ms, or no sentence paired with off)", False)
    else:
        p99 = row["added_p99_ms"]
        found = f"p99 {fmt(p99, 1)} ms (p50 {fmt(row['added_p50_ms'], 1)})"
        if row.get("beyond_n"):
            found += (
                f"; beyond the wait for the next character p99 {fmt(row['beyond_p99_ms'], 1)} ms"
            )
        unsent = row["undelivered"]
        if unsent:
            found += f"; {unsent} sentences never arrived"
        first = (found, not math.isnan(p99) and p99 <= limit and not unsent)
    rows = result["rows"]
    moderated = [r for r in rows if r["latency_ms"] is not None]
    replies = sum(r["replies"] for r in rows)
    whole = sum(r["whole"] for r in rows)
    clear = sum(r["clear"] for r in rows)
    foreign = sum(r["foreign"] for r in rows)
    unchecked = [r for r in moderated if not r["calls"]]
    failed = sum(result.get("failures", {}).values())
    bad = sum(result.get("bad_requests", {}).values())
    found = f"{whole} / {replies} whole; {clear} windows in clear, {foreign} not in the text"
    if unchecked:
        found += "; no moderator call in " + ", ".join(_mode(r) for r in unchecked)
    if failed:
        found += f"; {failed} rounds failed"
    if bad:
        found += f"; {bad} requests broke the contract"
    ok = bool(moderated) and replies > 0 and whole == replies
    ok = ok and not (clear or foreign or unchecked or failed or bad)
    return [first, (found, ok)]


def targets_table(result: Row) -> str:
    lines = ["| target | found | verdict |", "|---|---|---|"]
    for target, (found, met) in zip(TARGETS, checks(result), strict=True):
        lines.append(f"| {target} | {found} | {'met' if met else '**not met**'} |")
    return "\n".join(lines)


def _intro(result: Row) -> str:
    return (
        f"The same replies ({fmt(result['chars_per_reply'], 0)} characters, "
        f"{fmt(result['chunks_per_reply'], 1)} chunks at {fmt(result['rate'], 0)} chunks/s, "
        f"sentences of {fmt(result['chars_per_sentence'], 0)} characters on average) are sent "
        f"by {result['conversations']} concurrent conversations per round to one holdback per "
        "mode: moderation off, and a fake webhook moderator on loopback (`--moderation "
        "http:<url>`, `bench/server/moderator.py`) answering `allow` after a fixed latency. "
        f"{result['rounds']} rounds, the modes' order turning each round, after a warm-up "
        "round per mode; CPU from the measured server's own clock at the round's edges.\n\n"
        "A sentence ends after `.`, `!` or `?` and whitespace, or at the reply's end. Its "
        "*delay* runs from the upstream's send of the chunk carrying its terminator to the "
        "client's receipt of the frame that completes it (restored text, by character "
        "offsets). A moderated window closes only once the character after the terminator "
        "has come (the last one at the stream's end), so that wait is in the delay; *from "
        "the window's close* starts at the chunk that brings that character instead: "
        f"{fmt(_waited(result), 0)} % of the sentences wait for a later chunk (the terminator "
        "ended its chunk, or the sentence ends the reply), for one chunk interval. *Added* "
        "is, per sentence, the delay minus the same sentence's with moderation off; *added "
        "beyond the wait* is the delay from the window's close minus that; *first "
        "visible text* runs from the client's send to its first `assistant_delta`, its extra "
        "paired per conversation. With moderation, nothing shows before the first sentence "
        "has streamed whole and been allowed: the first sentence alone streams for "
        f"{fmt(_first_sentence(result), 0)} ms (p50). *CPU / chunk* is the server's CPU over "
        "the upstream chunks; *extra CPU / moderator call* is, over the same rounds, the "
        "moderated server's CPU minus moderation off's, over its calls (a moderated reply "
        "also goes out in one frame per window, not one per chunk, which saves CPU: see "
        "*delta frames / reply*)."
    )


def _waited(result: Row) -> float | None:
    share = next((r["waited"] for r in result["rows"] if r["latency_ms"] is not None), None)
    return None if share is None else share * 100


def _first_sentence(result: Row) -> float | None:
    return next((r["first_sentence_p50_ms"] for r in result["rows"]), None)


def moderation_report(results: Sequence[Row]) -> str:
    """The moderation workload's sections, one set of tables per server."""
    if not results:
        return ""
    parts = [f"### Moderation latency\n\n{_intro(results[0])}"]
    for result in results:
        parts.append(f"#### {result['server']}: side by side\n\n" + latency_table(result))
        parts.append(f"#### {result['server']}: calls and cost\n\n" + cost_table(result))
        parts.append(f"#### {result['server']}: targets\n\n" + targets_table(result))
    return "\n\n".join(parts)
