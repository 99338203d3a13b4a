"""From two logs to latency, throughput and leak figures. No I/O.

The rule it keeps: latency is matched by character offsets, never by frame counts, because a
server may merge or hold text. The upstream logs, per stream, the text it sent, the chunk sizes
and each chunk's send time; the generator logs, per frame, its arrival time and the cumulative
count of reply characters. For chunk i, with `target` a character count the client must reach:

    latency(i) = arrival of the first frame with cumulative count >= target(i) - send(i)

Two targets are measured:

- *added latency* (the server's own cost: parsing, filtering, storing, sending, queueing):
  target(i) is what the server's filter chain can release once it has chunks 0..i. For
  holdback that is computed by replaying the reply through holdback's own filter chain
  (`ReplyFilter` = guard then restorer, with the server's default settings), which is
  chunk-invariant, so the replay releases exactly what the server may. For the relay it is
  everything sent so far.
- *visible delay* (what a reader waits for the text of chunk i, hold-back included): target(i)
  is the end of chunk i in the restored text (inside a token: the token's start). Holding a
  partial word or token until the next chunk shows up here, not in the added latency.

A chunk whose target does not advance past the previous chunk's is not measured (it made
nothing new visible). A frame that arrives before the chunk that makes its text releasable
would be a replay error; such frames are counted (`early`) rather than hidden.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from holdback.detect import default_detectors
from holdback.stream import Guard, ReplyFilter, Restorer
from holdback.tokens import TokenIndex

from . import script

_DETECTORS = default_detectors()


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of already sorted values (0 when there are none)."""
    if not sorted_values:
        return 0.0
    rank = max(1, math.ceil(q / 100 * len(sorted_values)))
    return float(sorted_values[min(rank, len(sorted_values)) - 1])


def holdback_releasable(pieces: Sequence[str], values: Mapping[str, str]) -> list[int]:
    """Characters holdback's filter chain has released after each chunk (restored space)."""
    vault = dict(values)
    # Built as `ChatService._filter` builds it: the guard knows the vault (its values are
    # allowed, its tokens expected), the restorer gets the vault's index.
    chain = ReplyFilter(Guard(_DETECTORS, vault=vault), Restorer(TokenIndex(vault)))
    out: list[int] = []
    total = 0
    for piece in pieces:
        total += len(chain.feed(piece))
        out.append(total)
    return out


def relay_releasable(pieces: Sequence[str]) -> list[int]:
    out: list[int] = []
    total = 0
    for piece in pieces:
        total += len(piece)
        out.append(total)
    return out


@dataclass(slots=True)
class Figures:
    """What one server did in one measurement window."""

    added_ms: list[float] = field(default_factory=list)
    visible_ms: list[float] = field(default_factory=list)
    frames: int = 0
    chunks_measured: int = 0
    undelivered: int = 0
    early: int = 0
    leaks: int = 0
    rounds_with_leaks: int = 0
    rounds: int = 0
    mismatches: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        added = sorted(self.added_ms)
        visible = sorted(self.visible_ms)
        return {
            "added_p50_ms": percentile(added, 50),
            "added_p99_ms": percentile(added, 99),
            "added_max_ms": added[-1] if added else 0.0,
            "visible_p50_ms": percentile(visible, 50),
            "visible_p99_ms": percentile(visible, 99),
            "frames": self.frames,
            "chunks_measured": self.chunks_measured,
            "undelivered": self.undelivered,
            "early": self.early,
            "leaks": self.leaks,
            "rounds_with_leaks": self.rounds_with_leaks,
            "rounds": self.rounds,
            "mismatches": self.mismatches,
            "outcomes": self.outcomes,
        }


def _first_at_least(cums: Sequence[int], times: Sequence[int], target: int) -> int | None:
    at = bisect.bisect_left(cums, target)
    return times[at] if at < len(times) else None


def count_leaks(text: str) -> int:
    return sum(1 for _ in script.LEAK_RE.finditer(text))


def analyse(
    streams: Iterable[Mapping[str, Any]],
    rounds: Iterable[Mapping[str, Any]],
    window: tuple[int, int],
    *,
    restores: bool,
) -> Figures:
    """Match upstream streams and client rounds by key; measure chunks sent in `window`."""
    start, end = window
    by_key: dict[str, Mapping[str, Any]] = {}
    for s in streams:
        if "text" in s:
            by_key[s["key"]] = s
    fig = Figures()
    for r in rounds:
        frames_ns: list[int] = r.get("frames_ns", [])
        frames_cum: list[int] = r.get("frames_cum", [])
        in_window = sum(1 for t in frames_ns if start <= t < end)
        fig.frames += in_window
        if not (in_window or start <= r["sent_ns"] < end):
            continue
        fig.rounds += 1
        fig.outcomes[r["outcome"]] = fig.outcomes.get(r["outcome"], 0) + 1
        leaks = count_leaks(r.get("text", ""))
        fig.leaks += leaks
        fig.rounds_with_leaks += leaks > 0
        stream = by_key.get(r["key"])
        if stream is None:
            continue
        values: dict[str, str] = dict(r.get("values") or {}) if restores else {}
        pieces = script.split(stream["text"], stream["sizes"])
        restored, offsets = script.restore_offsets(stream["text"], values)
        if r["outcome"] == "done:complete" and r.get("text") != restored:
            fig.mismatches += 1
        release = holdback_releasable(pieces, values) if restores else relay_releasable(pieces)
        _measure(fig, stream["sent_ns"], pieces, release, offsets, frames_ns, frames_cum, window)
    return fig


def _measure(
    fig: Figures,
    sent: Sequence[int],
    pieces: Sequence[str],
    release: Sequence[int],
    offsets: Sequence[int],
    frames_ns: Sequence[int],
    frames_cum: Sequence[int],
    window: tuple[int, int],
) -> None:
    start, end = window
    model_cum = 0
    last_release = last_visible = 0
    for i, sent_ns in enumerate(sent):
        model_cum += len(pieces[i])
        visible = offsets[model_cum]
        measured = start <= sent_ns < end
        if release[i] > last_release:
            if measured:
                fig.chunks_measured += 1
                got = _first_at_least(frames_cum, frames_ns, release[i])
                if got is None:
                    fig.undelivered += 1
                elif got < sent_ns:
                    fig.early += 1
                else:
                    fig.added_ms.append((got - sent_ns) / 1e6)
            last_release = release[i]
        if visible > last_visible:
            if measured:
                got = _first_at_least(frames_cum, frames_ns, visible)
                if got is not None and got >= sent_ns:
                    fig.visible_ms.append((got - sent_ns) / 1e6)
            last_visible = visible


def burst_figures(
    records: Sequence[Mapping[str, Any]],
    streams: Iterable[Mapping[str, Any]],
    *,
    restores: bool,
) -> dict[str, Any]:
    """Latencies of new one-turn conversations, from the moment each client began to connect.

    `start` is the first delta's arrival (the reply begins to show), `end` the reply's
    `assistant_done`, `accepted` the user message's `message_accepted`. A complete reply
    whose text is not the upstream's (restored, for holdback) counts as a mismatch.
    """
    by_key = {s["key"]: s for s in streams if "text" in s}
    accepted: list[float] = []
    start: list[float] = []
    end: list[float] = []
    outcomes: dict[str, int] = {}
    mismatches = leaks = 0
    for r in records:
        outcomes[r["outcome"]] = outcomes.get(r["outcome"], 0) + 1
        leaks += count_leaks(r.get("text", ""))
        t0 = r["connect_ns"]
        if "accepted_ns" in r:
            accepted.append((r["accepted_ns"] - t0) / 1e6)
        if "first_ns" in r:
            start.append((r["first_ns"] - t0) / 1e6)
        if r["outcome"] != "done:complete":
            continue
        end.append((r["done_ns"] - t0) / 1e6)
        stream = by_key.get(r["key"])
        values: dict[str, str] = dict(r.get("values") or {}) if restores else {}
        expected = script.restore_offsets(stream["text"], values)[0] if stream else None
        if r.get("text") != expected:
            mismatches += 1
    out: dict[str, Any] = {
        "conversations": len(records),
        "complete": len(end),
        "mismatches": mismatches,
        "leaks": leaks,
        "outcomes": outcomes,
    }
    for name, values_ms in (("accepted", accepted), ("start", start), ("end", end)):
        ordered = sorted(values_ms)
        out[f"{name}_p50_ms"] = percentile(ordered, 50)
        out[f"{name}_p99_ms"] = percentile(ordered, 99)
    return out
