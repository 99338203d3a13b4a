"""A set of detectors, run together, with overlaps resolved and offsets mapped to the original.

Overlapping findings resolve to one: the longest, then the most specific kind (a secret before a
card number before a phone number, and any built-in kind before a dictionary term).

`scan()` is the streaming primitive the output guard is built on. It normalizes the text,
asks every detector for its candidates, and returns the decided findings together with `hold`,
the first original offset whose fate is still open. A finding that straddles `hold` is not
decided either: `hold` moves back to its start, so every overlap cluster is decided whole.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from holdback.detect.base import Detector, Finding
from holdback.detect.dictionary import TermMatcher
from holdback.detect.normalize import normalize
from holdback.detect.patterns import builtin_detectors
from holdback.detect.regex_detector import RegexDetector
from holdback.detect.values import normalize_value

SPECIFICITY = ("secret", "jwt", "iban", "credit_card", "us_ssn", "email", "ip_address", "phone")


@dataclass(frozen=True, slots=True)
class Scan:
    findings: list[Finding]  # decided, not yet resolved; original offsets
    hold: int  # original offset: everything from here on is still open


class DetectorSet:
    """Every detector a deployment uses; `detect()` is the one-shot API."""

    def __init__(self, detectors: Sequence[Detector], *, phone_regions: Sequence[str] = ()) -> None:
        self.detectors = list(detectors)
        # How a phone number's value is read: the default region first, then the others.
        self.phone_regions: tuple[str, ...] = tuple(r.upper() for r in phone_regions) or ("US",)
        kinds: list[str] = [k for d in self.detectors for k in d.kinds]
        self._rank = {kind: i for i, kind in enumerate(SPECIFICITY)}
        for kind in kinds:
            self._rank.setdefault(kind, len(self._rank))
        # A detector whose values have a canonical key of their own (every form of a listed
        # person names one person) normalizes the values of its kind.
        self._canonical: dict[str, Callable[[str], str]] = {}
        for d in self.detectors:
            canonical = getattr(d, "canonical", None)
            if callable(canonical):
                for kind in d.kinds:
                    self._canonical.setdefault(kind, canonical)

    @classmethod
    def from_config(
        cls,
        dictionaries: Mapping[str, Iterable[str]] | None = None,
        *,
        phone_region: str | None = None,
        phone_regions: Sequence[str] = (),
        entropy_secrets: bool = False,
        extra: Sequence[Detector] = (),
    ) -> DetectorSet:
        """The built-in detectors and one term list per kind. Phone numbers are read in
        `phone_region`, the default (else the first of `phone_regions`, else the US), and in
        every region of `phone_regions`; `entropy_secrets` adds the detector of long
        random-looking strings; `extra` are a team's own detectors (patterns, people)."""
        regions = list(phone_regions)
        default = phone_region or (regions[0] if regions else "US")
        detectors: list[Detector] = list(
            builtin_detectors(default, phone_regions=regions, entropy_secrets=entropy_secrets)
        )
        for kind, terms in (dictionaries or {}).items():
            detectors.append(TermMatcher(kind, terms))
        detectors.extend(extra)
        return cls(detectors, phone_regions=[default, *regions])

    def with_detectors(self, detectors: Sequence[Detector]) -> DetectorSet:
        """Other detectors, reading values as this set does."""
        return DetectorSet(detectors, phone_regions=self.phone_regions)

    def normalize(self, kind: str, value: str, *, phone_region: str | None = None) -> str:
        """A value's normalized form, the vault's key for it: a phone number is read in
        `phone_region` if given, else in this set's default region, then in its others."""
        canonical = self._canonical.get(kind)
        if canonical is not None:
            return canonical(value)
        regions = self.phone_regions
        first = (phone_region or regions[0]).upper()
        return normalize_value(kind, value, phone_region=first, phone_regions=regions)

    @property
    def kinds(self) -> list[str]:
        return sorted({k for d in self.detectors for k in d.kinds}, key=self.rank)

    def rank(self, kind: str) -> int:
        return self._rank.get(kind, len(self._rank))

    def detect(self, text: str) -> list[Finding]:
        """Every sensitive value in a whole text, overlaps resolved, in order of position."""
        return self.resolve(self.scan(text).findings)

    def scan(self, text: str, start: int = 0, *, final: bool = True) -> Scan:
        """Decided findings starting at or after `start` (text before it is context only)."""
        norm = normalize(text)
        pos = _normalized_offset(norm.origin, start)
        endpos = len(norm.text)
        hold = endpos
        found: list[Finding] = []
        for detector in self.detectors:
            c = detector.candidates(norm.text, pos, endpos, partial=not final)
            found.extend(c.findings)
            hold = min(hold, c.hold)
        if not final:
            found, hold = settle(found, hold)
        if norm.text is text:
            return Scan(found, hold)
        mapped = []
        for f in found:
            s, e = norm.span_to_original(f.start, f.end)
            mapped.append(Finding(s, e, f.kind, text[s:e]))
        return Scan(mapped, norm.to_original(hold))

    def detect_around(self, text: str, spans: Iterable[tuple[int, int]]) -> list[Finding]:
        """The findings of `detect(text)` that overlap one of `spans`, looking at the text near
        them only.

        The rule that makes it exact: a pattern detector's matches hold only characters of its
        alphabet, so each lies in one run of them, and it is found by searching from the start
        of its run to its end (a check looks before and after its match, and it still can: the
        whole text is searched, between bounds; a pattern or a check looks at most
        `_LOOK_AHEAD` characters past a match, and the search runs that far past the run, so
        the text seems to end nowhere it does not). Each such detector searches the runs of its
        alphabet that meet the spans; any other detector, the whole text. The choice among
        overlapping findings depends only on the findings that overlap them, and on those that
        overlap these, and so on: the runs that meet each new finding are searched too, until
        none is new, and the findings found are resolved together as `detect` resolves them.
        """
        wanted = _merged(spans)
        if not wanted:
            return []
        norm = normalize(text)
        ntext, n = norm.text, len(norm.text)
        origin = norm.origin

        def to_normalized(start: int, end: int) -> tuple[int, int]:
            # Every normalized character of a finding that overlaps start..end, at least.
            if origin is None:
                return start, end
            lo, hi = bisect.bisect_left(origin, start), bisect.bisect_left(origin, end)
            return max(0, lo - 1), min(n, hi + 1)

        def to_original(f: Finding) -> Finding:
            if norm.text is text:
                return f
            s, e = norm.span_to_original(f.start, f.end)
            return Finding(s, e, f.kind, text[s:e])

        patterned = [d for d in self.detectors if isinstance(d, RegexDetector)]
        everywhere = [
            to_original(f)
            for d in self.detectors
            if not isinstance(d, RegexDetector)
            for f in d.candidates(ntext, 0, n, partial=False).findings
        ]
        searched: dict[int, list[tuple[int, int]]] = {id(d): [] for d in patterned}
        found: set[Finding] = set()
        pending = wanted
        while pending:
            new: set[Finding] = set()
            near = _merged(to_normalized(s, e) for s, e in pending)
            for d in patterned:
                done = searched[id(d)]
                if done == [(0, n)]:
                    continue
                if not done and len(near) * _PER_SEARCH >= n:
                    stretches = [(0, n)]  # as cheap to search it all at once
                else:
                    stretches = _unsearched(_runs_meeting(d, ntext, near, done), done, n)
                    if not done and sum(e - s + _PER_SEARCH for s, e in stretches) >= n:
                        stretches = [(0, n)]
                for start, end in stretches:
                    c = d.candidates(ntext, start, min(n, end + _LOOK_AHEAD), partial=False)
                    new.update(to_original(f) for f in c.findings if f.start < end)
                    done.append((start, end))
                done[:] = _merged(done)
            new.update(f for f in everywhere if _meets(f, pending))
            new -= found
            found |= new
            pending = _merged((f.start, f.end) for f in new)
        return [f for f in self.resolve(found) if _meets(f, wanted)]

    def resolve(self, findings: Iterable[Finding]) -> list[Finding]:
        """One finding per overlap: the longest, then the most specific, then the first."""
        ordered = sorted(findings, key=lambda f: (-(f.end - f.start), self.rank(f.kind), f.start))
        # The chosen findings never overlap, so by start they are also by end: a finding
        # overlaps one of them only if it overlaps the last that starts before it ends. A
        # bisection per finding keeps a text of many findings O(n log n).
        starts: list[int] = []
        chosen: list[Finding] = []
        for f in ordered:
            i = bisect.bisect_left(starts, f.end)
            if i and chosen[i - 1].end > f.start:
                continue
            starts.insert(i, f.start)
            chosen.insert(i, f)
        return chosen


# How far past the end of its match a pattern or a check may look (a look-ahead, `glued`).
_LOOK_AHEAD = 16
# Runs closer than this are searched as one: fewer, longer searches. A search costs about as
# much as reading `_PER_SEARCH` characters more.
_CLOSE = 256
_PER_SEARCH = 256


def _merged(spans: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for s, e in sorted(spans):
        if out and s <= out[-1][1]:
            if e > out[-1][1]:
                out[-1] = (out[-1][0], e)
        else:
            out.append((s, e))
    return out


def _meets(f: Finding, spans: list[tuple[int, int]]) -> bool:
    """Whether a finding overlaps one of `spans` (merged, in order)."""
    i = bisect.bisect_left(spans, (f.end, -1))
    return i > 0 and spans[i - 1][1] > f.start


def _runs_meeting(
    d: RegexDetector, text: str, spans: list[tuple[int, int]], done: list[tuple[int, int]]
) -> list[tuple[int, int]]:
    """Stretches of `text` that hold every run of `d`'s alphabet meeting one of `spans`
    (merged, in order) but for spans inside a stretch of `done`, each from just after a
    character outside the alphabet (or the start of the text) to just before one (or the
    end). Each character is read once."""
    out: list[tuple[int, int]] = []
    for s, e in spans:
        i = bisect.bisect_right(done, (s, len(text) + 1))
        if i and done[i - 1][1] >= e:
            continue
        if out and s <= out[-1][1] + _CLOSE:
            start = out[-1][0]
            end = max(out[-1][1], d.run_end(text, e) if e > out[-1][1] else out[-1][1])
            out[-1] = (start, end)
            continue
        start = d.run_start(text, out[-1][1] if out else 0, s)
        out.append((start, d.run_end(text, e)))
    return out


def _unsearched(
    stretches: list[tuple[int, int]], done: list[tuple[int, int]], n: int
) -> list[tuple[int, int]]:
    """The parts of `stretches` not in `done` (both as `_runs_meeting` makes them). A part
    starts after the end of a searched stretch, whose character is outside the alphabet, and
    ends before the character outside it that precedes the next one, so it is one of them
    too."""
    out: list[tuple[int, int]] = []
    for start, end in stretches:
        i = bisect.bisect_right(done, (start, n + 1))
        if i and done[i - 1][1] > start:
            start = done[i - 1][1] + 1
        while start < end:
            if i < len(done) and done[i][0] < end:
                if done[i][0] - 1 > start:
                    out.append((start, done[i][0] - 1))
                start = done[i][1] + 1
                i += 1
            else:
                out.append((start, end))
                break
    return out


def settle(found: list[Finding], hold: int) -> tuple[list[Finding], int]:
    """The decided findings of a partial scan, and its hold once no finding straddles it."""
    moved = True
    while moved:
        moved = False
        for f in found:
            if f.start < hold < f.end:
                hold = f.start
                moved = True
    return [f for f in found if f.end <= hold], hold


def _normalized_offset(origin: list[int] | None, original: int) -> int:
    """The first normalized character at or after an original offset."""
    if origin is None or original == 0:
        return original
    lo, hi = 0, len(origin)
    while lo < hi:
        mid = (lo + hi) // 2
        if origin[mid] < original:
            lo = mid + 1
        else:
            hi = mid
    return lo


_DEFAULT: DetectorSet | None = None


def default_detectors() -> DetectorSet:
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = DetectorSet.from_config()
    return _DEFAULT


def detect(text: str) -> list[Finding]:
    """Every sensitive value the built-in detectors find in a text (no dictionaries)."""
    return default_detectors().detect(text)
