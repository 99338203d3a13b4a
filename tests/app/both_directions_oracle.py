"""The leak oracle of the both-directions tests: does a text show a value, in any form a reader
(a model reading a request body, a person reading the rendered chat) would decode?

The rule it keeps: it shares no code with what it checks. It imports nothing from `holdback`;
its list of invisible characters, its look-alike table and its decoding steps are its own. It
errs towards seeing a leak: a value shows if its plain spelling is in any single decoded view
of the text (raw, NFKC, invisibles dropped, HTML entities decoded, markdown markers and escapes
dropped, punycode labels decoded), or if its folded form (every view at once, then combining
marks dropped, look-alikes read as Latin, case folded, only letters and digits kept) is in the
text's folded form. A value with a fragment length also shows when any run of that many of its
folded characters does (most of a card number is still the card number).
"""

from __future__ import annotations

import html
import re
import unicodedata
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

# Unicode's Default_Ignorable_Code_Point set (DerivedCoreProperties.txt), as ranges.
_IGNORABLE_RANGES = (
    (0x00AD, 0x00AD),
    (0x034F, 0x034F),
    (0x061C, 0x061C),
    (0x115F, 0x1160),
    (0x17B4, 0x17B5),
    (0x180B, 0x180F),
    (0x200B, 0x200F),
    (0x202A, 0x202E),
    (0x2060, 0x206F),
    (0x3164, 0x3164),
    (0xFE00, 0xFE0F),
    (0xFEFF, 0xFEFF),
    (0xFFA0, 0xFFA0),
    (0xFFF0, 0xFFF8),
    (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A),
    (0xE0000, 0xE0FFF),
)

# Letters of other scripts that a reader takes for Latin ones (a few of UTS #39's table).
_LOOK_ALIKES = str.maketrans(
    {
        "а": "a",
        "е": "e",
        "о": "o",
        "р": "p",
        "с": "c",
        "у": "y",
        "х": "x",
        "і": "i",
        "ј": "j",
        "ѕ": "s",
        "ԁ": "d",
        "ԛ": "q",
        "ԝ": "w",
        "һ": "h",
        "А": "A",
        "В": "B",
        "Е": "E",
        "К": "K",
        "М": "M",
        "Н": "H",
        "О": "O",
        "Р": "P",
        "С": "C",
        "Т": "T",
        "Х": "X",
        "Ѕ": "S",
        "І": "I",
        "Ј": "J",
        "ο": "o",
        "α": "a",
        "ν": "v",
        "ρ": "p",
        "ι": "i",
        "Α": "A",
        "Β": "B",
        "Ε": "E",
        "Ζ": "Z",
        "Η": "H",
        "Ι": "I",
        "Κ": "K",
        "Μ": "M",
        "Ν": "N",
        "Ο": "O",
        "Ρ": "P",
        "Τ": "T",
        "Υ": "Y",
        "Χ": "X",
        "ı": "i",
    }
)

_MD_MARKERS = str.maketrans("", "", "*_`~")
_MD_ESCAPE = re.compile(r"\\([!-/:-@\[-`{-~])")
_PUNYCODE_LABEL = re.compile(r"xn--([a-z0-9-]+)", re.IGNORECASE)
_ENTITY_ROUNDS = 3  # `&amp;#64;` renders as `&#64;`; a reader may decode it once more


def is_ignorable(ch: str) -> bool:
    """Default-ignorable, or a format character: nothing a reader sees."""
    point = ord(ch)
    if any(low <= point <= high for low, high in _IGNORABLE_RANGES):
        return True
    return unicodedata.category(ch) == "Cf"


def _drop_ignorable(text: str) -> str:
    return "".join(c for c in text if not is_ignorable(c))


def _unescape(text: str) -> str:
    for _ in range(_ENTITY_ROUNDS):
        decoded = html.unescape(text)
        if decoded == text:
            break
        text = decoded
    return text


def _unmark(text: str) -> str:
    return _MD_ESCAPE.sub(r"\1", text).translate(_MD_MARKERS)


def _punycode(text: str) -> str:
    def decode(m: re.Match[str]) -> str:
        try:
            return m.group(1).lower().encode("ascii").decode("punycode")
        except UnicodeError:
            return m.group()

    return _PUNYCODE_LABEL.sub(decode, text)


def _without_marks(text: str) -> str:
    decomposed = unicodedata.normalize("NFD", text)
    kept = "".join(c for c in decomposed if unicodedata.category(c) not in ("Mn", "Me"))
    return unicodedata.normalize("NFC", kept)


def views(text: str) -> dict[str, str]:
    """The text as each single decoding shows it, and with all of them applied."""
    everything = _punycode(text)
    everything = _unescape(everything)
    everything = _unmark(everything)
    everything = unicodedata.normalize("NFKC", everything)
    everything = _drop_ignorable(everything)
    everything = _unmark(unicodedata.normalize("NFKC", everything))
    return {
        "raw": text,
        "nfkc": unicodedata.normalize("NFKC", text),
        "visible": _drop_ignorable(text),
        "unescaped": _unescape(text),
        "unmarked": _unmark(text),
        "punycode": _punycode(text),
        "decoded": everything,
    }


def fold(text: str) -> str:
    """Every decoding, then combining marks dropped, look-alikes read as Latin, case folded,
    and only letters and digits kept: `4000.0566.5566.5556` and `𝟒𝟎𝟎𝟎 0566…` fold alike."""
    decoded = views(text)["decoded"]
    plain = _without_marks(decoded).translate(_LOOK_ALIKES)
    plain = unicodedata.normalize("NFKC", plain.casefold())
    return "".join(c for c in plain if c.isalnum())


def shows(text: str, value: str, fragment: int = 0) -> str | None:
    """How `text` shows `value` (a short description), or None if it does not."""
    wanted = value.casefold()
    for name, view in views(text).items():
        if wanted in view.casefold():
            return f"{value!r} in the {name} view"
    folded_value, folded_text = fold(value), fold(text)
    if folded_value and folded_value in folded_text:
        return f"{value!r} folded ({folded_value!r})"
    if fragment and len(folded_value) > fragment:
        for start in range(len(folded_value) - fragment + 1):
            piece = folded_value[start : start + fragment]
            if piece in folded_text:
                return f"{fragment} characters of {value!r} in a row ({piece!r})"
    return None


def strings(data: Any) -> Iterator[str]:
    """Every string in a decoded JSON document, keys included."""
    if isinstance(data, str):
        yield data
    elif isinstance(data, Mapping):
        for key, item in data.items():
            yield str(key)
            yield from strings(item)
    elif isinstance(data, list | tuple):
        for item in data:
            yield from strings(item)


def findings(
    texts: Iterable[str], values: Iterable[str], fragment: int = 0
) -> list[tuple[str, str]]:
    """(how it shows, the text) for every value some text shows."""
    found = []
    texts = list(texts)
    for value in values:
        for text in texts:
            how = shows(text, value, fragment)
            if how is not None:
                found.append((how, text))
                break
    return found
