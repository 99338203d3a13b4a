"""An independent leak oracle: what a client could show, and whether a forbidden value is in it.

The rule it keeps: it shares no code with the server (it imports nothing from `holdback`), so a
blind spot of the server's normalizer, restorer or guard is not its blind spot too. It decodes
frames the way the browser client does (every string field; the concatenated deltas of each
message, channel and tool call; markdown character references, backslash escapes, emphasis
markers and link text; tool-call arguments parsed as JSON) and compares in its own canonical
form (NFKD, then format characters, combining marks and other default-ignorables dropped, NFKC,
casefold, whitespace runs collapsed; digits only for long numbers). `values_in_urls` finds
values inside URLs (link and image targets, autolinks, bare URLs, reference definitions), raw,
entity-decoded and percent-decoded. Where the browser's rendering is uncertain it errs towards
seeing a leak.
"""

from __future__ import annotations

import html
import json
import re
import unicodedata
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any
from urllib.parse import unquote

__all__ = [
    "canonical",
    "decoded_views",
    "digit_form",
    "find_leaks",
    "find_url_leaks",
    "leaks_in",
    "leaks_in_urls",
    "markdown_text",
    "stored_views",
    "url_targets",
    "values_in_urls",
]

Frame = Mapping[str, Any]

# Characters the Unicode standard calls default-ignorable that are neither Cf nor Mn (the
# Hangul fillers, the Khmer inherent vowels, the Mongolian free variation selectors, which are
# Mn, are covered below anyway): dropped from the canonical form too.
_IGNORABLE = frozenset(
    "\u034f\u115f\u1160\u17b4\u17b5\u180b\u180c\u180d\u180f\u3164\uffa0"
    + "".join(chr(c) for c in range(0xFE00, 0xFE10))
)
_DROPPED_CATEGORIES = frozenset({"Cf", "Mn", "Me"})
_WHITESPACE = re.compile(r"\s+")
# ASCII punctuation a markdown backslash escapes (CommonMark 2.4).
_MD_ESCAPE = re.compile(r"\\([!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~])")
_MD_MARKERS = str.maketrans("", "", "*_`~")
# A link or image, inline or by reference, shows its text only.
_MD_LINK = re.compile(r"!?\[([^\]\n]*)\](?:\([^)\n]*\)|\[[^\]\n]*\])")
_DIGIT_MIN = 9  # values with at least this many digits are also compared digits-only


def _dropped(ch: str) -> bool:
    return ch in _IGNORABLE or unicodedata.category(ch) in _DROPPED_CATEGORIES


def canonical(s: str) -> str:
    """The oracle's search form: lookalikes folded, invisibles dropped, case and spaces folded."""
    if s.isascii():  # nothing to fold or drop but case and spaces
        return _WHITESPACE.sub(" ", s.lower())
    decomposed = unicodedata.normalize("NFKD", s)
    kept = "".join(ch for ch in decomposed if not _dropped(ch))
    folded = unicodedata.normalize("NFKC", kept).casefold()
    return _WHITESPACE.sub(" ", folded)


def digit_form(s: str) -> str:
    """The canonical text with whitespace and number separators removed, for digit searches."""
    return re.sub(r"[\s\-.()/+]", "", canonical(s))


def markdown_text(text: str) -> str:
    """Text as the browser's markdown renderer shows it, near enough for searching.

    Links and images show their text only, backslash escapes before ASCII punctuation are
    removed, character references (`&#64;`, `&#x40;`, `&commat;`) become their characters, and
    the emphasis, code and strike markers (`*`, `_`, `` ` ``, `~`) vanish, as they do from the
    rendered page. The markers are removed
    everywhere, also where CommonMark would show them (an intraword `_`): the oracle errs on
    the side of seeing a leak, so a case must not rely on a literal marker to split a value.
    """
    shown = _MD_LINK.sub(r"\1", text)
    unescaped = _MD_ESCAPE.sub(r"\1", shown)
    return html.unescape(unescaped).translate(_MD_MARKERS)


def _strings(value: object) -> Iterator[str]:
    """Every string in a JSON value: keys and values, recursively; numbers as text too."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, bool) or value is None:
        return
    elif isinstance(value, int | float):
        yield json.dumps(value)
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield str(key)
            yield from _strings(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _strings(item)


def _tool_views(arguments: str) -> list[str]:
    views = [arguments]
    try:
        parsed = json.loads(arguments)
    except ValueError:
        return views
    views.extend(_strings(parsed))
    # The client pretty-prints parsed arguments: JSON.stringify keeps non-ASCII as it is.
    views.append(json.dumps(parsed, ensure_ascii=False, indent=2))
    return views


def decoded_views(frames: Sequence[Frame]) -> list[str]:
    """Every string a client could show for these frames, decoded as the browser does."""
    views: list[str] = []
    streams: dict[tuple[str, str, str], list[str]] = {}
    for frame in frames:
        views.extend(_strings(frame))
        if frame.get("type") != "assistant_delta":
            continue
        text = frame.get("text")
        if not isinstance(text, str):
            continue
        channel = str(frame.get("channel") or "content")
        call_id = str(frame.get("call_id") or "") if channel == "tool_call" else ""
        streams.setdefault((str(frame.get("message_id")), channel, call_id), []).append(text)
    for (_, channel, _), pieces in streams.items():
        whole = "".join(pieces)
        if channel == "tool_call":
            views.extend(_tool_views(whole))
        else:
            views.append(whole)
            views.append(markdown_text(whole))
    return [v for v in views if v]


def stored_views(document: object) -> list[str]:
    """Every string of a stored record (an HTTP body) as the client shows it: every string
    raw; message `text` and `reasoning` also markdown-decoded; tool-call `arguments` parsed."""
    views = list(_strings(document))

    def walk(node: object) -> None:
        if isinstance(node, Mapping):
            for key, item in node.items():
                if key in ("text", "reasoning") and isinstance(item, str):
                    views.append(markdown_text(item))
                elif key == "arguments" and isinstance(item, str):
                    views.extend(_tool_views(item))
                else:
                    walk(item)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(document)
    return [v for v in views if v]


def _digits(value: str) -> str:
    return "".join(ch for ch in canonical(value) if ch.isdigit())


def find_leaks(frames: Sequence[Frame], forbidden: Iterable[str]) -> list[str]:
    """The forbidden strings that appear, in any decoded view, in canonical form."""
    views = decoded_views(frames)
    return leaks_in(views, forbidden)


def leaks_in(texts: Iterable[str], forbidden: Iterable[str]) -> list[str]:
    """The forbidden strings found in any of the texts (same comparison as `find_leaks`).

    A value is found when its canonical form, or that of its markdown-decoded spelling (so
    `<EMAIL_9>` is found as `<EMAIL9>` in a rendered view that lost its underscore), is in a
    text's canonical form; a value with at least 9 digits also when its digits are, with
    spaces and number separators ignored.
    """
    texts = list(texts)
    plain = "\n".join(canonical(t) for t in texts)
    digits = "\n".join(digit_form(t) for t in texts)
    found: list[str] = []
    for value in dict.fromkeys(forbidden):
        needles = {canonical(value), canonical(markdown_text(value))} - {""}
        hit = any(n in plain for n in needles)
        number = _digits(value)
        if not hit and len(number) >= _DIGIT_MIN:
            hit = number in digits
        if hit:
            found.append(value)
    return found


# -- URLs ------------------------------------------------------------------------------------

_LINK_TARGET = re.compile(r"\]\(\s*(<[^>\n]*>|[^\s)]+)")
_AUTOLINK = re.compile(r"<([A-Za-z][A-Za-z0-9+.\-]{1,31}:[^\s<>]*(?:<[^\s<>]*>[^\s<>]*)*)>")
_BARE_URL = re.compile(r"(?:https?://|ftp://|mailto:|www\.)[^\s<>\"'`]+", re.IGNORECASE)
_REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*(\S+)", re.MULTILINE)


def url_targets(text: str) -> list[str]:
    """Every URL in a text: markdown link and image targets, autolinks, bare URLs, references.

    Each is given raw and decoded (markdown escapes, character references, percent-encoding).
    """
    found: list[str] = []
    for pattern in (_LINK_TARGET, _AUTOLINK, _BARE_URL, _REFERENCE):
        for m in pattern.finditer(text):
            found.append(m.group(m.lastindex or 0))
    decoded = []
    for url in found:
        step = html.unescape(_MD_ESCAPE.sub(r"\1", url))
        decoded += [url, step, unquote(step), unquote(unquote(step))]
    return list(dict.fromkeys(decoded))


def values_in_urls(text: str, values: Iterable[str]) -> list[str]:
    """The values found inside a URL of the text (canonically, as `find_leaks` compares)."""
    values = list(values)
    return leaks_in(url_targets(text), values) if values else []


def find_url_leaks(frames: Sequence[Frame], values: Iterable[str]) -> list[str]:
    """The values found inside any URL of any decoded view of the frames."""
    return leaks_in_urls(decoded_views(frames), values)


def leaks_in_urls(texts: Iterable[str], values: Iterable[str]) -> list[str]:
    """The values found inside any URL of any of the texts."""
    values = list(values)
    if not values:
        return []
    return leaks_in([u for text in texts for u in url_targets(text)], values)
