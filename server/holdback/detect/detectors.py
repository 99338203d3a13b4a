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
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from holdback.detect.base import Detector, Finding
from holdback.detect.dictionary import TermMatcher
from holdback.detect.normalize import normalize
from holdback.detect.patterns import builtin_detectors
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

    @classmethod
    def from_config(
        cls,
        dictionaries: Mapping[str, Iterable[str]] | None = None,
        *,
        phone_region: str | None = None,
        phone_regions: Sequence[str] = (),
        entropy_secrets: bool = False,
    ) -> DetectorSet:
        """The built-in detectors and one term list per kind. Phone numbers are read in
        `phone_region`, the default (else the first of `phone_regions`, else the US), and in
        every region of `phone_regions`; `entropy_secrets` adds the detector of long
        random-looking strings."""
        regions = list(phone_regions)
        default = phone_region or (regions[0] if regions else "US")
        detectors: list[Detector] = list(
            builtin_detectors(default, phone_regions=regions, entropy_secrets=entropy_secrets)
        )
        for kind, terms in (dictionaries or {}).items():
            detectors.append(TermMatcher(kind, terms))
        return cls(detectors, phone_regions=[default, *regions])

    def with_detectors(self, detectors: Sequence[Detector]) -> DetectorSet:
        """Other detectors, reading values as this set does."""
        return DetectorSet(detectors, phone_regions=self.phone_regions)

    def normalize(self, kind: str, value: str, *, phone_region: str | None = None) -> str:
        """A value's normalized form, the vault's key for it: a phone number is read in
        `phone_region` if given, else in this set's default region, then in its others."""
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
