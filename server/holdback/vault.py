"""A conversation's vault: which token stands for which original value, and back.

Tokens are `<KIND_N>`, numbered per kind in order of first appearance. The same value (after the
per-kind normalization of `holdback.detect.values`) always maps to the same token, and two
different values never share one. The vault is a read-only `Mapping` from token to value, which
is what the restorer takes; it changes only through `assign()` and `add()`.

This is the in-memory vault. The store persists it (encrypted) and assigns tokens atomically
across writers; the server loads a vault from the store, and adds what the store assigned.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from holdback.detect.values import normalize_value
from holdback.errors import HoldbackError
from holdback.tokens import TokenIndex, kind_label, make_token, parse_id, token_id


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
    """Token -> original value, with the reverse lookup by normalized value."""

    def __init__(self, entries: Mapping[str, str] | Iterable[VaultEntry] = ()) -> None:
        self._entries: dict[str, VaultEntry] = {}
        self._by_value: dict[tuple[str, str], str] = {}
        self._counters: dict[str, int] = {}
        self._index: TokenIndex | None = None
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
        return f"Vault({len(self)} entries)"

    # -- lookups ---------------------------------------------------------------------------

    def entries(self) -> list[VaultEntry]:
        return list(self._entries.values())

    def lookup(self, kind: str, normalized: str) -> str | None:
        """The token of a value already in the vault, by its normalized form."""
        return self._by_value.get((kind, normalized))

    def contains_value(self, kind: str, value: str) -> bool:
        return (kind, normalize_value(kind, value)) in self._by_value

    def index(self) -> TokenIndex:
        """The restorer's index of this vault, rebuilt only after the vault changed."""
        if self._index is None:
            self._index = TokenIndex(self)
        return self._index

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
        token = make_token(kind, self._counters.get(label, 0) + 1)
        self.add(token, kind, value, norm)
        return token
