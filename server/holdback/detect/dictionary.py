"""Custom dictionaries: an organisation's lists of sensitive or forbidden terms.

One Aho-Corasick automaton (pyahocorasick) per list, so matching costs the same for 100 terms
as for 100,000, and loading 100,000 terms takes a fraction of a second. Terms and text are
compared after evasion normalization and case folding, and a run of spaces (line breaks and
odd spaces read as spaces; soft hyphens read as nothing) matches the one space between a term's
words, so `Acme\n\nHoldings` is the term `Acme Holdings`. Sensitive lists match whole words only;
forbidden lists (`whole_words=False`) match anywhere, because a forbidden string must never
be shown even inside a longer word.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import ahocorasick

from holdback.detect.base import Candidates, Finding
from holdback.detect.normalize import fold_case, normalize
from holdback.tokens import is_word_char

_RUN = re.compile(r" {2,}")


def _squeezed(key: str) -> str:
    """A folded text with every run of spaces as one space."""
    return _RUN.sub(" ", key) if "  " in key else key


def normalize_term(term: str) -> str:
    """The form in which a term is stored and compared: normalized, folded, spaces collapsed."""
    return " ".join(fold_case(normalize(term).text).split())


class TermMatcher:
    """A detector for one list of terms; the list's name is the findings' kind."""

    def __init__(self, kind: str, terms: Iterable[str], *, whole_words: bool = True) -> None:
        self.kind = kind
        self.whole_words = whole_words
        self._automaton = ahocorasick.Automaton()
        longest = 0
        count = 0
        heads: set[str] = set()
        for term in terms:
            key = normalize_term(term)
            if not key:
                continue
            self._automaton.add_word(key, len(key))
            longest = max(longest, len(key))
            count += 1
            heads.add(key[:2])
        self.max_len = longest
        self.size = count
        # How the terms begin (folded): their first two characters, or the whole of a short one.
        self.heads = frozenset(heads)
        self.firsts = frozenset(h[0] for h in heads)
        if count:
            self._automaton.make_automaton()

    @property
    def kinds(self) -> tuple[str, ...]:
        return (self.kind,)

    def __len__(self) -> int:
        return self.size

    def _bounded(self, text: str, start: int, end: int) -> bool:
        if not self.whole_words:
            return True
        if start > 0 and is_word_char(text[start]) and is_word_char(text[start - 1]):
            return False
        return not (end < len(text) and is_word_char(text[end - 1]) and is_word_char(text[end]))

    def candidates(self, text: str, pos: int, endpos: int, *, partial: bool) -> Candidates:
        if not self.size:
            return Candidates([], endpos)
        folded = fold_case(text[:endpos])
        hold = self.open_tail(folded, pos, endpos) if partial else endpos
        return Candidates(self.found(text, folded, pos, endpos), hold)

    def found(self, text: str, folded: str, pos: int, endpos: int) -> list[Finding]:
        """Every match starting at or after `pos` (the longest at each start)."""
        longest_at: dict[int, int] = {}
        for start, end in self._matches(folded, pos, endpos):
            if start < pos or not self._bounded(folded, start, end):
                continue
            if end > longest_at.get(start, 0):
                longest_at[start] = end
        return [
            Finding(start, end, self.kind, text[start:end])
            for start, end in sorted(longest_at.items())
        ]

    def _matches(self, folded: str, pos: int, endpos: int) -> Iterable[tuple[int, int]]:
        """(start, end) of every term in `folded[pos:endpos]`, space runs read as one space."""
        if "  " not in folded[pos:endpos]:
            for last, length in self._automaton.iter(folded, pos, endpos):
                yield last + 1 - length, last + 1
            return
        # Squeeze the space runs, and keep where each squeezed character came from.
        where: list[int] = []
        out: list[str] = []
        for i in range(pos, endpos):
            ch = folded[i]
            if ch == " " and out and out[-1] == " ":
                continue
            out.append(ch)
            where.append(i)
        for last, length in self._automaton.iter("".join(out)):
            yield where[last + 1 - length], where[last] + 1

    def open_tail(self, folded: str, pos: int, endpos: int) -> int:
        """The earliest start whose text up to the end is a prefix of some term (or a term)."""
        # A term's text is at most `max_len` characters once its space runs are squeezed.
        first, kept = endpos, 0
        while first > pos and kept < self.max_len:
            first -= 1
            if not (folded[first] == " " and first + 1 < endpos and folded[first + 1] == " "):
                kept += 1
        for start in range(first, endpos):
            if self.open_at(folded, start, endpos):
                return start
        return endpos

    def open_at(self, folded: str, start: int, endpos: int) -> bool:
        inside_a_word = start > 0 and is_word_char(folded[start - 1])
        if self.whole_words and inside_a_word and is_word_char(folded[start]):
            return False
        return bool(self._automaton.match(_squeezed(folded[start:endpos])))

    def probe(self, folded: str, start: int, endpos: int) -> bool | None:
        """True if `open_at`; else False if a match may begin at `start` (`begins_term`,
        within word bounds), None if none can. One walk of the automaton answers both."""
        inside_a_word = start > 0 and is_word_char(folded[start - 1])
        if self.whole_words and inside_a_word and is_word_char(folded[start]):
            return None  # inside a word: neither open nor the start of a whole word
        key = folded[start:endpos]
        if "  " in key:
            key = _RUN.sub(" ", key)
        reach = self._automaton.longest_prefix(key)
        if reach == len(key):
            return True
        # A whole-word term ends where a word does: not inside the word the text begins with.
        if not reach or (self.whole_words and key[: reach + 1].isalnum()):
            return None
        exists = self._automaton.exists
        return False if any(exists(key[:k]) for k in range(1, reach + 1)) else None

    def begins_term(self, folded: str, start: int, endpos: int) -> bool:
        """Whether some term is a prefix of the text from `start` (ignoring word bounds)."""
        key = _squeezed(folded[start:endpos])
        reach = self._automaton.longest_prefix(key)
        return any(self._automaton.exists(key[:k]) for k in range(1, reach + 1))

    def is_prefix(self, folded: str, start: int, endpos: int) -> bool:
        """Whether the text from `start` is a prefix of some term, for a start already open."""
        return bool(self._automaton.match(_squeezed(folded[start:endpos])))
