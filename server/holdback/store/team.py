"""Roles, groups and reveal levels: who administers holdback, who belongs together, and how
much of each kind of value a viewer who does not own a conversation is shown.

The rules:
- A user is an `admin` or a `member`. The first user created, and the single user of
  `--auth none`, are admins. Once there is an admin there stays one: the last admin cannot be
  deleted or made a member (`LastAdminError`). Roles are decided inside the write transaction
  under one lock (PostgreSQL: a transaction-scoped advisory lock; SQLite: the database write
  lock every write holds), so two users created at once on an empty database make exactly
  one admin, and two admins removed at once never leave none.
- Deleting a user either hands their conversations to an admin, shares and all, or deletes
  them with their messages and vaults (crypto-shredding: the vault rows and their
  ciphertexts go in the same transaction).
- A group is shown by its name and referred to by its id (`reveal_levels.scope`, shares), so
  renaming it changes nothing else. Deleting it deletes its memberships, shares and levels.
- Levels and never-restored kinds name kinds (`email`, `client-names`), never values.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import cast

from sqlalchemy import delete, func, select, text, update
from sqlalchemy.ext.asyncio import AsyncSession

from holdback.reveal import InvalidRevealLevelError, Level, Rules, check_level
from holdback.store import accounts, conversations
from holdback.store.errors import (
    GroupExistsError,
    GroupNotFoundError,
    InvalidRecordError,
    LastAdminError,
    UserExistsError,
    UserNotFoundError,
)
from holdback.store.records import Group, LevelSetting, User
from holdback.store.schema import (
    DEFAULT_SCOPE,
    ROLES,
    ApiTokenRow,
    ConversationRow,
    GroupMemberRow,
    GroupRow,
    NeverRestoreRow,
    RevealLevelRow,
    SessionRow,
    ShareRow,
    UserRow,
)

# pg_advisory_xact_lock key of role decisions: the bytes of "hb-roles" as a 64-bit integer.
ROLES_LOCK = int.from_bytes(b"hb-roles", "big")
MAX_KIND_CHARS = 200
# A detector kind or a term list's kind: `email`, `credit_card`, `client-names`.
_KIND_RE = re.compile(r"[a-z0-9][a-z0-9_-]*\Z")


def check_kind(kind: str) -> str:
    if not isinstance(kind, str) or not kind:
        raise InvalidRecordError("a kind cannot be empty")
    if len(kind) > MAX_KIND_CHARS:
        raise InvalidRecordError(f"a kind is at most {MAX_KIND_CHARS} characters")
    if not _KIND_RE.match(kind):
        raise InvalidRecordError(
            "a kind is lower-case letters, digits, '_' and '-' (e.g. 'email', 'client-names')"
        )
    return kind


def check_role(role: str) -> str:
    if role not in ROLES:
        raise InvalidRecordError(f"a role is one of {', '.join(ROLES)}")
    return role


def check_reveal_level(level: str) -> Level:
    try:
        return check_level(level)
    except InvalidRevealLevelError as exc:
        raise InvalidRecordError(str(exc)) from None


async def lock_roles(session: AsyncSession) -> None:
    """Serialize the transactions that decide roles (SQLite's write lock already does)."""
    if session.get_bind().dialect.name == "postgresql":
        await session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": ROLES_LOCK})


async def user_row(session: AsyncSession, name: str) -> UserRow:
    row = await session.scalar(select(UserRow).where(UserRow.name == name))
    if row is None:
        raise UserNotFoundError(f"no user named {name!r}")
    return row


async def _refuse_last_admin(session: AsyncSession, user: UserRow, what: str) -> None:
    if user.role != "admin":
        return
    others = await session.scalar(
        select(func.count())
        .select_from(UserRow)
        .where(UserRow.role == "admin", UserRow.id != user.id)
    )
    if not others:
        raise LastAdminError(
            f"{user.name!r} is the last admin and cannot be {what}; make another user an "
            "admin first"
        )


# Users and roles.


async def create_user(session: AsyncSession, name: str, password_hash: str | None) -> User:
    """A new user: an admin if there is no user yet, else a member."""
    await lock_roles(session)
    if await accounts.user_by_name(session, name) is not None:
        raise UserExistsError("a user with that name already exists")
    anyone = await session.scalar(select(UserRow.id).limit(1))
    role = "member" if anyone is not None else "admin"
    return await accounts.insert_user(session, name, password_hash, role)


async def ensure_admin(session: AsyncSession, name: str) -> User:
    """The user `name`, created (without a password) or made an admin if need be."""
    row = await session.scalar(select(UserRow).where(UserRow.name == name))
    if row is None:
        return await accounts.insert_user(session, name, None, "admin")
    if row.role != "admin":
        row.role = "admin"
        await session.flush()
    return accounts.to_user(row)


async def set_role(session: AsyncSession, name: str, role: str) -> tuple[User, bool]:
    await lock_roles(session)
    row = await user_row(session, name)
    if row.role == role:
        return accounts.to_user(row), False
    await _refuse_last_admin(session, row, "made a member")
    row.role = role
    await session.flush()
    return accounts.to_user(row), True


async def all_users(session: AsyncSession) -> list[User]:
    rows = await session.scalars(select(UserRow).order_by(UserRow.created_at, UserRow.id))
    return [accounts.to_user(row) for row in rows]


async def remove_user(session: AsyncSession, name: str, conversations_to: str | None) -> int:
    """Delete the user `name`; returns how many conversations were handed over or deleted."""
    await lock_roles(session)
    row = await user_row(session, name)
    await _refuse_last_admin(session, row, "deleted")
    heir: UserRow | None = None
    if conversations_to is not None:
        if conversations_to == name:
            raise InvalidRecordError("a deleted user's conversations go to another user")
        heir = await user_row(session, conversations_to)
        if heir.role != "admin":
            raise InvalidRecordError(
                f"conversations are handed to an admin, and {conversations_to!r} is not one"
            )
    owned = list(
        await session.scalars(select(ConversationRow.id).where(ConversationRow.owner_id == row.id))
    )
    if heir is not None:
        if owned:
            # The heir owns these now; a share with the heir would be a share with the owner.
            await session.execute(
                delete(ShareRow).where(
                    ShareRow.conversation_id.in_(owned), ShareRow.user_id == heir.id
                )
            )
            await session.execute(
                update(ConversationRow)
                .where(ConversationRow.owner_id == row.id)
                .values(owner_id=heir.id)
            )
    else:
        for conversation_id in owned:
            await session.execute(
                delete(ShareRow).where(ShareRow.conversation_id == conversation_id)
            )
            await conversations.remove_conversation(session, conversation_id, row.id)
    for table in (ShareRow, GroupMemberRow, SessionRow, ApiTokenRow):
        await session.execute(delete(table).where(table.user_id == row.id))
    await session.execute(delete(UserRow).where(UserRow.id == row.id))
    return len(owned)


# Groups.


async def group_row(session: AsyncSession, name: str, *, key_share: bool = False) -> GroupRow:
    """The group `name`; `key_share` locks it against deletion until the transaction ends."""
    query = select(GroupRow).where(GroupRow.name == name)
    if key_share:
        query = query.with_for_update(key_share=True)
    row = await session.scalar(query)
    if row is None:
        raise GroupNotFoundError(f"no group named {name!r}")
    return row


async def _members(session: AsyncSession, group_ids: Iterable[str]) -> dict[str, tuple[str, ...]]:
    ids = list(group_ids)
    found: dict[str, list[str]] = defaultdict(list)
    if ids:
        rows = await session.execute(
            select(GroupMemberRow.group_id, UserRow.name)
            .join(UserRow, UserRow.id == GroupMemberRow.user_id)
            .where(GroupMemberRow.group_id.in_(ids))
            .order_by(UserRow.name)
        )
        for group_id, user_name in rows:
            found[group_id].append(user_name)
    return {group_id: tuple(found[group_id]) for group_id in ids}


def _to_group(row: GroupRow, members: tuple[str, ...]) -> Group:
    return Group(id=row.id, name=row.name, created_at=row.created_at, members=members)


async def _refuse_taken(session: AsyncSession, name: str) -> None:
    if await session.scalar(select(GroupRow.id).where(GroupRow.name == name)) is not None:
        raise GroupExistsError(f"a group named {name!r} already exists")


async def create_group(session: AsyncSession, name: str) -> Group:
    await _refuse_taken(session, name)
    row = GroupRow(id=accounts.new_id(), name=name, created_at=datetime.now(UTC))
    session.add(row)
    await session.flush()
    return _to_group(row, ())


async def rename_group(session: AsyncSession, old: str, new: str) -> Group:
    row = await group_row(session, old)
    if new != old:
        await _refuse_taken(session, new)
        row.name = new
        await session.flush()
    return _to_group(row, (await _members(session, [row.id]))[row.id])


async def remove_group(session: AsyncSession, name: str) -> None:
    row = await group_row(session, name)
    # The group's row first: a level being set for it (which holds a key-share lock on the
    # row) commits before this goes on, so the delete below sees that level too.
    await session.execute(delete(GroupRow).where(GroupRow.id == row.id))
    await session.execute(delete(RevealLevelRow).where(RevealLevelRow.scope == row.id))
    for table in (ShareRow, GroupMemberRow):
        await session.execute(delete(table).where(table.group_id == row.id))


async def one_group(session: AsyncSession, name: str) -> Group | None:
    row = await session.scalar(select(GroupRow).where(GroupRow.name == name))
    if row is None:
        return None
    return _to_group(row, (await _members(session, [row.id]))[row.id])


async def all_groups(session: AsyncSession) -> list[Group]:
    rows = list(await session.scalars(select(GroupRow).order_by(GroupRow.name)))
    members = await _members(session, (row.id for row in rows))
    return [_to_group(row, members[row.id]) for row in rows]


async def add_member(session: AsyncSession, group: str, user: str) -> bool:
    group_id = (await group_row(session, group)).id
    user_id = (await user_row(session, user)).id
    if await session.get(GroupMemberRow, (group_id, user_id)) is not None:
        return False
    session.add(GroupMemberRow(group_id=group_id, user_id=user_id, created_at=datetime.now(UTC)))
    await session.flush()
    return True


async def remove_member(session: AsyncSession, group: str, user: str) -> bool:
    group_id = (await group_row(session, group)).id
    user_id = (await user_row(session, user)).id
    result = await session.execute(
        delete(GroupMemberRow).where(
            GroupMemberRow.group_id == group_id, GroupMemberRow.user_id == user_id
        )
    )
    return bool(getattr(result, "rowcount", 0))


async def groups_of(session: AsyncSession, user_id: str) -> list[str]:
    rows = await session.scalars(
        select(GroupMemberRow.group_id)
        .where(GroupMemberRow.user_id == user_id)
        .order_by(GroupMemberRow.group_id)
    )
    return list(rows)


# Reveal levels.


async def _scope(session: AsyncSession, group: str | None) -> str:
    if group is None:
        return DEFAULT_SCOPE
    return (await group_row(session, group, key_share=True)).id


async def set_level(session: AsyncSession, group: str | None, kind: str, level: Level) -> bool:
    """Set a level; returns whether it changed."""
    scope = await _scope(session, group)
    now = datetime.now(UTC)
    row = await session.get(RevealLevelRow, (scope, kind))
    if row is None:
        session.add(RevealLevelRow(scope=scope, kind=kind, level=level, updated_at=now))
    elif row.level == level:
        return False
    else:
        row.level, row.updated_at = level, now
    await session.flush()
    return True


async def clear_level(session: AsyncSession, group: str | None, kind: str) -> bool:
    scope = await _scope(session, group)
    result = await session.execute(
        delete(RevealLevelRow).where(RevealLevelRow.scope == scope, RevealLevelRow.kind == kind)
    )
    return bool(getattr(result, "rowcount", 0))


async def never_restore(session: AsyncSession, kind: str) -> bool:
    if await session.get(NeverRestoreRow, kind) is not None:
        return False
    session.add(NeverRestoreRow(kind=kind, created_at=datetime.now(UTC)))
    await session.flush()
    return True


async def allow_restore(session: AsyncSession, kind: str) -> bool:
    result = await session.execute(delete(NeverRestoreRow).where(NeverRestoreRow.kind == kind))
    return bool(getattr(result, "rowcount", 0))


async def rules(session: AsyncSession) -> Rules:
    default: dict[str, Level] = {}
    groups: dict[str, dict[str, Level]] = defaultdict(dict)
    rows = await session.execute(select(RevealLevelRow.scope, RevealLevelRow.kind,
                                        RevealLevelRow.level))  # fmt: skip
    for scope, kind, level in rows:
        (default if scope == DEFAULT_SCOPE else groups[scope])[kind] = cast(Level, level)
    never = frozenset(await session.scalars(select(NeverRestoreRow.kind)))
    return Rules(default=default, groups=dict(groups), never_restore=never)


async def levels(session: AsyncSession) -> list[LevelSetting]:
    """Every level set: the organisation's first, then each group's by name; kinds sorted."""
    rows = await session.execute(
        select(RevealLevelRow, GroupRow.name)
        .outerjoin(GroupRow, GroupRow.id == RevealLevelRow.scope)
        .order_by(RevealLevelRow.scope != DEFAULT_SCOPE, GroupRow.name, RevealLevelRow.kind)
    )
    found: list[LevelSetting] = []
    for row, group_name in rows:
        if row.scope != DEFAULT_SCOPE and group_name is None:
            continue  # a group deleted by a transaction that raced the level's
        level = cast(Level, row.level)
        found.append(LevelSetting(group_name, row.kind, level, row.updated_at))
    return found
