"""Restorer benchmark: per-chunk cost against vault size, and against the naive baseline."""

from __future__ import annotations

import statistics
from collections.abc import Mapping

from corpus import chunk, make_reply, make_vault
from naive_restorer import NaiveRestorer
from timing import per_chunk

from holdback.stream import Restorer

SIZES = (10, 100, 1_000, 10_000)


def held_chars(vault: Mapping[str, str], chunks: list[str]) -> list[int]:
    restorer = Restorer(vault)
    held = []
    for c in chunks:
        restorer.feed(c)
        held.append(len(restorer.pending))
    return held


def percentile(values: list[int], p: float) -> float:
    ordered = sorted(values)
    return float(ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))])


def run() -> dict[str, object]:
    vaults = {size: make_vault(size) for size in SIZES}
    # One reply for every size, using tokens every vault has (the larger vaults extend the
    # smaller ones), so only the vault's size changes between the columns.
    same = chunk(make_reply(vaults[SIZES[0]]))
    chunk_sets = dict.fromkeys(SIZES, same)
    costs = per_chunk(
        {str(size): (lambda v=vaults[size]: Restorer(v)) for size in SIZES},
        {str(size): chunk_sets[size] for size in SIZES},
        rounds=9,
    )
    # The naive baseline is slow: fewer chunks and rounds, measured next to its own holdback.
    naive_costs = per_chunk(
        {str(size): (lambda v=vaults[size]: NaiveRestorer(v)) for size in SIZES},
        {str(size): chunk_sets[size][: max(200, 20_000 // size)] for size in SIZES},
        rounds=2,
    )
    rows = [(size, costs[str(size)] * 1e6, naive_costs[str(size)] * 1e6) for size in SIZES]
    vault = make_vault(100)
    held = held_chars(vault, chunk(make_reply(vault)))
    return {
        "rows": rows,
        "naive_over_holdback_1000": naive_costs["1000"] / costs["1000"],
        "cost_10000_over_10": costs["10000"] / costs["10"],
        "held_p50": percentile(held, 50),
        "held_p99": percentile(held, 99),
        "held_max": max(held),
        "held_mean": statistics.fmean(held),
    }


def report(result: dict[str, object]) -> str:
    lines = [
        "### Restorer (1–8-character chunks of a realistic reply)",
        "",
        "| vault size | holdback µs/chunk | naive µs/chunk |",
        "|---:|---:|---:|",
    ]
    for size, fast, naive in result["rows"]:  # type: ignore[attr-defined]
        lines.append(f"| {size:,} | {fast:.2f} | {naive:.1f} |")
    lines += [
        "",
        f"- naive/holdback at 1,000 entries: **{result['naive_over_holdback_1000']:.0f}×** "
        "(target ≥ 100×)",
        f"- holdback cost(10,000)/cost(10): **{result['cost_10000_over_10']:.2f}** (target ≤ 1.3)",
        f"- characters held after each feed: p50 {result['held_p50']:.0f}, "
        f"p99 {result['held_p99']:.0f}, max {result['held_max']}",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    print(report(run()))
