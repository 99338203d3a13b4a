"""The guard's incremental scans against its reference: every scan done in full.

`ReferenceGuard` is the guard with every scan a whole `DetectorSet.scan` of the window, the
straightforward way; the guard proper resumes each scan from what the last one proved
(`holdback.detect.incremental`). For every text and every split, both must emit the same text
and hold the same text after every chunk, redact the same, and block at the same place.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from holdback.detect import DetectorSet
from holdback.detect.base import Candidates
from holdback.stream import Guard, ReplyBlockedError, forbidden_matcher

from ..detect.partial_pii import VALUES, chunked, texts


class ReferenceGuard(Guard):
    """Every scan in full: the guard as it is without its incremental scanner."""

    _incremental = False


class EveryOtherWord:
    """A detector the scanner knows nothing about: it is asked on every scan."""

    kinds = ("other",)

    def candidates(self, text: str, pos: int, endpos: int, *, partial: bool) -> Candidates:
        hold = endpos
        if partial:
            space = text.rfind(" ", pos, endpos)
            hold = max(pos, space + 1)
        return Candidates([], hold)


DETECTORS = DetectorSet.from_config({"client": ["Acme Holdings", "Globex"]})
FORBIDDEN = forbidden_matcher(["db01.corp.internal", "Project Nightjar", "hunter2", "ΣΙΓΜΑ"])
VAULT = {"<EMAIL_1>": "sarah@acme.com", "<PHONE_3>": "+1 (415) 555-2671"}
CONFIGS: list[dict[str, Any]] = [
    {},
    {"window": 16},
    {"window": 24},
    {"mode": "block"},
    {"vault": VAULT},
    {"vault": VAULT, "window": 20, "mode": "block"},
    {"detectors": DetectorSet([*DETECTORS.detectors, EveryOtherWord()])},
    {"detectors": DetectorSet.from_config(), "forbidden": None},
]


def transcript(guard: Guard, chunks: list[str]) -> list[object]:
    """What the guard emits and holds after each chunk, then at the end (or where it blocks)."""
    log: list[object] = []
    try:
        for chunk in chunks:
            log.append((guard.feed(chunk), guard.pending))
        log.append((guard.flush(), guard.pending))
    except ReplyBlockedError as blocked:
        log.append(("blocked", blocked.kinds, blocked.safe_prefix))
    log.append(sorted(guard.redacted.items()))
    return log


def both(config: dict[str, Any], chunks: list[str]) -> tuple[list[object], list[object]]:
    kwargs = {"detectors": DETECTORS, "forbidden": FORBIDDEN, **config}
    return (transcript(Guard(**kwargs), chunks), transcript(ReferenceGuard(**kwargs), chunks))


@given(text=texts(), data=st.data(), config=st.sampled_from(CONFIGS))
def test_the_incremental_guard_equals_its_reference(
    text: str, data: st.DataObject, config: dict[str, Any]
) -> None:
    fast, reference = both(config, data.draw(chunked(text)))
    assert fast == reference


@given(text=texts(odd=False, max_pieces=6), config=st.sampled_from(CONFIGS))
def test_one_character_feeds_equal_the_reference(text: str, config: dict[str, Any]) -> None:
    fast, reference = both(config, list(text))
    assert fast == reference


@pytest.mark.parametrize("value", VALUES)
def test_every_value_in_every_single_split(value: str) -> None:
    text = f"Note: {value}, then {value[: len(value) // 2]}"
    for cut in range(len(text) + 1):
        fast, reference = both({}, [text[:cut], text[cut:]])
        assert fast == reference, cut


def test_plain_text_is_not_rescanned_in_full(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fast path must be the one taken: a prose reply never falls back to full scans."""
    calls = 0
    full_scan = DetectorSet.scan

    def counting(self: DetectorSet, *args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        return full_scan(self, *args, **kwargs)

    monkeypatch.setattr(DetectorSet, "scan", counting)
    guard = Guard(DETECTORS, forbidden=FORBIDDEN, vault=VAULT)
    text = "Thanks for the details; I have drafted the email to <EMAIL_1> today.\n\n" * 5 + "Bye"
    for i in range(0, len(text), 3):
        guard.feed(text[i : i + 3])
    assert calls == 0
    guard.flush()
    assert calls == 1  # the final scan, which decides what is still open


@pytest.mark.parametrize("spelling", ["ſecret_1", "ıban_2", "ıp_address_3", "\u212aEY_4"])
def test_letters_that_case_fold_into_ascii_do_not_split_the_two_scans(spelling: str) -> None:
    # A case-insensitive pattern would match these where the start tables say no match begins.
    text = f"Your key is {spelling} and more words here"
    for cut in range(len(text) + 1):
        fast, reference = both({}, [text[:cut], text[cut:]])
        assert fast == reference, cut


def test_full_start_tables_start_over_and_keep_the_results_exact(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from holdback.detect import traits

    monkeypatch.setattr(traits, "_LIMIT", 8)
    monkeypatch.setattr(traits, "_SHARED", {})
    text = (
        "Write to sarah@acme.com or call +1 415 555 2671; 日本語のテキスト, ſecret_1, ΣΙΓΜΑ. " * 3
    )
    for cut in range(0, len(text), 7):
        fast, reference = both({}, [text[:cut], text[cut:]])
        assert fast == reference, cut
    for table in traits._SHARED.values():
        assert len(table.near) <= 8
        assert len(table.chars) <= 8
