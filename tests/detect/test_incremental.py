"""The incremental scanner answers as `DetectorSet.scan` does, and what it relies on holds.

`StreamScanner` keeps, between the scans of a stream, what earlier scans proved; it is only
right if every detector keeps what it declares (see `RegexDetector`) and if a start, once
closed, stays closed. Both are tested here for every built-in detector.
"""

from __future__ import annotations

import string

import regex
from hypothesis import assume, given
from hypothesis import strategies as st

from holdback.detect import DetectorSet
from holdback.detect.base import Candidates
from holdback.detect.incremental import StreamScanner
from holdback.detect.normalize import normalize
from holdback.detect.regex_detector import RegexDetector
from holdback.detect.secrets import token_detector, token_fragment_detector
from holdback.detect.traits import for_detectors
from holdback.stream import forbidden_matcher

from .partial_pii import texts


class LastWord:
    """A detector the scanner knows nothing about: it holds the last word, finds nothing."""

    kinds = ("other",)

    def candidates(self, text: str, pos: int, endpos: int, *, partial: bool) -> Candidates:
        hold = max(pos, text.rfind(" ", pos, endpos) + 1) if partial else endpos
        return Candidates([], hold)


BASE = DetectorSet.from_config({"client": ["Acme Holdings", "Acme", "Globex"]})
PATTERNS: list[RegexDetector] = [
    *(d for d in BASE.detectors if isinstance(d, RegexDetector)),
    token_detector([*BASE.kinds, "literal"]),
    token_fragment_detector(),
]
FULL = DetectorSet(
    [
        *BASE.detectors,
        *PATTERNS[-2:],
        forbidden_matcher(["db01.corp.internal", "Project Nightjar", "hunter2", "x"]),
        LastWord(),
    ]
)
CONTEXT = 80
ASCII = string.printable


@given(text=texts(), data=st.data())
def test_the_scanner_answers_as_detector_set_scan(text: str, data: st.DataObject) -> None:
    """Scans of a growing text, each from anywhere up to the last hold, with context before."""
    scanner = StreamScanner(FULL)
    pos = end = 0
    while end < len(text):
        end = data.draw(st.integers(end + 1, len(text)))
        offset = max(0, pos - CONTEXT)
        window = text[offset:end]
        if data.draw(st.integers(0, 9)) == 0:
            scanner.forget()
        expected = FULL.scan(window, pos - offset, final=False)
        assert scanner.scan(window, pos - offset, offset) == (expected.findings, expected.hold)
        pos = offset + data.draw(st.integers(pos - offset, expected.hold))


def matches(d: RegexDetector, text: str) -> list[regex.Match[str]]:
    return list(d.pattern.finditer(text, overlapped=True))


@given(text=texts(odd=False))
def test_every_match_is_of_its_alphabet_and_has_what_it_needs(text: str) -> None:
    for d in PATTERNS:
        for m in matches(d, text):
            assert regex.fullmatch(rf"{d.alphabet}*", m.group()), (d.kind, m)
            assert d.starts.match(text, m.start()) is not None, (d.kind, m)
            if d.needs is not None and (m.end() < len(text) or d.lookback):
                assert regex.search(d.needs, m.group()), (d.kind, m)


@given(text=texts(odd=False), data=st.data())
def test_a_closed_start_stays_closed(text: str, data: st.DataObject) -> None:
    assume(text)
    start = data.draw(st.integers(0, len(text) - 1))
    first = data.draw(st.integers(start + 1, len(text)))
    later = data.draw(st.integers(first, len(text)))
    for d in PATTERNS:
        if d.open_start(text, start, first) != start:
            assert d.open_start(text, start, later) != start, d.kind


@given(text=texts(odd=False), data=st.data())
def test_is_open_is_open_start_inside_the_run(text: str, data: st.DataObject) -> None:
    assume(text)
    end = data.draw(st.integers(1, len(text)))
    for d in PATTERNS:
        run = d.run_start(text, 0, end)
        for s in range(run, end):
            assert d.is_open(text, s, end) == (d.open_start(text, s, end) == s), (d.kind, s)
        if d.gate is not None and d.open_start(text, 0, end) < end:
            assert regex.search(d.gate, text[d.open_start(text, 0, end) : end]), d.kind


@given(text=texts(), data=st.data())
def test_candidates_cover_every_open_start_and_every_match(text: str, data: st.DataObject) -> None:
    """A start is only looked for where the tables say a detector may begin: judged from its
    character and the one before, and from the one after once it has come."""
    norm = normalize(text).text
    assume(norm)
    end = data.draw(st.integers(1, len(norm)))
    seen = norm[:end]
    tables = for_detectors(list(FULL.detectors))
    for j, d in enumerate(FULL.detectors):
        if not isinstance(d, RegexDetector):
            continue
        begins = {m.start() for m in matches(d, seen)}
        begins |= {s for s in range(d.run_start(seen, 0, end), end) if d.is_open(seen, s, end)}
        for s in begins:
            at = 1 if s else 0
            for key in {seen[s - at : s + 1], seen[s - at : s + 2]}:
                assert tables.info(key, at)[0] >> j & 1, (d.kind, s, key)


WORD_DETECTORS = [d for d in PATTERNS if d.word]


@given(
    before=texts(odd=False, max_pieces=4),
    data=st.data(),
    detector=st.sampled_from(WORD_DETECTORS),
)
def test_a_start_followed_by_word_characters_is_open(
    before: str, data: st.DataObject, detector: RegexDetector
) -> None:
    assert detector.word is not None
    word = [c for c in ASCII if regex.fullmatch(detector.word, c)]
    assert all(regex.fullmatch(detector.alphabet, c) for c in word)
    run = data.draw(st.text(alphabet=word, min_size=1, max_size=80))
    text = before + run
    s = len(before)
    j = FULL.detectors.index(detector)
    tables = for_detectors(list(FULL.detectors))
    at = 1 if s else 0
    for key in {text[s - at : s + 1], text[s - at : s + 2]}:  # before and after the next comes
        if tables.info(key, at)[0] >> j & 1:
            assert detector.is_open(text, s, len(text)), key


SHORT_DETECTORS = [d for d in PATTERNS if d.word and d.short]


@given(
    before=texts(odd=False, max_pieces=4),
    after=texts(odd=False, max_pieces=4),
    data=st.data(),
    detector=st.sampled_from(SHORT_DETECTORS),
)
def test_a_start_whose_word_ends_too_soon_is_closed(
    before: str, after: str, data: st.DataObject, detector: RegexDetector
) -> None:
    assert detector.word is not None
    word = [c for c in ASCII if regex.fullmatch(detector.word, c)]
    other = [c for c in ASCII if not regex.fullmatch(detector.word, c)]
    run = data.draw(st.text(alphabet=word, min_size=1, max_size=detector.short - 1))
    text = before + run + data.draw(st.sampled_from(other)) + after
    for end in range(len(before) + len(run) + 1, len(text) + 1):
        assert not detector.is_open(text, len(before), end)
