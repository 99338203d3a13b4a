"""A team's detectors in the incremental scanner: it answers as `DetectorSet.scan` does.

People are a term list of whole words, and a team's regexes one pattern detector whose findings
may wait on the text after them (context words, `RegexDetector.judge`): both are read by the
scanner's own rules, not asked on every scan, so both are held here to the one-shot answer,
scan by scan, and the guard built on them to its reference (every scan in full); the bundle of
regexes to the entries asked on every scan. What the
scanner relies on is tested too: `TermMatcher.probe` tells an open start, and no match begins
where it says none does; the start tables miss no start of a whole-word term.
"""

from __future__ import annotations

from collections.abc import Iterable

from hypothesis import given, settings
from hypothesis import strategies as st

from holdback.detect import DetectorSet
from holdback.detect.base import Finding
from holdback.detect.dictionary import TermMatcher
from holdback.detect.incremental import StreamScanner
from holdback.detect.normalize import fold_case, normalize
from holdback.detect.people import PeopleMatcher, parse_people
from holdback.detect.team_patterns import parse_patterns
from holdback.detect.team_scan import PatternBundle
from holdback.detect.traits import for_detectors
from holdback.stream import Guard, forbidden_matcher

from ..stream.test_guard_incremental import ReferenceGuard, transcript
from .partial_pii import PIECES, chunked

PEOPLE = PeopleMatcher(
    parse_people("Sarah Jane,Connor,Sally\nTom,Baker\nJosé,García\nIbrahim,Okafor\nA,Ng\n")
)
PATTERNS = parse_patterns(
    {
        "pattern": [
            {"label": "account", "regex": r"ACC-\d{4}-\d{5}"},
            {
                "label": "matter",
                "regex": [r"MAT/\d{5}", r"M\d{6}"],
                "context": ["matter", "file no"],
                "context_window": 12,
            },
            {"label": "policy", "regex": r"\d{9}[\dX]", "validator": "mod11", "context": "pol"},
            {"label": "code", "regex": r"XY-[A-Z]{3}", "context": "code", "context_window": 8},
        ]
    }
)
FORBIDDEN = forbidden_matcher(["db01.corp.internal", "x"])
TEAM = DetectorSet.from_config({"client": ["Acme Holdings"]}, extra=[*PATTERNS.detectors(), PEOPLE])
SCREENING = DetectorSet([*TEAM.detectors, FORBIDDEN])
BUNDLED = DetectorSet(PATTERNS.detectors())
AS_ONE = DetectorSet([PATTERNS])  # every entry asked on every scan: the reference
CONTEXT = 80

TEAM_PIECES = [
    "Sarah Connor", "Ms Connor", "S. Connor", "Connor, Sarah", "CONNOR'S", "Tom Baker", "baker",
    "Mr Baker", "Okafor", "Dr. Oka", "José García", "Sally", "A Ng", "a ng", "ng", "it's",
    "ACC-2024-00817", "acc-2024-0081", "matter", "MAT/88213", "M123456", "file no", "pol",
    "0306406152", "ACC-", "MAT/", "XY-ABC", "xy-a", "code", "Conn", "the", " ", " ", ", ", ".",
    "\n", "padding", "x",
]  # fmt: skip

TEAM_TEXTS = st.lists(st.sampled_from(TEAM_PIECES), max_size=14).map("".join)
TEXTS = st.lists(st.one_of(st.sampled_from(TEAM_PIECES), PIECES), max_size=14).map("".join)


def test_the_regexes_are_one_pattern_detector_and_those_without_a_digit_another() -> None:
    bundles = PATTERNS.detectors()
    assert all(isinstance(d, PatternBundle) for d in bundles)
    assert [d.kinds for d in bundles] == [("account", "matter", "policy"), ("code",)]
    assert [len(d.members) for d in bundles if isinstance(d, PatternBundle)] == [4, 1]


def in_order(findings: Iterable[Finding]) -> list[Finding]:
    """Findings by place and kind (a `Finding` has no order of its own)."""
    return sorted(findings, key=lambda f: (f.start, f.end, f.kind, f.value))


@settings(max_examples=200, deadline=None)
@given(text=TEAM_TEXTS, data=st.data())
def test_the_bundles_find_what_the_entries_asked_on_every_scan_find(
    text: str, data: st.DataObject
) -> None:
    """Every prefix of a text, partial and final, from a start drawn once."""
    norm = normalize(text).text
    pos = data.draw(st.integers(0, len(norm)))
    for end in range(pos, len(norm) + 1):
        for final in (False, True):
            got = BUNDLED.scan(norm[:end], pos, final=final)
            want = AS_ONE.scan(norm[:end], pos, final=final)
            assert (in_order(got.findings), got.hold) == (in_order(want.findings), want.hold)
    assert in_order(BUNDLED.detect(text)) == in_order(AS_ONE.detect(text))


@settings(max_examples=300, deadline=None)
@given(text=TEXTS, data=st.data())
def test_the_scanner_answers_as_detector_set_scan(text: str, data: st.DataObject) -> None:
    """Scans of a growing text, each from anywhere up to the last hold, with context before."""
    scanner = StreamScanner(SCREENING)
    pos = end = 0
    while end < len(text):
        end = data.draw(st.integers(end + 1, len(text)))
        offset = max(0, pos - CONTEXT)
        window = text[offset:end]
        expected = SCREENING.scan(window, pos - offset, final=False)
        assert scanner.scan(window, pos - offset, offset) == (expected.findings, expected.hold)
        pos = offset + data.draw(st.integers(pos - offset, expected.hold))


@settings(max_examples=200, deadline=None)
@given(text=TEXTS, data=st.data())
def test_the_guard_equals_its_reference(text: str, data: st.DataObject) -> None:
    chunks = data.draw(chunked(text))
    for window in (256, 24):
        kwargs = {"detectors": TEAM, "forbidden": FORBIDDEN, "window": window}
        assert transcript(Guard(**kwargs), chunks) == transcript(ReferenceGuard(**kwargs), chunks)


@st.composite
def seen_so_far(draw: st.DrawFn) -> tuple[str, str]:
    """The canonical text of a stream so far, and the same folded."""
    norm = normalize(draw(TEXTS)).text
    seen = norm[: draw(st.integers(0, len(norm)))]
    return seen, fold_case(seen)


@given(seen_so_far())
def test_probe_is_open_at_and_no_match_begins_where_it_says_none(case: tuple[str, str]) -> None:
    seen, folded = case
    end = len(seen)
    for terms in (PEOPLE, FORBIDDEN):
        begins = {f.start for f in terms.found(seen, folded, 0, end)}
        for s in range(end):
            state = terms.probe(folded, s, end)
            assert (state is True) == terms.open_at(folded, s, end), (terms.kind, s)
            if state is None:
                assert s not in begins, (terms.kind, s)


@given(seen_so_far())
def test_the_tables_cover_every_open_start_and_every_match_of_a_term(
    case: tuple[str, str],
) -> None:
    seen, folded = case
    end = len(seen)
    tables = for_detectors(list(SCREENING.detectors))
    for j, d in enumerate(SCREENING.detectors):
        if not isinstance(d, TermMatcher):
            continue
        begins = {f.start for f in d.found(seen, folded, 0, end)}
        begins |= {s for s in range(end) if d.open_at(folded, s, end)}
        for s in begins:
            at = 1 if s else 0
            for key in {seen[s - at : s + 1], seen[s - at : s + 2]}:
                assert tables.info(key, at)[0] >> j & 1, (d.kind, s, key)
