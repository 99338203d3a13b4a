"""Evasion-proof text for the detectors, with offsets that still point into the original.

The rule: every original character becomes at most one normalized character, so a finding in
the normalized text maps back to exactly the original characters it came from.

- Invisible characters (zero-width spaces and joiners, soft hyphens, word joiners, byte-order
  marks, bidi controls, carriage returns) are dropped.
- Unusual spaces (no-break, thin, narrow, figure, ideographic, tabs) and line breaks become a
  plain space, so `4111 1111\\n1111 1111` reads as one card number.
- Fullwidth ASCII (`４１１１`, `ｓａｒａｈ＠ａｃｍｅ．ｃｏｍ`) becomes ASCII, as does every other
  character whose compatibility form (NFKC, from Unicode's own data) is one ASCII letter, digit
  or address punctuation: mathematical alphanumerics (`𝟒𝟓𝟓𝟔`, `𝐢𝐧𝐭𝐫𝐮𝐝𝐞𝐫`), circled, squared,
  superscript and subscript forms.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

_DROPPED = (
    "\u00ad\u180e\u200b\u200c\u200d\u200e\u200f\u2060\u2061\u2062\u2063\u2064"
    "\ufeff\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\r"
)
_SPACES = "\t\n\x0b\x0c\u00a0\u1680\u2028\u2029\u202f\u205f\u3000" + "".join(
    chr(c) for c in range(0x2000, 0x200B)
)

_TABLE: dict[int, int | None] = {ord(c): None for c in _DROPPED}
_TABLE.update({ord(c): 0x20 for c in _SPACES})
_TABLE.update({c: c - 0xFEE0 for c in range(0xFF01, 0xFF5F)})


def _compatibility_forms() -> dict[int, int]:
    """Characters whose NFKC form is a single ASCII letter, digit or address punctuation."""
    found: dict[int, int] = {}
    for cp in range(0xA0, 0x20000):
        if cp in _TABLE:
            continue
        form = unicodedata.normalize("NFKC", chr(cp))
        if len(form) == 1 and form.isascii() and (form.isalnum() or form in "@.+-_%#&"):
            found[cp] = ord(form)
    return found


def _char_class(codes: list[int]) -> str:
    """A regex character class for a set of code points, as ranges."""
    parts: list[str] = []
    run: list[int] = []
    for cp in sorted(codes):
        if run and cp == run[-1] + 1:
            run.append(cp)
            continue
        if run:
            parts.append(
                re.escape(chr(run[0])) + ("-" + re.escape(chr(run[-1])) if len(run) > 1 else "")
            )
        run = [cp]
    if run:
        parts.append(
            re.escape(chr(run[0])) + ("-" + re.escape(chr(run[-1])) if len(run) > 1 else "")
        )
    return "[" + "".join(parts) + "]"


_TABLE.update(_compatibility_forms())

_DROPS = re.compile("[" + re.escape(_DROPPED) + "]")
_SPECIAL = re.compile(_char_class(list(_TABLE)))


@dataclass(frozen=True, slots=True)
class Normalized:
    """Normalized text, and for each of its characters the index of the original one."""

    text: str
    origin: list[int] | None  # None: the identity (nothing was dropped)
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


def normalize(text: str) -> Normalized:
    """Normalize a text for detection; O(n), and a copy-free fast path for ordinary text."""
    if not _SPECIAL.search(text):
        return Normalized(text, None, len(text))
    normalized = text.translate(_TABLE)
    if not _DROPS.search(text):
        return Normalized(normalized, None, len(text))
    origin = [i for i, ch in enumerate(text) if ch not in _DROPPED_SET]
    return Normalized(normalized, origin, len(text))


_DROPPED_SET = frozenset(_DROPPED)


def normalize_in_place(text: str) -> str | None:
    """The normalized text when no character is dropped (so offsets are unchanged), else None."""
    if not _SPECIAL.search(text):
        return text
    return None if _DROPS.search(text) else text.translate(_TABLE)


def fold_case(text: str) -> str:
    """Lower-case without changing the length (so offsets survive): `İ` stays as it is."""
    lowered = text.lower()
    if len(lowered) == len(text):
        return lowered
    return "".join(c if len(low := c.lower()) != 1 else low for c in text)
