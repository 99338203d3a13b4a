"""A team's own identifier formats (`--patterns FILE`), as detectors that keep the stream contract.

The rules it keeps:
- every regex is refused at load unless its shape is linear (`moderation.safe_regex.check_shape`:
  no nested or alternated repetition, no backreferences), it has a length bound of at most
  `MAX_MATCH` characters (no `+`, `*` or `{n,}`), it cannot match the empty text, and it has no
  lookbehind (context before a value is what `context` words are for). Each refusal names the
  entry, the regex and the reason;
- a match stands apart from letters and digits on both sides (`ACC-2024-00817` is not found in
  `XACC-2024-008171`), and is compared case-insensitively, in the canonical text both
  directions read (`normalize`);
- a start is decided from the text at most `MAX_CONTEXT` characters before it (the guard keeps
  80 characters of released text) and from the text after it: it is open while the text from
  it is the prefix of a match, or while the match's context words are not found and fewer than
  `context_window` characters have come after the match. So streamed screening equals one-shot
  screening for every split, as for the built-in detectors. Each regex is a detector the
  stream scanner reads with its own tables (`team_scan`); `PatternSet` is the same entries as
  one detector asked on every scan (one search of the last `MAX_MATCH` characters for all
  entries at once), for a regex of any character and as the reference they are tested against;
- an entry's `validator` (`luhn`, `mod97`, `mod11`, `none`) decides a match from its letters
  and digits; its `match` and `no_match` examples are checked when the file is loaded, and a
  failing one refuses the file. Errors name the entry and the example by position, never by
  its text: a team may have pasted a real identifier there.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import regex

from holdback.detect.base import Candidates, Detector, Finding
from holdback.detect.dictionary import normalize_term
from holdback.detect.normalize import fold_case, normalize
from holdback.detect.regex_detector import RegexDetector
from holdback.detect.team_scan import InContext, PatternBundle, regex_detector, wrapped
from holdback.detect.validators import digits_of, luhn_ok
from holdback.errors import ConfigurationError
from holdback.moderation.safe_regex import UnsafePatternError, check_shape
from holdback.tokens import kind_label

MAX_MATCH = 128  # the longest match a regex may have: an open start is held at most this long
MAX_CONTEXT = 60  # context words are looked for at most this far from a match
MAX_ENTRIES = 500
RESERVED_KINDS = frozenset(
    {"secret", "jwt", "iban", "credit_card", "us_ssn", "email", "ip_address", "phone"}
    | {"person", "literal", "token", "forbidden"}
)
_LABEL = re.compile(r"[a-z][a-z0-9_]{0,31}")
_MAXREPEAT = int(re._constants.MAXREPEAT)  # type: ignore[attr-defined]


class PatternFileError(ConfigurationError):
    """A patterns file cannot be used: it names the entry and the reason."""


def mod97_ok(text: str) -> bool:
    """ISO 7064 MOD 97-10 over the letters and digits (letters as 10..35) leaves 1: as written,
    or with the first four characters moved to the end, as IBANs and RF references read."""
    chars = "".join(c for c in text.upper() if c.isascii() and c.isalnum())
    if len(chars) < 5:
        return False
    return any(
        int("".join(str(int(c, 36)) for c in form)) % 97 == 1
        for form in (chars, chars[4:] + chars[:4])
    )


def mod11_ok(text: str) -> bool:
    """The weighted mod-11 check (ISBN-10, many account numbers): the digits weighted 1, 2, 3,
    ... from the right sum to a multiple of 11; a final `X` is a check digit of 10."""
    chars = [c for c in text.upper() if c.isascii() and (c.isdigit() or c == "X")]
    if len(chars) < 2 or "X" in chars[:-1]:
        return False
    total = sum((10 if c == "X" else int(c)) * w for w, c in enumerate(reversed(chars), 1))
    return total % 11 == 0


VALIDATORS: dict[str, Callable[[str], bool]] = {
    "none": lambda _: True,
    "luhn": lambda text: len(digits_of(text)) >= 2 and luhn_ok(digits_of(text)),
    "mod97": mod97_ok,
    "mod11": mod11_ok,
}


@dataclass(frozen=True, slots=True)
class PatternEntry:
    """One entry of a patterns file, compiled."""

    kind: str  # the label, lower-case: `account` gives `<ACCOUNT_1>`
    regexes: tuple[regex.Pattern[str], ...]
    max_len: int
    validator: Callable[[str], bool]
    context: regex.Pattern[str] | None  # whole context words, folded
    window: int
    sources: tuple[str, ...] = ()

    def verdict(self, text: str, start: int, end: int, endpos: int, partial: bool) -> bool | None:
        """Whether the match at start..end is a finding; None while text still to come decides."""
        if not self.validator(text[start:end]):
            return False
        return self.in_context(text, start, end, endpos, partial)

    def in_context(
        self, text: str, start: int, end: int, endpos: int, partial: bool
    ) -> bool | None:
        """Whether a context word is near the match at start..end (True without words); None
        while text still to come decides. A whole text is read to its end, whatever `endpos`
        (a search near some spans ends a little past them: `DetectorSet.detect_around`)."""
        if self.context is None:
            return True
        if not partial:
            endpos = len(text)
        before = fold_case(text[max(0, start - self.window) : start])
        if self.context.search(before):
            return True
        # A word after the match ends within the window; whether it ends there is told by the
        # character after it, so the window is decided once that character has come.
        limit = end + self.window
        folded = fold_case(text[end : min(endpos, limit + 1)])
        for m in self.context.finditer(folded):
            if m.end() > self.window:
                break
            if not (partial and m.end() == len(folded) and endpos <= limit):
                return True
        if partial and endpos <= limit:
            return None
        return False


def _width(source: str) -> tuple[int, int]:
    """The shortest and longest match of a regex, as Python's own parser reads it."""
    try:
        low, high = re._parser.parse(source).getwidth()  # type: ignore[attr-defined]
    except (re.error, OverflowError, RecursionError) as exc:
        raise UnsafePatternError(f"it does not parse ({type(exc).__name__})") from None
    return int(low), int(high)


def compile_regex(source: str) -> tuple[regex.Pattern[str], int]:
    """The regex, wrapped to stand apart from letters and digits, and its longest match; refused
    with the reason if it could backtrack, has no length bound, or looks behind."""
    check_shape(source)
    if "(?<=" in source or "(?<!" in source:
        raise UnsafePatternError(
            "lookbehinds are not allowed: use context words for what must come before"
        )
    low, high = _width(source)
    if high >= _MAXREPEAT:
        raise UnsafePatternError(
            "it has no length bound (+, * or {n,}): write a counted repeat such as \\d{4,12}"
        )
    if high > MAX_MATCH:
        raise UnsafePatternError(f"it could match {high} characters; at most {MAX_MATCH}")
    if low == 0:
        raise UnsafePatternError("it can match the empty text")
    try:
        compiled = regex.compile(wrapped(source), regex.IGNORECASE | regex.V0)
    except regex.error as exc:
        raise UnsafePatternError(f"it does not compile ({exc})") from None
    return compiled, high


def _as_list(value: object, entry: str, field: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    raise PatternFileError(f"{entry}: {field} must be a string or a list of strings")


def entry_from(raw: Mapping[str, object], where: str) -> tuple[PatternEntry, list[str], list[str]]:
    """One entry, compiled, with its `match` and `no_match` examples (not yet checked)."""
    known = {"label", "regex", "context", "context_window", "validator", "match", "no_match"}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise PatternFileError(f"{where}: unknown field {unknown[0]!r}")
    label = raw.get("label")
    if not isinstance(label, str) or not label.strip():
        raise PatternFileError(f"{where}: a label is required (it names the token, <ACCOUNT_1>)")
    kind = label.strip().lower()
    if not _LABEL.fullmatch(kind):
        raise PatternFileError(
            f"{where}: label {label!r} makes no token kind: a letter, then letters, digits, _"
        )
    kind_label(kind)
    if kind in RESERVED_KINDS:
        raise PatternFileError(f"{where}: label {label!r} is a built-in kind")
    where = f"{where} ({kind})"
    sources = _as_list(raw.get("regex"), where, "regex")
    if not sources:
        raise PatternFileError(f"{where}: at least one regex is required")
    regexes: list[regex.Pattern[str]] = []
    longest = 0
    for i, source in enumerate(sources, 1):
        try:
            compiled, high = compile_regex(source)
        except UnsafePatternError as exc:
            raise PatternFileError(f"{where}: regex {i} is refused: {exc}") from None
        regexes.append(compiled)
        longest = max(longest, high)
    validator_name = raw.get("validator", "none")
    if not isinstance(validator_name, str) or validator_name not in VALIDATORS:
        raise PatternFileError(f"{where}: validator must be one of {', '.join(VALIDATORS)}")
    words = [normalize_term(w) for w in _as_list(raw.get("context"), where, "context")]
    words = [w for w in words if w]
    window = raw.get("context_window", 40)
    if not isinstance(window, int) or isinstance(window, bool) or not 1 <= window <= MAX_CONTEXT:
        raise PatternFileError(f"{where}: context_window must be 1..{MAX_CONTEXT} characters")
    context = None
    if words:
        alternatives = "|".join(regex.escape(w) for w in sorted(set(words), key=len, reverse=True))
        context = regex.compile(rf"(?<!\w)(?:{alternatives})(?!\w)")
    entry = PatternEntry(
        kind,
        tuple(regexes),
        longest,
        VALIDATORS[validator_name],
        context,
        int(window),
        tuple(sources),
    )
    return (
        entry,
        _as_list(raw.get("match"), where, "match"),
        _as_list(raw.get("no_match"), where, "no_match"),
    )


class PatternSet:
    """Every entry of a patterns file as one detector (one search finds what is still open)."""

    def __init__(self, entries: Sequence[PatternEntry]) -> None:
        self.entries = list(entries)
        self.max_len = max((e.max_len for e in self.entries), default=0)
        self._kinds = tuple(dict.fromkeys(e.kind for e in self.entries))
        union = "|".join(rx.pattern for e in self.entries for rx in e.regexes)
        flags = regex.IGNORECASE | regex.V0
        self._any = regex.compile(union or "(?!)", flags)
        # A start is open while the text from it is the prefix of a match: a partial search
        # for a match that runs to the end finds the first such start.
        self._open = regex.compile(rf"(?:{union or '(?!)'})\Z", flags)

    @property
    def kinds(self) -> tuple[str, ...]:
        return self._kinds

    def __len__(self) -> int:
        return len(self.entries)

    def detectors(self) -> list[Detector]:
        """The entries as the stream scanner reads them best: their regexes as one pattern
        detector (`PatternBundle`; those that need a digit apart, which the scanner skips
        where no digit is held), judged by each entry's context words; an entry with a regex
        of any character stays in one set, asked on every scan. Both find exactly what this
        set finds."""
        members: list[RegexDetector] = []
        contexts: dict[str, InContext] = {}
        rest: list[PatternEntry] = []
        for entry in self.entries:
            made = [regex_detector(entry.kind, src, entry.validator) for src in entry.sources]
            if any(d is None for d in made):
                rest.append(entry)
                continue
            members.extend(d for d in made if d is not None)
            if entry.context is not None:
                contexts[entry.kind] = entry.in_context
        # Those that need a digit apart: the scanner skips them where no digit is held.
        digits = [d for d in members if d.needs is not None]
        others = [d for d in members if d.needs is None]
        bundles: list[Detector] = [PatternBundle(ds, contexts) for ds in (digits, others) if ds]
        return [*bundles, PatternSet(rest)] if rest else bundles

    def candidates(self, text: str, pos: int, endpos: int, *, partial: bool) -> Candidates:
        hold = endpos
        if not self.entries:
            return Candidates([], hold)
        if partial:
            lo = max(pos, endpos - self.max_len)
            m = self._open.search(text, lo, endpos, partial=True)
            if m is not None:
                hold = m.start()
        if self._any.search(text, pos, endpos) is None:
            return Candidates([], hold)
        found: list[Finding] = []
        for entry in self.entries:
            for rx in entry.regexes:
                for m in rx.finditer(text, pos, endpos, overlapped=True):
                    start, end = m.span()
                    if start >= hold:
                        break
                    verdict = entry.verdict(text, start, end, endpos, partial)
                    if verdict is None:
                        hold = start
                        break
                    if verdict:
                        found.append(Finding(start, end, entry.kind, text[start:end]))
        return Candidates([f for f in found if f.start < hold], hold)

    def find(self, text: str, kind: str) -> list[Finding]:
        """One-shot findings of one entry in a text (normalized first), for the examples."""
        norm = normalize(text).text
        return [
            f for f in self.candidates(norm, 0, len(norm), partial=False).findings if f.kind == kind
        ]


def check_examples(
    patterns: PatternSet, examples: Iterable[tuple[str, str, list[str], list[str]]]
) -> None:
    """Refuse the file if an entry misses one of its `match` examples or finds a `no_match`."""
    for where, kind, must, must_not in examples:
        for i, text in enumerate(must, 1):
            if not patterns.find(text, kind):
                raise PatternFileError(f"{where}: example match[{i}] is not found")
        for i, text in enumerate(must_not, 1):
            if patterns.find(text, kind):
                raise PatternFileError(f"{where}: example no_match[{i}] is found")


def parse_patterns(data: Mapping[str, object], name: str = "patterns") -> PatternSet:
    """A patterns document (`[[pattern]]` tables) as a detector, examples checked."""
    raw_entries = data.get("pattern", [])
    unknown = sorted(set(data) - {"pattern"})
    if unknown:
        raise PatternFileError(f"{name}: unknown table {unknown[0]!r} (entries are [[pattern]])")
    if not isinstance(raw_entries, list) or not all(isinstance(e, dict) for e in raw_entries):
        raise PatternFileError(f"{name}: entries are [[pattern]] tables")
    if len(raw_entries) > MAX_ENTRIES:
        raise PatternFileError(f"{name}: at most {MAX_ENTRIES} entries")
    entries: list[PatternEntry] = []
    examples: list[tuple[str, str, list[str], list[str]]] = []
    seen: set[str] = set()
    for i, raw in enumerate(raw_entries, 1):
        where = f"{name}: entry {i}"
        entry, must, must_not = entry_from(raw, where)
        if entry.kind in seen:
            raise PatternFileError(f"{where}: label {entry.kind!r} is used twice")
        seen.add(entry.kind)
        entries.append(entry)
        examples.append((f"{where} ({entry.kind})", entry.kind, must, must_not))
    patterns = PatternSet(entries)
    # Each entry's examples are checked against that entry alone.
    for (where, kind, must, must_not), entry in zip(examples, entries, strict=True):
        check_examples(PatternSet([entry]), [(where, kind, must, must_not)])
    return patterns


def load_patterns(path: Path) -> PatternSet:
    """A patterns file (TOML), refused with the entry and the reason if any part is unusable."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise PatternFileError(
            f"cannot read patterns file {path}: {exc.strerror or type(exc).__name__}"
        ) from None
    try:
        data = tomllib.loads(raw.decode("utf-8-sig"))
    except UnicodeDecodeError:
        raise PatternFileError(f"patterns file {path} is not UTF-8") from None
    except tomllib.TOMLDecodeError as exc:
        raise PatternFileError(f"patterns file {path} is not TOML ({exc})") from None
    return parse_patterns(data, f"patterns file {path}")
