"""Matching by character offsets: latency, early and undelivered frames, leaks, mismatches."""

from __future__ import annotations

from typing import Any

import pytest

from server import analysis, script

MS = 1_000_000
VALUES = {"<EMAIL_1>": "sam@ex-mail.com"}


def _stream(text: str, sizes: list[int], first_ns: int = 10 * MS) -> dict[str, Any]:
    return {
        "key": "bkaaaaaaaaaa",
        "text": text,
        "sizes": sizes,
        "sent_ns": [first_ns + i * 50 * MS for i in range(len(sizes))],
    }


def _round(
    stream: dict[str, Any], cums: list[int], delays_ms: list[float], **extra: Any
) -> dict[str, Any]:
    sent = stream["sent_ns"]
    return {
        "key": stream["key"],
        "sent_ns": sent[0] - MS,
        "outcome": "done:complete",
        "frames_ns": [sent[i] + int(d * MS) for i, d in enumerate(delays_ms)],
        "frames_cum": cums,
        **extra,
    }


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert analysis.percentile(values, 50) == 50.0
    assert analysis.percentile(values, 99) == 99.0
    assert analysis.percentile(values, 100) == 100.0
    assert analysis.percentile([], 99) == 0.0
    assert analysis.percentile([7.0], 99) == 7.0


def test_relay_latency_is_send_to_frame_per_chunk() -> None:
    text = "Hello <EMAIL_1> there."
    stream = _stream(text, [3, 5, 6, 8])
    rnd = _round(stream, [3, 8, 14, 22], [1.0, 2.0, 3.0, 4.0], text=text)
    fig = analysis.analyse([stream], [rnd], (0, 10**12), restores=False)
    assert fig.added_ms == pytest.approx([1.0, 2.0, 3.0, 4.0])
    assert fig.visible_ms == pytest.approx([1.0, 2.0, 3.0, 4.0])
    assert (fig.early, fig.undelivered, fig.mismatches, fig.frames) == (0, 0, 0, 4)
    assert fig.leaks == 1  # the relay forwards the raw token


def test_a_frame_that_merges_two_chunks_counts_for_both() -> None:
    stream = _stream("abcdefghij", [5, 5])
    # One frame with everything, 60 ms after the first chunk: 60 ms, then 10 ms.
    rnd = {
        "key": stream["key"],
        "sent_ns": 0,
        "outcome": "done:complete",
        "text": "abcdefghij",
        "frames_ns": [stream["sent_ns"][0] + 60 * MS],
        "frames_cum": [10],
    }
    fig = analysis.analyse([stream], [rnd], (0, 10**12), restores=False)
    assert fig.added_ms == pytest.approx([60.0, 10.0])


def test_frames_before_their_chunk_are_counted_as_early() -> None:
    stream = _stream("abcdefghij", [5, 5])
    rnd = _round(stream, [5, 10], [1.0, -20.0], text="abcdefghij")
    fig = analysis.analyse([stream], [rnd], (0, 10**12), restores=False)
    assert fig.early == 1
    assert fig.added_ms == pytest.approx([1.0])


def test_text_never_delivered_is_counted() -> None:
    stream = _stream("abcdefghij", [5, 5])
    rnd = _round(stream, [5], [1.0], text="abcde", outcome="error:upstream_protocol")
    fig = analysis.analyse([stream], [rnd], (0, 10**12), restores=False)
    assert fig.undelivered == 1
    assert fig.mismatches == 0  # only complete replies are compared
    assert fig.outcomes == {"error:upstream_protocol": 1}


def test_only_chunks_sent_in_the_window_are_measured() -> None:
    stream = _stream("abcdefghij", [2, 2, 2, 2, 2])
    rnd = _round(stream, [2, 4, 6, 8, 10], [1, 1, 1, 1, 1], text="abcdefghij")
    window = (stream["sent_ns"][1], stream["sent_ns"][3])
    fig = analysis.analyse([stream], [rnd], window, restores=False)
    assert fig.chunks_measured == 2


def test_complete_reply_with_other_text_is_a_mismatch() -> None:
    stream = _stream("abcdefghij", [5, 5])
    rnd = _round(stream, [5, 10], [1.0, 1.0], text="abcdeXghij")
    fig = analysis.analyse([stream], [rnd], (0, 10**12), restores=False)
    assert fig.mismatches == 1


def test_holdback_release_follows_its_real_filter_chain() -> None:
    text = "Please write to <EMAIL_1> today."
    sizes = script.chunk_sizes("bkaaaaaaaaaa", len(text))
    pieces = script.split(text, sizes)
    release = analysis.holdback_releasable(pieces, VALUES)
    restored, _ = script.restore_offsets(text, VALUES)
    assert release == sorted(release)
    assert release[-1] <= len(restored)
    # Nothing of the value is released before the token is complete.
    token_end = text.index(">") + 1
    cum = 0
    for piece, released in zip(pieces, release, strict=True):
        cum += len(piece)
        if cum < token_end:
            assert released <= text.index("<")


def test_holdback_latency_uses_released_text_and_restored_offsets() -> None:
    text = "Please write to <EMAIL_1> today, or call."
    sizes = script.chunk_sizes("bkaaaaaaaaab", len(text))
    stream = _stream(text, sizes)
    pieces = script.split(text, sizes)
    release = analysis.holdback_releasable(pieces, VALUES)
    restored, _ = script.restore_offsets(text, VALUES)
    # A server that sends what the chain releases, 2 ms after each chunk, then the rest at end.
    cums: list[int] = []
    frames_ns: list[int] = []
    for i, released in enumerate(release):
        if released > (cums[-1] if cums else 0):
            cums.append(released)
            frames_ns.append(stream["sent_ns"][i] + 2 * MS)
    cums.append(len(restored))
    frames_ns.append(stream["sent_ns"][-1] + 52 * MS)
    rnd = {
        "key": stream["key"],
        "sent_ns": 0,
        "outcome": "done:complete",
        "text": restored,
        "values": VALUES,
        "frames_ns": frames_ns,
        "frames_cum": cums,
    }
    fig = analysis.analyse([stream], [rnd], (0, 10**12), restores=True)
    assert fig.added_ms
    assert all(v == pytest.approx(2.0) for v in fig.added_ms)
    assert (fig.early, fig.undelivered, fig.mismatches, fig.leaks) == (0, 0, 0, 0)
    # Held text waits for later chunks: visible delay is never below the added latency.
    assert max(fig.visible_ms) >= 50.0
    assert min(fig.visible_ms) >= 2.0 - 1e-9


def test_rounds_of_unknown_streams_still_count_leaks() -> None:
    rnd = {"key": "bkzzzzzzzzzz", "sent_ns": 5, "outcome": "done:complete", "text": "x <PHO"}
    fig = analysis.analyse([], [rnd], (0, 10), restores=True)
    assert (fig.rounds, fig.leaks, fig.rounds_with_leaks, fig.chunks_measured) == (1, 1, 1, 0)
