"""The vault: which token stands for which value in a conversation, kept as ciphertext.

The rules:
- The same normalized value of a kind always gets the same token in a conversation; a new
  value gets the next number of its kind (1, 2, 3…, in order of first appearance, no gaps).
- An entry is found by the keyed hash of `kind NUL normalized`; values are never compared
  in the clear and never decrypted to look them up.
- An entry's plaintext (the value and its normalized form) is sealed with AES-256-GCM and the
  conversation id as associated data, so a ciphertext copied to another conversation fails.
- Assignment is safe under concurrency: it runs under the conversation's row lock, and the
  unique constraints on (conversation, token) and (conversation, kind, value hash) turn any
  writer that slipped past it into a conflict that the caller retries from the start.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from holdback.errors import InvalidTokenError
from holdback.store.crypto import VaultKey
from holdback.store.errors import (
    ConversationNotFoundError,
    InvalidRecordError,
    VaultEntryCorruptError,
)
from holdback.store.records import VaultItem
from holdback.store.schema import ConversationRow, VaultEntryRow
from holdback.tokens import kind_label, make_token

MAX_VALUE_CHARS = 100_000


@dataclass(frozen=True, slots=True)
class _Prepared:
    kind: str  # the token's KIND label
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
        if not item.value or not item.normalized:
            raise InvalidRecordError(f"vault item {index} ({label}) has an empty value")
        if len(item.value) > MAX_VALUE_CHARS or len(item.normalized) > MAX_VALUE_CHARS:
            raise InvalidRecordError(
                f"vault item {index} ({label}) is longer than {MAX_VALUE_CHARS} characters"
            )
        prepared.append(
            _Prepared(label, item.value, item.normalized, key.value_hash(label, item.normalized))
        )
    return prepared


async def lock_conversation(session: AsyncSession, conversation_id: str) -> None:
    """Take the conversation's row lock (SQLite already holds the database write lock).

    `FOR NO KEY UPDATE` serializes holdback's writers of one conversation without blocking
    on the key-share locks that foreign-key checks take.
    """
    found = await session.scalar(
        select(ConversationRow.id)
        .where(ConversationRow.id == conversation_id)
        .with_for_update(key_share=True)
    )
    if found is None:
        raise ConversationNotFoundError(f"conversation {conversation_id} does not exist")


async def assign(
    session: AsyncSession, key: VaultKey, conversation_id: str, items: Sequence[_Prepared]
) -> list[str]:
    """Tokens for `items`, inserting entries for values the vault does not hold yet."""
    await lock_conversation(session, conversation_id)
    rows = (
        await session.execute(
            select(VaultEntryRow.kind, VaultEntryRow.number, VaultEntryRow.value_hash).where(
                VaultEntryRow.conversation_id == conversation_id
            )
        )
    ).all()
    known: dict[tuple[str, bytes], str] = {}
    highest: dict[str, int] = {}
    for kind, number, value_hash in rows:
        known[(kind, bytes(value_hash))] = make_token(kind, number)
        highest[kind] = max(highest.get(kind, 0), number)
    now = datetime.now(UTC)
    tokens: list[str] = []
    for item in items:
        slot = (item.kind, item.value_hash)
        token = known.get(slot)
        if token is None:
            number = highest.get(item.kind, 0) + 1
            highest[item.kind] = number
            token = make_token(item.kind, number)
            known[slot] = token
            session.add(
                VaultEntryRow(
                    conversation_id=conversation_id,
                    token=token,
                    kind=item.kind,
                    number=number,
                    value_hash=item.value_hash,
                    value_ciphertext=seal_entry(key, conversation_id, item.value, item.normalized),
                    created_at=now,
                )
            )
        tokens.append(token)
    await session.flush()
    return tokens


async def load(session: AsyncSession, key: VaultKey, conversation_id: str) -> dict[str, str]:
    rows = (
        await session.execute(
            select(VaultEntryRow.token, VaultEntryRow.value_ciphertext)
            .where(VaultEntryRow.conversation_id == conversation_id)
            .order_by(VaultEntryRow.kind, VaultEntryRow.number)
        )
    ).all()
    return {token: open_entry(key, conversation_id, token, bytes(blob))[0] for token, blob in rows}
