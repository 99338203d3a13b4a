"""Pseudonymization: every sensitive value in a user message becomes its conversation's token.

The rule it keeps: `restore(masked_text, vault) == text`, and the masked text contains none of
the values found. Two things make that hold:

- every finding is replaced by its token, `<KIND_N>`;
- anything in the user's own text that the restorer would replace (a token the user typed, such
  as `<EMAIL_1>`, or a bare `EMAIL_1` where EMAIL_1 is a token of this vault) is *neutralized*:
  it becomes a `literal` token of its own, which restores to exactly what the user typed and can
  never be confused with a real token of the vault;
- every other id the text spells (a bare `EMAIL_1` or `email\\_1` before EMAIL_1 exists, and
  the id of every typed token) is *reserved* in the vault before any token is assigned, so it
  never becomes a token later: the bare id stays in the masked text as typed, and the stored
  text keeps restoring to what the user typed, however the vault grows afterwards.

When a value is seen in a differently-spelled form (`Sarah@Acme.com` after `sarah@acme.com`)
it gets the same token, which restores to the spelling seen first: that is what the model's
replies show. The user's own message reads back exactly as typed: `spellings()` lists the
spans whose typed text differs from the vault's value, which the server stores sealed with the
message, and `restore_as_typed()` rebuilds the message from its masked text, its spans and
those spellings.

`analyze()` does one pass without changing the vault and says which ids must be reserved and
which values still need tokens; the server has the store reserve and assign those in one
transaction (atomically, across writers, reservations first) and calls it again, until the
analysis is `complete`. `pseudonymize()` does the same with an in-memory vault.

A `Pseudonymizer` may be used from several threads at once (the server analyzes large messages
off its event loop); each vault, by one thread at a time.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from holdback.detect import DetectorSet, Finding, default_detectors
from holdback.stream.projection import Projector, marks, may_decode
from holdback.stream.restorer import find_forms, restore
from holdback.tokens import (
    TOKEN_RE,
    TokenIndex,
    bare_ids,
    find_tokens,
    find_typed_tokens,
    is_word_char,
    kind_label,
)
from holdback.vault import Vault

__all__ = [
    "Analysis",
    "Masked",
    "Pseudonymizer",
    "Vault",
    "VaultItem",
    "pseudonymize",
    "restore",
    "restore_as_typed",
    "restore_in_order",
    "spellings",
]

LITERAL = "literal"


@dataclass(frozen=True, slots=True)
class Masked(Finding):
    """A finding and the token that replaced it in the masked text."""

    token: str = ""

    def __repr__(self) -> str:
        return (
            f"Masked(start={self.start}, end={self.end}, kind={self.kind!r}, token={self.token!r})"
        )


@dataclass(frozen=True, slots=True)
class VaultItem:
    kind: str
    value: str
    normalized: str

    def __repr__(self) -> str:
        return f"VaultItem(kind={self.kind!r})"


@dataclass(slots=True)
class Analysis:
    """One pass of `Pseudonymizer.analyze`.

    `reserve`: ids the text spells that the vault must reserve (canonical, sorted), before
    `missing`, the values that need tokens, are assigned. `masked_text` is set once every value
    has a token; it is final only when the analysis is `complete`, that is when nothing is left
    to reserve either (a reservation can fail because the id has become a token meanwhile).
    """

    findings: list[Finding]
    missing: list[VaultItem] = field(default_factory=list)
    masked_text: str | None = None
    masked: list[Masked] = field(default_factory=list)
    reserve: list[str] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return self.masked_text is not None and not self.reserve


class Pseudonymizer:
    # Texts whose findings (and their values' normalized forms) are kept: `analyze` runs a few
    # times per message, and neither depends on the vault. One per message being analyzed at
    # once, roughly.
    RECENT = 8

    def __init__(
        self, detectors: DetectorSet | None = None, *, phone_region: str | None = None
    ) -> None:
        self.detectors = detectors or default_detectors()
        self.phone_region = phone_region
        self._recent: list[tuple[str, list[Finding], dict[tuple[str, str], str]]] = []
        self._lock = threading.Lock()

    def _detect(self, text: str) -> tuple[list[Finding], dict[tuple[str, str], str]]:
        """The findings of a text, and its values' normalized forms known so far."""
        with self._lock:
            for seen, found, known in self._recent:
                if seen is text:
                    return found, known
        found = self.detectors.detect(text)
        known = {}
        shown = self._shown(text, known)
        found = self.detectors.resolve([*found, *shown, *self._typed_tokens(text)])
        with self._lock:
            self._recent = [(text, found, known), *self._recent[: self.RECENT - 1]]
        return found, known

    def _shown(self, text: str, known: dict[tuple[str, str], str]) -> list[Finding]:
        """Values the model reads once markdown and entities are decoded.

        The model reads `ann&#64;example.org` and `**ann**@example.org` as the address they
        spell, as the browser shows them, so the user's text is also read through the
        projection the guard screens replies with. A finding there masks the raw text that
        spells it, and is keyed by its decoded value (noted in `known`), so every spelling
        shares one token; its value is the raw text, so the masked text restores to exactly
        what the user typed. Where the raw text
        spells the value but for its spacing, the raw text's own detection decides: collapsing
        spaces makes no value the model would not already read there.
        """
        # Only a finding that takes in text the projection shows otherwise than it is written
        # can be kept, and every such text is at a mark: the projection is read around them.
        if not may_decode(text):
            return []
        at = marks(text)
        if not at:
            return []
        shown = Projector("markdown")
        shown.extend(text, final=True)
        lo, hi = shown.lo, shown.hi
        n = len(shown.text)
        around = []
        for mark in at:
            # The first character shown at or after the mark: it, or the one before it and
            # it, are in every finding that takes in what the mark changes.
            i = bisect.bisect_left(lo, mark)
            around.append((max(0, i - 2), min(n, i + 2)))
        out = []
        for f in self.detectors.detect_around(shown.text, around):
            start, end = lo[f.start], hi[f.end - 1]
            raw = text[start:end]
            if _unspaced(raw) != _unspaced(f.value):
                out.append(Finding(start, end, f.kind, raw))
                known[(f.kind, raw)] = self.detectors.normalize(
                    f.kind, f.value, phone_region=self.phone_region
                )
        return out

    def _normalized(self, f: Finding, known: dict[tuple[str, str], str]) -> str:
        # A message is analyzed a few times: its values are normalized once (`known` goes
        # with its findings).
        key = (f.kind, f.value)
        norm = known.get(key)
        if norm is None:
            norm = known[key] = self.detectors.normalize(
                f.kind, f.value, phone_region=self.phone_region
            )
        return norm

    def analyze(self, text: str, vault: Vault) -> Analysis:
        """One pass: the masked text if every value has a token, else the values that need one."""
        found, known = self._detect(text)
        extra: list[Finding] = []
        while True:
            findings = sorted([*found, *extra], key=lambda f: f.start)
            missing = self._missing(findings, vault, known)
            reserve = self._unreserved(text, findings, vault)
            if missing:
                return Analysis(findings, missing, reserve=reserve)
            masked_text, masked = self._apply(text, findings, vault, known)
            stray = self._stray_forms(text, masked, vault)
            if not stray:
                return Analysis(findings, [], masked_text, masked, reserve)
            extra.extend(stray)

    def pseudonymize(self, text: str, vault: Vault) -> tuple[str, list[Masked]]:
        """Mask a text, reserving ids and assigning new tokens in the (in-memory) vault."""
        while True:
            analysis = self.analyze(text, vault)
            if analysis.complete:
                assert analysis.masked_text is not None
                return analysis.masked_text, analysis.masked
            for ident in analysis.reserve:  # first: the values must not get these ids
                vault.reserve(ident)
            for item in analysis.missing:
                vault.assign(item.kind, item.value, item.normalized)

    # -- internals -------------------------------------------------------------------------

    def _typed_tokens(self, text: str) -> list[Finding]:
        return [
            Finding(start, end, LITERAL, text[start:end])
            for start, end, _ in find_typed_tokens(text)
        ]

    def _unreserved(self, text: str, findings: list[Finding], vault: Vault) -> list[str]:
        """The ids the text spells outside its findings, and those of its typed tokens, that
        are neither tokens nor reserved yet.

        The text between two findings is what the masked text holds between two tokens,
        which end in `>` and start with `<` (non-word characters, like the start and the end
        of a text), so the ids spelled there are exactly those the restorer could ever find in
        the masked text outside its tokens. Inside findings nothing is looked at: a value's
        text must not reach the vault's clear columns.
        """
        ids: set[str] = set()
        pos = 0
        for f in findings:
            ids |= bare_ids(text[pos : f.start])
            if f.kind == LITERAL:
                ids.update(ident for _, _, ident in find_typed_tokens(f.value))
            pos = f.end
        ids |= bare_ids(text[pos:])
        ids.difference_update(vault.index().values, vault.reserved)
        return sorted(ids)

    def _missing(
        self, findings: list[Finding], vault: Vault, known: dict[tuple[str, str], str]
    ) -> list[VaultItem]:
        # Keyed as the vault and the store key values: by kind label and normalized form.
        missing: dict[tuple[str, str], VaultItem] = {}
        for f in findings:
            norm = self._normalized(f, known)
            slot = (kind_label(f.kind), norm)
            if slot not in missing and vault.lookup(f.kind, norm) is None:
                missing[slot] = VaultItem(f.kind, f.value, norm)
        return list(missing.values())

    def _apply(
        self, text: str, findings: list[Finding], vault: Vault, known: dict[tuple[str, str], str]
    ) -> tuple[str, list[Masked]]:
        out: list[str] = []
        masked: list[Masked] = []
        pos = 0
        for f in findings:
            token = vault.lookup(f.kind, self._normalized(f, known))
            assert token is not None
            out.append(text[pos : f.start])
            out.append(token)
            # The span keeps the text as typed (a value read through markup is decoded).
            masked.append(Masked(f.start, f.end, f.kind, text[f.start : f.end], token))
            pos = f.end
        out.append(text[pos:])
        return "".join(out), masked

    def _stray_forms(self, text: str, masked: list[Masked], vault: Vault) -> list[Finding]:
        """Forms of vault tokens that came from the user's own text, in original offsets.

        Those are the forms of the masked text but its tokens: the restorer reads each token
        as itself (it begins with `<`, which no form holds but first, and ends with `>`), and
        a form before it as if the text ended there. So the user's own pieces of text are
        read, joined by a character that no form holds and that is no word character either,
        as a token is to its neighbours: each form is read once, whatever the findings.
        """
        pieces: list[str] = []
        starts: list[int] = []  # where each piece starts in the joined text
        shifts: list[int] = []  # and how far it is from there in the original
        pos = at = 0
        for m in [*masked, None]:
            end = len(text) if m is None else m.start
            pieces.append(text[pos:end])
            starts.append(at)
            shifts.append(pos - at)
            at += end - pos + 1
            if m is not None:
                pos = m.end
        stray: list[Finding] = []
        for start, end in find_forms(_APART.join(pieces), vault.index()):
            shift = shifts[bisect.bisect_right(starts, start) - 1]
            o_start, o_end = start + shift, end + shift
            # Widen to whole words, so the neutralized text restores as typed.
            while o_start > 0 and is_word_char(text[o_start - 1]):
                o_start -= 1
            while o_end < len(text) and is_word_char(text[o_end]):
                o_end += 1
            stray.append(Finding(o_start, o_end, LITERAL, text[o_start:o_end]))
        return stray


_APART = "\x00"


def _unspaced(text: str) -> str:
    return "".join(text.split())


def spellings(masked: Sequence[Masked], vault: Mapping[str, str]) -> dict[int, str]:
    """The spans of a message whose typed text is not their token's value in the vault
    (`Sarah@Acme.com` where the vault has `sarah@acme.com`): span index -> text as typed.

    These, and only these, must be kept with the message for it to read back as typed; they
    are original values, so they are stored sealed, never in the clear.
    """
    return {i: m.value for i, m in enumerate(masked) if vault.get(m.token) != m.value}


def restore_as_typed(
    masked_text: str,
    spans: Sequence[tuple[int, int, str]],
    typed: Mapping[int, str],
    index: TokenIndex,
) -> str | None:
    """A user's message exactly as typed, from its masked text and its masked spans.

    `spans` are the message's `(start, end, token)` in the original text's offsets, in order
    (what `Masked` records); `typed` maps span indexes to their spellings (`spellings()`);
    every other span is its token's value in `index`. The text between spans is the user's
    own text, as the masked text holds it. None if the spans do not fit the masked text.
    """
    out: list[str] = []
    pos = 0
    shift = 0  # masked offset - original offset, after the spans seen so far
    for i, (start, end, token) in enumerate(spans):
        at = start + shift
        if end < start or at < pos or masked_text[at : at + len(token)] != token:
            return None
        text = typed.get(i)
        if text is None:
            text = index.values.get(token[1:-1]) if TOKEN_RE.fullmatch(token) else None
            if text is None:
                return None
        out.append(masked_text[pos:at])
        out.append(text)
        pos = at + len(token)
        shift += len(token) - (end - start)
    out.append(masked_text[pos:])
    return "".join(out)


def restore_in_order(
    text: str, tokens: Sequence[str], typed: Mapping[int, str], index: TokenIndex
) -> str | None:
    """A text cut from a user's masked message (its title) restored as the user typed it.

    The k-th token in `text` is the message's k-th masked span (a typed token spelling is a
    `literal` token of its own, so every exact token in a masked text is one it inserted):
    it becomes `typed[k]` if given, else its value; the rest restores as usual. None if the
    tokens of `text` are not `tokens` in order.
    """
    out: list[str] = []
    pos = 0
    for k, match in enumerate(find_tokens(text)):
        if k >= len(tokens) or match.group() != tokens[k]:
            return None
        out.append(restore(text[pos : match.start()], index))
        spelled = typed.get(k)
        out.append(spelled if spelled is not None else restore(match.group(), index))
        pos = match.end()
    out.append(restore(text[pos:], index))
    return "".join(out)


_DEFAULT: Pseudonymizer | None = None


def pseudonymize(text: str, vault: Vault) -> tuple[str, list[Masked]]:
    """Mask every sensitive value of a text with the built-in detectors."""
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = Pseudonymizer()
    return _DEFAULT.pseudonymize(text, vault)
