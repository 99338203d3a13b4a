"""Search queries: which messages a viewer may read hold a word or a value, found without
decrypting any vault.

The rules:
- Only conversations the viewer may read are looked at: those they own, and those shared with
  them or with one of their groups (as `sharing.access_of` decides for a user who is not
  disabled; a disabled user's credentials name nobody, so their searches never get here).
- A value is found by its keyed hash (`VaultKey.value_hash` of its label and normalized form),
  the key the vault itself is looked up by: a match gives a conversation and a token, never a
  value. Only `entries` decrypts, and only the tokens it is given (those a snippet shows).
- Words and tokens are matched with `LIKE` over the stored, tokenized text, wildcards
  escaped. A pattern is a filter only: the caller decides what is a hit (and that a word
  inside a token's spelling is none).
- Bounded: at most `limit` messages that pass the filter are read, newest first, in
  batches; at most `MAX_FOUND` vault entries match, at most `MAX_OPENED` are opened.
- A search's reveals are one transaction, whatever the number of conversations it showed.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sqlalchemy import ColumnElement, and_, false, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from holdback.store import audit_log
from holdback.store.errors import InvalidRecordError
from holdback.store.records import StoredVault
from holdback.store.schema import (
    ConversationRow,
    GroupMemberRow,
    MessageRow,
    ShareRow,
    VaultEntryRow,
)
from holdback.store.vault import RESERVED, stored_vault

if TYPE_CHECKING:
    from holdback.store.repository import Store

MAX_FOUND = 200  # vault entries one search may match
MAX_OPENED = 5000  # vault entries one search may decrypt: 50 snippets of at most ~90 ids each
MAX_HASHES = 1024  # keyed hashes one search may look up (the first, in the order given)


@dataclass(frozen=True, slots=True)
class Found:
    """A vault entry whose value was asked for: where, its token, its detector kind, and the
    `(label, hash)` it was found by."""

    conversation_id: str
    owner_id: str
    token: str
    kind: str
    key: tuple[str, bytes]


@dataclass(frozen=True, slots=True)
class Pattern:
    """One term of a query, as a filter: a message passes if its text holds any of `words`
    (case-insensitively) or one of `tokens` (exactly) in one of that token's conversations."""

    words: tuple[str, ...] = ()
    tokens: Mapping[str, Collection[str]] | None = None  # token -> conversation ids


@dataclass(frozen=True, slots=True)
class Candidate:
    """A message that passed every pattern: tokenized, as stored."""

    conversation_id: str
    owner_id: str
    message_id: str
    text: str


def value_hash(store: Store, label: str, normalized: str) -> bytes:
    """The vault's keyed hash of a value of the kind `label` (`EMAIL`), normalized."""
    return store._key.value_hash(label, normalized)


def _readable(viewer_id: str) -> ColumnElement[bool]:
    """The conversations the viewer owns or that are shared with them or their groups."""
    groups = select(GroupMemberRow.group_id).where(GroupMemberRow.user_id == viewer_id)
    shared = select(ShareRow.conversation_id).where(
        or_(ShareRow.user_id == viewer_id, ShareRow.group_id.in_(groups))
    )
    return or_(ConversationRow.owner_id == viewer_id, ConversationRow.id.in_(shared))


async def find_values(
    store: Store, viewer_id: str, hashes: Sequence[tuple[str, bytes]]
) -> list[Found]:
    """The vault entries, in conversations the viewer may read, whose `(label, hash)` is one
    of the first `MAX_HASHES` of `hashes`; the most recently updated conversations first, at
    most `MAX_FOUND`."""
    wanted = set(list(dict.fromkeys(hashes))[:MAX_HASHES])
    if not wanted:
        return []

    async def work(session: AsyncSession) -> list[Found]:
        rows = await session.execute(
            select(
                VaultEntryRow.conversation_id,
                ConversationRow.owner_id,
                VaultEntryRow.token,
                VaultEntryRow.kind,
                VaultEntryRow.detector_kind,
                VaultEntryRow.value_hash,
            )
            .join(ConversationRow, ConversationRow.id == VaultEntryRow.conversation_id)
            .where(
                _readable(viewer_id),
                VaultEntryRow.kind != RESERVED,
                VaultEntryRow.value_hash.in_(sorted({h for _, h in wanted})),
            )
            .order_by(ConversationRow.updated_at.desc(), VaultEntryRow.token)
            .limit(MAX_FOUND)
        )
        found = []
        for row in rows:
            key = (row.kind, bytes(row.value_hash))
            if key in wanted:  # a hash is keyed by its label too
                kind = row.detector_kind or row.kind.lower()
                found.append(Found(row.conversation_id, row.owner_id, row.token, kind, key))
        return found

    return await store._db.read(work)


def _condition(pattern: Pattern, dialect: str) -> ColumnElement[bool]:
    # SQLite's LIKE ignores the case of ASCII letters already (without `lower()`, which
    # costs a copy of every text); elsewhere the case is folded.
    alternatives: list[ColumnElement[bool]] = [
        MessageRow.text.contains(word, autoescape=True)
        if dialect == "sqlite"
        else MessageRow.text.icontains(word, autoescape=True)
        for word in pattern.words
    ]
    for token, conversations in (pattern.tokens or {}).items():
        alternatives.append(
            and_(
                MessageRow.conversation_id.in_(sorted(conversations)),
                MessageRow.text.contains(token, autoescape=True),
            )
        )
    return or_(*alternatives) if alternatives else false()


async def scan(
    store: Store,
    viewer_id: str,
    patterns: Sequence[Pattern],
    take: Callable[[list[Candidate]], bool],
    *,
    limit: int,
    batch: int = 200,
) -> int:
    """Hand `take` the messages the viewer may read that pass every pattern, newest first,
    `batch` at a time, until it says it has enough (True) or `limit` have been read, in one
    read transaction. Returns how many were read.

    The order is decided over ids alone (sorting the texts would copy every one of them);
    the texts are read a batch at a time, as they are needed.
    """
    ordered = (
        select(MessageRow.id)
        .join(ConversationRow, ConversationRow.id == MessageRow.conversation_id)
        .where(_readable(viewer_id), *(_condition(p, store._db.dialect) for p in patterns))
        # Newest first; a reply and its question share a time, the reply (later seq) first.
        .order_by(MessageRow.created_at.desc(), MessageRow.seq.desc(), MessageRow.id.desc())
        .limit(limit)
    )

    async def work(session: AsyncSession) -> int:
        ids = list((await session.execute(ordered)).scalars())
        read = 0
        for start in range(0, len(ids), batch):
            wanted = ids[start : start + batch]
            rows = await session.execute(
                select(
                    MessageRow.conversation_id,
                    ConversationRow.owner_id,
                    MessageRow.id,
                    MessageRow.text,
                )
                .join(ConversationRow, ConversationRow.id == MessageRow.conversation_id)
                .where(MessageRow.id.in_(wanted))
            )
            found = {r.id: Candidate(r.conversation_id, r.owner_id, r.id, r.text) for r in rows}
            read += len(found)
            if take([found[i] for i in wanted if i in found]):
                break
        return read

    return await store._db.read(work)


async def entries(store: Store, wanted: Mapping[str, Collection[str]]) -> dict[str, StoredVault]:
    """Conversation id -> the entries of just those tokens (`<EMAIL_1>`), decrypted; tokens
    that are not entries are left out. At most `MAX_OPENED` tokens in all."""
    total = sum(len(tokens) for tokens in wanted.values())
    if total > MAX_OPENED:
        raise InvalidRecordError(f"a search opens at most {MAX_OPENED} vault entries")

    async def work(session: AsyncSession) -> dict[str, StoredVault]:
        opened: dict[str, StoredVault] = {}
        for conversation_id, tokens in wanted.items():
            if not tokens:
                opened[conversation_id] = StoredVault([], frozenset())
                continue
            rows = await session.execute(
                select(
                    VaultEntryRow.token,
                    VaultEntryRow.kind,
                    VaultEntryRow.detector_kind,
                    VaultEntryRow.value_ciphertext,
                ).where(
                    VaultEntryRow.conversation_id == conversation_id,
                    VaultEntryRow.kind != RESERVED,
                    VaultEntryRow.token.in_(sorted(tokens)),
                )
            )
            opened[conversation_id] = stored_vault(store._key, conversation_id, rows)
        return opened

    return await store._db.read(work)


async def record(
    store: Store,
    viewer_id: str,
    shown: Sequence[tuple[str, str | None, Sequence[tuple[str, str, str]]]],
) -> int:
    """Record `(conversation id, message id, items)` of each snippet that showed values
    (as `Store.record_read` does for one conversation), in one transaction; rows written."""
    audit_log.check_id(viewer_id, "viewer")
    parts = []
    for conversation_id, message_id, items in shown:
        audit_log.check_id(conversation_id, "conversation")
        audit_log.check_id(message_id, "message")
        kept = audit_log.check_reveals(items)
        if kept:
            parts.append((conversation_id, message_id, kept))
    if not parts:
        return 0

    async def write(session: AsyncSession) -> None:
        for conversation_id, message_id, kept in parts:
            await audit_log.insert_reveals(session, viewer_id, conversation_id, message_id, kept)

    await store._db.write(write, what="recording reveals")
    return sum(len(kept) for _, _, kept in parts)
