"""What the client will show: the decoded projection a channel is screened through.

The rule this module keeps: the guard screens text *as the viewer reads it*, not as the model
spelled it. It is the only place in holdback that knows how the browser decodes what we send,
and `web/render.js` is configured to decode no more than this (`docs/threat-model.md` keeps the
pair):

- `markdown` (content and reasoning, rendered by marked): HTML character references are decoded
  one level (`&#64;`, `&#x40;`, `&commat;`: the forms marked passes to the HTML parser, so
  always with the `;`); a backslash before ASCII punctuation disappears (`example\\.org`); the
  emphasis, code and strike markers `*`, `` ` `` and `~` are ignored, and so is a run of `_`
  unless it stands between two letters or digits (CommonMark's intraword rule), so
  `**ann**@example.org` and `_ann@example.org_` read as the address they display. Link
  brackets are ignored too, and an inline link's destination (`](https://x "title")`) shows
  nothing in the text: `[ann](https://x)@example.org` reads as the address it displays. The
  destination is not lost: each is kept in `destinations`, for the guard to screen on its own.
- `json` (tool-call arguments, which the UI parses and prints again): string escapes are
  decoded, `\\u0040` and surrogate pairs included, and a number written with a fraction or an
  exponent reads as JavaScript prints it (`4556737586899855e0` is `4556737586899855`).

Every projected character comes from one contiguous raw span (`lo`, `hi`), and raw characters
that project to nothing (markers) sit between spans, so a finding in the projection maps back to
exactly the raw text that displays it, and a redaction replaces that raw text.

Streaming: an escape that could still be completed (`&#6`, a trailing `\\`, `\\ud83d`, a run of
`_` whose right neighbour is unknown) is held unprojected until the text decides it; each is
bounded, so a hold never grows without limit. For every split of the raw text, the projection of
the whole is the same (`project()` is the one-shot form).
"""

from __future__ import annotations

import html
import re
import unicodedata
from typing import Literal

import regex

ProjectionMode = Literal["markdown", "json", "plain"]

_ENTITY = re.compile(r"&(?:#[0-9]{1,8};|#[xX][0-9A-Fa-f]{1,8};|[A-Za-z][A-Za-z0-9]{1,31};)")
# A prefix of an entity that more text could still complete.
_ENTITY_OPEN = re.compile(r"&(?:#[0-9]{0,8}|#[xX][0-9A-Fa-f]{0,8}|[A-Za-z][A-Za-z0-9]{0,31})?\Z")
# An inline link's destination and title, after the `]`: CommonMark's forms, bounded.
_DESTINATION = regex.compile(
    r"""\(\s{0,8}(?:<[^<>\n]{0,1024}>|[^\s()<>]{0,1024}(?:\([^\s()]{0,256}\)[^\s()]{0,256}){0,4})"""
    r"""(?:\s{1,8}(?:"[^"\n]{0,256}"|'[^'\n]{0,256}'|\([^()\n]{0,256}\)))?\s{0,8}\)"""
)
_LABEL = regex.compile(r"\[[^\[\]\n]{0,999}\]")  # a reference label: `][label]` shows nothing
_PEEK = 16  # how far a `_` run's right neighbour is looked for, through markers and escapes
_ASCII_PUNCT = frozenset("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")
_MARKERS = frozenset("*`~[")
_UNDERSCORE_RUN_LIMIT = 32  # a longer run is decided as markers, whatever follows

# Whitespace the renderer collapses: a run of it shows as one space (outside code blocks).
_WS = " \t\n\r\f\v\u00a0\u1680\u2028\u2029\u202f\u205f\u3000" + "".join(
    chr(c) for c in range(0x2000, 0x200B)
)
_WS_SET = frozenset(_WS)
_WS_EDGE = _WS_SET | {""}  # a space, or the start or end of the text
_SPECIAL: dict[ProjectionMode, re.Pattern[str] | None] = {
    "markdown": re.compile(rf"[&\\*_`~\[\]]|[{_WS}]{{2,}}"),
    "json": re.compile(r"\\|[0-9][.eE]"),
    "plain": None,
}
_JSON_SIMPLE = {
    '"': '"',
    "\\": "\\",
    "/": "/",
    "b": "\b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
}
_HEX4 = re.compile(r"[0-9A-Fa-f]{4}")
_JSON_SPECIAL = re.compile(r"\\|-?[0-9]+(?=[.eE])")
_JSON_NUMBER = re.compile(r"-?[0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]*)?")
_NUMBER_CHARS = frozenset("0123456789.eE+-")
_BEFORE_NUMBER = frozenset(":,[ \t\n\r")
_NUMBER_MAX = 64  # a longer number is shown as written


class Projector:
    """The decoded projection of one channel's stream, built as the raw text arrives.

    `text` is the projected text of the held raw text; `lo[i]`..`hi[i]` is the raw stream span
    (absolute offsets) that projected character `i` came from. `done` is the raw stream offset
    up to which the raw text is decided; raw text after it is an escape still open.
    """

    __slots__ = (
        "_flat",
        "_hi",
        "_last",
        "_lo",
        "_prev",
        "_raw",
        "_raw_base",
        "_special",
        "destinations",
        "done",
        "mode",
        "text",
    )

    def __init__(self, mode: ProjectionMode = "markdown") -> None:
        self.mode: ProjectionMode = mode
        self._special = _SPECIAL[mode]
        self._raw = ""  # raw text from stream offset `_raw_base` on, not yet released
        self._raw_base = 0
        self._prev = ""  # the raw character before `_raw`
        self._last = ""  # the last projected character, released or not
        self.text = ""
        self._lo: list[int] = []
        self._hi: list[int] = []
        # While every held character is one raw character shown as itself, in a row, the
        # spans are implied: character i is raw `_flat + i`. None once one maps otherwise.
        self._flat: int | None = 0
        self.done = 0
        # Link destinations met, as (raw start, raw end, text): they show nothing in `text`.
        self.destinations: list[tuple[int, int, str]] = []

    @property
    def raw(self) -> str:
        """The raw text held, from `raw_base` on."""
        return self._raw

    @property
    def raw_base(self) -> int:
        return self._raw_base

    @property
    def open_tail(self) -> str:
        """Raw text not projected yet: an escape that more text could still complete."""
        return self._raw[self.done - self._raw_base :]

    def extend(self, raw: str, *, final: bool = False) -> None:
        """Add raw text and project as far as the text decides (to the end when `final`)."""
        self._raw += raw
        start = self.done - self._raw_base
        if start >= len(self._raw):
            return
        special = self._special
        before = self._raw[start - 1] if start else self._prev
        if self.mode == "markdown" and before in _WS_SET:
            while start < len(self._raw) and self._raw[start] in _WS_SET:
                start += 1  # the rest of a whitespace run shows as nothing
            self.done = self._raw_base + start
        if special is None or not special.search(self._raw, start):
            self._identity(start, len(self._raw))
            return
        if self.mode == "json":
            self._project_json(start, final)
        else:
            self._project_markdown(start, final)

    @property
    def lo(self) -> list[int]:
        """For each projected character, the raw stream offset its span starts at."""
        if self._flat is not None:
            self._spell_out()
        return self._lo

    @property
    def hi(self) -> list[int]:
        """For each projected character, the raw stream offset its span ends at."""
        if self._flat is not None:
            self._spell_out()
        return self._hi

    def start_of(self, i: int) -> int:
        """`lo[i]`."""
        flat = self._flat
        return flat + i if flat is not None else self._lo[i]

    def end_of(self, i: int) -> int:
        """`hi[i]`."""
        flat = self._flat
        return flat + i + 1 if flat is not None else self._hi[i]

    def cut_at(self, n: int) -> int:
        """The raw offset that releasing `n` projected characters cuts at."""
        if n >= len(self.text):
            return self.done
        flat = self._flat
        return flat + n if flat is not None else self._lo[n]

    def _spell_out(self) -> None:
        flat = self._flat
        assert flat is not None
        n = len(self.text)
        self._lo = list(range(flat, flat + n))
        self._hi = list(range(flat + 1, flat + n + 1))
        self._flat = None

    def release(self, n: int) -> int:
        """Drop the first `n` projected characters; returns the raw stream offset cut at.

        Markers between the last dropped character and the next kept one go with the dropped
        part: they display nothing.
        """
        cut = self.cut_at(n)
        self.text = self.text[n:]
        if self._flat is not None:
            self._flat += n
        else:
            del self._lo[:n]
            del self._hi[:n]
        k = cut - self._raw_base
        if k:
            self._prev = self._raw[k - 1]
            self._raw = self._raw[k:]
            self._raw_base = cut
        return cut

    def raw_slice(self, start: int, end: int) -> str:
        """Held raw text between two absolute stream offsets."""
        return self._raw[start - self._raw_base : end - self._raw_base]

    # -- projection ----------------------------------------------------------------------------

    def _identity(self, start: int, end: int) -> None:
        base = self._raw_base
        self.done = base + end
        if end <= start:
            return
        self._last = self._raw[end - 1]
        if not self.text:
            self._lo.clear()
            self._hi.clear()
            self._flat = base + start
        elif self._flat is not None and self._flat + len(self.text) != base + start:
            self._spell_out()
        self.text += self._raw[start:end]
        if self._flat is None:
            self._lo.extend(range(base + start, base + end))
            self._hi.extend(range(base + start + 1, base + end + 1))

    def _emit(self, ch: str, start: int, end: int) -> None:
        base = self._raw_base
        self._last = ch
        if self._flat is not None:
            self._spell_out()
        self.text += ch
        self._lo.append(base + start)
        self._hi.append(base + end)

    def _project_markdown(self, i: int, final: bool) -> None:
        raw = self._raw
        n = len(raw)
        special = self._special
        assert special is not None
        while i < n:
            m = special.search(raw, i)
            j = m.start() if m is not None else n
            if j > i:
                self._identity(i, j)
                i = j
            if m is None:
                break
            ch = raw[j]
            if ch in _WS_SET:
                k = j
                while k < n and raw[k] in _WS_SET:
                    k += 1
                self._identity(j, j + 1)
                i = k
            elif ch in _MARKERS:
                i = j + 1
            elif ch == "_":
                k = j
                while k < n and raw[k] == "_":
                    k += 1
                long_run = k - j > _UNDERSCORE_RUN_LIMIT
                after = "" if long_run else _shown_next(raw, k, final)
                if after is None:
                    break  # the right neighbour decides
                # A run between two word characters stays, as it shows (the renderer sees an
                # invisible character as one: neither space nor punctuation); so does a run
                # with space on both sides, which can neither open nor close emphasis.
                before = self._last
                intraword = (before.isalnum() or _invisible(before)) and after.isalnum()
                spaced = before in _WS_EDGE and after in _WS_EDGE
                if not long_run and (intraword or spaced):
                    self._identity(j, k)
                i = k
            elif ch == "]":
                if j + 1 == n and not final:
                    break  # a destination may follow
                if j + 1 < n and raw[j + 1] in "([":
                    pattern = _DESTINATION if raw[j + 1] == "(" else _LABEL
                    dest = pattern.match(raw, j + 1, partial=not final)
                    if dest is not None and dest.partial:
                        break
                    if dest is not None:
                        base = self._raw_base
                        self.destinations.append((base + j + 1, base + dest.end(), dest.group()))
                        i = dest.end()
                        self.done = base + i
                        continue
                i = j + 1
            elif ch == "\\":
                if j + 1 == n:
                    if not final:
                        break
                    self._emit("\\", j, j + 1)
                    i = j + 1
                elif raw[j + 1] == "\n":
                    i = j + 1  # a hard line break: the backslash shows nothing
                elif raw[j + 1] in _ASCII_PUNCT:
                    self._emit(raw[j + 1], j, j + 2)
                    i = j + 2
                else:
                    self._emit("\\", j, j + 1)
                    i = j + 1
            else:  # "&"
                e = _ENTITY.match(raw, j)
                if e is not None:
                    decoded = html.unescape(e.group())
                    if decoded != e.group():
                        for c in decoded:  # one or two characters: both display that span
                            self._emit(c, j, e.end())
                        i = e.end()
                        self.done = self._raw_base + i
                        continue
                elif not final and _ENTITY_OPEN.match(raw, j):
                    break
                self._emit("&", j, j + 1)
                i = j + 1
            self.done = self._raw_base + i

    def _project_json(self, i: int, final: bool) -> None:
        raw = self._raw
        n = len(raw)
        while i < n:
            m = _JSON_SPECIAL.search(raw, i)
            if m is None:
                self._identity(i, n)
                return
            j = m.start()
            if j > i:
                self._identity(i, j)
                i = j
            if m.group() != "\\":
                step = self._json_number(raw, j, final)
                if step < 0:
                    return  # open: the number may go on
                if step == 0:
                    self._identity(j, m.end())
                    i = m.end()
                    continue
                i = j + step
                self.done = self._raw_base + i
                continue
            step = self._json_escape(raw, j, final)
            if step == 0:
                return  # open: wait for more text
            i = j + step
            self.done = self._raw_base + i

    def _json_number(self, raw: str, j: int, final: bool) -> int:
        """Project a number written with a fraction or exponent, starting at `j`, as JavaScript
        prints it; the raw length it took, 0 if it is not one, or -1 if it may still grow."""
        m = _JSON_NUMBER.match(raw, j)
        before = raw[j - 1] if j else self._last
        if m is None or before not in _BEFORE_NUMBER:
            return 0  # a number value follows structure, not text inside a string
        if m.end() == len(raw) and not final:
            return -1 if m.end() - j <= _NUMBER_MAX else 0
        try:
            value = float(m.group())
        except ValueError:
            return 0
        shown = _js_number(value)
        if shown is None or shown == m.group():
            return 0
        for c in shown:
            self._emit(c, j, m.end())
        return m.end() - j

    def _json_escape(self, raw: str, j: int, final: bool) -> int:
        """Project the escape at `j`; the raw length it took, or 0 if it is still open."""
        n = len(raw)
        if j + 1 == n:
            if not final:
                return 0
            self._emit("\\", j, j + 1)
            return 1
        c = raw[j + 1]
        if c in _JSON_SIMPLE:
            self._emit(_JSON_SIMPLE[c], j, j + 2)
            return 2
        if c != "u":
            self._emit("\\", j, j + 1)
            return 1
        if not _HEX4.fullmatch(raw, j + 2, j + 6):
            if not final and n < j + 6 and _HEX4.fullmatch(raw[j + 2 :] + "0000"[: j + 6 - n]):
                return 0
            self._emit("\\", j, j + 1)
            return 1
        code = int(raw[j + 2 : j + 6], 16)
        if 0xD800 <= code < 0xDC00:  # a high surrogate: a low one may follow
            tail = raw[j + 6 : j + 12]
            if len(tail) < 6 and not final and _pair_prefix(tail):
                return 0
            if len(tail) == 6 and tail[:2] == "\\u" and _HEX4.fullmatch(tail, 2):
                low = int(tail[2:], 16)
                if 0xDC00 <= low < 0xE000:
                    ch = chr(0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00))
                    self._emit(ch, j, j + 12)
                    return 12
            self._emit("\ufffd", j, j + 6)
            return 6
        self._emit("\ufffd" if 0xDC00 <= code < 0xE000 else chr(code), j, j + 6)
        return 6


def _shown_next(raw: str, k: int, final: bool) -> str | None:
    """The next character the renderer shows from `k` ("" if none), or None if still open.

    Markers show nothing and an entity or an escape shows what it decodes to, so they are
    looked through; invisible characters are too (the detectors drop them).
    """
    end = min(len(raw), k + _PEEK)
    i = k
    while i < end:
        c = raw[i]
        if c in _MARKERS or c == "]" or _invisible(c):
            i += 1
            continue
        if c == "&":
            e = _ENTITY.match(raw, i)
            if e is not None:
                return html.unescape(e.group())[:1] or "&"
            if not final and _ENTITY_OPEN.match(raw, i):
                return None
            return "&"
        if c == "\\":
            if i + 1 == len(raw):
                return None if not final else "\\"
            nxt = raw[i + 1]
            return nxt if nxt in _ASCII_PUNCT else "\\"
        return c
    if end == len(raw) and not final and end - k < _PEEK:
        return None
    return ""


def _invisible(c: str) -> bool:
    return c in _INVISIBLE or (not c.isascii() and unicodedata.category(c) in ("Cf", "Mn", "Me"))


_INVISIBLE = frozenset("\u00ad\u034f\u115f\u1160\u17b4\u17b5\u3164\uffa0")


def _js_number(value: float) -> str | None:
    """A number as JavaScript's `String(n)` prints it, for the integers that matter here."""
    if value != value or value in (float("inf"), float("-inf")):
        return None
    if value.is_integer() and abs(value) < 1e21:
        return str(int(value))
    return None


def _pair_prefix(tail: str) -> bool:
    """Whether `tail` could still grow into `\\uDC00`..`\\uDFFF`."""
    target = "\\u"
    if len(tail) <= 2:
        return target.startswith(tail)
    if tail[:2] != target:
        return False
    hexpart = tail[2:]
    if not all(c in "0123456789abcdefABCDEF" for c in hexpart):
        return False
    low = int((hexpart + "0000")[:4], 16)
    high = int((hexpart + "FFFF")[:4], 16)
    return low <= 0xDFFF and high >= 0xDC00


def project(text: str, mode: ProjectionMode = "markdown") -> str:
    """The one-shot projection of a whole text, which streaming always equals."""
    p = Projector(mode)
    p.extend(text, final=True)
    return p.text


def may_decode(text: str, mode: ProjectionMode = "markdown") -> bool:
    """Whether the projection of `text` could differ from it (a text without any escape,
    marker or whitespace run reads as it is written)."""
    special = _SPECIAL[mode]
    return special is not None and special.search(text) is not None


# Where the markdown projection may show a text otherwise than it is written, but for its
# spacing: an entity, an escape, a marker, link syntax, a run of `_` the renderer takes for a
# marker. A run of `_` between two ASCII letters or digits, of at most 32, shows as written
# (CommonMark's intraword rule) unless a link destination can hold it, that is unless the text
# has a `]`. `Projector` decides; this only says where it may differ (for a run of `_`, at one
# of its characters). Each pattern starts with one class, which `re` scans for quickly.
_MARKS = re.compile(r"[&\\*`~\[\]_](?<!__)")
_MARKS_NO_LINKS = re.compile(
    r"[&\\*`~\[_](?:(?<=[&\\*`~\[])|(?<![A-Za-z0-9_]_)|(?<=_)_{32,}|(?<=_)_*+(?![A-Za-z0-9_]))"
)


def marks(text: str) -> list[int]:
    """Where the markdown projection may show `text` otherwise than it is written (see above)."""
    marks = _MARKS if "]" in text else _MARKS_NO_LINKS
    return [m.start() for m in marks.finditer(text)]
