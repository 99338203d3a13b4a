"""Users, login sessions and API tokens.

The rules: a session secret or API token is shown once, to the caller that created it, and
only its SHA-256 is stored (both are 256-bit random strings, so a fast hash is enough and a
stolen database yields no usable credential). Passwords are hashed by the caller; the store
keeps the hash it is given. An expired session is no session, and is deleted when it is
next presented.

A credential is worth what the database says now: a session or token of a disabled user
names nobody, nor does a revoked token, checked in the same query that finds the user (so a
server that checks again, per request or per WebSocket frame, sees it at once). Disabling a
user also deletes their sessions; their tokens work again if the user is enabled, unless
revoked. Revoking is for good.
"""

from __future__ import annotations

import hashlib
import secrets
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from sqlalchemy import Table, bindparam, delete, select
from sqlalchemy.ext.asyncio import AsyncSession

from holdback.store.errors import InvalidRecordError, RecordNotFoundError, UserNotFoundError
from holdback.store.records import ApiToken, User
from holdback.store.runner import Runner
from holdback.store.schema import ApiTokenRow, SessionRow, UserRow

LOCAL_USER_NAME = "local"
API_TOKEN_PREFIX = "hb_"
MAX_NAME_CHARS = 200


def new_id() -> str:
    """A random id, usable in URLs."""
    return uuid.uuid4().hex


def secret_hash(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


_users = cast(Table, UserRow.__table__)
_sessions = cast(Table, SessionRow.__table__)
_tokens = cast(Table, ApiTokenRow.__table__)
_USER = (_users.c.id, _users.c.name, _users.c.password_hash, _users.c.created_at,
         _users.c.disabled_at, _users.c.role)  # fmt: skip
# The credential checks of every request and WebSocket frame: one statement each.
_SESSION_USER = (
    select(_sessions.c.expires_at, *_USER)
    .join(_users, _users.c.id == _sessions.c.user_id)
    .where(_sessions.c.secret_hash == bindparam("hash"))
)
_TOKEN_USER = (
    select(_tokens.c.id.label("token_id"), *_USER)
    .join(_tokens, _tokens.c.user_id == _users.c.id)
    .where(
        _tokens.c.token_hash == bindparam("hash"),
        _tokens.c.revoked_at.is_(None),
        _users.c.disabled_at.is_(None),
    )
)
_USER_BY_ID = select(*_USER).where(_users.c.id == bindparam("id"))


def to_user(row: Any) -> User:
    """A user record from an ORM row or a Core result row (same attribute names)."""
    return User(
        id=row.id,
        name=row.name,
        password_hash=row.password_hash,
        created_at=row.created_at,
        disabled_at=row.disabled_at,
        role=row.role,
    )


def check_name(name: str, what: str) -> str:
    if not name or not name.strip():
        raise InvalidRecordError(f"a {what} name cannot be empty")
    if len(name) > MAX_NAME_CHARS:
        raise InvalidRecordError(f"a {what} name is at most {MAX_NAME_CHARS} characters")
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        raise InvalidRecordError(f"a {what} name cannot contain control characters")
    return name


async def insert_user(
    session: AsyncSession, name: str, password_hash: str | None, role: str = "member"
) -> User:
    row = UserRow(
        id=new_id(), name=name, password_hash=password_hash, created_at=datetime.now(UTC),
        role=role,
    )  # fmt: skip
    session.add(row)
    await session.flush()
    return to_user(row)


async def user_by_name(session: AsyncSession, name: str) -> User | None:
    row = await session.scalar(select(UserRow).where(UserRow.name == name))
    return to_user(row) if row is not None else None


async def _require_user(session: AsyncSession, user_id: str) -> None:
    if await session.get(UserRow, user_id) is None:
        raise UserNotFoundError(f"user {user_id} does not exist")


async def insert_session(session: AsyncSession, user_id: str, ttl: timedelta) -> str:
    if ttl <= timedelta(0):
        raise InvalidRecordError("a session lifetime must be positive")
    await _require_user(session, user_id)
    secret = secrets.token_urlsafe(32)
    now = datetime.now(UTC)
    session.add(
        SessionRow(
            secret_hash=secret_hash(secret), user_id=user_id, created_at=now, expires_at=now + ttl
        )
    )
    await session.flush()
    return secret


def session_user(run: Runner, secret: str) -> tuple[User | None, bool]:
    """The user of a live session, and whether an expired session matched instead."""
    found = run.rows(_SESSION_USER, {"hash": secret_hash(secret)})
    if not found:
        return None, False
    row = found[0]
    if row.expires_at <= datetime.now(UTC):
        return None, True
    if row.disabled_at is not None:
        return None, False
    return to_user(row), False


async def remove_session(session: AsyncSession, secret: str) -> None:
    await session.execute(delete(SessionRow).where(SessionRow.secret_hash == secret_hash(secret)))


async def remove_expired_sessions(session: AsyncSession) -> int:
    result = await session.execute(
        delete(SessionRow).where(SessionRow.expires_at <= datetime.now(UTC))
    )
    return int(getattr(result, "rowcount", 0) or 0)


async def insert_api_token(session: AsyncSession, user_id: str, name: str) -> str:
    await _require_user(session, user_id)
    token = API_TOKEN_PREFIX + secrets.token_urlsafe(32)
    session.add(
        ApiTokenRow(
            id=new_id(),
            user_id=user_id,
            name=name,
            token_hash=secret_hash(token),
            created_at=datetime.now(UTC),
        )
    )
    await session.flush()
    return token


def api_token_user(run: Runner, token: str) -> tuple[User, str] | None:
    """The user a live token acts for, and the token's id."""
    found = run.rows(_TOKEN_USER, {"hash": secret_hash(token)})
    return (to_user(found[0]), str(found[0].token_id)) if found else None


def user_with_id(run: Runner, user_id: str) -> User | None:
    found = run.rows(_USER_BY_ID, {"id": user_id})
    return to_user(found[0]) if found else None


async def set_disabled(session: AsyncSession, name: str, disabled: bool) -> tuple[User, bool]:
    """Disable or enable the user named `name`; returns the user and whether it changed.

    Disabling deletes the user's sessions, in the same transaction."""
    row = await session.scalar(select(UserRow).where(UserRow.name == name))
    if row is None:
        raise UserNotFoundError(f"no user named {name!r}")
    changed = (row.disabled_at is None) == disabled
    if changed:
        row.disabled_at = datetime.now(UTC) if disabled else None
    if disabled:
        await session.execute(delete(SessionRow).where(SessionRow.user_id == row.id))
    await session.flush()
    return to_user(row), changed


async def set_password(session: AsyncSession, name: str, password_hash: str) -> User:
    """Set the hash of the user named `name`'s password; their sessions end with it (their
    API tokens stay), in the same transaction."""
    row = await session.scalar(select(UserRow).where(UserRow.name == name))
    if row is None:
        raise UserNotFoundError(f"no user named {name!r}")
    row.password_hash = password_hash
    await session.execute(delete(SessionRow).where(SessionRow.user_id == row.id))
    await session.flush()
    return to_user(row)


def _to_token(row: ApiTokenRow, user: UserRow) -> ApiToken:
    return ApiToken(
        id=row.id,
        user_id=row.user_id,
        user_name=user.name,
        name=row.name,
        created_at=row.created_at,
        revoked_at=row.revoked_at,
        user_disabled=user.disabled_at is not None,
        last_used_at=row.last_used_at,
    )


async def api_tokens(session: AsyncSession, user_id: str | None) -> list[ApiToken]:
    query = select(ApiTokenRow, UserRow).join(UserRow, UserRow.id == ApiTokenRow.user_id)
    if user_id is not None:
        query = query.where(ApiTokenRow.user_id == user_id)
    rows = await session.execute(query.order_by(ApiTokenRow.created_at, ApiTokenRow.id))
    return [_to_token(token, user) for token, user in rows]


async def api_token_by_secret(session: AsyncSession, token: str) -> ApiToken | None:
    found = (
        await session.execute(
            select(ApiTokenRow, UserRow)
            .join(UserRow, UserRow.id == ApiTokenRow.user_id)
            .where(ApiTokenRow.token_hash == secret_hash(token))
        )
    ).first()
    return _to_token(*found) if found is not None else None


async def revoke_api_token(session: AsyncSession, token_id: str) -> tuple[ApiToken, bool]:
    """Revoke the token with this id; returns it and whether it was live until now."""
    found = (
        await session.execute(
            select(ApiTokenRow, UserRow)
            .join(UserRow, UserRow.id == ApiTokenRow.user_id)
            .where(ApiTokenRow.id == token_id)
        )
    ).first()
    if found is None:
        # Not echoed: a token's text pasted here by mistake must not be printed back.
        raise RecordNotFoundError("no API token has that id (holdback token list shows them)")
    row, user = found
    changed = row.revoked_at is None
    if changed:
        row.revoked_at = datetime.now(UTC)
        await session.flush()
    return _to_token(row, user), changed
