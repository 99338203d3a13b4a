"""A conversation's vault: which token stands for which original value, and back.

Tokens are `<KIND_N>`, numbered per kind in order of first appearance. The same value (after the
per-kind normalization of `holdback.detect.values`) always maps to the same token, and two
different values never share one. The vault is a read-only `Mapping` from token to value, which
is what the restorer takes; it changes only through `assign()`, `add()` and `reserve()`.

An id can also be *reserved*: the user's own text spelled it (`EMAIL_1`, `email\\_1`,
`<EMAIL_1>`) before any value had it. A reserved id is never assigned (the next email after a
reserved EMAIL_1 is EMAIL_2), so what the user typed never starts restoring to a value later. It
is not a token: it is not in the mapping, nor in `index()`, and restores to nothing;
`reserved` lists them, canonical (`EMAIL_1`), for the output guard.

This is the in-memory vault. The store persists it (encrypted) and assigns tokens atomically
across writers; the server loads a vault from the store, and adds what the store assigned.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from holdback.detect.values import normalize_value
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
    normalized: str

    def __repr__(self) -> str:  # never show the value
        return f"VaultEntry(token={self.token!r}, kind={self.kind!r})"


class Vault(Mapping[str, str]):
    """Token -> original value, with the reverse lookup by normalized value, and reserved ids.

    `reserved` are ids to reserve from the start. When it is not given and `entries` carries
    a `reserved` attribute (the store's `StoredVault` does), those are reserved: so
    `Vault(await store.load_vault(conversation_id))` has the conversation's reservations.
    """

    def __init__(
        self,
        entries: Mapping[str, str] | Iterable[VaultEntry] = (),
        *,
        reserved: Iterable[str] | None = None,
    ) -> None:
        self._entries: dict[str, VaultEntry] = {}
        self._by_value: dict[tuple[str, str], str] = {}
        self._counters: dict[str, int] = {}
        self._reserved: set[str] = set()
        self._reserved_view: frozenset[str] | None = None
        self._index: TokenIndex | None = None
        if reserved is None:
            reserved = getattr(entries, "reserved", ())
        for ident in reserved:
            self.reserve(ident)
        if isinstance(entries, Mapping):
            for token, value in entries.items():
                kind = parse_id(token_id(token))[0].lower()
                self.add(f"<{token_id(token)}>", kind, value)
        else:
            for entry in entries:
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

    def lookup(self, kind: str, normalized: str) -> str | None:
        """The token of a value already in the vault, by its normalized form."""
        return self._by_value.get((kind, normalized))

    def contains_value(self, kind: str, value: str) -> bool:
        return (kind, normalize_value(kind, value)) in self._by_value

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
        """Record a token that was assigned elsewhere (by the store)."""
        norm = normalize_value(kind, value) if normalized is None else normalized
        existing = self._entries.get(token)
        if existing is not None:
            if existing.normalized != norm or existing.kind != kind:
                raise VaultConflictError(f"token {token} already stands for another value")
            return
        other = self._by_value.get((kind, norm))
        if other is not None and other != token:
            raise VaultConflictError(f"this {kind} value already has token {other}, not {token}")
        label, n = parse_id(token_id(token))
        if token_id(token) in self._reserved:
            raise VaultConflictError(f"token {token} is reserved: the user typed it literally")
        self._entries[token] = VaultEntry(token, kind, value, norm)
        self._by_value[(kind, norm)] = token
        self._counters[label] = max(self._counters.get(label, 0), n)
        self._index = None

    def assign(self, kind: str, value: str, normalized: str | None = None) -> str:
        """The token for a value: its existing token, or the next one of its kind."""
        norm = normalize_value(kind, value) if normalized is None else normalized
        token = self._by_value.get((kind, norm))
        if token is not None:
            return token
        label = kind_label(kind)
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
        if f"<{canonical}>" in self._entries or canonical in self._entries:
            raise VaultConflictError(f"<{canonical}> is a token of this vault, not reservable")
        self._reserved.add(canonical)
        self._reserved_view = None
