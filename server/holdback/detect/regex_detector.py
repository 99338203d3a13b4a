"""A detector made of a regular expression: a pattern proposes, a validator decides.

Every pattern consumes the *longest* run that could hold a value of its kind and starts only
where such a run can start (its look-behind, one character, rejects the middle of a word or
number). The validator then picks the value out of the run, or rejects it. Keeping runs maximal
is what makes the streaming contract of `holdback.detect.base` hold: a start whose run could
still reach past the end of the text (the pattern matches, or partially matches, all the way to
the end) is reported as open, never cut short and accepted.

And every detector costs linear time. A pattern's quantifiers are possessive or bounded, so a
start costs at most its run; a validator looks at a bounded number of candidates per group of
its run. A detector whose runs hold many starts (digit groups: every group after a space may
begin a card number) is a *run* detector: its check reports the values of every start inside
the run at once, so the run is matched once rather than once per start.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator

import regex

from holdback.detect.base import Candidates, Finding

# A check takes the match and returns the value's span, or None to reject it; a check for a run
# that may hold several values (phone numbers side by side) returns a list of spans.
Check = Callable[["regex.Match[str]"], "tuple[int, int] | list[tuple[int, int]] | None"]


class RegexDetector:
    """A pattern, a validator, and what the streaming contract needs to find open starts.

    `alphabet` is a character class holding every character a match can contain; `starts` is a
    cheap pattern that matches wherever a match could begin. A start is *open* when the whole
    text from it to the end is a prefix of some match (`fullmatch(..., partial=True)`): that can
    only happen inside the trailing run of alphabet characters, which is all that is searched.

    `runs`: the check of a match reports the values of every start inside it too (every such
    start's match ends where the run does), so matching resumes after the run, not after its
    first character: a run of many groups costs one match instead of one per group. `hint`: a
    pattern for Python's `re` (much faster than `regex` at a plain search) that matches, empty,
    at every position where a match can begin, and maybe elsewhere: the pattern is then tried
    only there.

    Three declarations let a stream be screened incrementally (`holdback.detect.incremental`);
    tests hold every built-in detector to them. `needs`: characters of which every match holds
    one, unless it runs to the end of the text (with a `lookback`, every match); the gate, by
    default. `word`: characters that keep a start open, whatever they spell: a start (judged by
    its character and the one before it) followed by nothing but `word` characters up to the end
    is open. `short`: a start at a `word` character whose run of them ends, before the end, in
    fewer characters than this is not open.
    """

    __slots__ = (
        "_gate",
        "_head",
        "_tail",
        "alphabet",
        "check",
        "gate",
        "hint",
        "kind",
        "lookback",
        "needs",
        "once",
        "pattern",
        "runs",
        "short",
        "starts",
        "word",
    )

    def __init__(
        self,
        kind: str,
        pattern: regex.Pattern[str],
        check: Check,
        *,
        alphabet: str,
        starts: str,
        lookback: int = 0,
        gate: str | None = None,
        needs: str | None = None,
        word: str | None = None,
        short: int = 0,
        runs: bool = False,
        hint: str | None = None,
        once: regex.Pattern[str] | None = None,
    ) -> None:
        self.kind = kind
        self.pattern = pattern
        self.check = check
        # A run that may hold several values is matched from its own start, up to `lookback`
        # characters before `pos`, so a scan resumed inside it still finds the values after.
        self.lookback = lookback
        self.alphabet = alphabet
        self._tail = regex.compile(rf"(?r){alphabet}*")
        self._head = regex.compile(rf"{alphabet}*+")
        self.starts = regex.compile(starts)
        # A character that every match, and every open start, must contain: a text without
        # one is skipped at the cost of one quick search (most reply text has no digit).
        self.gate = gate
        self._gate = re.compile(gate) if gate else None
        self.needs = needs if needs is not None else gate
        self.word = word
        self.short = short
        self.runs = runs
        self.hint = re.compile(hint) if hint else None
        # For one-shot searches only (streaming asks `pattern` what is still open): the same
        # matches as `pattern`, but for those the check rejects for their length alone.
        self.once = once

    # A detector whose findings may wait on text still to come after them (a team pattern's
    # context words) says so, and `judge`s them: the scanner asks it only then.
    judged = False

    @property
    def kinds(self) -> tuple[str, ...]:
        return (self.kind,)

    def judge(
        self, text: str, findings: list[Finding], endpos: int, *, partial: bool
    ) -> tuple[list[Finding], int | None]:
        """The decided findings (in order) that stand, and the start of the first still
        undecided (None if none is): the hold, for a partial text."""
        return findings, None

    def open_start(self, text: str, pos: int, endpos: int) -> int:
        """The first start whose match could still run past `endpos`; `endpos` if none."""
        tail = self._tail.search(text, pos, endpos)
        run_start = tail.start() if tail is not None and tail.end() == endpos else endpos
        fullmatch = self.pattern.fullmatch
        for m in self.starts.finditer(text, run_start, endpos):
            if fullmatch(text, m.start(), endpos, partial=True) is not None:
                return m.start()
        return endpos

    def is_open(self, text: str, start: int, endpos: int) -> bool:
        """Whether `start` is an open start, for a start inside the trailing alphabet run."""
        if self.starts.match(text, start, endpos) is None:
            return False
        return self.pattern.fullmatch(text, start, endpos, partial=True) is not None

    def run_start(self, text: str, pos: int, endpos: int) -> int:
        """Where the run of alphabet characters that ends at `endpos` begins (not before `pos`)."""
        tail = self._tail.search(text, pos, endpos)
        return tail.start() if tail is not None and tail.end() == endpos else endpos

    def run_end(self, text: str, pos: int) -> int:
        """Where the run of alphabet characters that starts at `pos` ends (one-shot use)."""
        m = self._head.match(text, pos)
        return m.end() if m is not None else pos

    def candidates(self, text: str, pos: int, endpos: int, *, partial: bool) -> Candidates:
        if self._gate is not None and not self._gate.search(
            text, max(0, pos - self.lookback), endpos
        ):
            return Candidates([], endpos)
        if not partial:
            found = self._found(text, pos, endpos)
            if self.judged:
                found = self.judge(text, found, endpos, partial=False)[0]
            return Candidates(found, endpos)
        hold = self.open_start(text, pos, endpos)
        found = self.decided(text, pos, endpos, hold)
        if self.judged:
            found, waiting = self.judge(text, found, endpos, partial=True)
            hold = hold if waiting is None else waiting
        return Candidates(found, hold)

    def _found(self, text: str, pos: int, endpos: int) -> list[Finding]:
        """`decided(text, pos, endpos, endpos)` for a text that ends at `endpos`: matched
        with `once`, if given."""
        if self.once is None:
            return self.decided(text, pos, endpos, endpos)
        findings: list[Finding] = []
        for m in self._matching(self.once, text, max(0, pos - self.lookback), endpos):
            spans = self.check(m)
            if spans is None:
                continue
            for start, end in spans if isinstance(spans, list) else [spans]:
                if end > start and start >= pos:
                    findings.append(Finding(start, end, self.kind, text[start:end]))
        return findings

    def decided(
        self, text: str, pos: int, endpos: int, hold: int, *, since: int | None = None
    ) -> list[Finding]:
        """The findings that start in `pos..hold`, where no start is open.

        Matches are tried from `lookback` before `pos`, or from `since` if given (a caller that
        knows no match from before `since` reaches past `pos` saves the look-back).
        """
        findings: list[Finding] = []
        first = max(0, pos - self.lookback) if since is None else since
        for m in self.matches(text, first, endpos):
            if m.start() >= hold:
                break
            spans = self.check(m)
            if spans is None:
                continue
            for start, end in spans if isinstance(spans, list) else [spans]:
                if end > start and pos <= start < hold:
                    findings.append(Finding(start, end, self.kind, text[start:end]))
        return findings

    def matches(self, text: str, first: int, endpos: int) -> Iterator[regex.Match[str]]:
        """The pattern's matches that begin at `first` or later, in order: at every start, or
        for a run detector at every start not inside an earlier match."""
        return self._matching(self.pattern, text, first, endpos)

    def _matching(
        self, pattern: regex.Pattern[str], text: str, first: int, endpos: int
    ) -> Iterator[regex.Match[str]]:
        if self.hint is None:
            yield from pattern.finditer(text, first, endpos, overlapped=not self.runs)
            return
        match = pattern.match
        covered = first
        for h in self.hint.finditer(text, first, endpos):
            start = h.start()
            if start < covered:
                continue
            m = match(text, start, endpos)
            if m is not None:
                if self.runs:
                    covered = max(m.end(), start + 1)
                yield m


def whole(check: Callable[[str], bool]) -> Check:
    cached = functools.lru_cache(maxsize=4096)(check)

    def run(m: regex.Match[str]) -> tuple[int, int] | None:
        return m.span() if cached(m.group()) else None

    return run


def after_number(text: str, start: int) -> bool:
    """Whether `start` follows a digit and a dot, dash, slash or en dash (`3.4111…`,
    `10-219-09-9999`): the number goes on from the one before, as a decimal, a version or a
    range. After anything else the punctuation sets the value apart: a label (`No.`, `Tel.`),
    a list dash, a path."""
    return start >= 2 and text[start - 1] in ".-/\u2013" and "0" <= text[start - 2] <= "9"


def glued(m: regex.Match[str]) -> bool:
    """Whether the run's last group runs straight into a word (`0x`, `42@host`).

    Only ASCII letters and digits glue: a letter of another script, a markdown marker or an
    underscore after a number ends it (`4111 1111 1111 1111号`, `_219-09-9999_`)."""
    after = m.string[m.end() : m.end() + 1]
    return bool(after) and ((after.isascii() and after.isalnum()) or after == "@")


def in_context(check: Check, *, before: int, after: int) -> Check:
    """`check`, remembered: a check that reads at most `before` characters before its match
    and `after` after it answers alike for the same run in the same context, so a text read
    twice (as typed and as shown) or a run met again costs one check. Runs of up to 256
    characters are remembered, a few thousand at a time (the memory starts over when full)."""
    known: dict[tuple[str, str, str], tuple[tuple[int, int], ...] | None] = {}

    def run(m: regex.Match[str]) -> list[tuple[int, int]] | None:
        start, end = m.span()
        if end - start > 256:
            found = check(m)
            return found if found is None or isinstance(found, list) else [found]
        text = m.string
        key = (text[max(0, start - before) : start], m.group(), text[end : end + after])
        spans = known.get(key, _UNKNOWN)
        if spans is _UNKNOWN:
            found = check(m)
            listed = found if found is None or isinstance(found, list) else [found]
            spans = None if listed is None else tuple((a - start, b - start) for a, b in listed)
            if len(known) >= 1 << 13:
                known.clear()
            known[key] = spans
        return None if spans is None else [(a + start, b + start) for a, b in spans]

    return run


_UNKNOWN: tuple[tuple[int, int], ...] = ((-1, -1),)
