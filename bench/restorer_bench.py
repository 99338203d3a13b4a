"""Restorer benchmark: per-chunk cost against vault size, and against the naive baseline."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping
from typing import Protocol

from corpus import chunk, make_reply, make_vault
from naive_restorer import NaiveRestorer

from holdback.stream import Restorer

SIZES = (10, 100, 1_000, 10_000)


class _Filter(Protocol):
    @property
    def pending(self) -> str: ...
    def feed(self, chunk: str) -> str: ...
    def flush(self) -> str: ...


def per_chunk_seconds(make: Callable[[], _Filter], chunks: list[str], repeats: int = 5) -> float:
    best = float("inf")
    for _ in range(repeats):
        f = make()
        start = time.perf_counter()
        for c in chunks:
            f.feed(c)
        f.flush()
        best = min(best, time.perf_counter() - start)
    return best / len(chunks)


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
    rows = []
    costs: dict[int, float] = {}
    naive_costs: dict[int, float] = {}
    for size in SIZES:
        vault = make_vault(size)
        text = make_reply(vault)
        chunks = chunk(text)
        costs[size] = per_chunk_seconds(lambda v=vault: Restorer(v), chunks)
        naive_chunks = chunks if size <= 100 else chunks[: max(200, 20_000 // size)]
        naive_costs[size] = per_chunk_seconds(
            lambda v=vault: NaiveRestorer(v), naive_chunks, repeats=1 if size > 100 else 3
        )
        rows.append((size, costs[size] * 1e6, naive_costs[size] * 1e6))
    vault = make_vault(100)
    held = held_chars(vault, chunk(make_reply(vault)))
    return {
        "rows": rows,
        "naive_over_holdback_1000": naive_costs[1_000] / costs[1_000],
        "cost_10000_over_10": costs[10_000] / costs[10],
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
