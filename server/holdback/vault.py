"""A conversation's vault: which token stands for which original value, and back.

Tokens are `<KIND_N>`, numbered per kind label in order of first appearance. The same value
(after the per-kind normalization of `holdback.detect.values`) always maps to the same token,
and two different values never share one. The vault is a read-only `Mapping` from token to
value, which is what the restorer takes; it changes only through `assign()`, `add()` and
`reserve()`.

The rule that keeps a value finding its token again: **the vault keeps what it knows and
rebuilds nothing.** Every entry carries the detector kind the value was found as
(`client-names`, which its label `CLIENT_NAMES` cannot give back) and its normalized form as
it was made then (a phone number in E.164 under the server's phone region), and the store
persists both. A vault is built from such entries, never from a bare token -> value mapping.
Values are looked up by kind *label* and normalized form, which is how the store keys them:
two detector kinds with one label share one numbering, and for one normalized form, one token.

An id can also be *reserved*: the user's own text spelled it (`EMAIL_1`, `email\\_1`,
`<EMAIL_1>`) before any value had it. A reserved id is never assigned (the next email after a
reserved EMAIL_1 is EMAIL_2), so what the user typed never starts restoring to a value later. It
is not a token: it is not in the mapping, nor in `index()`, and restores to nothing;
`reserved` lists them, canonical (`EMAIL_1`), for the output guard.

This is the in-memory vault. The store persists it (encrypted) and assigns tokens atomically
across writers; the server loads a vault from the store, and adds what the store assigned. A
vault is used by one thread at a time (the server may analyze a large message on a worker
thread, and changes the vault only after that analysis has returned).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from holdback.errors import HoldbackError
from holdback.tokens import (
    TokenIndex,
    ascii_upper,
    kind_label,
    make_id,
    make_token,
    parse_id,
    token_id,
)


class VaultConflictError(HoldbackError):
    """A token or a value was given a second, different meaning in one vault."""


@dataclass(frozen=True, slots=True)
class VaultEntry:
    token: str  # "<KIND_N>"
    kind: str  # the detector kind, e.g. "email"
    value: str  # the original value, exactly as first seen
    normalized: str  # as made when the value was found (phone numbers: the server's region)

    def __repr__(self) -> str:  # never show the value
        return f"VaultEntry(token={self.token!r}, kind={self.kind!r})"


class EntrySource(Protocol):
    """What the store hands over for a conversation (`StoredVault`): its entries, as stored,
    and its reserved ids."""

    @property
    def entries(self) -> Sequence[VaultEntry]: ...

    @property
    def reserved(self) -> frozenset[str]: ...


class Vault(Mapping[str, str]):
    """Token -> original value, with the reverse lookup by normalized value, and reserved ids.

    It is built from entries that carry their kinds and normalized forms: a list of
    `VaultEntry`, or the store's `StoredVault`, whose reserved ids it takes too unless
    `reserved` is given; so `Vault(await store.load_vault(conversation_id))` is the
    conversation's vault. A bare token -> value mapping is refused: a kind rebuilt from a
    token's label, and a value normalized again with default settings, are guesses, and a
    wrong guess gives a known value a second token.
    """

    def __init__(
        self,
        entries: Iterable[VaultEntry] | EntrySource = (),
        *,
        reserved: Iterable[str] | None = None,
    ) -> None:
        self._entries: dict[str, VaultEntry] = {}
        self._by_value: dict[tuple[str, str], str] = {}
        self._counters: dict[str, int] = {}
        self._reserved: set[str] = set()
        self._reserved_view: frozenset[str] | None = None
        self._index: TokenIndex | None = None
        records: Iterable[VaultEntry]
        if isinstance(entries, Vault):  # a copy
            records = entries.entries()
            if reserved is None:
                reserved = entries.reserved
        elif isinstance(entries, Mapping):
            source = getattr(entries, "entries", None)
            if not isinstance(source, Sequence):
                raise TypeError(
                    "a Vault is built from VaultEntry records (with their kinds and normalized "
                    "forms), not from a token -> value mapping"
                )
            records = source
            if reserved is None:
                reserved = getattr(entries, "reserved", ())
        elif isinstance(entries, Iterable):
            records = entries
        else:
            records = entries.entries
            if reserved is None:
                reserved = entries.reserved
        for ident in reserved or ():
            self.reserve(ident)
        for entry in records:
            self.add(entry.token, entry.kind, entry.value, entry.normalized)

    # -- Mapping ---------------------------------------------------------------------------

    def __getitem__(self, token: str) -> str:
        return self._entries[token].value

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        reserved = f", {len(self._reserved)} reserved" if self._reserved else ""
        return f"Vault({len(self)} entries{reserved})"

    # -- lookups ---------------------------------------------------------------------------

    def entries(self) -> list[VaultEntry]:
        return list(self._entries.values())

    def entry(self, token: str) -> VaultEntry:
        """The entry of a token (`KeyError` if it is not one of this vault's)."""
        return self._entries[token]

    def lookup(self, kind: str, normalized: str) -> str | None:
        """The token of a value already in the vault, by its normalized form."""
        return self._by_value.get((_label(kind), normalized))

    def contains_value(self, kind: str, value: str, *, phone_region: str = "US") -> bool:
        return self.lookup(kind, _normalize(kind, value, phone_region)) is not None

    def index(self) -> TokenIndex:
        """The restorer's index of this vault's tokens, rebuilt only after they changed."""
        if self._index is None:
            self._index = TokenIndex(self)
        return self._index

    @property
    def reserved(self) -> frozenset[str]:
        """The reserved ids, canonical (`EMAIL_1`): never assigned, never restored."""
        if self._reserved_view is None:
            self._reserved_view = frozenset(self._reserved)
        return self._reserved_view

    # -- changes ---------------------------------------------------------------------------

    def add(self, token: str, kind: str, value: str, normalized: str | None = None) -> None:
        """Record a token that was assigned elsewhere (by the store).

        `normalized` is the form the value was normalized to when it was found; the default,
        normalizing again with the default settings, is only for values made up in code.
        """
        norm = _normalize(kind, value, "US") if normalized is None else normalized
        ident = token_id(token)
        token = f"<{ident}>"
        label, n = parse_id(ident)
        if _label(kind) != label:
            raise VaultConflictError(f"token {token} cannot stand for a value of kind {kind}")
        existing = self._entries.get(token)
        if existing is not None:
            if existing.normalized != norm:
                raise VaultConflictError(f"token {token} already stands for another value")
            return
        other = self._by_value.get((label, norm))
        if other is not None and other != token:
            raise VaultConflictError(f"this {kind} value already has token {other}, not {token}")
        if ident in self._reserved:
            raise VaultConflictError(f"token {token} is reserved: the user typed it literally")
        self._entries[token] = VaultEntry(token, kind, value, norm)
        self._by_value[(label, norm)] = token
        self._counters[label] = max(self._counters.get(label, 0), n)
        self._index = None

    def assign(self, kind: str, value: str, normalized: str | None = None) -> str:
        """The token for a value: its existing token, or the next one of its kind."""
        norm = _normalize(kind, value, "US") if normalized is None else normalized
        label = _label(kind)
        token = self._by_value.get((label, norm))
        if token is not None:
            return token
        n = self._counters.get(label, 0) + 1
        while make_id(label, n) in self._reserved:
            n += 1
        token = make_token(label, n)
        self.add(token, kind, value, norm)
        return token

    def reserve(self, ident: str) -> None:
        """Reserve an id (`EMAIL_1` or `<EMAIL_1>`, any case), so it is never assigned.

        Reserving an id twice is harmless; reserving a token of the vault is a conflict (a
        token's spellings in user text are neutralized instead, see `pseudonymize`).
        """
        canonical = token_id(ascii_upper(ident))
        if canonical in self._reserved:
            return
        if f"<{canonical}>" in self._entries:
            raise VaultConflictError(f"<{canonical}> is a token of this vault, not reservable")
        self._reserved.add(canonical)
        self._reserved_view = None


@functools.lru_cache(maxsize=4096)
def _label(kind: str) -> str:
    return kind_label(kind)


def _normalize(kind: str, value: str, phone_region: str) -> str:
    # Imported here: the store builds entries without loading the detectors.
    from holdback.detect.values import normalize_value

    return normalize_value(kind, value, phone_region=phone_region)
