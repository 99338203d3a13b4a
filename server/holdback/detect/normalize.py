"""The canonical text detection reads, in both directions, with offsets into the original.

The rule: every original character becomes zero, one or a few normalized characters, each of
which remembers the original character it came from, so a finding in the normalized text maps
back to exactly the original characters it covers. The same canonical text serves what the user
sends (pseudonymization) and what the model writes (the guard), so an evasion that hides a value
from one direction hides it from neither.

From maintained Unicode data only (the standard library's `unicodedata`, the `regex` module's
property tables, and the Unicode confusables table that `confusable_homoglyphs` ships):

- dropped: every `Default_Ignorable_Code_Point` (zero-width spaces and joiners, soft hyphens,
  variation selectors, tag characters, Hangul fillers, U+034F), every format character (Cf:
  bidi controls, byte-order marks), combining marks (Mn, Me), and a carriage return before
  a line feed;
- unusual spaces (no-break, thin, figure, ideographic, tabs) and line breaks (a carriage
  return on its own too) become a space, so `4111 1111\\n1111 1111` reads as one card number;
- every dash and the minus sign read as `-`, ideographic full stops as `.` (as IDNA reads a
  domain), fraction and division slashes as `/`;
- compatibility forms (NFKC) that are ASCII: fullwidth (`４１１１`, `ｓａｒａｈ＠ａｃｍｅ．ｃｏｍ`),
  mathematical alphanumerics (`𝟒𝟓𝟓𝟔`), circled, squared, superscript and subscript forms, and
  ligatures (`ﬁ` reads `fi`); decimal digits of every script read as ASCII digits;
- letters with diacritics read as their base letter (`ä` as `a`), and look-alike letters of
  other scripts as the ASCII letter they imitate (Cyrillic `а` as `a`), as the confusables
  skeleton of UTS #39 does.

`normalize(text, lookalikes=False)` keeps diacritics and other scripts as they are: that is
how two values are compared (`holdback.detect.values`), where `ännä` and `anna` are different
people even though either is found by the same detector.
"""

from __future__ import annotations

import importlib.resources
import json
import re
import unicodedata
from dataclasses import dataclass

import regex

_PLANES = "".join(chr(c) for c in (*range(0xD800), *range(0xE000, 0x30000)))
_TAGS = "".join(chr(c) for c in range(0xE0000, 0xE1000))

# Characters that display nothing (or nothing of their own).
_DROPPED = frozenset(
    {"\r"}
    | set(regex.findall(r"[\p{Default_Ignorable_Code_Point}\p{Cf}\p{Mn}\p{Me}]", _PLANES + _TAGS))
)
# A carriage return is a line break on its own, and nothing before a line feed.
_LONE_CR = re.compile(r"\r(?!\n)")
_SPACES = "\t\n\x0b\x0c\x85\u00a0\u1680\u2028\u2029\u202f\u205f\u3000" + "".join(
    chr(c) for c in range(0x2000, 0x200B)
)
# Separators a value is written with, in the forms that read as them: every dash (Unicode's
# Pd, and the minus sign), the ideographic full stops IDNA reads as a domain's dots, and the
# fraction and division slashes.
_SEPARATOR_FORMS = {
    **{c: "-" for c in regex.findall(r"\p{Pd}", _PLANES) if c != "-"},
    "\u2212": "-",
    "\u3002": ".",
    "\uff61": ".",
    "\u2044": "/",
    "\u2215": "/",
}
_ADDRESS_SIGNS = "@.+-_%#&:/"


def _ascii_form(ch: str) -> str | None:
    """What a character reads as in ASCII for detection, or None if it is left as it is."""
    form = unicodedata.normalize("NFKC", ch)
    ascii_form = form != ch and form.isascii() and 1 <= len(form) <= 3
    if ascii_form and all(c.isalnum() or c in _ADDRESS_SIGNS for c in form):
        return form
    if unicodedata.category(ch) == "Nd":
        return str(unicodedata.decimal(ch))
    return None


def _base_letter(ch: str) -> str | None:
    """A letter with diacritics, as its base letter (`ä` -> `a`), if that base is ASCII."""
    parts = unicodedata.normalize("NFD", ch)
    marks = all(unicodedata.category(c) in ("Mn", "Me") for c in parts[1:])
    if len(parts) > 1 and parts[0].isascii() and parts[0].isalpha() and marks:
        return parts[0]
    return None


def _confusables() -> dict[str, str]:
    """Look-alike letters and digits of other scripts, as the ASCII character they imitate."""
    data = importlib.resources.files("confusable_homoglyphs").joinpath("confusables.json")
    table: dict[str, list[dict[str, str]]] = json.loads(data.read_text(encoding="utf-8"))
    out: dict[str, str] = {}
    for ch, glyphs in table.items():
        if len(ch) != 1 or ch.isascii() or not ch.isalnum():
            continue
        targets = [g["c"] for g in glyphs if len(g["c"]) == 1 and g["c"].isascii()]
        targets = [t for t in targets if t.isalnum()]
        if not targets:
            continue
        # The same case first, then any letter, then a digit: `О` is the letter O, not zero.
        same_case = [t for t in targets if t.isalpha() and t.isupper() == ch.isupper()]
        letters = [t for t in targets if t.isalpha()]
        out[ch] = (same_case or letters or targets)[0]
    return out


def _tables() -> tuple[dict[int, str | None], dict[int, str | None]]:
    """(the detection table, the comparison table): character -> replacement or None (drop)."""
    compare: dict[int, str | None] = {ord(c): None for c in _DROPPED}
    compare.update({ord(c): " " for c in _SPACES})
    compare.update({ord(c): form for c, form in _SEPARATOR_FORMS.items()})
    for ch in _PLANES:
        if ord(ch) >= 0x80 and ord(ch) not in compare:
            form = _ascii_form(ch)
            if form is not None:
                compare[ord(ch)] = form
    detect = dict(compare)
    for ch, target in _confusables().items():
        detect.setdefault(ord(ch), target)
    for ch in _PLANES:
        if ord(ch) >= 0x80 and ord(ch) not in detect:
            base = _base_letter(ch)
            if base is not None:
                detect[ord(ch)] = base
    return detect, compare


_DETECT, _COMPARE = _tables()


def _char_class(codes: list[int]) -> str:
    """A regex character class for a set of code points, as ranges."""
    parts: list[str] = []
    start = prev = -2
    for cp in sorted(codes):
        if cp == prev + 1:
            prev = cp
            continue
        if start >= 0:
            parts.append(
                re.escape(chr(start)) + ("-" + re.escape(chr(prev)) if prev > start else "")
            )
        start = prev = cp
    if start >= 0:
        parts.append(re.escape(chr(start)) + ("-" + re.escape(chr(prev)) if prev > start else ""))
    return "[" + "".join(parts) + "]"


def _in_place(table: dict[int, str | None]) -> dict[int, int]:
    """The part of a table that keeps every character one character (no drop, no expansion)."""
    return {k: ord(v) for k, v in table.items() if v is not None and len(v) == 1}


def _search_class(codes: list[int]) -> re.Pattern[str]:
    """A pattern matching one character of `codes`, as fast on ordinary text as on any.

    `re` tests a character against a class of the Basic Multilingual Plane with one bitmap
    look-up, but against the ranges of the other planes one range at a time: those are tried
    only for a character of the other planes (an emoji, a mathematical digit)."""
    bmp = [c for c in codes if c < 0x10000]
    astral = [c for c in codes if c >= 0x10000]
    parts = [_char_class(bmp)] if bmp else []
    if astral:
        parts.append(f"(?=[\U00010000-\U0010ffff]){_char_class(astral)}")
    return re.compile("|".join(parts) or "(?!)")


_SPECIAL = {
    True: _search_class(list(_DETECT)),
    False: _search_class(list(_COMPARE)),
}
_RESIZING = {
    flag: _search_class([k for k, v in table.items() if v is None or len(v) != 1])
    for flag, table in ((True, _DETECT), (False, _COMPARE))
}
_ONE_TO_ONE = {True: _in_place(_DETECT), False: _in_place(_COMPARE)}
_TABLE = {True: _DETECT, False: _COMPARE}
_TRANSLATE = {flag: {k: v for k, v in table.items()} for flag, table in _TABLE.items()}
# The ASCII characters each table changes (line breaks and tabs become spaces).
_ASCII_SPECIAL = {
    flag: [chr(k) for k in sorted(table) if k < 0x80] for flag, table in _TABLE.items()
}
_ASCII_RESIZING = {
    flag: frozenset(chr(k) for k, v in table.items() if k < 0x80 and (v is None or len(v) != 1))
    for flag, table in _TABLE.items()
}


@dataclass(frozen=True, slots=True)
class Normalized:
    """Normalized text, and for each of its characters the index of the original one."""

    text: str
    origin: list[int] | None  # None: the identity (each character stayed where it was)
    original_length: int

    def to_original(self, index: int) -> int:
        """The original offset of a normalized offset (an end offset maps past its character)."""
        if self.origin is None:
            return index
        if index >= len(self.text):
            return self.original_length
        return self.origin[index]

    def span_to_original(self, start: int, end: int) -> tuple[int, int]:
        """The original span of the normalized characters start..end (end exclusive)."""
        if self.origin is None:
            return start, end
        if end <= start:
            o = self.to_original(start)
            return o, o
        return self.origin[start], self.origin[end - 1] + 1


def normalize(text: str, *, lookalikes: bool = True) -> Normalized:
    """The canonical text for detection; O(n), and a copy-free fast path for ordinary text."""
    kept = _kept(text, lookalikes)
    if kept is not None:
        return Normalized(kept, None, len(text))
    if "\r" in text:
        text = _LONE_CR.sub("\n", text)  # the same length: offsets are unchanged
    # Dropped and expanded characters are rare: the text is translated in one pass, and the
    # offsets are built run by run between them.
    normalized = text.translate(_TRANSLATE[lookalikes])
    table = _TABLE[lookalikes]
    origin: list[int] = []
    last = 0
    for m in _RESIZING[lookalikes].finditer(text):
        i = m.start()
        origin.extend(range(last, i))
        form = table[ord(text[i])]
        if form is not None:
            origin.extend([i] * len(form))
        last = i + 1
    origin.extend(range(last, len(text)))
    return Normalized(normalized, origin, len(text))


def normalize_in_place(text: str) -> str | None:
    """The normalized text when it keeps every offset (nothing dropped or expanded), else None."""
    return _kept(text, True)


def _kept(text: str, lookalikes: bool) -> str | None:
    """The normalized text if it keeps every offset, else None; ASCII text (most text) is
    looked at with a few substring tests, which are much faster than a class search."""
    if text.isascii():
        present = [c for c in _ASCII_SPECIAL[lookalikes] if c in text]
        if not present:
            return text
        if not _ASCII_RESIZING[lookalikes].isdisjoint(present):
            return None
    else:
        if not _SPECIAL[lookalikes].search(text):
            return text
        if _RESIZING[lookalikes].search(text):
            return None
    return text.translate(_ONE_TO_ONE[lookalikes])


def fold_case(text: str) -> str:
    """Lower-case without changing the length (so offsets survive): `İ` stays as it is."""
    lowered = text.lower()
    if len(lowered) == len(text):
        return lowered
    return "".join(c if len(low := c.lower()) != 1 else low for c in text)
