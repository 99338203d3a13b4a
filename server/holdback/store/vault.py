"""The vault: which token stands for which value in a conversation, kept as ciphertext.

The rules:
- The same normalized value of a kind always gets the same token in a conversation; a new
  value gets the next number of its kind (1, 2, 3…, in order of first appearance), skipping
  the numbers of reserved ids.
- A *reserved* id (the conversation's text spelled `EMAIL_1` before any value had it) is a
  row of kind `reserved` (lower case, which no token kind label can be) under the token it
  keeps from ever being assigned, `<EMAIL_1>`: the primary key (conversation, token) makes
  an id either reserved or a token, never both, even for a writer that bypassed the lock.
  Reservations are made first, in the same transaction as the assignment. The row's sealed
  "value" is the id itself (nothing sensitive: the id is in the clear in `token` anyway),
  so key rotation and the key check treat it like any entry; it is never a vault token.
- An entry is found by the keyed hash of `LABEL NUL normalized`; values are never compared
  in the clear and never decrypted to look them up.
- An entry keeps what the pipeline knew: the detector kind in the clear (`detector_kind`,
  next to the token's label in `kind`), and the normalized form sealed with the value. Both
  come back as stored (`VaultEntry`); nothing is re-derived from the token.
- An entry's plaintext (the value and its normalized form) is sealed with AES-256-GCM and the
  conversation id as associated data, so a ciphertext copied to another conversation fails.
- A vault is bounded: a conversation holds at most `limit` rows (tokens and reserved ids,
  `MAX_VAULT_ENTRIES` unless the store is told otherwise). An update that would go past it
  is refused whole (`VaultFullError`), so a message is either pseudonymized completely or
  not accepted at all.
- Assignment is safe under concurrency: it runs under the conversation's row lock, and the
  unique constraints on (conversation, token) and (conversation, kind, value hash) turn any
  writer that slipped past it into a conflict that the caller retries from the start.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, cast

from sqlalchemy import Table, bindparam, select
from sqlalchemy.ext.asyncio import AsyncSession

from holdback.errors import InvalidTokenError
from holdback.store.crypto import VaultKey
from holdback.store.errors import (
    ConversationNotFoundError,
    InvalidRecordError,
    VaultEntryCorruptError,
    VaultFullError,
)
from holdback.store.records import StoredVault, VaultItem, VaultUpdate
from holdback.store.runner import Runner, insert_rows
from holdback.store.schema import ConversationRow, VaultEntryRow
from holdback.tokens import ID_RE, kind_label, make_token, parse_id
from holdback.vault import VaultEntry

MAX_VALUE_CHARS = 100_000
MAX_VAULT_ENTRIES = 10_000  # rows per conversation: tokens and reserved ids
MAX_KIND_CHARS = 200  # a detector kind: a term file's name, say
RESERVED = "reserved"  # the kind of a reservation row; token kind labels are upper case
# An id beyond these can never be assigned (the token column and the number's integer type
# cannot hold it), so reserving it needs no row.
MAX_TOKEN_CHARS = 100
MAX_NUMBER = 2**31 - 1


@dataclass(frozen=True, slots=True)
class _Prepared:
    kind: str  # the token's KIND label
    detector_kind: str
    value: str
    normalized: str
    value_hash: bytes


def seal_entry(key: VaultKey, conversation_id: str, value: str, normalized: str) -> bytes:
    plaintext = json.dumps([value, normalized], ensure_ascii=False).encode("utf-8")
    return key.seal(plaintext, conversation_id.encode("utf-8"))


def open_entry(key: VaultKey, conversation_id: str, token: str, blob: bytes) -> tuple[str, str]:
    """The value and normalized form sealed in a vault entry."""
    what = f"vault entry {token} of conversation {conversation_id}"
    plaintext = key.open(blob, conversation_id.encode("utf-8"), what=what)
    try:
        value, normalized = json.loads(plaintext.decode("utf-8"))
    except (ValueError, TypeError):
        raise VaultEntryCorruptError(f"{what}: the decrypted entry is malformed") from None
    if not isinstance(value, str) or not isinstance(normalized, str):
        raise VaultEntryCorruptError(f"{what}: the decrypted entry is malformed")
    return value, normalized


def prepare(key: VaultKey, items: Sequence[VaultItem]) -> list[_Prepared]:
    """Check the items and compute their keyed hashes (outside any transaction)."""
    prepared = []
    for index, item in enumerate(items):
        try:
            label = kind_label(item.kind)
        except InvalidTokenError:
            raise InvalidRecordError(
                f"vault item {index} has a kind that cannot name a token"
            ) from None
        if len(item.kind) > MAX_KIND_CHARS:
            raise InvalidRecordError(
                f"vault item {index} has a kind longer than {MAX_KIND_CHARS} characters"
            )
        if not item.value or not item.normalized:
            raise InvalidRecordError(f"vault item {index} ({label}) has an empty value")
        if len(item.value) > MAX_VALUE_CHARS or len(item.normalized) > MAX_VALUE_CHARS:
            raise InvalidRecordError(
                f"vault item {index} ({label}) is longer than {MAX_VALUE_CHARS} characters"
            )
        value_hash = key.value_hash(label, item.normalized)
        prepared.append(_Prepared(label, item.kind, item.value, item.normalized, value_hash))
    return prepared


def prepare_reservations(ids: Iterable[str]) -> list[str]:
    """Check the ids to reserve (canonical `KIND_N`), without repeats, in the order given."""
    checked: dict[str, None] = {}
    for index, ident in enumerate(ids):
        if not isinstance(ident, str) or not ID_RE.match(ident):
            raise InvalidRecordError(f"reserved id {index} is not a canonical token id KIND_N")
        checked[ident] = None
    return list(checked)


def _storable(ident: str) -> bool:
    return len(ident) + 2 <= MAX_TOKEN_CHARS and parse_id(ident)[1] <= MAX_NUMBER


_table = cast(Table, VaultEntryRow.__table__)
_INSERT = insert_rows(_table)
_BATCH = 500  # tokens per IN (SQLite allows 32,766 parameters per statement)
_LOCK = (
    select(ConversationRow.id)
    .where(ConversationRow.id == bindparam("conversation_id"))
    .with_for_update(key_share=True)
)
_HELD = select(_table.c.token, _table.c.kind, _table.c.number, _table.c.value_hash).where(
    _table.c.conversation_id == bindparam("conversation_id")
)


# The entries of some tokens (an expanding IN: one compiled shape for any count).
_ENTRIES = select(
    _table.c.token, _table.c.kind, _table.c.detector_kind, _table.c.value_ciphertext
).where(
    _table.c.conversation_id == bindparam("conversation_id"),
    _table.c.token.in_(bindparam("tokens", expanding=True)),
)


async def lock_conversation(session: AsyncSession, conversation_id: str) -> None:
    """Take the conversation's row lock (SQLite already holds the database write lock).

    `FOR NO KEY UPDATE` serializes holdback's writers of one conversation without blocking
    on the key-share locks that foreign-key checks take.
    """
    if await session.scalar(_LOCK, {"conversation_id": conversation_id}) is None:
        raise ConversationNotFoundError(f"conversation {conversation_id} does not exist")


def lock(run: Runner, conversation_id: str) -> None:
    """`lock_conversation`, as a statement of a `Runner` transaction."""
    if not run.rows(_LOCK, {"conversation_id": conversation_id}):
        raise ConversationNotFoundError(f"conversation {conversation_id} does not exist")


def assign(
    run: Runner,
    key: VaultKey,
    conversation_id: str,
    items: Sequence[_Prepared],
    reserve: Sequence[str] = (),
    *,
    limit: int = MAX_VAULT_ENTRIES,
) -> VaultUpdate:
    """Reserve `reserve`, then tokens for `items`, adding entries for values not held yet;
    `VaultFullError` if the vault would then hold more than `limit` rows."""
    lock(run, conversation_id)
    rows = run.rows(_HELD, {"conversation_id": conversation_id})
    known: dict[tuple[str, bytes], str] = {}
    highest: dict[str, int] = {}
    reserved: set[str] = set()  # tokens `<KIND_N>` of the reserved ids
    for token, kind, number, value_hash in rows:
        if kind == RESERVED:
            reserved.add(token)
            continue
        known[(kind, bytes(value_hash))] = token
        highest[kind] = max(highest.get(kind, 0), number)
    tokens_held = set(known.values())
    now = datetime.now(UTC)
    new_rows: list[dict[str, object]] = []
    taken: list[str] = []
    for ident in reserve:
        held = f"<{ident}>"
        if held in tokens_held:
            taken.append(held)
        elif held not in reserved:
            reserved.add(held)
            if _storable(ident):
                new_rows.append(
                    _row(conversation_id, held, RESERVED, RESERVED, parse_id(ident)[1],
                         key.value_hash(RESERVED, ident),
                         seal_entry(key, conversation_id, ident, ident), now)
                )  # fmt: skip
    tokens: list[str] = []
    entries: dict[str, VaultEntry] = {}
    stored_before: list[str] = []  # tokens of items another writer stored first: read them
    for item in items:
        slot = (item.kind, item.value_hash)
        found = known.get(slot)
        if found is not None:
            token = found
            if token not in entries:
                stored_before.append(token)
        else:
            number = highest.get(item.kind, 0) + 1
            while make_token(item.kind, number) in reserved:
                number += 1
            highest[item.kind] = number
            token = make_token(item.kind, number)
            known[slot] = token
            new_rows.append(
                _row(conversation_id, token, item.kind, item.detector_kind, number,
                     item.value_hash,
                     seal_entry(key, conversation_id, item.value, item.normalized), now)
            )  # fmt: skip
            entries[token] = VaultEntry(token, item.detector_kind, item.value, item.normalized)
        tokens.append(token)
    if new_rows and len(rows) + len(new_rows) > limit:
        raise VaultFullError(
            f"conversation {conversation_id} cannot take {len(new_rows)} more vault entries: "
            f"it holds {len(rows)} and the limit is {limit}; nothing was added"
        )
    run.many(_INSERT, new_rows)
    taken = [token for token in taken if token not in tokens]
    read = [*dict.fromkeys(stored_before), *taken]
    if read:
        entries.update(_entries_of(run, key, conversation_id, read))
    return VaultUpdate(
        tokens=tokens,
        reserved=frozenset(ident for ident in reserve if f"<{ident}>" in reserved),
        taken={token: entries[token].value for token in taken},
        entries=entries,
    )


def _row(
    conversation_id: str,
    token: str,
    kind: str,
    detector_kind: str,
    number: int,
    value_hash: bytes,
    ciphertext: bytes,
    now: datetime,
) -> dict[str, object]:
    return {
        "conversation_id": conversation_id,
        "token": token,
        "kind": kind,
        "detector_kind": detector_kind,
        "number": number,
        "value_hash": value_hash,
        "value_ciphertext": ciphertext,
        "created_at": now,
    }


def _entries_of(
    run: Runner, key: VaultKey, conversation_id: str, tokens: Sequence[str]
) -> dict[str, VaultEntry]:
    found: dict[str, VaultEntry] = {}
    for start in range(0, len(tokens), _BATCH):
        params = {
            "conversation_id": conversation_id,
            "tokens": list(tokens[start : start + _BATCH]),
        }
        for row in run.rows(_ENTRIES, params):
            found[row.token] = _entry(key, conversation_id, row)
    return found


def _entry(key: VaultKey, conversation_id: str, row: Any) -> VaultEntry:
    value, normalized = open_entry(key, conversation_id, row.token, bytes(row.value_ciphertext))
    # A row written by hand, without its kind: the label's lower case is the best guess, and
    # lookups go by label anyway.
    kind: str = row.detector_kind or row.kind.lower()
    return VaultEntry(row.token, kind, value, normalized)


def stored_vault(key: VaultKey, conversation_id: str, rows: Iterable[Any]) -> StoredVault:
    """The vault from its rows (with `token`, `kind`, `detector_kind` and
    `value_ciphertext`), decrypted, as entries that carry the stored kind and normalized form.

    Reservation rows become `reserved` ids; they are not opened.
    """
    entries: list[VaultEntry] = []
    reserved: set[str] = set()
    for row in rows:
        if row.kind == RESERVED:
            reserved.add(row.token[1:-1])
        else:
            entries.append(_entry(key, conversation_id, row))
    return StoredVault(entries, frozenset(reserved))


async def load(session: AsyncSession, key: VaultKey, conversation_id: str) -> StoredVault:
    rows = (
        await session.execute(
            select(
                VaultEntryRow.token,
                VaultEntryRow.kind,
                VaultEntryRow.detector_kind,
                VaultEntryRow.value_ciphertext,
            )
            .where(VaultEntryRow.conversation_id == conversation_id)
            .order_by(VaultEntryRow.kind, VaultEntryRow.number)
        )
    ).all()
    return stored_vault(key, conversation_id, rows)
