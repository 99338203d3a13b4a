"""Conversations, their messages and their audit trail: the records, the checks, the reads
and a conversation's deletion (the writes of messages and audit events are `turns.py`'s).

The rules:
- A conversation is visible only to its owner: another user's conversation behaves exactly
  as one that does not exist.
- Message text and parts are tokenized text, stored as given. A message's place in its
  conversation is `seq` (1, 2, 3…), taken under the conversation's row lock and guarded by a
  unique constraint, so two writers never both get the same place and neither is lost.
- Audit events say which kinds were masked, redacted or blocked and how many: their counts
  are keyed by kind label and hold non-negative integers, nothing else.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, TypeVar, cast

from sqlalchemy import delete, select
from sqlalchemy.ext.asyncio import AsyncSession

from holdback.errors import InvalidTokenError
from holdback.store.errors import InvalidRecordError
from holdback.store.records import AuditAction, AuditEvent, Conversation, Message, MessageStatus
from holdback.store.schema import (
    AUDIT_ACTIONS,
    CHANNEL_RE,
    MESSAGE_STATUSES,
    AuditEventRow,
    ConversationRow,
    MessageRow,
    MessageSpellingRow,
    ReplyCheckpointRow,
    VaultEntryRow,
)
from holdback.store.vault import lock_conversation
from holdback.tokens import kind_label

_ROLE_RE = re.compile(r"[a-z][a-z0-9_]{0,31}\Z")
MAX_TITLE_CHARS = 500
MAX_FINISH_REASON_CHARS = 64


def to_conversation(row: ConversationRow) -> Conversation:
    return Conversation(
        id=row.id,
        owner_id=row.owner_id,
        title=row.title,
        created_at=row.created_at,
        updated_at=row.updated_at,
        current_leaf=row.current_leaf,
        system_prompt=row.system_prompt,
        model=row.model,
    )


def to_message(row: Any) -> Message:
    """A message record from an ORM row or a Core result row (same attribute names)."""
    return Message(
        id=row.id,
        conversation_id=row.conversation_id,
        seq=row.seq,
        role=row.role,
        text=row.text,
        parts=dict(row.parts),
        status=cast(MessageStatus, row.status),
        finish_reason=row.finish_reason,
        meta=dict(row.meta),
        created_at=row.created_at,
        updated_at=row.updated_at,
        parent_id=row.parent_id,
        model=row.model,
    )


MAX_MODEL_CHARS = 200  # `messages.model`, `conversations.model`
MAX_SYSTEM_PROMPT_CHARS = 8000


def check_model(model: str) -> str:
    if not model or len(model) > MAX_MODEL_CHARS or not model.isprintable():
        raise InvalidRecordError(f"a model id is 1 to {MAX_MODEL_CHARS} printable characters")
    return model


def check_system_prompt(text: str) -> str:
    if len(text) > MAX_SYSTEM_PROMPT_CHARS:
        raise InvalidRecordError(f"a system prompt is at most {MAX_SYSTEM_PROMPT_CHARS} characters")
    return text


def check_title(title: str) -> str:
    if len(title) > MAX_TITLE_CHARS:
        raise InvalidRecordError(f"a title is at most {MAX_TITLE_CHARS} characters")
    return title


def check_message_fields(
    role: str | None,
    status: str | None,
    finish_reason: str | None,
    parts: Mapping[str, str] | None,
    meta: Mapping[str, object] | None,
) -> None:
    if role is not None and not _ROLE_RE.match(role):
        raise InvalidRecordError("a message role is a lower-case identifier, e.g. 'user'")
    if status is not None and status not in MESSAGE_STATUSES:
        raise InvalidRecordError(f"a message status is one of {', '.join(MESSAGE_STATUSES)}")
    if finish_reason is not None and len(finish_reason) > MAX_FINISH_REASON_CHARS:
        raise InvalidRecordError(f"a finish reason is at most {MAX_FINISH_REASON_CHARS} chars")
    for channel, text in (parts or {}).items():
        if not isinstance(channel, str) or not CHANNEL_RE.match(channel):
            raise InvalidRecordError("a part's channel is a short identifier, e.g. 'reasoning'")
        if not isinstance(text, str):
            raise InvalidRecordError(f"part {channel!r} must be text")
    if meta is not None:
        try:
            json.dumps(dict(meta), allow_nan=False)
        except (TypeError, ValueError):
            raise InvalidRecordError("message meta must be JSON-serializable") from None


def check_counts(counts: Mapping[str, int]) -> dict[str, int]:
    """Counts keyed by kind label (`email` -> `EMAIL`); merged if two keys share a label."""
    checked: dict[str, int] = {}
    for kind, count in counts.items():
        try:
            label = kind_label(kind)
        except InvalidTokenError:
            raise InvalidRecordError("an audit count is keyed by a detector kind") from None
        if len(label) > 64:
            raise InvalidRecordError("an audit count is keyed by a kind of at most 64 chars")
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise InvalidRecordError(f"the audit count for {label} is not a non-negative integer")
        checked[label] = checked.get(label, 0) + count
    return checked


async def owned_conversation(
    session: AsyncSession, conversation_id: str, owner_id: str
) -> ConversationRow | None:
    return await session.scalar(
        select(ConversationRow).where(
            ConversationRow.id == conversation_id, ConversationRow.owner_id == owner_id
        )
    )


async def owned_conversations(session: AsyncSession, owner_id: str) -> list[Conversation]:
    """The owner's conversations, most recently updated first."""
    rows = await session.scalars(
        select(ConversationRow)
        .where(ConversationRow.owner_id == owner_id)
        .order_by(ConversationRow.updated_at.desc(), ConversationRow.id)
    )
    return [to_conversation(row) for row in rows]


async def remove_conversation(session: AsyncSession, conversation_id: str, owner_id: str) -> bool:
    """Delete a conversation and everything it owns (explicitly, not only by cascade)."""
    if await owned_conversation(session, conversation_id, owner_id) is None:
        return False
    await lock_conversation(session, conversation_id)
    tables = (AuditEventRow, VaultEntryRow, MessageSpellingRow, ReplyCheckpointRow, MessageRow)
    for table in tables:
        await session.execute(delete(table).where(table.conversation_id == conversation_id))
    await session.execute(delete(ConversationRow).where(ConversationRow.id == conversation_id))
    return True


class _Node(Protocol):
    @property
    def id(self) -> str: ...
    @property
    def parent_id(self) -> str | None: ...
    @property
    def seq(self) -> int: ...


N = TypeVar("N", bound=_Node)


def path_to(messages: Sequence[N], leaf: str | None) -> list[N]:
    """The branch ending at `leaf`, first message first (by `parent_id`); a leaf of None (or
    one not among `messages`) is the last message by `seq`."""
    by_id = {m.id: m for m in messages}
    at = by_id.get(leaf) if leaf is not None else None
    if at is None:
        at = max(messages, key=lambda m: m.seq, default=None)
    path: list[N] = []
    seen: set[str] = set()
    while at is not None and at.id not in seen:
        seen.add(at.id)
        path.append(at)
        at = by_id.get(at.parent_id) if at.parent_id is not None else None
    path.reverse()
    return path


def to_audit(row: AuditEventRow) -> AuditEvent:
    return AuditEvent(
        id=row.id,
        conversation_id=row.conversation_id,
        message_id=row.message_id,
        action=cast(AuditAction, row.action),
        counts={str(k): int(v) for k, v in row.counts.items()},
        created_at=row.created_at,
    )


async def audit_of(session: AsyncSession, conversation_id: str) -> list[AuditEvent]:
    rows = await session.scalars(
        select(AuditEventRow)
        .where(AuditEventRow.conversation_id == conversation_id)
        .order_by(AuditEventRow.id)
    )
    return [to_audit(row) for row in rows]


def check_action(action: str) -> str:
    if action not in AUDIT_ACTIONS:
        raise InvalidRecordError(f"an audit action is one of {', '.join(AUDIT_ACTIONS)}")
    return action
