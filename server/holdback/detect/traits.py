"""What a character can mean to each detector of a set, in bit masks, for incremental scans.

Bit `j` of a mask stands for detector `j` of the set. For a character, among its neighbours:

- whether a match may begin there, for a pattern detector (its `starts` matches and so could
  the pattern, judged from those few characters alone: more text can only rule a start out)
  or for a term list (a term begins with the character, and with the next one once it has come;
  for a list of whole words, not inside a word);
- whether it is in the detector's alphabet, in its `word` class, in its `needs` class.

The answers depend on the detectors' declarations only, so the tables are shared by every
scanner of the same detectors, and filled as text is met: a reply pays only for what no earlier
reply has shown. Their size is bounded whatever the text.
"""

from __future__ import annotations

import re

import regex

from holdback.detect.base import Detector
from holdback.detect.dictionary import TermMatcher
from holdback.detect.normalize import fold_case
from holdback.detect.regex_detector import RegexDetector
from holdback.tokens import is_word_char

_LIMIT = 1 << 15  # entries a table keeps; a full table starts over, so it follows the traffic
_SHARED_LIMIT = 16  # detector sets whose tables are kept (a deployment has one or two)

Info = tuple[int, int, int, int]  # may begin, alphabet, `word` class, `needs` class
Chars = tuple[int, int, int]  # alphabet, `word` class, `needs` class


def is_terms(d: Detector) -> bool:
    """A term list with terms in it: its matches begin where a term does."""
    return isinstance(d, TermMatcher) and d.size > 0


def _signature(d: Detector) -> tuple[object, ...]:
    if isinstance(d, RegexDetector):
        pattern = (d.pattern.pattern, d.pattern.flags, d.starts.pattern)
        return ("pattern", *pattern, d.alphabet, d.word, d.needs)
    if isinstance(d, TermMatcher) and d.size:
        return ("terms", d.heads, d.whole_words)
    return ("other",)


def _term_may_begin(
    key: str, at: int, heads: frozenset[str], firsts: frozenset[str], whole_words: bool
) -> bool:
    """Whether a term may begin at `key[at]`, judged from it and the character after it, and
    for a list of whole words from the one before: not inside a word.

    Terms are compared folded; a character whose fold is not one character is let through.
    """
    low = key[at].lower()
    if len(low) != 1:
        return True
    if whole_words and at and is_word_char(low) and is_word_char(fold_case(key[at - 1])):
        return False
    after = key[at + 1 : at + 2].lower()
    if len(after) != 1:
        return low in firsts
    return low in heads or low + after in heads


class Traits:
    """The tables of one set of detectors (`for_detectors` shares them)."""

    def __init__(self, detectors: list[Detector]) -> None:
        self._patterns: list[tuple[int, regex.Pattern[str], regex.Pattern[str]]] = []
        self._terms: list[tuple[int, frozenset[str], frozenset[str], bool]] = []
        self._classes: list[tuple[int, regex.Pattern[str], regex.Pattern[str] | None]] = []
        self._needs: list[tuple[int, re.Pattern[str]]] = []
        for j, d in enumerate(detectors):
            bit = 1 << j
            if isinstance(d, RegexDetector):
                self._patterns.append((bit, d.starts, d.pattern))
                word = regex.compile(d.word) if d.word else None
                self._classes.append((bit, regex.compile(d.alphabet), word))
                if d.needs is not None:
                    self._needs.append((bit, re.compile(d.needs)))
            elif isinstance(d, TermMatcher) and d.size:
                self._terms.append((bit, d.heads, d.firsts, d.whole_words))
        # Keyed by a character with the one before it and, once it has come, the one after.
        self.near: dict[str, Info] = {}
        self.chars: dict[str, Chars] = {}

    def info(self, key: str, at: int) -> Info:
        """What `key[at]` means among the characters of `key` (kept when `at` is 1)."""
        mask = 0
        for bit, starts, pattern in self._patterns:
            if (
                starts.match(key, at, partial=True) is not None
                and pattern.match(key, at, partial=True) is not None
            ):
                mask |= bit
        for bit, heads, firsts, whole_words in self._terms:
            if _term_may_begin(key, at, heads, firsts, whole_words):
                mask |= bit
        info = (mask, *self.char(key[at]))
        if at == 1:
            if len(self.near) >= _LIMIT:
                self.near.clear()
            self.near[key] = info
        return info

    def char(self, ch: str) -> Chars:
        """The detectors whose alphabet, whose `word` class, and whose `needs` hold `ch`."""
        known = self.chars.get(ch)
        if known is not None:
            return known
        alpha = word = needs = 0
        for bit, alphabet, word_class in self._classes:
            if alphabet.fullmatch(ch) is not None:
                alpha |= bit
            if word_class is not None and word_class.fullmatch(ch) is not None:
                word |= bit
        for bit, pattern in self._needs:
            if pattern.fullmatch(ch) is not None:
                needs |= bit
        chars = (alpha, word, needs)
        if len(self.chars) >= _LIMIT:
            self.chars.clear()
        self.chars[ch] = chars
        return chars


_SHARED: dict[tuple[tuple[object, ...], ...], Traits] = {}


def for_detectors(detectors: list[Detector]) -> Traits:
    """The tables of these detectors, shared with every set that declares the same."""
    key = tuple(_signature(d) for d in detectors)
    traits = _SHARED.get(key)
    if traits is None:
        if len(_SHARED) >= _SHARED_LIMIT:
            _SHARED.clear()
        traits = _SHARED[key] = Traits(detectors)
    return traits
