"""A team's regexes as detectors the stream scanner reads with its own rules, not on every scan.

The rules it keeps:
- each regex declares what the scanner's tables need (`RegexDetector`): the alphabet of its
  matches and where one may begin, read from the regex as Python's parser reads it, and a
  digit it needs if every match holds one. A regex whose matches may hold any character (`.`,
  a negated class) makes no such detector: its entry is asked on every scan instead;
- a match stands apart from letters and digits on both sides (`wrapped`);
- the regexes are one detector (`PatternBundle`) that finds what each would find on its own,
  so fifty formats cost the scanner one bit of its masks, not fifty;
- a validated match of an entry with context words is judged by the entry
  (`PatternEntry.in_context`), and one still undecided is where the scan holds: the finding
  waits for the text after it, as when the entry is asked on every scan.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence

import regex

from holdback.detect.base import Finding
from holdback.detect.regex_detector import RegexDetector

EDGE = "A-Za-z0-9"  # a match stands apart from these on both sides
# Whether a context word is near the match at start..end of a text that ends at endpos
# (partial: more may come); None while text still to come decides.
InContext = Callable[[str, int, int, int, bool], "bool | None"]


def wrapped(source: str) -> str:
    """The regex as it is searched: apart from letters and digits on both sides."""
    return f"(?<![{EDGE}])(?:{source})(?![{EDGE}])"


_C = re._constants  # type: ignore[attr-defined]
_CATEGORIES = {_C.CATEGORY_DIGIT: r"\d", _C.CATEGORY_SPACE: r"\s", _C.CATEGORY_WORD: r"\w"}


def _alphabet(items: object) -> set[str] | None:
    """The characters (as class parts) a match of parsed items can hold; None if any."""
    out: set[str] = set()
    for op, arg in items:  # type: ignore[attr-defined]
        if op is _C.LITERAL:
            out.update(re.escape(c) for c in {chr(arg), chr(arg).lower(), chr(arg).upper()})
        elif op is _C.IN:
            for iop, iarg in arg:
                if iop is _C.LITERAL:
                    out.add(re.escape(chr(iarg)))
                elif iop is _C.RANGE:
                    out.add(f"{re.escape(chr(iarg[0]))}-{re.escape(chr(iarg[1]))}")
                elif iop is _C.CATEGORY and iarg in _CATEGORIES:
                    out.add(_CATEGORIES[iarg])
                else:
                    return None  # a negated class, or a negated category
        elif op in (_C.MAX_REPEAT, _C.MIN_REPEAT, _C.POSSESSIVE_REPEAT):
            inner = _alphabet(arg[2])
            if inner is None:
                return None
            out |= inner
        elif op is _C.SUBPATTERN:
            inner = _alphabet(arg[3])
            if inner is None:
                return None
            out |= inner
        elif op is _C.ATOMIC_GROUP:
            inner = _alphabet(arg)
            if inner is None:
                return None
            out |= inner
        elif op is _C.BRANCH:
            for branch in arg[1]:
                inner = _alphabet(branch)
                if inner is None:
                    return None
                out |= inner
        elif op in (_C.AT, _C.ASSERT, _C.ASSERT_NOT):
            continue  # holds no character of the match
        else:
            return None  # any character, a negated literal
    return out


def _needs_digit(items: object) -> bool:
    """Whether every match of parsed items holds an ASCII digit (most identifiers do)."""
    for op, arg in items:  # type: ignore[attr-defined]
        if op is _C.LITERAL and chr(arg).isdigit():
            return True
        if op is _C.IN and all(
            (iop is _C.CATEGORY and iarg is _C.CATEGORY_DIGIT)
            or (iop is _C.RANGE and "0" <= chr(iarg[0]) <= chr(iarg[1]) <= "9")
            or (iop is _C.LITERAL and chr(iarg).isdigit())
            for iop, iarg in arg
        ):
            return True
        if op in (_C.MAX_REPEAT, _C.POSSESSIVE_REPEAT) and arg[0] >= 1 and _needs_digit(arg[2]):
            return True
        if op is _C.SUBPATTERN and _needs_digit(arg[3]):
            return True
    return False


def regex_detector(
    kind: str, source: str, validator: Callable[[str], bool]
) -> RegexDetector | None:
    """An entry's regex as a pattern detector the stream scanner knows (its alphabet, where a
    match may begin, a digit it needs); None if its alphabet is every character (`.`, a
    negated class): the entry is then asked on every scan instead."""
    parsed = re._parser.parse(source)  # type: ignore[attr-defined]
    parts = _alphabet(parsed)
    if not parts:
        return None
    alphabet = "(?i:[" + "".join(sorted(parts)) + "])"
    flags = regex.IGNORECASE | regex.V0
    pattern = regex.compile(wrapped(source), flags)

    def check(m: regex.Match[str]) -> tuple[int, int] | None:
        return m.span() if validator(m.group()) else None

    return RegexDetector(
        kind,
        pattern,
        check,
        alphabet=alphabet,
        starts=rf"(?<![{EDGE}]){alphabet}",
        needs="[0-9]" if _needs_digit(parsed) else None,
    )


class PatternBundle(RegexDetector):
    """A team's regexes as one pattern detector, finding what they find as detectors of their
    own: one bit of the stream scanner's tables for all of them, where one each would make
    every mask of the scanner a long integer.

    Its alphabet is the union of theirs, a match of it begins where one of theirs may, and it
    needs a digit if each of them does. Which of them may begin at a character is known from
    the character (kept per character): only those are tried, there, as each would be. A
    validated match of an entry with context words is judged by its entry (`contexts`, by
    kind): it is a finding once a word is near, and the one still undecided is where the
    scan holds, so the finding waits for the text after it."""

    __slots__ = ("_by_first", "_contexts", "_kinds", "members")
    judged = True

    def __init__(self, members: Sequence[RegexDetector], contexts: Mapping[str, InContext]) -> None:
        inner = "".join(m.alphabet.removeprefix("(?i:[").removesuffix("])") for m in members)
        alphabet = f"(?i:[{inner}])"
        union = "|".join(m.pattern.pattern for m in members)
        super().__init__(
            members[0].kind,
            regex.compile(union, regex.IGNORECASE | regex.V0),
            _no_check,
            alphabet=alphabet,
            starts=rf"(?<![{EDGE}]){alphabet}",
            needs="[0-9]" if all(m.needs == "[0-9]" for m in members) else None,
        )
        self.members = tuple(members)
        self._contexts = dict(contexts)
        self._kinds = tuple(dict.fromkeys(m.kind for m in members))
        self._by_first: dict[str, tuple[RegexDetector, ...]] = {}

    @property
    def kinds(self) -> tuple[str, ...]:
        return self._kinds

    def _at(self, ch: str) -> tuple[RegexDetector, ...]:
        """The members a match of which may begin with `ch`."""
        known = self._by_first.get(ch)
        if known is None:
            known = tuple(m for m in self.members if m.pattern.match(ch, partial=True))
            if len(self._by_first) >= 1 << 12:
                self._by_first.clear()
            self._by_first[ch] = known
        return known

    def is_open(self, text: str, start: int, endpos: int) -> bool:
        if self.starts.match(text, start, endpos) is None:
            return False
        return any(
            m.pattern.fullmatch(text, start, endpos, partial=True) is not None
            for m in self._at(text[start])
        )

    def open_start(self, text: str, pos: int, endpos: int) -> int:
        for m in self.starts.finditer(text, self.run_start(text, pos, endpos), endpos):
            if self.is_open(text, m.start(), endpos):
                return m.start()
        return endpos

    def decided(
        self, text: str, pos: int, endpos: int, hold: int, *, since: int | None = None
    ) -> list[Finding]:
        findings: list[Finding] = []
        first = pos if since is None else since
        for at in self.starts.finditer(text, first, min(hold, endpos)):
            s = at.start()
            for d in self._at(text[s]):
                m = d.pattern.match(text, s, endpos)
                spans = None if m is None else d.check(m)
                if spans is None:
                    continue
                for start, end in spans if isinstance(spans, list) else [spans]:
                    if end > start and pos <= start < hold:
                        findings.append(Finding(start, end, d.kind, text[start:end]))
        return findings

    def judge(
        self, text: str, findings: list[Finding], endpos: int, *, partial: bool
    ) -> tuple[list[Finding], int | None]:
        kept: list[Finding] = []
        for f in findings:
            in_context = self._contexts.get(f.kind)
            verdict = (
                True if in_context is None else in_context(text, f.start, f.end, endpos, partial)
            )
            if verdict is None:
                return kept, f.start
            if verdict:
                kept.append(f)
        return kept, None


def _no_check(m: regex.Match[str]) -> None:
    return None  # a bundle's matches are its members', checked by each
