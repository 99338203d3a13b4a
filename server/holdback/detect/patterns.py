"""The built-in detectors of personal data: emails, card, bank and phone numbers, addresses.

Each is a `RegexDetector` (`holdback.detect.regex_detector`): a pattern that proposes maximal
runs, and a validator that decides. Secrets and token spellings are in `holdback.detect.secrets`.

The rule they keep: a value is found however it is dressed (next to punctuation, markdown
markers, a letter of another script, a label such as `Tel.`, `No.` or `#`), and the validator
alone decides whether it is one, in time linear in the text: no candidate is longer than a value
of its kind can be, and every look-behind is one character.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import re
from collections.abc import Callable, Iterator, Sequence

import regex

from holdback.detect import validators as v
from holdback.detect.regex_detector import (
    Check,
    RegexDetector,
    after_number,
    glued,
    in_context,
    whole,
)
from holdback.detect.secrets import (
    JWT,
    PRIVATE_KEY,
    SECRET_KEYS,
    URL_PASSWORD,
    entropy_detector,
)

# -- email ---------------------------------------------------------------------------------

_FILE_EXTENSIONS = frozenset(
    [
        "png",
        "jpg",
        "jpeg",
        "gif",
        "svg",
        "webp",
        "ico",
        "bmp",
        "tif",
        "tiff",
        "heic",
        "pdf",
        "js",
        "ts",
        "css",
        "map",
        "json",
        "html",
    ]
)


# `scheme://user:password@host`: what follows the colon is a password, not an email's local part.
_USERINFO = regex.compile(r"://[^\s:/@]{1,64}:\Z")


# Local parts and domain labels are written in one kind of script: one that separates words
# with spaces (Latin and its accented letters, `ännä@bücher.example`; Cyrillic, `иван@пример.рф`;
# Greek, Arabic, ...), or one that does not (Chinese, Japanese, Korean, Thai, ...). Text in the
# second kind runs straight into an address, so a change between the two marks where an
# address begins or ends: `邮箱ann@example.org` is `ann@example.org`, and so is
# `ann@example.org请回复`. (Cyrillic and Greek look-alikes that normalization folds to Latin
# letters stay in their kind.)
_SPACELESS_SCRIPTS = (
    r"\p{Han}\p{Hiragana}\p{Katakana}\p{Hangul}\p{Thai}\p{Lao}\p{Khmer}\p{Myanmar}"
    r"\p{Bopomofo}\p{Yi}\p{Tibetan}"
)
_WORDY = rf"[^\P{{L}}{_SPACELESS_SCRIPTS}0-9]|[0-9]"  # a letter or digit of the first kind
_SPACELESS = rf"[{_SPACELESS_SCRIPTS}]"  # a letter of the second kind
_PUNCT = r"._%+\-"
_LOCAL_WORDY = rf"(?:{_WORDY}|[\p{{M}}{_PUNCT}_])"
_LOCAL_SPACELESS = rf"(?:{_SPACELESS}|[0-9\p{{M}}{_PUNCT}_])"
_LABEL_WORDY = rf"(?:{_WORDY})(?:(?:{_WORDY}|[\p{{M}}\-])*(?:{_WORDY}|\p{{M}}))?"
_LABEL_SPACELESS = (
    rf"{_SPACELESS}(?:(?:{_SPACELESS}|[0-9\p{{M}}\-])*(?:{_SPACELESS}|[0-9\p{{M}}]))?"
)
# After the top-level domain: anything but a letter or digit of its kind (which would make it
# longer than any) or `@`. A dash may follow (`ann@example.org-----BEGIN`, an address glued to
# the next value): a longer domain that takes it in is tried first.
_WORDY_END = rf"(?!{_WORDY}|[\p{{M}}@])"
_TLD = (
    rf"(?:[Xx][Nn]--[A-Za-z0-9\-]{{0,58}}[A-Za-z0-9]{_WORDY_END}"  # punycode: `xn--p1ai`
    # letters, and digits where normalization folded a letter into one (Cyrillic `б` is `6`)
    rf"|(?=[0-9]*+[^\P{{L}}{_SPACELESS_SCRIPTS}])(?:{_WORDY}){{2,24}}{_WORDY_END}"
    rf"|{_SPACELESS}{{2,24}}(?!{_SPACELESS}|[\p{{M}}@]))"
)
# A start: a letter or digit not after one of its kind (nor after a combining mark or `@`).
# Punctuation before a start sets it apart (`-ann@…`, `+ann@…`, `_ann@…_`: a dash, a list
# marker, a markdown marker), and inside a local part it begins a shorter one (`last@…` in
# `first.last@…`), which the check considers when the longer one is no address.
_EMAIL_START_WORDY = rf"(?<!{_WORDY}|[\p{{M}}@])(?:{_WORDY})"
_EMAIL_START_SPACELESS = rf"(?<!{_SPACELESS}|[0-9\p{{M}}@]){_SPACELESS}"
_EMAIL_STARTS = regex.compile(rf"{_EMAIL_START_WORDY}|{_EMAIL_START_SPACELESS}")
_LOCAL_CHAR = regex.compile(rf"{_LOCAL_WORDY}|{_LOCAL_SPACELESS}")
_LOCAL_RUN = regex.compile(rf"(?r)(?:{_LOCAL_WORDY}|{_LOCAL_SPACELESS})*")


def _email_check(m: regex.Match[str]) -> list[tuple[int, int]] | None:
    """The addresses that end where the match does: one for each start in its local part (the
    match's own, and each after a dot, dash, plus or percent sign) whose local part is one an
    address can have, at most 64 characters with no `..` (`.first..last@x.org` holds
    `last@x.org`). The overlaps are resolved with the other findings, so every start answers
    for itself, as the pattern matched at every start would. A local part that follows
    `scheme://user:` is a password, whatever start it is read from."""
    text = m.string
    run = _LOCAL_RUN.search(text, max(0, m.start() - 70), m.start())
    run_start = run.start() if run is not None else m.start()
    if _USERINFO.search(text, max(0, run_start - 70), run_start):
        return None
    at = text.index("@", m.start(), m.end())
    domain = text[at + 1 : m.end()]
    if text[at - 1] == "." or domain.rsplit(".", 1)[-1].lower() in _FILE_EXTENSIONS:
        return None
    spans: list[tuple[int, int]] = []
    start = m.start() if at - m.start() <= 64 else _next_local_start(text, at - 65, at)
    while start < at:
        if m.end() - start <= 254 and ".." not in text[start:at]:
            spans.append((start, m.end()))
        start = _next_local_start(text, start, at)
    return spans or None


def _next_local_start(text: str, start: int, at: int) -> int:
    """The next start after `start` inside a local part: after a dot, dash, plus or percent
    sign (`at` if none)."""
    start += 1
    while start < at and not (
        text[start - 1] in "._%+-" and _EMAIL_STARTS.match(text, start) is not None
    ):
        start += 1
    return start


# An `@` that a domain can follow: a domain is a label, a dot and more. The text after each
# `@` is read up to the next `@`, space or dot, so a text costs one pass however many it holds.
_AT_DOMAIN = re.compile(r"@(?=[^\s@.]+\.)")


class _AddressDetector(RegexDetector):
    """The email detector, matched from each `@` rather than at every word: a match's local
    part runs to its `@`, so the starts worth trying are in the runs of local-part characters
    of each kind that end at an `@`, and only the first start of each: the check answers for
    the later ones itself. The same findings as the pattern's own search at every start, at a
    fraction of the cost on prose, which has few `@` and many words; and one attempt per `@`."""

    __slots__ = ("_runs_before",)

    def __init__(self, *args: object, runs_before: list[regex.Pattern[str]], **kwargs: object):
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._runs_before = runs_before

    def matches(self, text: str, first: int, endpos: int) -> Iterator[regex.Match[str]]:
        match, starts = self.pattern.match, self.starts.search
        for sign in _AT_DOMAIN.finditer(text, first + 1, endpos):
            at = sign.start()
            if _LOCAL_CHAR.match(text, at - 1) is None:  # no local part ends here (`@@`, ` @`)
                continue
            begins = set()
            for run in self._runs_before:
                found = run.search(text, first, at)
                if found is not None and found.start() < at:
                    start = starts(text, found.start(), at)
                    if start is not None:
                        begins.add(start.start())
            for begin in sorted(begins):
                m = match(text, begin, endpos)
                if m is not None:
                    yield m


EMAIL = _AddressDetector(
    "email",
    regex.compile(
        rf"(?:{_EMAIL_START_WORDY}{_LOCAL_WORDY}*+|{_EMAIL_START_SPACELESS}{_LOCAL_SPACELESS}*+)@"
        # labels, each followed by a dot and more of the domain; then the top-level domain.
        # (Possessive: backtracking over a long run of labels is quadratic in `regex`.)
        rf"(?:(?>{_LABEL_WORDY}|{_LABEL_SPACELESS})\.(?={_WORDY}|{_SPACELESS}))++{_TLD}"
    ),
    _email_check,
    alphabet=r"[\p{L}\p{M}0-9._%+\-@]",
    starts=rf"{_EMAIL_START_WORDY}|{_EMAIL_START_SPACELESS}",
    needs="@",
    word="[A-Za-z0-9]",
    runs_before=[
        regex.compile(rf"(?r){_LOCAL_WORDY}*"),
        regex.compile(rf"(?r){_LOCAL_SPACELESS}*"),
    ],
)

# -- numbers ---------------------------------------------------------------------------------

_SEP = v.NUMBER_SEPARATOR
_CARD_BEFORE = r"0-9,"  # a card number never continues a number


def _card_begins(text: str, start: int) -> bool:
    """Where a card number may begin in a run: not inside a number, nor right after one and
    a dot, dash or slash (`1.4111…`, `2024-4111…`); after a space, a label, a list dash."""
    if start and text[start - 1] in "0123456789,":
        return False
    return not after_number(text, start)


_DIGIT_GROUP = regex.compile(r"[0-9]+")
_NOT_DIGITS = regex.compile(r"[^0-9]+")


def _grouping_ok(
    text: str, groups: list[tuple[int, int]], sizes: list[int], i: int, j: int, number: str
) -> bool:
    """`credit_card_ok` for groups i..j-1 of a run, whose digits (`number`) pass Luhn and carry
    an issuer's prefix: what is left is how they are grouped (the run's separators are those
    `credit_card_ok` accepts)."""
    if j == i + 1:
        return len(set(number)) > 1
    separators = {text[groups[k - 1][1] : groups[k][0]] for k in range(i + 1, j)}
    return v.card_grouping_ok(sizes[i:j], separators, number)


def _cards(m: regex.Match[str]) -> list[tuple[int, int]] | None:
    """Every card number in a run of digit groups: from each group that may begin one, the
    longest stretch of whole groups that is a card number (13 to 19 digits, unbroken or in
    groups of 2 to 6, Luhn, an issuer's prefix). A last group glued to the word after it
    belongs to that word. Each start looks at the few stretches of 13 to 19 digits, each
    checked by Luhn in constant time, so a run of n groups costs O(n)."""
    if m.end() - m.start() < 13 or len(_NOT_DIGITS.sub("", m.group())) < 13:
        return None
    text = m.string
    groups = [g.span() for g in _DIGIT_GROUP.finditer(text, m.start(), m.end())]
    if glued(m):
        groups.pop()
    sizes = [b - a for a, b in groups]
    offsets = [0, *itertools.accumulate(sizes)]
    total = offsets[-1]
    if total < 13:
        return None
    digits = "".join([text[a:b] for a, b in groups])
    # Constant-time Luhn over slices pays off for runs with many candidates only.
    luhn = v.LuhnSums(digits) if len(digits) > 40 else None
    count = len(groups)
    # grouped[k]: the first group from k on that no grouped card number has (not 2-6 digits)
    grouped = [count] * (count + 1)
    for k in range(count - 1, -1, -1):
        grouped[k] = k if not 2 <= sizes[k] <= 6 else grouped[k + 1]
    found: list[tuple[int, int]] = []
    sums = luhn.sums if luhn else None
    brand_ok = v.card_brand_ok
    no_issuer = v.NO_ISSUER_FIRST
    lo = hi = 1  # candidate ends (group indices) with 13..19 digits, kept as the start moves
    for i, (start, _) in enumerate(groups):
        base = offsets[i]
        if total - base < 13:
            break  # too few digits left for any card number
        if text[start] in no_issuer:
            continue
        if (i or start) and text[start - 1] != " " and not _card_begins(text, start):
            continue
        # stretches of groups i..j-1 with 13 to 19 digits, longest first
        if lo <= i:
            lo = i + 1
        while offsets[lo] < base + 13:
            lo += 1
        if hi < lo:
            hi = lo
        while hi < count and offsets[hi + 1] <= base + 19:
            hi += 1
        for j in range(hi, lo - 1, -1):
            end = offsets[j]
            if end - base > 19 or (j > i + 1 and grouped[i] < j):
                continue  # too long, or a group on the way is no card group
            if sums is not None:
                weights = sums[(end - 1) & 1]
                passes = (weights[end] - weights[base]) % 10 == 0
            else:
                passes = v.luhn_ok(digits[base:end])
            if not passes:
                continue
            number = digits[base:end]
            if brand_ok(number) and _grouping_ok(text, groups, sizes, i, j, number):
                found.append((start, groups[j - 1][1]))
                break
    return found or None


_CARD_RUN = rf"[0-9]*+(?:{_SEP}[0-9]++)*+"
_CARD_PATTERN = regex.compile(rf"[0-9](?<![{_CARD_BEFORE}](?s:.)){_CARD_RUN}")
# One-shot searches skip the runs of fewer than 13 digits, which `_cards` rejects (looked for
# over at most three separator characters between two digits, as many as `_SEP` has).
_CARD_ONCE = regex.compile(
    rf"[0-9](?<![{_CARD_BEFORE}](?s:.))(?=(?:[ \-./\u2013]{{0,3}}+[0-9]){{12}}){_CARD_RUN}"
)

CREDIT_CARD = RegexDetector(
    "credit_card",
    _CARD_PATTERN,
    # A run is judged with the two characters before it (`_card_begins`) and the one after.
    in_context(_cards, before=2, after=1),
    alphabet=r"[0-9 \-./\u2013]",
    starts=rf"(?<![{_CARD_BEFORE}])[0-9]",
    gate="[0-9]",
    runs=True,
    once=_CARD_ONCE,
)


def _iban_check(m: regex.Match[str]) -> tuple[int, int] | None:
    text = m.group()
    length = v.IBAN_LENGTHS.get(text[:2].upper())
    if length is None:
        return None
    seen = 0
    for i, ch in enumerate(text):
        if ch != " ":
            seen += 1
            if seen == length:
                after = text[i + 1 : i + 2]
                if after and after != " ":
                    return None  # the IBAN would end inside a group
                return (m.start(), m.start() + i + 1) if _iban_ok(text[: i + 1]) else None
    return None


_iban_ok = functools.lru_cache(maxsize=4096)(v.iban_ok)

# Printed in upper or lower case (`gb82 west 1234 5698 7654 32`): the check digits decide. The
# country code is one of the registry's, in one case, so a word is no start of one (`the`, `my`).
# A country code in any case (`GB`, `gb`, `Gb`): ASCII letters only, never a case fold.
_COUNTRY = (
    "(?:"
    + "|".join("".join(f"[{c}{c.lower()}]" for c in code) for code in sorted(v.IBAN_LENGTHS))
    + ")"
)

IBAN = RegexDetector(
    "iban",
    regex.compile(rf"(?<![A-Za-z0-9]){_COUNTRY}[0-9]{{2}}(?: ?[A-Za-z0-9]){{8,32}}(?![A-Za-z0-9])"),
    _iban_check,
    alphabet=r"[A-Za-z0-9 ]",
    starts=r"(?<![A-Za-z0-9])[A-Za-z]",
    needs="[0-9]",
    hint=r"(?<![A-Za-z0-9])(?=[A-Za-z]{2}[0-9]{2})",
)

_SSN_BEFORE = r"0-9A-Za-z"


def _ssn_check(m: regex.Match[str]) -> tuple[int, int] | None:
    if after_number(m.string, m.start()) or not _ssn_ok(m.group()):
        return None
    return m.span()


_ssn_ok = functools.lru_cache(maxsize=4096)(v.us_ssn_ok)

US_SSN = RegexDetector(
    "us_ssn",
    regex.compile(
        rf"[0-9](?<![{_SSN_BEFORE}](?s:.))[0-9]{{2}}{_SEP}[0-9]{{2}}{_SEP}[0-9]{{4}}"
        r"(?![0-9A-Za-z\-\u2013])"
    ),
    _ssn_check,
    alphabet=r"[0-9 \-./\u2013]",
    starts=rf"(?<![{_SSN_BEFORE}])[0-9]",
    gate="[0-9]",
)

# -- phone numbers -------------------------------------------------------------------------
#
# A run of digit groups may hold several numbers, or none: `415-555-2671 415-555-2672` is two,
# `3659 086030 6428` (an order number) is none, though its first two groups would pass for a
# US number. The run is split left to right, each candidate at most `_PHONE_GROUPS` groups and
# `_RUN_DIGITS` digits long (no phone number, card number or SSN is longer), so a run of n
# groups costs O(n) validations whatever it holds.

_PSEP = r"[ .\-\u2013]"
_PHONE_GROUPS = 7
_RUN_GROUPS = 10  # card numbers have up to 10 groups (19 digits in groups of 2)
_RUN_DIGITS = 19
_PHONE_DIGITS = 18  # 15 digits, after an `011` international prefix
_FORMATTING = frozenset("+()-.\u2013")
# Two spaces, or a dot and a space (`1. 415.555.2671`, a list), end one number and may begin
# another; a dash and a space do not (a number broken across lines after a dash reads so).
_BREAKS = frozenset(["  ", ". "])
_TOKEN = regex.compile(r"\+[0-9]+|\([0-9]+\)|[0-9]+")

_PHONE_BEFORE_PLUS = r"0-9A-Za-z+@"
_PHONE_BEFORE_PAREN = r"0-9A-Za-z(@"
_PHONE_BEFORE_DIGIT = r"0-9A-Za-z+\-\u2013/@"


# Each start consumes its first character before its look-behind (`x(?<![…](?s:.))`, the
# look-behind of one character before `x`): `regex` then scans for that character quickly.
def _phone_pattern(*, ahead_plus: str = "", ahead_digit: str = "") -> str:
    """The phone pattern; `ahead_*` is a look-ahead after the first character of a start at a
    `+` or a `(`, or at a digit."""
    return (
        rf"(?:\+(?<![{_PHONE_BEFORE_PLUS}](?s:.)){ahead_plus}[0-9]{{1,3}}{_PSEP}?"
        rf"(?:\([0-9]{{1,5}}\){_PSEP}?)?[0-9]"
        rf"|\((?<![{_PHONE_BEFORE_PAREN}](?s:.)){ahead_plus}[0-9]{{1,5}}\){_PSEP}?[0-9]"
        rf"|[0-9](?<![{_PHONE_BEFORE_DIGIT}](?s:.)){ahead_digit})"
        # the groups, a slash between two of them too: after an area code (`030/1234 5678`),
        # before the last digits of another number (`… 5678 / 5679`) or another number
        rf"[0-9]*+(?:(?:{_PSEP} ?| ?/ ?)[0-9]++)*+"
    )


PHONE_PATTERN = _phone_pattern()
# One-shot searches skip the runs of fewer than 7 digits, which `_phones` rejects: after its
# first character, a start looks ahead for them (after it, so `regex` still scans for that
# character quickly), over at most four characters between two digits (the pattern has three
# at most: `) (`, ` / `).
_PHONE_ONCE = _phone_pattern(
    ahead_plus=r"(?=(?:[ ().+\-\u2013/]{0,4}+[0-9]){7})",
    ahead_digit=r"(?=(?:[ ().+\-\u2013/]{0,4}+[0-9]){6})",
)
PHONE_STARTS = (
    rf"\+(?<![{_PHONE_BEFORE_PLUS}](?s:.))|\((?<![{_PHONE_BEFORE_PAREN}](?s:.))"
    rf"|[0-9](?<![{_PHONE_BEFORE_DIGIT}](?s:.))"
)


def _phone_ok(regions: tuple[str, ...]) -> Callable[[str], bool]:
    def ok(text: str) -> bool:
        # A bare run of digits is an order number, not a phone number: require formatting.
        if not (text.startswith("+") or any(c in text for c in " ().-\u2013/")):
            return False
        return v.phone_number_ok(text, regions)

    return ok


def _other_value(text: str, digits: int) -> bool:
    """A card number or an SSN: a value beside a phone number that is not ours to report."""
    if digits == 9:
        return v.us_ssn_ok(text)
    return 13 <= digits <= 19 and v.credit_card_ok(text)


class _Run:
    """One run of digit groups, split into phone numbers (see `_phones`)."""

    __slots__ = (
        "area",
        "bounds",
        "digits",
        "ends",
        "marks",
        "ok",
        "ones",
        "other",
        "seps",
        "starts",
        "text",
    )

    def __init__(self, text: str, spans: list[tuple[int, int]], ok: Callable[[str], bool]):
        self.text = text
        self.ok = ok
        self.starts = [s for s, _ in spans]
        self.ends = [e for _, e in spans]
        # seps[k]: what comes between group k-1 and group k ("" before the first)
        self.seps = [""] + [text[spans[k - 1][1] : spans[k][0]] for k in range(1, len(spans))]
        sizes = [e - s - (text[s] in "+(") - (text[e - 1] == ")") for s, e in spans]
        self.digits = [0, *itertools.accumulate(sizes)]
        self.ones = [0, *itertools.accumulate(n == 1 for n in sizes)]
        # marks: the separators (by the group they come before) that hold formatting; inside
        # a run, brackets and `+` are never in a group but the first
        self.marks = [
            k for k, sep in enumerate(self.seps) if sep != " " and not _FORMATTING.isdisjoint(sep)
        ]
        self.other: dict[tuple[int, int], bool] = {}
        # bounds: where the parts of the run begin, each after a break (`_BREAKS`) or a slash.
        # A slash after the first group of a part that is an area code with its trunk prefix
        # (`030/1234 5678`, `030 / 1234 5678`) sets the area code apart, as brackets do: the
        # number goes on (`area`: such first groups). Any other slash ends a number; what
        # follows is another number, or its last digits (`…5678 / 5679`).
        self.area: set[int] = set()
        self.bounds = [0]
        for k in range(1, len(spans)):
            sep = self.seps[k]
            if "/" in sep:
                if k - 1 == self.bounds[-1] and _AREA_CODE.fullmatch(text, *spans[k - 1]):
                    self.area.add(k - 1)
                else:
                    self.bounds.append(k)
            elif sep in _BREAKS:
                self.bounds.append(k)

    def next_mark(self, k: int) -> int:
        """The first separator from group k on that holds formatting (the group count if none)."""
        at = bisect.bisect_left(self.marks, k)
        return self.marks[at] if at < len(self.marks) else len(self.starts)

    def next_same(self, i: int, hi: int) -> int:
        """The first group after i (up to hi) whose separator before it is the one before i."""
        sep, seps = self.seps[i], self.seps
        for k in range(i + 1, hi):
            if seps[k] == sep:
                return k
        return hi

    def segment(self, i: int, j: int) -> str:
        return self.text[self.starts[i] : self.ends[j - 1]]

    def reach(self, i: int, end: int) -> list[int]:
        """The ends of the candidates that start at group i, longest first."""
        out = []
        j = i + 1
        while j <= end and j - i <= _RUN_GROUPS and self.digits[j] - self.digits[i] <= _RUN_DIGITS:
            out.append(j)
            j += 1
        out.reverse()
        return out

    def phone(self, i: int, j: int, *, apart: bool = False) -> bool:
        """Whether groups i..j-1 are a phone number. `apart`: after groups that are no value,
        where only a number its own formatting sets apart counts, and its formatting must be
        of one kind (`2024 415-555-2671`, not `12 415.555-2671`)."""
        digits = self.digits[j] - self.digits[i]
        if not 7 <= digits <= _PHONE_DIGITS or j - i > _PHONE_GROUPS:
            return False
        if self.ones[j] - self.ones[i] > 2:
            return False  # `1 2 3 4 5 6 7` is not how anyone prints a number
        if apart and len({sep.strip() for sep in self.seps[i + 1 : j]} - {""}) > 1:
            return False
        return self.ok(self.segment(i, j))

    def other_value(self, i: int, j: int) -> bool:
        digits = self.digits[j] - self.digits[i]
        if digits != 9 and not 13 <= digits <= 19:
            return False
        known = self.other.get((i, j))
        if known is None:
            known = self.other[(i, j)] = _other_value(self.segment(i, j), digits)
        return known

    def inner(self, i: int, j: int) -> set[str]:
        return set(self.seps[i + 1 : j])

    def formatted(self, i: int, j: int) -> bool:
        """Formatting (`+`, brackets, dashes, dots, an area code's slash) marks where a number
        ends; spaces do not."""
        return (i in self.area and j > i + 1) or any(c in _FORMATTING for c in self.segment(i, j))

    def ends_here(self, i: int, j: int, end: int) -> bool:
        """Nothing after group j-1 continues the number: the segment ends, the next separator
        is not one the number uses, or its country code or area code fixes its length."""
        if j == end or self.seps[j] not in self.inner(i, j):
            return True
        return self.text[self.starts[i]] in "+(" or i in self.area


def _phones(ok: Callable[[str], bool]) -> Check:
    """Split a run of digit groups into phone numbers side by side, or find none.

    From the start of the run, and after each value found, a number is the longest candidate
    that passes and either ends where its formatting does or is followed by more values up
    to the end of the run (the partition rule: a card number or SSN may follow, and is left to
    its own detector). After groups that are no value, only a number that its own formatting
    sets apart is taken: `2024 415-555-2671` holds one, `2024 415 555 2671` none.
    """
    # A frame of 64 KiB holds up to some 20,000 candidates, and is often read twice (as
    # typed, and as the page shows it): the cache holds a frame's worth.
    cached = functools.lru_cache(maxsize=1 << 15)(ok)

    def run(m: regex.Match[str]) -> list[tuple[int, int]] | None:
        if m.end() - m.start() < 8 or len(_NOT_DIGITS.sub("", m.group())) < 7:
            return None  # seven digits, and a separator or a `+`, at least
        text = m.string
        tokens = [t.span() for t in _TOKEN.finditer(text, m.start(), m.end())]
        if glued(m):
            tokens.pop()  # the glued last group belongs to the word after it
        elif text[m.end() : m.end() + 1] == ":":
            del tokens[_time_stamp(text, tokens) :]
        if not tokens or (len(tokens) == 1 and text[tokens[0][0]] != "+"):
            return None  # one group is a phone number only after a `+`
        r = _Run(text, tokens, cached)
        spans: list[tuple[int, int]] = []
        number: tuple[int, int] | None = None  # the last number found
        last = -1  # the group where the last value found (a number or its last digits) ends
        for lo, hi in itertools.pairwise([*r.bounds, len(tokens)]):
            sep, first = r.seps[lo], lo
            if lo == 0:
                clean = not after_number(text, r.starts[0])
            elif "/" in sep:
                listed = last == lo  # a value ends at the slash: a list of numbers
                if listed and number is not None and hi == lo + 1:
                    tail = tokens[lo]
                    if _last_digits(text, number, tail, cached):
                        spans.append(tail)
                        last = hi
                        continue
                # A number glued to a slash after one is another (`0958/020 7946 0959`); after
                # anything else the slash joins the group after it to what is before (`12/25`),
                # as a dash does, and no value begins there.
                clean = listed or sep.endswith(" ")
                first = lo if clean else lo + 1
            else:
                clean = True
            found = _split(r, first, hi, clean)
            if found:
                spans += [(r.starts[i], r.ends[j - 1]) for i, j in found]
                number, last = spans[-1], found[-1][1]
        return spans or None

    return run


# A log time stamp: a date, year first or last, and an hour before a colon (`2024-06-11
# 09:14:05`, `20240611 09:14`): the clock's digits, not a number's (the date alone is judged
# as any digit groups are). The colon is what the run's check sees after the run.
_DATE = regex.compile(
    r"[12][0-9]{3}(?P<s>[\-/.])(?:0?[1-9]|1[0-2])(?P=s)(?:0?[1-9]|[12][0-9]|3[01])"
    r"|[12][0-9]{3}(?:0[1-9]|1[0-2])(?:0[1-9]|[12][0-9]|3[01])"
    r"|(?:0?[1-9]|[12][0-9]|3[01])(?P<t>[\-/.])(?:0?[1-9]|[12][0-9]|3[01])(?P=t)[12][0-9]{3}"
)
_HOUR = regex.compile(r"[01]?[0-9]|2[0-3]")
_AREA_CODE = regex.compile(r"0[1-9][0-9]{1,4}")  # two to five digits after the trunk prefix


def _time_stamp(text: str, tokens: list[tuple[int, int]]) -> int:
    """Where a time stamp that ends the run's groups begins (their count if none)."""
    n = len(tokens)
    if n < 2 or _HOUR.fullmatch(text, *tokens[-1]) is None:
        return n
    if text[tokens[-2][1] : tokens[-1][0]] not in ("  ", " "):
        return n
    for first in (n - 2, n - 4):
        if first >= 0 and _DATE.fullmatch(text, tokens[first][0], tokens[-2][1]) is not None:
            return first
    return n


def _split(r: _Run, lo: int, hi: int, clean: bool) -> list[tuple[int, int]]:
    """The phone numbers among groups lo..hi of a run, left to right (see `_phones`)."""
    explained: dict[int, bool] = {hi: True}
    found: list[tuple[int, int]] = []
    i = lo
    while i < hi:
        took = 0
        if clean:
            for j in r.reach(i, hi):
                if r.phone(i, j) and (
                    (r.formatted(i, j) and r.ends_here(i, j, hi)) or _explained(r, j, hi, explained)
                ):
                    found.append((i, j))
                elif not (r.other_value(i, j) and _explained(r, j, hi, explained)):
                    continue
                took = j
                break
        else:
            # Set apart by its formatting: the separator before it is none of its own (so it
            # ends before that separator comes again), and it ends where its formatting does.
            # No formatting within reach: no start before it can take one in.
            if r.text[r.starts[i]] not in "+(":
                mark = r.next_mark(i + 1)
                if mark >= hi:
                    break
                if mark - i >= _PHONE_GROUPS:
                    i = mark - _PHONE_GROUPS + 1
                    continue
            top = r.next_same(i, min(hi, i + _PHONE_GROUPS))
            for j in range(top, i + 1, -1):
                digits = r.digits[j] - r.digits[i]
                if digits < 7:
                    break
                if r.formatted(i, j) and r.ends_here(i, j, hi) and r.phone(i, j, apart=True):
                    found.append((i, j))
                    took = j
                    break
        clean = took > 0
        i = took or i + 1
    return found


def _explained(r: _Run, j0: int, hi: int, memo: dict[int, bool]) -> bool:
    """Whether groups j0..hi are values side by side to the end (a number that ends where its
    formatting does may end the list early). Depth first, without recursion: each start is
    settled once, so a run costs O(groups) questions."""
    if j0 in memo:
        return memo[j0]
    stack: list[tuple[int, list[int]]] = [(j0, r.reach(j0, hi))]
    index = {j0: 0}
    while stack:
        pos, ends = stack[-1]
        result: bool | None = False
        k = index[pos]
        while k < len(ends):
            j = ends[k]
            phone = r.phone(pos, j)
            if phone and r.formatted(pos, j) and r.ends_here(pos, j, hi):
                result = True
                break
            if phone or r.other_value(pos, j):
                if j not in memo:
                    index[pos] = k
                    stack.append((j, r.reach(j, hi)))
                    index[j] = 0
                    result = None
                    break
                if memo[j]:
                    result = True
                    break
            k += 1
        if result is None:
            continue
        memo[pos] = result
        stack.pop()
    return memo[j0]


def _last_digits(
    text: str, number: tuple[int, int], group: tuple[int, int], ok: Callable[[str], bool]
) -> bool:
    """`+49 30 1234 5678 / 5679`: whether the one group after a slash is the last digits of
    another number, the number before with those digits in place of its own (at most six
    digits, and fewer than the number has but three)."""
    written = text[number[0] : number[1]]
    positions = [i for i, c in enumerate(written) if c.isdigit()]
    tail = text[group[0] : group[1]]
    if not tail.isdigit() or len(tail) > min(6, len(positions) - 3):
        return False
    chars = list(written)
    for p, d in zip(positions[-len(tail) :], tail, strict=True):
        chars[p] = d
    return ok("".join(chars))


def make_phone(regions: Sequence[str] = ("US",)) -> RegexDetector:
    """Phone numbers of every region listed; the first is the default (see
    `validators.phone_number_ok`)."""
    codes = tuple(regions) or ("US",)
    pattern = regex.compile(PHONE_PATTERN)
    once = regex.compile(_PHONE_ONCE)
    return RegexDetector(
        "phone",
        pattern,
        # A run is judged with the two characters before it (`after_number`) and the one after.
        in_context(_phones(_phone_ok(codes)), before=2, after=1),
        alphabet=r"[0-9 ().+\-\u2013/]",
        starts=PHONE_STARTS,
        lookback=64,
        gate="[0-9+(]",
        runs=True,
        once=once,
    )


# -- network ---------------------------------------------------------------------------------


def _ipv4_ok(text: str) -> bool:
    return text.count(".") == 3 and v.ip_ok(text)


IPV4 = RegexDetector(
    "ip_address",
    regex.compile(r"[0-9](?<![A-Za-z0-9.](?s:.))[0-9]{0,2}(?:\.[0-9]{1,3})+(?![A-Za-z0-9])"),
    whole(_ipv4_ok),
    alphabet=r"[0-9.]",
    starts=r"(?<![A-Za-z0-9.])[0-9]",
    gate="[0-9]",
)


def _ipv6_check(m: regex.Match[str]) -> tuple[int, int] | None:
    text = m.group()
    trimmed = text.rstrip(".")
    if trimmed.endswith(":") and not trimmed.endswith("::"):
        trimmed = trimmed[:-1]
    if trimmed.count(":") < 2 or not any(c.isdigit() for c in trimmed) or "." in trimmed[:2]:
        return None
    return (m.start(), m.start() + len(trimmed)) if _ipv6_ok(trimmed) else None


_ipv6_ok = functools.lru_cache(maxsize=4096)(v.ip_ok)

IPV6 = RegexDetector(
    "ip_address",
    regex.compile(
        r"(?=[0-9A-Fa-f:])(?<![A-Za-z0-9:.])[0-9A-Fa-f]{0,4}(?::[0-9A-Fa-f]{0,4}){2,7}"
        r"(?:\.[0-9]{1,3}){0,3}"
    ),
    _ipv6_check,
    alphabet=r"[0-9A-Fa-f:.]",
    starts=r"(?<![A-Za-z0-9:.])[0-9A-Fa-f:]",
    needs=":",
)


def builtin_detectors(
    phone_region: str = "US",
    *,
    phone_regions: Sequence[str] = (),
    entropy_secrets: bool = False,
) -> list[RegexDetector]:
    """The built-in detectors. Phone numbers are those of `phone_region` (the default) and of
    every region in `phone_regions`; `entropy_secrets` adds the detector of long random-looking
    strings (`secrets.entropy_detector`), which is off by default."""
    regions = [phone_region.upper()]
    regions += [r.upper() for r in phone_regions if r.upper() not in regions]
    detectors = [
        SECRET_KEYS,
        PRIVATE_KEY,
        URL_PASSWORD,
        JWT,
        IBAN,
        CREDIT_CARD,
        US_SSN,
        EMAIL,
        IPV4,
        IPV6,
        make_phone(regions),
    ]
    if entropy_secrets:
        detectors.insert(4, entropy_detector())
    return detectors
