"""The output guard: screen a streamed reply for values the model produced on its own.

It runs on the model's *tokenized* text, before the restorer, so values restored from the vault
are never flagged. A detector finding that is not a value of the conversation's vault becomes
`[redacted <kind>]`; a forbidden term becomes `[redacted]`; a token spelling that is not one of
the vault's (a token the model made up) becomes `[redacted token]`. In `block` mode the first
such finding stops the reply instead, and no part of it is emitted.

Hold-back is minimal, as in the restorer: text is held only while some detector still has an open
candidate at it (a partial match reaching the end of the buffer, or a complete finding touching
it, which could still grow: `sarah@acme.co` -> `sarah@acme.com`). The hold is bounded by a window
(256 characters by default): when the open candidate at the start of the held text is still open
a whole window later, the window is screened as it stands and released. That bounds latency and
memory (a reply made of digits never stalls), at a price: a value longer than the window, such as
a long PEM private key, is screened in window-sized pieces, each redacted on its own.

Chunk invariance holds because every decision depends only on the text, never on where chunks
end: the screening is a loop over windows that start at positions fixed by the text, and in each
window only decided positions are released. Screening a whole text is that same loop
(`screen()`), so for every split the streamed output equals the one-shot one. A partial scan
resumes from what the last one proved (`holdback.detect.incremental`), and answers exactly as
scanning the window whole would; tests hold the guard to its whole-scan reference.

Fail closed: if a detector raises, the guard raises `GuardFailedError` and is poisoned; every
later call raises too, so no raw text can follow.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Literal

from holdback.detect import DetectorSet, Finding, TermMatcher, default_detectors
from holdback.detect.incremental import StreamScanner
from holdback.detect.secrets import token_detector, token_fragment_detector
from holdback.detect.values import normalize_value
from holdback.errors import ConfigurationError, FilterFailedError, HoldbackError, StreamClosedError
from holdback.tokens import parse_id, token_id
from holdback.vault import Vault

GuardMode = Literal["redact", "block"]
FORBIDDEN = "forbidden"
TOKEN = "token"  # a token spelling; redacted unless it is one of the vault's
DEFAULT_WINDOW = 256
_CONTEXT = 80  # characters of already-released text kept for look-behinds


class GuardConfigError(ConfigurationError, ValueError):
    """A guard setting (mode, window) cannot be used."""


class GuardFailedError(FilterFailedError):
    """A detector failed while screening a reply; the reply must stop with no raw text after."""


class ReplyBlockedError(HoldbackError):
    """The guard, in block mode, found text that must not be shown; the reply stops here.

    `safe_prefix` is the screened text before the offending finding, which may still be sent.
    """

    def __init__(self, kinds: Iterable[str], safe_prefix: str) -> None:
        self.kinds = sorted(set(kinds))
        self.safe_prefix = safe_prefix
        super().__init__("the reply was blocked: it contained " + ", ".join(self.kinds))


def forbidden_matcher(terms: Iterable[str]) -> TermMatcher:
    """Forbidden terms match anywhere, case-insensitively, with evasion handling."""
    return TermMatcher(FORBIDDEN, terms, whole_words=False)


def redaction_label(kind: str) -> str:
    if kind == FORBIDDEN:
        return "[redacted]"
    return f"[redacted {TOKEN if kind == 'token_fragment' else kind}]"


class Guard:
    """Streaming output guard. Sans-I/O: `feed()` tokenized text in, screened text out."""

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
        phone_region: str = "US",
    ) -> None:
        """Screen with `detectors` (the built-in ones by default) and `forbidden` terms.

        Values of the conversation's vault are never flagged: pass the vault itself, or its
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
        parts = list(detectors.detectors)
        parts.append(token_detector([*detectors.kinds, "literal"]))
        parts.append(token_fragment_detector())
        if forbidden is not None and len(forbidden):
            parts.append(forbidden)
        self._detectors = DetectorSet(parts)
        self._scanner = StreamScanner(self._detectors)
        allowed_values = set(allowed)
        if isinstance(vault, Vault):
            allowed_values.update((e.kind, e.normalized) for e in vault.entries())
        elif vault is not None:
            for token, value in vault.items():
                kind = parse_id(token_id(token))[0].lower()
                allowed_values.add((kind, normalize_value(kind, value, phone_region=phone_region)))
        for token in vault or ():
            allowed_values.add((TOKEN, token_id(token)))
        self._allowed = frozenset(allowed_values)
        self.mode = mode
        self.window = window
        self._phone_region = phone_region
        self._buf = ""
        self._context = ""
        self._released = 0  # stream offset of the held text
        self._closed = False
        self._failed = False
        self.blocked = False  # set when block mode stopped the reply
        self.redacted: Counter[str] = Counter()

    @property
    def pending(self) -> str:
        return self._buf

    def feed(self, chunk: str) -> str:
        self._check_open()
        if not chunk:
            return ""
        self._buf += chunk
        return self._run(final=False)

    def flush(self) -> str:
        self._check_open()
        out = self._run(final=True)
        self._closed = True
        return out

    def _check_open(self) -> None:
        if self._failed:
            raise GuardFailedError("the output guard failed earlier; the reply cannot go on")
        if self._closed:
            raise StreamClosedError("the guard's stream has ended; feed() after flush()")

    # -- screening -------------------------------------------------------------------------

    def _run(self, *, final: bool) -> str:
        out: list[str] = []
        while self._buf:
            window = self._buf[: self.window]
            full = len(self._buf) >= self.window
            last = len(self._buf) <= self.window
            hold, findings = self._scan(window, final=final and last)
            if hold == 0:
                if not full:
                    break
                # The candidate at the start is still open a whole window later: screen the
                # window as it stands.
                hold, findings = self._scan(window, final=True)
            out.append(self._render(window[:hold], findings, out) if findings else window[:hold])
            self._context = (self._context + window[:hold])[-_CONTEXT:]
            self._buf = self._buf[hold:]
            self._released += hold
            if hold < len(window) and not full:
                break  # what is left is open; rescanning it now would decide nothing new
        return "".join(out)

    def _scan(self, window: str, *, final: bool) -> tuple[int, list[Finding]]:
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
            self._failed = True
            raise GuardFailedError(
                f"a detector failed while screening the reply ({type(exc).__name__})"
            ) from None
        hold = len(window) if final else held - len(ctx)
        if not found:
            return hold, []
        shifted = [
            Finding(f.start - len(ctx), f.end - len(ctx), f.kind, f.value)
            for f in found
            if not self._is_allowed(f)
        ]
        return hold, shifted

    def _is_allowed(self, f: Finding) -> bool:
        if f.kind == FORBIDDEN or not self._allowed:
            return False
        norm = normalize_value(f.kind, f.value, phone_region=self._phone_region)
        return (f.kind, norm) in self._allowed

    def _render(self, text: str, findings: list[Finding], released: list[str]) -> str:
        clusters = self._clusters(findings)
        if self.mode == "block":
            self._closed = self.blocked = True
            first = clusters[0]
            raise ReplyBlockedError(
                (f.kind for c in clusters for f in c[2]), "".join(released) + text[: first[0]]
            )
        out: list[str] = []
        pos = 0
        for start, end, members in clusters:
            best = min(members, key=lambda f: (-(f.end - f.start), self._detectors.rank(f.kind)))
            out.append(text[pos:start])
            out.append(redaction_label(best.kind))
            self.redacted[best.kind] += 1
            pos = end
        out.append(text[pos:])
        return "".join(out)

    @staticmethod
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
