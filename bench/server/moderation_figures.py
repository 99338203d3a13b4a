"""From the moderation workload's three logs to its figures. No I/O, no holdback code.

The rule it keeps: every delay is measured per sentence, from the upstream's send log to the
client's frame log, by character offsets, and every "added" figure sets a sentence, a reply or
a round against the very same one with moderation off (same stream key, same chunks, same
cadence, same round), so what is left is what moderation adds.

- A *sentence* of the model's text ends just after `.`, `!` or `?` followed by whitespace, or
  at the text's end (`sentence_ends`); this is the reader's sentence, found without holdback.
- Its *delay* is the arrival of the first content frame whose cumulative count of reply
  characters reaches the sentence's end in the restored text, minus the send time of the
  chunk that carries its terminator: from the moment the upstream had sent the whole
  sentence to the moment the reader has it. A moderated sentence also waits for the next
  character (a window ends only once whitespace follows its terminator, so `3.14` is not cut)
  and the last one for the stream's end; that wait is part of what the reader waits for, so
  it is counted.
- Its *delay from the window's close* starts instead at the chunk that lets the window close
  (the one carrying the character after the terminator; for the last sentence, the stream's
  end): the moderator's call and the server's work around it, the lookahead left out. Its
  *wait* is the time between the two chunks (0 when they are one).
- *Added delay* is, per sentence, its delay in a mode minus its delay with moderation off;
  *added beyond the wait* is its delay from the window's close minus its delay with
  moderation off (the added delay less the wait for the next character).
- *Time to first visible text* is the first content delta's arrival minus the moment the
  client sent its message; its extra is, per conversation, that minus moderation off's.
- *CPU per chunk* is the server's CPU over the round (read on its own clock at the round's
  edges) over the upstream chunks of the round's replies.
- *Moderator calls* are the moderator's log for the round's conversations; a window that
  holds a value of the user's message in clear, or is not a piece of the model's tokenized
  text, is counted.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from . import script
from .analysis import percentile

OFF: Final = "off"
TERMINATORS: Final = frozenset(".!?")
Key = tuple[int, int]  # (round, conversation)


def sentence_ends(text: str) -> list[int]:
    """The offset just past each sentence of `text`."""
    ends = [
        i + 1
        for i, c in enumerate(text)
        if c in TERMINATORS and (i + 1 == len(text) or text[i + 1].isspace())
    ]
    if text[ends[-1] if ends else 0 :].strip():
        ends.append(len(text))
    return ends


def _first_at_least(cums: Sequence[int], times: Sequence[int], target: int) -> int | None:
    at = bisect.bisect_left(cums, target)
    return times[at] if at < len(times) else None


def sentences(stream: Mapping[str, Any], record: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Per sentence of one reply: its send, close and arrival times (arrival None if the
    client never got it)."""
    text = stream["text"]
    sent: Sequence[int] = stream.get("sent_ns", ())
    cum = list(itertools.accumulate(stream["sizes"]))
    _, offsets = script.restore_offsets(text, dict(record.get("values") or {}))
    out: list[dict[str, Any]] = []
    for end in sentence_ends(text):
        carried = bisect.bisect_right(cum, end - 1)  # the chunk with the terminator
        closing = bisect.bisect_right(cum, end) if end < len(text) else None
        if carried >= len(sent):
            break  # the upstream never sent it
        if closing is None:
            close_ns = stream.get("end_ns")
        else:
            close_ns = sent[closing] if closing < len(sent) else None
        frames = (record.get("frames_cum", ()), record.get("frames_ns", ()))
        got = _first_at_least(*frames, offsets[end])
        out.append({"end": end, "sent_ns": sent[carried], "close_ns": close_ns, "got_ns": got})
    return out


def _ms(ns: float) -> float:
    return ns / 1e6


def _quantiles(values: Iterable[float], prefix: str) -> dict[str, float]:
    ordered = sorted(values)
    return {
        f"{prefix}_p50_ms": percentile(ordered, 50),
        f"{prefix}_p99_ms": percentile(ordered, 99),
        f"{prefix}_max_ms": ordered[-1] if ordered else float("nan"),
        f"{prefix}_n": len(ordered),
    }


def _match(rounds: Sequence[Mapping[str, Any]], streams: Sequence[Mapping[str, Any]]) -> None:
    """Give each record its upstream stream: the one of its key that began during its round
    (every mode sends the same keys, one mode at a time)."""
    by_key: dict[str, list[Mapping[str, Any]]] = {}
    for s in streams:
        if "text" in s:
            by_key.setdefault(s["key"], []).append(s)
    for rnd in rounds:
        for rec in rnd.get("records", ()):
            rec["stream"] = next(
                (
                    s
                    for s in by_key.get(rec["key"], ())
                    if rnd["start_ns"] <= s["start_ns"] <= rnd["end_ns"]
                ),
                None,
            )


def _mode_figures(
    mode: str,
    rounds: Sequence[Mapping[str, Any]],
    calls: Sequence[Mapping[str, Any]],
) -> dict[str, Any]:
    """One mode's raw figures, keyed for pairing with moderation off."""
    ttft: dict[Key, float] = {}
    delay: dict[tuple[int, int, int], float] = {}
    close: dict[tuple[int, int, int], float] = {}
    waits: list[float] = []
    frames: list[int] = []
    first_sentence: list[float] = []
    cpu: dict[int, float] = {}
    chunks: dict[int, int] = {}
    replies = whole = undelivered = texts = 0
    outcomes: dict[str, int] = {}
    values_of: dict[str, list[str]] = {}
    model_of: dict[str, str] = {}
    for rnd in rounds:
        number = rnd["round"]
        cpu[number] = rnd["cpu_s"]
        chunks[number] = 0
        for rec in rnd["records"]:
            replies += 1
            outcomes[rec["outcome"]] = outcomes.get(rec["outcome"], 0) + 1
            stream = rec.get("stream")
            if stream is None:
                continue
            chunks[number] += len(stream.get("sent_ns", ()))
            frames.append(len(rec.get("frames_ns", ())))
            values = dict(rec.get("values") or {})
            if rec.get("conversation_id"):
                values_of[rec["conversation_id"]] = [v for v in values.values() if v]
                model_of[rec["conversation_id"]] = stream["text"]
            restored, _ = script.restore_offsets(stream["text"], values)
            whole += rec["outcome"] == "done:complete" and rec.get("text") == restored
            key = (number, rec["conn"])
            if "first_ns" in rec:
                ttft[key] = _ms(rec["first_ns"] - rec["sent_ns"])
            for i, s in enumerate(sentences(stream, rec)):
                texts += 1
                if s["got_ns"] is None:
                    undelivered += 1
                    continue
                delay[(*key, i)] = _ms(s["got_ns"] - s["sent_ns"])
                if s["close_ns"] is not None:
                    close[(*key, i)] = _ms(s["got_ns"] - s["close_ns"])
                    waits.append(_ms(s["close_ns"] - s["sent_ns"]))
                    if i == 0 and stream.get("sent_ns"):
                        first_sentence.append(_ms(s["close_ns"] - stream["sent_ns"][0]))
    own = [c for c in calls if c.get("conversation_id") in values_of]
    clear = sum(
        1 for c in own if any(v in c.get("text", "") for v in values_of[c["conversation_id"]])
    )
    foreign = sum(1 for c in own if c.get("text", "") not in model_of[c["conversation_id"]])
    return {
        "mode": mode,
        "rounds": len(rounds),
        "replies": replies,
        "whole": whole,
        "outcomes": outcomes,
        "sentences": texts,
        "undelivered": undelivered,
        "ttft": ttft,
        "delay": delay,
        "close": close,
        "waits": waits,
        "frames": frames,
        "first_sentence": first_sentence,
        "cpu": cpu,
        "chunks": chunks,
        "calls": len(own),
        "calls_by_round": _calls_by_round(rounds, own),
        "clear": clear,
        "foreign": foreign,
        "moderator_ms": sorted(_ms(c["answered_ns"] - c["received_ns"]) for c in own),
    }


def _calls_by_round(
    rounds: Sequence[Mapping[str, Any]], calls: Sequence[Mapping[str, Any]]
) -> dict[int, int]:
    round_of = {
        rec["conversation_id"]: rnd["round"]
        for rnd in rounds
        for rec in rnd["records"]
        if rec.get("conversation_id")
    }
    out: dict[int, int] = {}
    for c in calls:
        number = round_of[c["conversation_id"]]
        out[number] = out.get(number, 0) + 1
    return out


def _paired(mine: Mapping[Any, float], off: Mapping[Any, float]) -> list[float]:
    return [v - off[k] for k, v in mine.items() if k in off]


def _row(
    raw: Mapping[str, Any], off: Mapping[str, Any] | None, latency_ms: float | None
) -> dict[str, Any]:
    chunks = sum(raw["chunks"].values())
    cpu = sum(raw["cpu"].values())
    row: dict[str, Any] = {
        k: raw[k]
        for k in ("mode", "rounds", "replies", "whole", "outcomes", "sentences", "undelivered")
    }
    row.update(
        latency_ms=latency_ms,
        calls=raw["calls"],
        calls_per_reply=raw["calls"] / raw["replies"] if raw["replies"] else float("nan"),
        sentences_per_reply=raw["sentences"] / raw["replies"] if raw["replies"] else float("nan"),
        clear=raw["clear"],
        foreign=raw["foreign"],
        cpu_per_chunk_ms=cpu / chunks * 1e3 if chunks else float("nan"),
        chunks=chunks,
        first_sentence_p50_ms=percentile(sorted(raw["first_sentence"]), 50),
        frames_per_reply=_mean(raw["frames"]),
        waited=sum(1 for w in raw["waits"] if w > 0) / len(raw["waits"])
        if raw["waits"]
        else float("nan"),
        wait_when_waited_p50_ms=percentile(sorted(w for w in raw["waits"] if w > 0), 50),
    )
    row.update(_quantiles(raw["ttft"].values(), "ttft"))
    row.update(_quantiles(raw["delay"].values(), "delay"))
    row.update(_quantiles(raw["close"].values(), "close"))
    row.update(_quantiles(raw["moderator_ms"], "moderator"))
    if raw["mode"] == OFF or off is None:
        return row
    row.update(_quantiles(_paired(raw["ttft"], off["ttft"]), "ttft_extra"))
    row.update(_quantiles(_paired(raw["delay"], off["delay"]), "added"))
    row.update(_quantiles(_paired(raw["close"], off["delay"]), "beyond"))
    shared = [r for r in raw["cpu"] if r in off["cpu"]]
    off_cpu = sum(off["cpu"][r] for r in shared)
    off_chunks = sum(off["chunks"][r] for r in shared)
    mine_chunks = sum(raw["chunks"][r] for r in shared)
    extra = sum(raw["cpu"][r] for r in shared) - off_cpu
    paired_calls = sum(raw["calls_by_round"].get(r, 0) for r in shared)
    off_per_chunk = off_cpu / off_chunks if off_chunks else float("nan")
    row["cpu_vs_off"] = (
        sum(raw["cpu"][r] for r in shared) / mine_chunks / off_per_chunk
        if mine_chunks and off_per_chunk
        else float("nan")
    )
    row["extra_cpu_per_call_ms"] = extra / paired_calls * 1e3 if paired_calls else float("nan")
    return row


def figures(
    data: Mapping[str, Any],
    streams: Sequence[Mapping[str, Any]],
    calls: Mapping[str, Sequence[Mapping[str, Any]]],
    latencies: Mapping[str, float | None],
) -> dict[str, Any]:
    """Per mode: replies, the checks, the delays, CPU and calls; each moderated mode against
    moderation off. `calls` is each moderated mode's moderator log, `latencies` each mode's
    moderator latency (None: off)."""
    failures: dict[str, int] = {}
    good: list[dict[str, Any]] = []
    for rnd in data.get("rounds", ()):
        if "failure" in rnd:
            failures[rnd["failure"]] = failures.get(rnd["failure"], 0) + 1
        else:
            good.append(dict(rnd, records=[dict(r) for r in rnd["records"]]))
    _match(good, streams)
    modes = list(data.get("modes", ()))
    raws = {
        mode: _mode_figures(mode, [r for r in good if r["mode"] == mode], calls.get(mode, ()))
        for mode in modes
    }
    off = raws.get(OFF)
    rows = [_row(raws[m], off, latencies.get(m)) for m in modes]
    texts = [s for s in streams if "text" in s]
    return {
        "modes": modes,
        "rows": rows,
        "failures": failures,
        "warm_up": data.get("warm_up"),
        "conversations": data.get("conversations"),
        "chunks_per_reply": _mean(len(s.get("sizes", ())) for s in texts),
        "chars_per_reply": _mean(len(s["text"]) for s in texts),
        "chars_per_sentence": _mean(
            len(s["text"]) / len(sentence_ends(s["text"])) for s in texts if s["text"]
        ),
    }


def _mean(values: Iterable[float]) -> float:
    items = list(values)
    return sum(items) / len(items) if items else float("nan")
