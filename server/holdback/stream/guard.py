"""The output guard: screen a streamed reply as the viewer will read it.

The rule it keeps: nothing the viewer may not see reaches them, in any form the client decodes.
The guard runs *after* the restorer, on the text as it will be shown, and screens it through the
channel's decoded projection (`holdback.stream.projection`: entities, markdown escapes and
markers for content, JSON escapes for tool-call arguments). A finding there maps back to the raw
text that displays it, and that raw text is replaced:

- a detector finding becomes `[redacted <kind>]`, a forbidden term `[redacted]`, a token spelling
  that is not one of the vault's (made up, or cut off by the end of the reply) `[redacted token]`;
- a value restored from the vault is exempt only as the exact span the restorer produced: model
  text glued to it (`sam@` + `acme` + `.com`) is screened together with it;
- a value of the vault that the model writes out itself is shown (the viewer may see it) but
  stored as its token, like every restored span (`stored`): stored text is always tokenized;
- a private-key block is redacted from its BEGIN line to its END line, whatever its length.

In `block` mode the first such finding stops the reply instead (`ReplyBlockedError`).

Hold-back is minimal: text is held only while some detector still has an open candidate at it
(`sarah@acme.co` could still become `sarah@acme.com`), or while an escape is still open. The hold
is bounded by a window (256 projected characters): when the candidate at the start of the held
text is still open with more text beyond a whole window, it is redacted (fail closed) up to a
margin before the window's end, and that margin is screened again with what follows, so no value
of bounded length can straddle the cut.

Chunk invariance holds because every decision depends only on the text, never on where chunks
end: windows start at positions fixed by the text, and only decided positions are released.
`screen()` is the one-shot form. Fail closed: if a detector raises, the guard raises
`GuardFailedError` and every later call raises too, so no raw text can follow.
"""

from __future__ import annotations

import html
import re
import urllib.parse
import weakref
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Literal

import regex

from holdback.detect import DetectorSet, Finding, TermMatcher, default_detectors
from holdback.detect.incremental import StreamScanner
from holdback.detect.normalize import normalize
from holdback.detect.secrets import token_detector, token_fragment_detector
from holdback.detect.values import normalize_value
from holdback.errors import (
    ConfigurationError,
    FilterFailedError,
    HoldbackError,
    StreamClosedError,
)
from holdback.stream.projection import ProjectionMode, Projector
from holdback.stream.restorer import Piece
from holdback.tokens import parse_id, token_id
from holdback.vault import Vault

GuardMode = Literal["redact", "block"]
FORBIDDEN = "forbidden"
TOKEN = "token"  # a token spelling; redacted unless it is one of the vault's
HELD_TOO_LONG = "value"  # a candidate still open a whole window later
KEY_BLOCK = "secret"
DEFAULT_WINDOW = 256
MARGIN = 64  # longer than any value of bounded length, with its separators
_CONTEXT = 80  # characters of already-released text kept for look-behinds

# A marker line is decided once a character that is not a dash follows it (or the text ends).
# Dashes of any kind, and any spacing: the page shows them alike.
_DASH = r"[\-\u2010-\u2015\u2212\ufe58\ufe63\uff0d]"
_KEY_LINE = rf"{_DASH}{{3,}}\s*BEGIN\s+[A-Z0-9 ]*?PRIVATE\s+KEY(?:\s+BLOCK)?\s*{_DASH}{{3,}}"
_KEY_BEGIN = regex.compile(rf"{_KEY_LINE}(?={_DASH.replace('[', '[^', 1)})", regex.I)
_KEY_BEGIN_AT_END = regex.compile(rf"{_KEY_LINE}(?:(?={_DASH.replace('[', '[^', 1)})|\Z)", regex.I)
_KEY_END = re.compile(
    rf"{_DASH}{{3,}}\s*END\s+[A-Z0-9 ]*?PRIVATE\s+KEY(?:\s+BLOCK)?\s*{_DASH}{{3,}}"
    rf"(?={_DASH.replace('[', '[^', 1)}|\Z)",
    re.I,
)
_BACKSLASH_ESCAPE = re.compile(r"\\([!-/:-@\[-`{-~])")
# Three dashes, perhaps with invisible characters between: a marker line may be here; or a dash
# at the very end, where one may be beginning.
_INVISIBLE_IN_LINE = "[\u00ad\u200b-\u200f\u2060-\u2064\ufeff]*"
_KEY_HINT = re.compile(
    rf"{_DASH}(?:{_INVISIBLE_IN_LINE}{_DASH}){{2}}|{_DASH}{_INVISIBLE_IN_LINE}\Z"
)
_KEY_LINE_MAX = 100  # a marker line is shorter than this
_RAW_LIMIT = 8192  # raw text held, markers included, before the front is redacted anyway

_State = Literal["screening", "key_block", "closed", "blocked", "failed"]


# The screening set of a deployment's detectors and forbidden terms: built once, shared by
# every reply's guard (its scan tables with it, `StreamScanner`).
_SCREENING: weakref.WeakKeyDictionary[DetectorSet, dict[int, tuple[object, DetectorSet]]] = (
    weakref.WeakKeyDictionary()
)


def screening_set(detectors: DetectorSet, forbidden: TermMatcher | None) -> DetectorSet:
    """The detectors, the token spellings of their kinds, cut-off tokens and forbidden terms."""
    by_terms = _SCREENING.get(detectors)
    if by_terms is None:
        by_terms = _SCREENING[detectors] = {}
    found = by_terms.get(id(forbidden))
    if found is not None and found[0] is forbidden:
        return found[1]
    parts = list(detectors.detectors)
    parts.append(token_detector([*detectors.kinds, "literal"]))
    parts.append(token_fragment_detector())
    if forbidden is not None and len(forbidden):
        parts.append(forbidden)
    made = detectors.with_detectors(parts)
    if len(by_terms) >= _SCREENING_SETS:
        by_terms.pop(next(iter(by_terms)))
    by_terms[id(forbidden)] = (forbidden, made)
    return made


_SCREENING_SETS = 8  # per detector set: term lists replaced at run time leave old ones behind


class GuardConfigError(ConfigurationError, ValueError):
    """A guard setting (mode, window) cannot be used."""


class GuardFailedError(FilterFailedError):
    """A detector failed while screening a reply; the reply must stop with no raw text after."""


class ReplyBlockedError(HoldbackError):
    """The guard, in block mode, found text that must not be shown; the reply stops here.

    `safe_prefix` is the screened text before the offending finding, which may still be sent.
    """

    code = "blocked"

    def __init__(self, kinds: Iterable[str], safe_prefix: str) -> None:
        self.kinds = sorted(set(kinds))
        self.safe_prefix = safe_prefix
        super().__init__("the reply was blocked: it contained " + ", ".join(self.kinds))


def forbidden_matcher(terms: Iterable[str]) -> TermMatcher:
    """Forbidden terms match anywhere, case-insensitively, with evasion handling."""
    return TermMatcher(FORBIDDEN, terms, whole_words=False)


# Every label `redaction_label` writes, and nothing the model could pass off as more: a kind is
# a detector kind or a term-list name (letters, digits, `_`, `-`, spaces).
REDACTION_LABEL_RE = re.compile(r"\[redacted(?: (?P<kind>[A-Za-z0-9_ -]{1,40}))?\]")


def redaction_label(kind: str) -> str:
    """The one spelling of a redaction: `[redacted]` for a forbidden term, else by kind."""
    if kind == FORBIDDEN:
        return "[redacted]"
    return f"[redacted {TOKEN if kind == 'token_fragment' else kind}]"


class Guard:
    """Streaming output guard. Sans-I/O: `feed()` text in, screened text out."""

    # Partial scans go through a `StreamScanner`, which answers as `DetectorSet.scan` does
    # without redoing what earlier scans proved; off, every scan is a whole `DetectorSet.scan`
    # (the reference the tests and the benchmark compare it with).
    _incremental = True

    def __init__(
        self,
        detectors: DetectorSet | None = None,
        *,
        forbidden: TermMatcher | Iterable[str] | None = None,
        allowed: Iterable[tuple[str, str]] = (),
        vault: Mapping[str, str] | None = None,
        mode: GuardMode = "redact",
        window: int = DEFAULT_WINDOW,
        phone_region: str | None = None,
        projection: ProjectionMode = "markdown",
    ) -> None:
        """Screen with `detectors` (the built-in ones by default) and `forbidden` terms.

        Values of the conversation's vault may be shown: pass the vault itself, or its
        `(kind, normalized value)` pairs as `allowed`.
        """
        if window < 16:
            raise GuardConfigError("the guard's window must be at least 16 characters")
        if mode not in ("redact", "block"):
            raise GuardConfigError(f"unknown guard mode {mode!r}; use redact or block")
        if detectors is None:
            detectors = default_detectors()
        if forbidden is not None and not isinstance(forbidden, TermMatcher):
            forbidden = forbidden_matcher(forbidden)
        self._detectors = screening_set(detectors, forbidden)
        self._scanner = StreamScanner(self._detectors)
        self._tokens: dict[tuple[str, str], str] = {(k, n): "" for k, n in allowed}
        if isinstance(vault, Vault):
            for e in vault.entries():
                self._tokens[(e.kind, e.normalized)] = e.token
            for ident in vault.reserved:  # ids the user typed before they existed
                self._tokens[(TOKEN, ident)] = ""
        elif vault is not None:
            for token, value in vault.items():
                kind = parse_id(token_id(token))[0].lower()
                norm = self._detectors.normalize(kind, value, phone_region=phone_region)
                self._tokens[(kind, norm)] = f"<{token_id(token)}>"
        self._vault_ids = {token_id(token) for token in vault or ()}
        for ident in self._vault_ids:
            self._tokens[(TOKEN, ident)] = ""
        self.mode = mode
        self.window = window
        self._phone_region = phone_region
        self._proj = Projector(projection)
        self._restored: list[tuple[int, int, str]] = []  # raw spans the restorer produced
        self._hidden: list[tuple[int, int, str]] = []  # link destinations to replace
        self._skip_to = 0  # stored text skips raw text up to here (inside a restored span)
        self._context = ""
        self._released = 0  # projected stream offset of the held text
        self._state: _State = "screening"
        self._continuing = False  # a candidate redacted at the window goes on at the front
        self._no_dashes_until = 0  # projected stream offset up to which no dash run was seen
        self._stored: list[str] = []
        self.redacted: Counter[str] = Counter()

    def after_restorer(self) -> None:
        """A restorer runs before this guard: a vault token's spelling that reaches the guard
        was not restored (it was encoded, or glued to other text), so it is redacted like any
        other token text. Ids the user typed before they existed (reserved) stay allowed."""
        for ident in self._vault_ids:
            self._tokens.pop((TOKEN, ident), None)

    @property
    def pending(self) -> str:
        """The raw text held back."""
        return self._proj.raw

    @property
    def blocked(self) -> bool:
        """Whether block mode stopped the reply."""
        return self._state == "blocked"

    @property
    def stored_pieces(self) -> list[str]:
        """The stored text as the pieces it was released in (only ever appended to)."""
        return self._stored

    @property
    def stored(self) -> str:
        """Everything released so far as it may be stored: screened, and tokenized."""
        return "".join(self._stored)

    def feed(self, chunk: str) -> str:
        return self.feed_pieces([(chunk, None)])

    def feed_pieces(self, pieces: Sequence[Piece]) -> str:
        """Take restorer output: each piece's text, and the token id of a restored value."""
        if self._state != "screening":
            self._check_open()
        proj = self._proj
        fed = False
        for text, ident in pieces:
            if not text:
                continue
            if ident is not None:
                end = proj.raw_base + len(proj.raw)
                self._restored.append((end, end + len(text), ident))
            proj.extend(text)
            fed = True
        if not fed:
            return ""  # each scan ends where only more text can decide more
        if proj.destinations:
            self._screen_destinations()
        return self._run(final=False)

    def flush(self) -> str:
        self._check_open()
        self._proj.extend("", final=True)
        self._screen_destinations()
        out = self._run(final=True)
        self._state = "closed"
        return out

    def _check_open(self) -> None:
        if self._state == "failed":
            raise GuardFailedError("the output guard failed earlier; the reply cannot go on")
        if self._state != "screening" and self._state != "key_block":
            raise StreamClosedError("the guard's stream has ended; feed() after flush()")

    # -- screening -------------------------------------------------------------------------

    def _run(self, *, final: bool) -> str:
        out: list[str] = []
        proj = self._proj
        while proj.text:
            if self._state == "key_block":
                if not self._skip_key_block(final, out):
                    break
                continue
            buf = proj.text
            window = buf[: self.window]
            begin = None
            reach = min(len(buf), self.window + _KEY_LINE_MAX)
            # Text already seen to hold no dash run needs no second look (but its last few
            # characters may begin one with what follows).
            seen = max(0, self._no_dashes_until - self._released - 4)
            if _KEY_HINT.search(buf, seen, reach):
                begin = _key_begin(buf[:reach], final)
            else:
                self._no_dashes_until = self._released + reach
            if begin is not None and begin[0] == 0:
                if begin[1] == 0:
                    break  # a BEGIN line may be coming: wait for it
                self._enter_key_block(begin[1], out)
                continue
            if begin is not None and begin[0] < len(window):
                # The text before a key block is decided where the block's BEGIN line is known,
                # with that line in view, so every split decides it alike.
                start, end = begin
                if end == 0:
                    if final:
                        begin = None
                    else:
                        hold, findings, tokenize = self._scan(window[:start], final=False)
                        if hold:
                            self._release(hold, findings, tokenize, out)
                            continue
                        break
                else:
                    _, findings, tokenize = self._scan(buf[:end], final=True)
                    findings = [_clip(f, start) for f in findings if f.start < start]
                    self._release(start, findings, [t for t in tokenize if t[1] <= start], out)
                    continue
            beyond = len(buf) > len(window)
            overflow = len(proj.raw) > _RAW_LIMIT  # markers and destinations count here
            hold, findings, tokenize = self._scan(window, final=final and not beyond)
            if hold == 0:
                if not ((beyond and len(window) == self.window) or overflow):
                    break
                self._redact_held(window, out)
                continue
            self._release(hold, findings, tokenize, out)
            if hold < len(window) and not beyond:
                break  # what is left is open; rescanning it now would decide nothing new
        if not proj.text and proj.done > proj.raw_base and self._state == "screening":
            # Raw text that shows nothing (markers, destinations) is released as it comes.
            self._copy(proj.raw_base, proj.done, out)
            self._advance(0, "")
        return "".join(out)

    def _scan(
        self, window: str, *, final: bool
    ) -> tuple[int, list[Finding], list[tuple[int, int, str]]]:
        ctx = self._context
        try:
            if self._incremental and not final:
                found, held = self._scanner.scan(ctx + window, len(ctx), self._released - len(ctx))
            else:
                if self._incremental:
                    self._scanner.forget()  # its scans resume from partial ones only
                scan = self._detectors.scan(ctx + window, len(ctx), final=final)
                found, held = scan.findings, scan.hold
        except Exception as exc:  # fail closed, whatever a detector did
            raise self._detector_failed("the reply", exc) from None
        hold = len(window) if final else held - len(ctx)
        redact: list[Finding] = []
        tokenize: list[tuple[int, int, str]] = []
        shown: list[tuple[int, int]] = []  # spans of values that may be shown as they are
        for f in found:
            s, e = f.start - len(ctx), f.end - len(ctx)
            verdict = self._verdict(f, s, e)
            if verdict is None:
                redact.append(Finding(s, e, f.kind, f.value))
            else:
                shown.append((s, e))
                if verdict:
                    tokenize.append((s, e, verdict))
        if shown and redact:
            # A match inside a value that may be shown reads only that value's own characters
            # (`canary@example.org` in the vault's `ann.canary@example.org`); one that reaches
            # past it is still redacted, and takes the value with it.
            redact = [r for r in redact if not any(a <= r.start and r.end <= b for a, b in shown)]
        return hold, redact, tokenize

    def _verdict(self, f: Finding, s: int, e: int) -> str | None:
        """None: redact. "": show as it is. A token: show, and store as that token."""
        if f.kind == FORBIDDEN:
            return None
        lo, hi = self._proj.start_of(s), self._proj.end_of(e - 1)
        if any(rs <= lo and hi <= re_ for rs, re_, _ in self._restored):
            return ""
        if f.kind == TOKEN:
            norm = normalize_value(TOKEN, f.value)
        else:
            norm = self._detectors.normalize(f.kind, f.value, phone_region=self._phone_region)
        return self._tokens.get((f.kind, norm))

    # -- releasing -------------------------------------------------------------------------

    def _release(
        self,
        hold: int,
        findings: list[Finding],
        tokenize: list[tuple[int, int, str]],
        out: list[str],
    ) -> None:
        proj = self._proj
        if self._continuing:
            hold, findings, tokenize = self._swallow_continuation(hold, findings, tokenize, out)
            if hold == 0:
                return
        if not findings and not tokenize:
            cut = proj.cut_at(hold)
            text = proj.text[:hold]
            self._copy(proj.raw_base, cut, out)
            self._advance(hold, text)
            return
        clusters = _clusters(findings)
        if clusters and self.mode == "block":
            self._block(clusters[0][0], [f.kind for c in clusters for f in c[2]], out)
        edits: list[tuple[int, int, str, str]] = []  # raw span, wire text, stored text
        for start, end, members in clusters:
            best = min(members, key=lambda f: (-(f.end - f.start), self._detectors.rank(f.kind)))
            label = redaction_label(_label_kind(best))
            self.redacted[best.kind] += 1
            edits.append((proj.start_of(start), proj.end_of(end - 1), label, label))
        kept: list[tuple[int, int, str]] = []
        for start, end, token in sorted(tokenize, key=lambda t: (t[0] - t[1], t[0])):
            if any(s < end and start < e for s, e, _ in kept):
                continue  # a vault value inside a longer one: the longer one is tokenized
            kept.append((start, end, token))
        for start, end, token in sorted(kept):
            if not any(s < end and start < e for s, e, _ in clusters):
                lo, hi = proj.start_of(start), proj.end_of(end - 1)
                if any(lo <= h[0] and h[1] <= hi for h in self._hidden):
                    # A vault value spelled around a link that was redacted: the value goes too.
                    label = redaction_label(HELD_TOO_LONG)
                    self.redacted[HELD_TOO_LONG] += 1
                    edits.append((lo, hi, label, label))
                    continue
                edits.append((lo, hi, proj.raw_slice(lo, hi), token))
        edits.sort()
        text = proj.text[:hold]
        pos = proj.raw_base
        cut = proj.cut_at(hold)
        for lo, hi, wire, stored in edits:
            self._copy(pos, lo, out)
            out.append(wire)
            self._stored.append(stored)
            self._skip_restored(lo, hi)
            pos = hi
        self._copy(pos, cut, out)
        self._advance(hold, text)

    def _screen_destinations(self) -> None:
        """Screen each link destination the projection met, on its own and whole.

        A destination shows nothing in the text, so it is screened apart, as written and
        percent-decoded; anything found in it, even a vault value, replaces the destination:
        a link must not carry a value out of the browser. Block mode stops the reply, and
        releases nothing more.
        """
        proj = self._proj
        while proj.destinations:
            lo, hi, text = proj.destinations.pop(0)
            kinds = self._kinds_in_destination(text)
            if not kinds:
                continue
            if self.mode == "block":
                self._state = "blocked"
                raise ReplyBlockedError(kinds, "")
            label = redaction_label(kinds[0])
            self.redacted[kinds[0]] += 1
            self._hidden.append((lo, hi, f"({label})"))

    def _kinds_in_destination(self, text: str) -> list[str]:
        decoded = _BACKSLASH_ESCAPE.sub(r"\1", html.unescape(text))
        spellings = {text, decoded, urllib.parse.unquote(decoded)}
        kinds: list[str] = []
        try:
            for spelling in spellings:
                for f in self._detectors.scan(spelling, 0, final=True).findings:
                    if f.kind == TOKEN and (TOKEN, normalize_value(TOKEN, f.value)) in self._tokens:
                        continue
                    kinds.append(f.kind)
        except Exception as exc:  # fail closed, whatever a detector did
            raise self._detector_failed("a link", exc) from None
        return sorted(set(kinds), key=self._detectors.rank)

    def _detector_failed(self, what: str, exc: Exception) -> GuardFailedError:
        """Poison the guard; the error names only the exception's type (its message may
        quote the text)."""
        self._state = "failed"
        return GuardFailedError(f"a detector failed while screening {what} ({type(exc).__name__})")

    def _copy(self, a: int, b: int, out: list[str]) -> None:
        """Raw text to the wire, with redacted link destinations replaced."""
        if not self._hidden:
            self._copy_raw(a, b, out)
            return
        for lo, hi, label in [h for h in self._hidden if a <= h[0] and h[1] <= b]:
            self._copy_raw(a, lo, out)
            out.append(label)
            self._stored.append(label)
            self._skip_restored(lo, hi)
            a = hi
        self._copy_raw(a, b, out)

    def _copy_raw(self, a: int, b: int, out: list[str]) -> None:
        """Raw text as it is to the wire, and to storage with restored values as tokens."""
        if a >= b:
            return
        proj = self._proj
        if not self._restored and self._skip_to <= a:
            text = proj.raw_slice(a, b)
            out.append(text)
            self._stored.append(text)
            return
        out.append(proj.raw_slice(a, b))
        i = max(a, min(self._skip_to, b))
        for rs, re_, ident in self._restored:
            if re_ <= i:
                continue
            if rs >= b:
                break
            if rs >= i:
                self._stored.append(proj.raw_slice(i, rs))
                self._stored.append(f"<{ident}>")
            self._skip_to = max(self._skip_to, re_)
            i = min(re_, b)
        if i < b:
            self._stored.append(proj.raw_slice(i, b))

    def _skip_restored(self, lo: int, hi: int) -> None:
        """A redaction or tokenization covered raw `lo..hi`: no restored value in it is stored."""
        for rs, re_, _ in self._restored:
            if rs < hi and lo < re_:
                self._skip_to = max(self._skip_to, re_)
        self._skip_to = max(self._skip_to, hi)

    def _advance(self, n: int, text: str) -> None:
        """The first `n` projected characters are released."""
        cut = self._proj.release(n)
        if self._restored:
            self._restored = [r for r in self._restored if r[1] > cut]
        if self._hidden:
            self._hidden = [h for h in self._hidden if h[1] > cut]
        self._context = (self._context + text)[-_CONTEXT:]
        self._released += n

    def _swallow_continuation(
        self,
        hold: int,
        findings: list[Finding],
        tokenize: list[tuple[int, int, str]],
        out: list[str],
    ) -> tuple[int, list[Finding], list[tuple[int, int, str]]]:
        """Drop the rest of a candidate redacted at the window, up to the next space.

        Its label went out with the part already redacted. What is left of `hold` is released
        as usual; a finding that reaches into the dropped text is dropped with it.
        """
        text = self._proj.text
        end = next((i for i in range(hold) if text[i].isspace()), hold)
        for f in sorted(findings, key=lambda f: f.start):
            if f.start < end < f.end:
                end = f.end
        if end < hold:
            self._continuing = False
        if end:
            self._drop(end, None, out)  # its label went out with the part before
        kept = [
            Finding(f.start - end, f.end - end, f.kind, f.value) for f in findings if f.start >= end
        ]
        toks = [(s - end, e - end, t) for s, e, t in tokenize if s >= end]
        return hold - end, kept, toks

    def _drop(self, n: int, label: str | None, out: list[str]) -> None:
        """Replace the first `n` projected characters' raw text with `label` (or nothing).

        The raw text around it that shows nothing (markers before it, markers after it up to
        the next character shown) is released as it is, so no split decides it differently.
        """
        proj = self._proj
        lo, hi = proj.start_of(0), proj.end_of(n - 1)
        self._copy(proj.raw_base, lo, out)
        if label is not None:
            out.append(label)
            self._stored.append(label)
        self._skip_restored(lo, hi)
        cut = proj.cut_at(n)
        self._copy(hi, cut, out)
        self._advance(n, proj.text[:n])

    def _redact_held(self, window: str, out: list[str]) -> None:
        """The candidate at the start is open a whole window later: redact it, fail closed."""
        _, findings, _ = self._scan(window, final=True)
        cut = max(len(window) - MARGIN, len(window) // 2, 1)
        space = window.rfind(" ", max(0, cut - MARGIN // 2), cut)
        if space > 0:
            cut = space + 1  # a cut between words reads better, and only widens the overlap
        for f in sorted(findings, key=lambda f: f.start):
            if f.start < cut < f.end:
                cut = f.end
        if self.mode == "block":
            self._block(0, [HELD_TOO_LONG], out)
        label = None
        if not self._continuing:
            label = redaction_label(HELD_TOO_LONG)
            self.redacted[HELD_TOO_LONG] += 1
        self._continuing = True
        self._drop(cut, label, out)

    def _enter_key_block(self, end: int, out: list[str]) -> None:
        """A BEGIN line ends at projected `end`: the block is redacted from here to its END."""
        if self.mode == "block":
            self._block(0, [KEY_BLOCK], out)
        self._continuing = False
        self.redacted[KEY_BLOCK] += 1
        self._drop(end, redaction_label(KEY_BLOCK), out)
        self._state = "key_block"

    def _skip_key_block(self, final: bool, out: list[str]) -> bool:
        """Drop key material up to the END line; True once the block is over."""
        proj = self._proj
        norm = normalize(proj.text)
        m = _KEY_END.search(norm.text)
        if m is not None and m.end() == len(norm.text) and not final:
            m = None  # more dashes may follow
        if m is not None:
            n = norm.span_to_original(m.start(), m.end())[1]
        elif final:
            n = len(proj.text)
        else:
            n = max(0, len(proj.text) - _KEY_LINE_MAX)
        if n:
            proj = self._proj
            lo, hi = proj.raw_base, proj.end_of(n - 1)
            self._skip_restored(lo, hi)
            cut = proj.cut_at(n)
            if m is not None:
                self._copy(hi, cut, out)  # what shows nothing after the END line is not key
            self._advance(n, "")
            self._context = ""
        if m is not None or final:
            self._state = "screening"
            self._scanner.forget()
            return True
        return False

    def _block(self, start: int, kinds: list[str], out: list[str]) -> None:
        """Block mode: release what comes before `start`, then stop the reply."""
        proj = self._proj
        self._copy(proj.raw_base, proj.start_of(start), out)
        self._state = "blocked"
        raise ReplyBlockedError(kinds, "".join(out))


def _label_kind(f: Finding) -> str:
    """The kind a redaction names: a forbidden term's token is a forbidden term."""
    if f.kind == TOKEN and normalize_value(TOKEN, f.value).startswith("FORBIDDEN_"):
        return FORBIDDEN
    return f.kind


def _key_begin(text: str, final: bool) -> tuple[int, int] | None:
    """Where a private-key BEGIN line is in `text`: (start, end) in projected offsets, or
    (start, 0) when one may be beginning at `start` but has not arrived whole."""
    norm = normalize(text)
    pattern = _KEY_BEGIN_AT_END if final else _KEY_BEGIN
    m = pattern.search(norm.text, partial=not final)
    if m is None:
        return None
    start = norm.span_to_original(m.start(), m.end())[0]
    if m.partial:
        return (start, 0)
    return (start, norm.span_to_original(m.start(), m.end())[1])


def _clip(f: Finding, end: int) -> Finding:
    return f if f.end <= end else Finding(f.start, end, f.kind, f.value)


def _clusters(findings: list[Finding]) -> list[tuple[int, int, list[Finding]]]:
    """Overlapping findings are redacted together, so no part of any of them shows."""
    clusters: list[tuple[int, int, list[Finding]]] = []
    for f in sorted(findings, key=lambda f: (f.start, -f.end)):
        if clusters and f.start < clusters[-1][1]:
            start, end, members = clusters[-1]
            clusters[-1] = (start, max(end, f.end), [*members, f])
        else:
            clusters.append((f.start, f.end, [f]))
    return clusters


def screen(text: str, guard: Guard) -> str:
    """The one-shot screening of a whole text, which streaming always equals."""
    return guard.feed(text) + guard.flush()
