"""The hold-back restorer: vault tokens in a streamed reply become their original values again.

The rule it keeps: emit a character as soon as it can no longer become part of a form we must
replace; hold it as long as it can; only the end of the stream overrides the hold.

The forms are those of `holdback.tokens`: `<ID>`, `&lt;ID&gt;` and the bare `ID` on word
boundaries, each with optional markdown-escaped underscores and in any letter case, for every id
in the vault. At each position the longest form wins, leftmost first. A syntactically valid token
that is not in the vault is not a form, so it is emitted unchanged.

Streaming and one-shot agree for every split of the input (chunk invariance) because every
decision is taken only when the text it depends on has arrived: a position is either *decided*
(it starts a complete form that cannot grow, or starts none whatever follows) or it is where
`pending` begins. `pending` is therefore the shortest tail that could still become a form: a
proper prefix of a form of some vault id, or a complete bare id waiting for the one character
that says whether it stands on a word boundary. Scans follow the vault's id prefixes, so a
`feed()` costs O(len(chunk) + len(pending)) whatever the vault's size.

A restored value never leaves the browser: a form inside a URL (a markdown link target, an
autolink, a bare URL, an image source: any form in a run of non-space text that contains `://`,
`](`, `www.` or a `mailto:`-like scheme) is not restored there. It becomes its kind label
(`[email]`), so a click cannot carry the value to another site. Whether a form is in a URL
depends only on the text before it, so this too is chunk-invariant.

`feed_pieces()` says which output spans are restored values and for which token: the output
guard exempts exactly those spans, and the store maps them back to their tokens.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping

from holdback.errors import StreamClosedError
from holdback.tokens import ID_CHARS, TokenIndex, ascii_upper, is_word_char, parse_id

# Outcomes of trying to match a form at one position, besides a match `(end, value)`.
_NONE = 0  # no form starts here, whatever text follows
_HOLD = 1  # a form could still start here: wait for more text
_Result = tuple[int, str, str] | int  # (end, value, canonical id)

_Escape = Callable[[str], str]
Piece = tuple[str, str | None]  # output text, and the token id it restores (None: model text)

# In a run of non-space text, any of these makes what follows part of a URL.
# `//` covers `scheme://` and protocol-relative links, `<scheme:` an autolink, `](` and `]:` a
# link destination or a reference definition.
_URL_MARK = re.compile(
    r"//|\]\(|\]:|<[A-Za-z][A-Za-z0-9+.\-]{1,31}:"
    r"|(?<![A-Za-z])(?:www\.|(?:mailto|tel|sms|data|javascript|xmpp|ftp|file|irc):)",
    re.I,
)
# What ends a run, as the browser's renderer sees whitespace (JavaScript's `\s`), not Python's.
_JS_SPACE = "\t\n\v\f\r \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
_ANY_SPACE = re.compile(f"[{_JS_SPACE}]")
_RECENT = 2048  # input kept to find a form's run of non-space text


class Restorer:
    """Streaming token restorer. Sans-I/O: `feed()` text in, get safe text out.

    `vault` maps tokens (`<EMAIL_1>` or `EMAIL_1`) to original values; the restorer reads it
    once, when it is built. `escape`, if given, is applied to every restored value (the tool-call
    filter passes a JSON string escaper so a value with `"` keeps the arguments valid JSON).
    """

    __slots__ = (
        "_closed",
        "_escape",
        "_index",
        "_pending",
        "_prev",
        "_recent",
        "_starts",
    )

    def __init__(
        self,
        vault: Mapping[str, str] | TokenIndex,
        *,
        escape: _Escape | None = None,
    ) -> None:
        self._index = vault if isinstance(vault, TokenIndex) else TokenIndex(vault)
        self._escape = escape
        self._pending = ""
        self._prev = ""  # the input character just before `pending`, for word boundaries
        self._closed = False
        self._starts = _start_pattern(self._index)
        self._recent = ""  # the end of the decided input, to tell whether a form is in a URL

    @property
    def pending(self) -> str:
        """The text held back: the shortest tail of the input that could still become a form."""
        return self._pending

    @property
    def closed(self) -> bool:
        return self._closed

    def feed(self, chunk: str) -> str:
        """Take the next piece of the stream; return the text that is now safe to emit."""
        if self._closed:
            raise StreamClosedError("the restorer's stream has ended; feed() after flush()")
        if not chunk:
            return ""
        return self._run(self._pending + chunk, final=False)

    def flush(self) -> str:
        """End the stream: whatever is held is decided as if no more text could follow."""
        if self._closed:
            return ""
        out = self._run(self._pending, final=True)
        self._closed = True
        return out

    def feed_pieces(self, chunk: str) -> list[Piece]:
        """Like `feed()`, with each restored value as a piece of its own, naming its token."""
        if self._closed:
            raise StreamClosedError("the restorer's stream has ended; feed() after flush()")
        if not chunk:
            return []
        buf = self._pending + chunk
        if self._starts is None or self._starts.search(buf) is None:
            self._keep(buf, len(buf))  # no form can begin in it: all of it is decided
            return [(buf, None)]
        pieces: list[Piece] = []
        self._run(buf, final=False, pieces=pieces)
        return pieces

    def flush_pieces(self) -> list[Piece]:
        """Like `flush()`, in pieces."""
        if self._closed:
            return []
        pieces: list[Piece] = []
        self._run(self._pending, final=True, pieces=pieces)
        self._closed = True
        return pieces

    @staticmethod
    def restore(text: str, vault: Mapping[str, str] | TokenIndex) -> str:
        """The one-shot result for a whole text; streaming always concatenates to this."""
        return restore(text, vault)

    # -- the scanner -------------------------------------------------------------------

    def _run(
        self,
        buf: str,
        *,
        final: bool,
        spans: list[tuple[int, int]] | None = None,
        pieces: list[Piece] | None = None,
    ) -> str:
        starts = self._starts
        out: list[str] = []
        pos = 0  # everything before pos has been decided and emitted
        search = 0
        n = len(buf)
        while starts is not None:
            m = starts.search(buf, search)
            if m is None:
                break
            j = m.start()
            ch = buf[j]
            if j == 0 and ch != "<" and ch != "&" and self._prev and is_word_char(self._prev):
                # A bare id needs a non-word character (or the start of the stream) before it;
                # inside the buffer the start pattern's look-behind has checked that already.
                search = j + 1
                continue
            found = self._match(buf, j, final)
            if found == _NONE:
                search = j + 1
                continue
            if found == _HOLD:
                out.append(buf[pos:j])
                self._keep(buf, j)
                return _finish(out, pieces)
            assert isinstance(found, tuple)
            end, value, ident = found
            if spans is not None:
                spans.append((j, end))
            out.append(buf[pos:j])
            if self._in_url(buf, j):
                value = url_label(ident)
            elif self._escape is not None:
                value = self._escape(value)
            if pieces is not None:
                if any(out):
                    pieces.append(("".join(out), None))
                pieces.append((value, ident))
                out.clear()
            else:
                out.append(value)
            pos = search = end
        out.append(buf[pos:])
        self._keep(buf, n)
        return _finish(out, pieces)

    def _in_url(self, buf: str, j: int) -> bool:
        """Whether the form at `buf[j]` stands in a URL: its run of non-space text has a mark.

        A run longer than what is kept is taken for a URL: fail closed.
        """
        before = self._recent + buf[:j]
        space = _ANY_SPACE.search(before[::-1])
        if space is None:
            return len(before) >= _RECENT or bool(_URL_MARK.search(before))
        return bool(_URL_MARK.search(before, len(before) - space.start()))

    def _keep(self, buf: str, at: int) -> None:
        if at:
            self._prev = buf[at - 1]
            self._recent = (self._recent + buf[:at])[-_RECENT:]
        self._pending = buf[at:]

    def _match(self, buf: str, j: int, final: bool) -> _Result:
        """The longest form of a vault id that starts at `j`, or whether one still could."""
        ch = buf[j]
        if ch == "<":
            return self._match_bracketed(buf, j + 1, ">", final)
        if ch == "&":
            opener = ascii_upper(buf[j : j + 4])
            if opener == "&LT;":
                return self._match_bracketed(buf, j + 4, "&GT;", final)
            if not final and len(opener) < 4 and "&LT;".startswith(opener):
                return _HOLD
            return _NONE
        return self._match_bare(buf, j, final)

    def _scan_id(self, buf: str, k: int, final: bool) -> tuple[int, str, list[int]] | None:
        """Follow id characters from `k` while they spell a prefix of some vault id.

        Returns (stop, canonical id read, positions where a `\\` ended a vault id), or None if the
        text runs out while the id could still grow (the caller holds).
        """
        prefixes = self._index.prefixes
        values = self._index.values
        n = len(buf)
        canon = ""
        ends_before_backslash: list[int] = []
        while True:
            if k == n:
                return None if not final else (k, canon, ends_before_backslash)
            ch = buf[k]
            if ch in ID_CHARS:
                nxt = canon + (ch.upper() if "a" <= ch <= "z" else ch)
                step = 1
            elif ch == "\\":
                if canon in values:
                    ends_before_backslash.append(k)
                if k + 1 == n:
                    if not final and canon + "_" in prefixes:
                        return None
                    return (k, canon, ends_before_backslash)
                if buf[k + 1] != "_":
                    return (k, canon, ends_before_backslash)
                nxt = canon + "_"
                step = 2
            else:
                return (k, canon, ends_before_backslash)
            if nxt not in prefixes:
                return (k, canon, ends_before_backslash)
            canon = nxt
            k += step

    def _match_bracketed(self, buf: str, k: int, closer: str, final: bool) -> _Result:
        scanned = self._scan_id(buf, k, final)
        if scanned is None:
            return _HOLD
        stop, canon, _ = scanned
        value = self._index.values.get(canon)
        if value is None:
            return _NONE
        tail = ascii_upper(buf[stop : stop + len(closer)])
        if tail == closer:
            return (stop + len(closer), value, canon)
        if not final and len(tail) < len(closer) and closer.startswith(tail):
            return _HOLD
        return _NONE

    def _match_bare(self, buf: str, j: int, final: bool) -> _Result:
        scanned = self._scan_id(buf, j, final)
        if scanned is None:
            return _HOLD
        stop, canon, ends_before_backslash = scanned
        values = self._index.values
        if canon in values and (stop == len(buf) or not is_word_char(buf[stop])):
            return (stop, values[canon], canon)
        if ends_before_backslash:
            # A shorter id ended on a `\`, a word boundary; the scan went on hoping for more.
            end = ends_before_backslash[-1]
            ident = _canonical(buf[j:end])
            return (end, values[ident], ident)
        return _NONE


def _canonical(spelled: str) -> str:
    return ascii_upper(spelled.replace("\\_", "_"))


def _finish(out: list[str], pieces: list[Piece] | None) -> str:
    text = "".join(out)
    if pieces is not None and text:
        pieces.append((text, None))
    return text


def json_escape(value: str) -> str:
    """A value as it must appear inside a JSON string (tool-call arguments)."""
    return json.dumps(value, ensure_ascii=False)[1:-1]


# Every label `url_label` writes: a token's kind, lower-case, with no space (a URL has none).
URL_LABEL_RE = re.compile(r"\[(?P<kind>[a-z][a-z0-9_-]{0,39})\]")


def url_label(ident: str) -> str:
    """What a token shows as inside a URL: its kind, never its value (`[email]`)."""
    return f"[{parse_id(ident)[0].lower()}]"


def _start_pattern(index: TokenIndex) -> re.Pattern[str] | None:
    """Where a form could start: `<`, `&`, or the first two characters of some vault id.

    A prefilter only: the scanner decides. Case-insensitive matching may let a non-ASCII
    look-alike through here; the scanner's ASCII-only comparison turns it away.
    """
    if not index.values:
        return None
    heads = set()
    for ident in index.values:
        heads.add(re.escape(ident[:2]))
        if ident[1] == "_":
            heads.add(re.escape(ident[0] + "\\"))
    firsts = "".join(sorted({re.escape(ident[0]) for ident in index.values}))
    return re.compile(rf"[<&]|(?<!\w)(?i:{'|'.join(sorted(heads))}|[{firsts}]\Z)")


def restore(text: str, vault: Mapping[str, str] | TokenIndex) -> str:
    """Replace every form of every vault token in a whole text by its original value."""
    restorer = Restorer(vault)
    return restorer.feed(text) + restorer.flush()


def find_forms(text: str, vault: Mapping[str, str] | TokenIndex) -> list[tuple[int, int]]:
    """The spans `restore()` would replace in a whole text, in order."""
    spans: list[tuple[int, int]] = []
    Restorer(vault)._run(text, final=True, spans=spans)
    return spans
