"""Shared conversations: an owner lets one user, or everyone in a group, read or write one.

The rules:
- Only the owner shares, lists and withdraws the shares of a conversation; for anyone else
  the conversation does not exist (`ConversationNotFoundError`), as everywhere in the store.
- A conversation is shared with a user or a group at most once: sharing again changes the
  access of the share that exists (same id). The database enforces it (unique per
  conversation and user, per conversation and group), so two owners' tabs sharing at once
  make one share.
- A viewer's access to a conversation is `owner`, else the best of their own share and their
  groups' (`write` beats `read`), else none. A disabled user has none, even to their own.
- Shares name users and groups by id, and are deleted with the conversation, the user or the
  group they name.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import cast

from sqlalchemy import ColumnElement, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from holdback.store import accounts, conversations, team
from holdback.store.errors import ConversationNotFoundError, InvalidRecordError
from holdback.store.records import Access, Share, ShareAccess, SharedConversation
from holdback.store.schema import (
    SHARE_ACCESS,
    ConversationRow,
    GroupMemberRow,
    GroupRow,
    ShareRow,
    UserRow,
)


def check_share(user: str | None, group: str | None, access: str) -> ShareAccess:
    if (user is None) == (group is None):
        raise InvalidRecordError("a conversation is shared with one user or one group")
    if access not in SHARE_ACCESS:
        raise InvalidRecordError(f"a share's access is one of {', '.join(SHARE_ACCESS)}")
    return cast(ShareAccess, access)


async def _owned(session: AsyncSession, conversation_id: str, owner_id: str) -> None:
    if await conversations.owned_conversation(session, conversation_id, owner_id) is None:
        raise ConversationNotFoundError(f"conversation {conversation_id} does not exist")


def _to_share(row: ShareRow, user: str | None, group: str | None) -> Share:
    return Share(
        id=row.id,
        conversation_id=row.conversation_id,
        user=user,
        group=group,
        access=cast(ShareAccess, row.access),
        created_at=row.created_at,
    )


async def share(
    session: AsyncSession,
    conversation_id: str,
    owner_id: str,
    user: str | None,
    group: str | None,
    access: ShareAccess,
) -> Share:
    await _owned(session, conversation_id, owner_id)
    if user is not None:
        grantee = await team.user_row(session, user)
        if grantee.id == owner_id:
            raise InvalidRecordError("a conversation is not shared with its owner")
        user_id, group_id = grantee.id, None
        match = ShareRow.user_id == user_id
    else:
        assert group is not None
        group_id, user_id = (await team.group_row(session, group)).id, None
        match = ShareRow.group_id == group_id
    row = await session.scalar(
        select(ShareRow).where(ShareRow.conversation_id == conversation_id, match)
    )
    if row is None:
        row = ShareRow(
            id=accounts.new_id(),
            conversation_id=conversation_id,
            user_id=user_id,
            group_id=group_id,
            access=access,
            created_at=datetime.now(UTC),
        )
        session.add(row)
    else:
        row.access = access
    await session.flush()
    return _to_share(row, user, group)


async def shares_of(session: AsyncSession, conversation_id: str, owner_id: str) -> list[Share]:
    await _owned(session, conversation_id, owner_id)
    rows = await session.execute(
        select(ShareRow, UserRow.name, GroupRow.name)
        .outerjoin(UserRow, UserRow.id == ShareRow.user_id)
        .outerjoin(GroupRow, GroupRow.id == ShareRow.group_id)
        .where(ShareRow.conversation_id == conversation_id)
        .order_by(ShareRow.created_at, ShareRow.id)
    )
    return [_to_share(row, user, group) for row, user, group in rows]


async def unshare(
    session: AsyncSession, conversation_id: str, owner_id: str, share_id: str
) -> bool:
    await _owned(session, conversation_id, owner_id)
    row = await session.scalar(
        select(ShareRow).where(ShareRow.id == share_id, ShareRow.conversation_id == conversation_id)
    )
    if row is None:
        return False
    await session.delete(row)
    await session.flush()
    return True


def _viewer_shares(viewer_id: str) -> ColumnElement[bool]:
    """The condition for the shares that name the viewer or one of the viewer's groups."""
    return or_(
        ShareRow.user_id == viewer_id,
        ShareRow.group_id.in_(
            select(GroupMemberRow.group_id).where(GroupMemberRow.user_id == viewer_id)
        ),
    )


async def _enabled(session: AsyncSession, viewer_id: str) -> bool:
    found = await session.execute(select(UserRow.disabled_at).where(UserRow.id == viewer_id))
    row = found.first()
    return row is not None and row.disabled_at is None


def _best(accesses: list[str]) -> ShareAccess | None:
    if "write" in accesses:
        return "write"
    return "read" if accesses else None


async def access_of(session: AsyncSession, conversation_id: str, viewer_id: str) -> Access | None:
    if not await _enabled(session, viewer_id):
        return None
    owner = await session.scalar(
        select(ConversationRow.owner_id).where(ConversationRow.id == conversation_id)
    )
    if owner is None:
        return None
    if owner == viewer_id:
        return "owner"
    accesses = await session.scalars(
        select(ShareRow.access).where(
            ShareRow.conversation_id == conversation_id,
            _viewer_shares(viewer_id),
        )
    )
    return _best(list(accesses))


async def shared_with(session: AsyncSession, viewer_id: str) -> list[SharedConversation]:
    """The conversations others shared with the viewer, most recently updated first."""
    if not await _enabled(session, viewer_id):
        return []
    rows = await session.execute(
        select(ConversationRow, UserRow.name, ShareRow.access)
        .join(ShareRow, ShareRow.conversation_id == ConversationRow.id)
        .join(UserRow, UserRow.id == ConversationRow.owner_id)
        .where(ConversationRow.owner_id != viewer_id, _viewer_shares(viewer_id))
        .order_by(ConversationRow.updated_at.desc(), ConversationRow.id)
    )
    found: dict[str, tuple[ConversationRow, str, list[str]]] = {}
    for conversation, owner, access in rows:
        found.setdefault(conversation.id, (conversation, owner, []))[2].append(access)
    shared: list[SharedConversation] = []
    for conversation, owner, accesses in found.values():
        best = _best(accesses)
        assert best is not None
        shared.append(SharedConversation(conversations.to_conversation(conversation), owner, best))
    return shared
