"""Screening a stream incrementally: `DetectorSet.scan`'s answer, without redoing proven work.

The output guard scans its held text again after every chunk, and most of it was screened
before: a chunk usually adds a few letters to a held word. `StreamScanner.scan` answers exactly
what `DetectorSet.scan(text, start, final=False)` answers: the decided findings and the hold,
the first position where some detector is still open. It keeps what earlier scans of the same
stream proved, on these rules:

- A start that is not open stays closed as the text grows (a text that is not the prefix of a
  match never becomes one). So positions found closed for every detector are never asked again,
  and the hold is found by asking, from the front of what is left, until one position is open.
- A match can only begin where the detector's tables say it may (`holdback.detect.traits`):
  only those positions, with the detectors that may begin there, are kept as candidates.
- No start is open before a character out of its detector's alphabet. A start followed by
  nothing but the detector's `word` characters is open; one whose run of them ends too soon
  (`short`) is not. Those rules answer most questions without the pattern.
- A decided match begins at a candidate found closed, and holds one of its detector's `needs`
  characters: until both are in the held text, the detector has no findings to look for, and
  it looks from the first such candidate. A finding that starts at or after the hold does not
  change the outcome, so the findings are those that start before it.
- A detector that `judge`s its decided findings (a team pattern's context words) may leave one
  waiting on text still to come: the scan holds from its start, as `DetectorSet.scan` does.
- A term list is asked once per candidate, for both answers (`TermMatcher.probe`): whether
  the start is open, and if not, whether a term begins there; only then may it have findings.

Detectors other than patterns and term lists are asked on every scan, as `DetectorSet.scan` asks
them. A text that loses characters to normalization, or whose case folding depends on context
(a capital sigma), is left to `DetectorSet.scan`, and what was proved is forgotten, as it is
when the caller scans a final window itself (`forget()`). Positions kept are stream offsets.
"""

from __future__ import annotations

import weakref

import regex

from holdback.detect import traits
from holdback.detect.base import Finding
from holdback.detect.detectors import DetectorSet, settle
from holdback.detect.dictionary import TermMatcher
from holdback.detect.normalize import fold_case, normalize_in_place
from holdback.detect.regex_detector import RegexDetector

_SIGMA = "\u03a3"  # folds by its context (final sigma), so folded text is not per character


class _Plan:
    """What a scanner knows of its detectors that no stream changes: built once per set."""

    def __init__(self, detectors: DetectorSet) -> None:
        self.parts = list(detectors.detectors)
        self.tables = traits.for_detectors(self.parts)
        self.patterns: dict[int, RegexDetector] = {}
        self.terms: dict[int, TermMatcher] = {}
        self.others: list[int] = []
        self.short = [d.short if isinstance(d, RegexDetector) else 0 for d in self.parts]
        self.word_runs = [
            regex.compile(f"(?:{d.word})*+") if isinstance(d, RegexDetector) and d.word else None
            for d in self.parts
        ]
        self.pattern_bits = self.word_bits = self.needs_bits = self.term_bits = 0
        self.behind_bits = self.always = 0
        for j, d in enumerate(self.parts):
            bit = 1 << j
            if isinstance(d, RegexDetector):
                self.patterns[j] = d
                self.pattern_bits |= bit
                self.word_bits |= bit if d.word else 0
                self.needs_bits |= bit if d.needs is not None else 0
                self.behind_bits |= bit if d.lookback else 0
                self.always |= bit if d.needs is None else 0
            elif isinstance(d, TermMatcher) and traits.is_terms(d):
                self.terms[j] = d
                self.term_bits |= bit
            else:
                self.others.append(j)


# A set's plan lives as long as the set (a deployment's sets live as long as the process).
_PLANS: weakref.WeakKeyDictionary[DetectorSet, _Plan] = weakref.WeakKeyDictionary()


def _plan(detectors: DetectorSet) -> _Plan:
    plan = _PLANS.get(detectors)
    if plan is None:
        plan = _PLANS[detectors] = _Plan(detectors)
    return plan


class StreamScanner:
    """`DetectorSet.scan(text, start, final=False)` for the successive scans of one stream.

    Each scan is of `text` (released context, then held text from `start` on), whose first
    character is at stream offset `offset`. Scans move forward: neither the held text's start
    nor the text's end goes back, and the held text never starts past the last scan's hold;
    a scan that breaks these starts afresh.
    """

    def __init__(self, detectors: DetectorSet) -> None:
        self.detectors = detectors
        plan = _plan(detectors)
        self._parts = plan.parts
        self._tables = plan.tables
        self._patterns = plan.patterns
        self._terms = plan.terms
        self._others = plan.others
        self._short = plan.short
        self._word_runs = plan.word_runs
        self._pattern_bits, self._word_bits = plan.pattern_bits, plan.word_bits
        self._needs_bits, self._term_bits = plan.needs_bits, plan.term_bits
        self._behind_bits, self._always = plan.behind_bits, plan.always
        self.forget()

    def forget(self) -> None:
        """Drop what earlier scans proved; the next scan starts afresh."""
        n = len(self._parts)
        self._text: str | None = None
        self._plain = False  # the last scan's normalized text is its text
        self._offset = self._pos = self._end = self._held = 0
        self._starts: list[int] = []  # candidate positions, in order, from the held text on
        self._masks: list[int] = []  # for each: the detectors not yet ruled out there
        self._cut = [0] * n  # nothing before it is open: a character out of the alphabet
        self._word_from = [0] * n  # from here to the end: nothing but `word` characters
        self._needle = [-1] * n  # where the last `needs` character is
        self._dropped = [-1] * n  # the last position where the detector was ruled out
        self._first_drop = [-1] * n  # the first such in the held text, if still so
        self._due = 0  # may have findings: a `needs` character and a ruled-out start in reach
        self._folded: str | None = None
        # The first candidate and a `word` detector that kept it open, when that decided it.
        self._word_open: tuple[int, int] | None = None

    def scan(self, text: str, start: int, offset: int) -> tuple[list[Finding], int]:
        """The findings and the hold `DetectorSet.scan(text, start, final=False)` reports."""
        norm = self._normalized(text, offset)
        if norm is None or _SIGMA in norm:
            self.forget()
            whole = self.detectors.scan(text, start, final=False)
            return whole.findings, whole.hold
        pos, end = offset + start, offset + len(text)
        if self._text is None or not self._pos <= pos <= self._held or end < self._end:
            self.forget()
            self._end = pos
            self._word_from = [pos] * len(self._parts)
            self._read_context(norm, offset, pos)
        self._text, self._offset, self._pos, self._folded = norm, offset, pos, None
        self._plain = norm is text
        word = self._word_open
        if word is not None and word[0] == pos and not self._others:
            run = self._word_runs[word[1]]
            if run is not None and run.fullmatch(norm, self._end - offset) is not None:
                # The held text starts at a start that the `word` rule keeps open, and only
                # its word characters came: it is still open, and nothing starts before it.
                # The new text is read when a scan needs it.
                self._held = pos
                return [], start
        self._read(norm, offset, self._end, pos)
        self._end = end
        hold = self._first_open(norm, offset, pos, end)
        found: list[Finding] = []
        for j in self._others:
            c = self._parts[j].candidates(norm, pos - offset, end - offset, partial=True)
            found.extend(c.findings)
            hold = min(hold, c.hold + offset)
        if self._due | self._always:
            hold = self._decided(norm, offset, pos, hold, found)
        held = hold - offset
        if found:
            found, held = settle(found, held)
        self._held = held + offset
        if found and norm != text:  # values are reported as the original text spells them
            found = [Finding(f.start, f.end, f.kind, text[f.start : f.end]) for f in found]
        return found, held

    def _normalized(self, text: str, offset: int) -> str | None:
        """The normalized text, reusing the last scan's for the part both share; None if the
        text loses characters to normalization (offsets would no longer be the original's)."""
        old = self._text
        if old is not None:
            skip = offset - self._offset
            kept = len(old) - skip
            if skip >= 0 and 0 <= kept <= len(text):
                tail = text[kept:]
                if tail.isascii() and tail.isprintable():  # nothing in it changes
                    return text if self._plain else old[skip:] + tail
                norm = normalize_in_place(tail)
                return None if norm is None else old[skip:] + norm
        if text.isascii() and text.isprintable():
            return text
        return normalize_in_place(text)

    def _read_context(self, text: str, offset: int, pos: int) -> None:
        """Where the last `needs` characters of the released context are."""
        left = self._needs_bits
        for i in range(pos - offset - 1, -1, -1):
            needs = self._tables.char(text[i])[2] & left
            if needs:
                self._needles(needs, i + offset, pos)
                left &= ~needs
                if not left:
                    break

    def _read(self, text: str, offset: int, lo: int, pos: int) -> None:
        """Take in the new characters, from stream offset `lo` to the end of `text`: the
        candidate starts, where runs of each alphabet and of each `word` class end, and the
        last `needs` characters."""
        tables = self._tables
        near, info_of = tables.near.get, tables.info
        alpha_left, word_left, needs_left = self._pattern_bits, self._word_bits, self._needs_bits
        events: list[tuple[int, int, int, int]] = []  # where something ends or is needed
        starts: list[int] = []
        masks: list[int] = []
        for i in range(len(text) - 1, lo - offset - 1, -1):
            if i:
                key = text[i - 1 : i + 2]  # the last character has no character after it yet
                info = near(key) or info_of(key, 1)
            else:
                info = info_of(text[:2], 0)
            mask, alpha, word, needs = info
            if mask:
                starts.append(i + offset)
                masks.append(mask)
            broken = alpha_left & ~alpha
            ended = word_left & ~word
            needs &= needs_left
            if broken | ended | needs:
                events.append((i + offset, broken, ended, needs))
                alpha_left ^= broken
                word_left ^= ended
                needs_left ^= needs
        if starts:
            starts.reverse()
            masks.reverse()
            self._starts += starts
            self._masks += masks
        if not events:
            return
        live = -1  # the detectors with candidates, found when first needed
        word_from, cut = self._word_from, self._cut
        for at, broken, ended, needs in events:
            # Only a detector with candidates has use for where its run of alphabet ends.
            if broken and live < 0:
                live = 0
                for mask in self._masks:
                    live |= mask
            for j in _BITS[broken & live]:
                cut[j] = at + 1
            for j in _BITS[ended]:
                word_from[j] = at + 1
            if needs:
                self._needles(needs, at, pos)

    def _needles(self, mask: int, at: int, pos: int) -> None:
        """Note the last `needs` character of the detectors of `mask`."""
        dropped, needle = self._dropped, self._needle
        due = mask & self._behind_bits  # a run from before the held text may take it in
        for j in _BITS[mask]:
            needle[j] = at
            if dropped[j] >= pos:
                due |= 1 << j
        self._due |= due

    def _drop(self, mask: int, at: int, pos: int) -> None:
        """Note that the detectors of `mask` are ruled out at `at`, where a match may begin."""
        dropped, first, needle = self._dropped, self._first_drop, self._needle
        due = mask & self._term_bits  # a term can only be where a start was ruled out
        for j in _BITS[mask]:
            if dropped[j] < pos:
                first[j] = at
            dropped[j] = at
            if needle[j] >= pos:
                due |= 1 << j
        self._due |= due

    def _first_open(self, text: str, offset: int, pos: int, end: int) -> int:
        """The first candidate where some detector is open (`end` if none is). Candidates
        before it are emptied and forgotten: what is ruled out stays ruled out."""
        starts, masks = self._starts, self._masks
        words, word_from, short = self._word_bits, self._word_from, self._short
        char = self._tables.char
        rel_end = end - offset
        cut = self._cut
        for k, s in enumerate(starts):
            if s < pos:
                continue
            mask = masks[k]
            # First the `word` rule, which needs no pattern: where a word detector is open
            # by it, nothing else needs asking.
            for j in _BITS[mask & words]:
                if s >= word_from[j]:
                    del starts[:k], masks[:k]
                    masks[0] = mask
                    self._word_open = (s, j)
                    return s
                if word_from[j] - 1 - s < short[j] and char(text[s - offset])[1] >> j & 1:
                    cut[j] = max(cut[j], s + 1)  # its run of `word` characters ended too soon
            bare = 0  # the term lists that no term begins with at `s`
            for j in _BITS[mask]:
                if s < cut[j]:
                    mask ^= 1 << j
                    continue
                state = self._probe(j, text, s, offset, rel_end)
                if state:
                    if mask != masks[k]:
                        self._drop((masks[k] ^ mask) & ~bare, s, pos)
                    del starts[:k], masks[:k]
                    masks[0] = mask
                    self._word_open = None
                    return s
                if state is None:
                    bare |= 1 << j
                mask ^= 1 << j
            self._drop(masks[k] & ~bare if bare else masks[k], s, pos)
        starts.clear()
        masks.clear()
        self._word_open = None
        return end

    def _probe(self, j: int, text: str, s: int, offset: int, rel_end: int) -> bool | None:
        """Whether detector `j` is open at `s`; for a term list, if not, also whether a term
        begins there (False) or none does (None): once a start is no longer open, all the
        terms that begin there are in the text (`TermMatcher.probe`)."""
        d = self._patterns.get(j)
        if d is not None:
            return d.is_open(text, s - offset, rel_end)
        if self._folded is None:
            self._folded = fold_case(text)
        return self._terms[j].probe(self._folded, s - offset, rel_end)

    def _decided(self, text: str, offset: int, pos: int, hold: int, found: list[Finding]) -> int:
        """The findings of the detectors that may have some: they start before the hold (a
        finding that starts after it cannot change the scan, once settled). The hold is
        returned: earlier if a finding waits on text still to come (`judge`)."""
        rel_pos, rel_end, rel_hold = pos - offset, len(text), hold - offset
        patterns, dropped = self._patterns, self._dropped
        for j in _BITS[self._due | self._always]:
            bit = 1 << j
            d = patterns.get(j)
            if d is None:
                if dropped[j] < pos:
                    self._due &= ~bit
                    continue
                if self._folded is None:
                    self._folded = fold_case(text)
                terms = self._terms[j].found(text, self._folded, rel_pos, rel_end)
                found.extend(f for f in terms if f.start < rel_hold)
                continue
            needle = self._needle[j]
            new: list[Finding] | None = None
            if d.needs is None or (needle >= pos and dropped[j] >= pos):
                # A match begins where the detector was ruled out: from the first such on,
                # unless a match from before `pos` can reach past it (the look-back's case).
                run = self._run_before(j, d, text, offset, pos) if d.lookback else pos
                since = None if run < pos else max(pos, self._first_drop[j]) - offset
                if since is None or since < rel_hold:  # else no finding starts before the hold
                    new = d.decided(text, rel_pos, rel_end, rel_hold, since=since)
            elif d.lookback and max(offset, pos - d.lookback) <= needle < pos < hold:
                if self._run_before(j, d, text, offset, pos) <= needle:
                    new = d.decided(text, rel_pos, rel_end, rel_hold)
            elif needle < pos or not d.lookback:
                self._due &= ~bit
            elif self._run_before(j, d, text, offset, pos) < pos:
                # A run from before the held text reaches into it, and may hold values that
                # begin where no start is (`…2671/2672`): it is matched from its start.
                new = d.decided(text, rel_pos, rel_end, rel_hold)
            if new:
                if d.judged:
                    new, waiting = d.judge(text, new, rel_end, partial=True)
                    if waiting is not None and waiting < rel_hold:
                        rel_hold, hold = waiting, waiting + offset
                found.extend(new)
        return hold

    def _run_before(self, j: int, d: RegexDetector, text: str, offset: int, pos: int) -> int:
        """Where a match that begins before `pos` and reaches past it can begin, at the
        earliest (`pos` if none can): in the run of alphabet characters across `pos`, at a
        start. Only such a match can report values after `pos`."""
        bit = 1 << j
        char = self._tables.char
        rel_pos = pos - offset
        if rel_pos == 0 or rel_pos >= len(text) or not char(text[rel_pos])[0] & bit:
            return pos
        first = max(0, rel_pos - d.lookback)
        i = rel_pos
        while i > first and char(text[i - 1])[0] & bit:
            i -= 1
        m = d.starts.search(text, i, len(text)) if i < rel_pos else None
        return m.start() + offset if m is not None and m.start() < rel_pos else pos


class _Indices(dict[int, tuple[int, ...]]):
    """The detectors of a mask, by subscript (masks recur, so their lists are kept)."""

    def __missing__(self, mask: int) -> tuple[int, ...]:
        indices = tuple(j for j in range(mask.bit_length()) if mask >> j & 1)
        if len(self) < 1 << 16:
            self[mask] = indices
        return indices


_BITS = _Indices()
