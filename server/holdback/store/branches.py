"""A conversation's branches and settings, and a user's custom instructions.

The rules:
- Messages form a tree by `parent_id` (migration 0006); the branch shown is the path to the
  conversation's `current_leaf` (`turns.path_to`). Choosing a branch names any message of the
  conversation; its branch continues to its newest descendant, so picking a user message
  shows its reply too.
- A conversation's `system_prompt` is stored tokenized (the caller pseudonymizes it with the
  conversation's vault first); `model` is a model id of this server's, checked by the caller.
- A reply still unfinished when a server starts on a store only it uses (SQLite) was cut off
  by the last stop: `close_unfinished` marks it incomplete, `ended_by` the server, so it
  reads as what it is instead of as a reply that might still come.
- A user's custom instructions are sealed with the vault key, the user's id as associated
  data: they may hold values, and no conversation's vault owns them until a message uses
  them, when they are pseudonymized with that conversation's vault like the message.
"""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from holdback.store.conversations import owned_conversation, to_message
from holdback.store.crypto import VaultKey
from holdback.store.errors import InvalidRecordError, UserNotFoundError, VaultEntryCorruptError
from holdback.store.records import Message
from holdback.store.schema import MessageRow, UserRow

MAX_INSTRUCTIONS_CHARS = 8000
UNSET = object()  # a setting `update_settings` leaves as it is


def check_instructions(text: str) -> str:
    if len(text) > MAX_INSTRUCTIONS_CHARS:
        raise InvalidRecordError(f"instructions are at most {MAX_INSTRUCTIONS_CHARS} characters")
    return text


def _associated(user_id: str) -> bytes:
    return b"holdback instructions\x00" + user_id.encode()


async def message_of(session: AsyncSession, message_id: str) -> Message | None:
    row = await session.get(MessageRow, message_id)
    return to_message(row) if row is not None else None


async def choose_branch(
    session: AsyncSession, conversation_id: str, owner_id: str, message_id: str
) -> bool:
    """Show the branch through `message_id`, down to its newest descendant; False if there
    is no such conversation of the owner's or no such message in it."""
    conversation = await owned_conversation(session, conversation_id, owner_id)
    if conversation is None:
        return False
    rows = await session.scalars(
        select(MessageRow).where(MessageRow.conversation_id == conversation_id)
    )
    messages = list(rows)
    if not any(m.id == message_id for m in messages):
        return False
    children: dict[str | None, list[MessageRow]] = {}
    for m in messages:
        children.setdefault(m.parent_id, []).append(m)
    leaf = message_id
    while children.get(leaf):
        leaf = max(children[leaf], key=lambda m: m.seq).id
    conversation.current_leaf = leaf
    return True


async def update_settings(
    session: AsyncSession,
    conversation_id: str,
    owner_id: str,
    *,
    system_prompt: str | object | None = UNSET,
    model: str | object | None = UNSET,
) -> bool:
    conversation = await owned_conversation(session, conversation_id, owner_id)
    if conversation is None:
        return False
    if system_prompt is not UNSET:
        conversation.system_prompt = system_prompt or None  # type: ignore[assignment]
    if model is not UNSET:
        conversation.model = model  # type: ignore[assignment]
    conversation.updated_at = datetime.now(UTC)
    return True


async def instructions_of(session: AsyncSession, key: VaultKey, user_id: str) -> str:
    blob = await session.scalar(
        select(UserRow.instructions_ciphertext).where(UserRow.id == user_id)
    )
    if not blob:
        return ""
    plain = key.open(blob, _associated(user_id), what=f"the instructions of user {user_id}")
    try:
        return plain.decode("utf-8")
    except UnicodeDecodeError:
        raise VaultEntryCorruptError(f"the instructions of user {user_id} are malformed") from None


async def set_instructions(session: AsyncSession, key: VaultKey, user_id: str, text: str) -> None:
    user = await session.get(UserRow, user_id)
    if user is None:
        raise UserNotFoundError(f"user {user_id} does not exist")
    user.instructions_ciphertext = (
        key.seal(text.encode("utf-8"), _associated(user_id)) if text else None
    )


async def close_unfinished(session: AsyncSession) -> int:
    """Mark every reply never finished (status incomplete, no finish reason) as ended by the
    server; returns how many."""
    rows = await session.execute(
        select(MessageRow.id, MessageRow.meta).where(
            MessageRow.role == "assistant",
            MessageRow.status == "incomplete",
            MessageRow.finish_reason.is_(None),
        )
    )
    found = list(rows.all())
    now = datetime.now(UTC)
    for message_id, meta in found:
        await session.execute(
            update(MessageRow)
            .where(MessageRow.id == message_id)
            .values(
                finish_reason="other",
                meta={**dict(meta or {}), "ended_by": "server"},
                updated_at=now,
            )
        )
    return len(found)
