"""The team's trails: which values were shown to whom, what admins did, when tokens were used.

The rules:
- A reveal event is a value shown to a viewer whole (`plain`) or in part (`masked`): it holds
  the token (`<EMAIL_1>`), the kind and the level, never the value; a `label` shows nothing
  of a value and is not recorded. One message's reveals are one transaction.
- An admin event holds an action (`group.create`) and its target by name (a user, a group, a
  kind), never a secret or a value. Both are checked for shape, so a value handed here by
  mistake is refused rather than stored, and is never echoed in the error.
- Neither has foreign keys: the trail outlives the users and conversations it names.
- Events are listed newest first; `since` is inclusive and `until` exclusive.
- An API token's `last_used_at` moves at most once a minute, so using a token costs a write
  only that often.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar, cast

from sqlalchemy import Select, insert, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import InstrumentedAttribute

from holdback.errors import InvalidTokenError
from holdback.reveal import Level
from holdback.store.errors import InvalidRecordError
from holdback.store.records import AdminEvent, RevealEvent
from holdback.store.schema import RECORDED_LEVELS, AdminEventRow, ApiTokenRow, RevealEventRow
from holdback.store.team import check_kind, check_reveal_level
from holdback.tokens import token_id

MAX_EVENTS = 10_000
MAX_TARGET_CHARS = 400
TOUCH_INTERVAL = timedelta(minutes=1)
_ID_RE = re.compile(r"[A-Za-z0-9_-]{1,32}\Z")
_ACTION_RE = re.compile(r"[a-z][a-z0-9_.:-]{0,63}\Z")


def check_id(value: str | None, what: str) -> str | None:
    if value is not None and (not isinstance(value, str) or not _ID_RE.match(value)):
        raise InvalidRecordError(f"a {what} id is up to 32 letters, digits, '_' or '-'")
    return value


def check_reveals(items: Sequence[tuple[str, str, str]]) -> list[tuple[str, str, Level]]:
    """The items worth recording: canonical tokens, checked kinds, `plain`/`masked` only."""
    kept: list[tuple[str, str, Level]] = []
    for token, kind, level in items:
        checked = check_reveal_level(level)
        check_kind(kind)
        try:
            canonical = f"<{token_id(token)}>"
        except InvalidTokenError:
            raise InvalidRecordError("a reveal event names a token of the form <KIND_N>") from None
        if len(canonical) > 100:
            raise InvalidRecordError("a reveal event's token is at most 100 characters")
        if checked in RECORDED_LEVELS:
            kept.append((canonical, kind, checked))
    return kept


def check_admin(action: str, target: str) -> None:
    if not isinstance(action, str) or not _ACTION_RE.match(action):
        raise InvalidRecordError(
            "an admin action is a short lower-case name, e.g. 'group.create' (at most 64 chars)"
        )
    if not isinstance(target, str) or len(target) > MAX_TARGET_CHARS:
        raise InvalidRecordError(f"an admin event's target is at most {MAX_TARGET_CHARS} chars")
    if any(ord(c) < 32 or ord(c) == 127 for c in target):
        raise InvalidRecordError("an admin event's target cannot contain control characters")


def check_window(since: datetime | None, until: datetime | None, limit: int) -> None:
    for when in (since, until):
        if when is not None and when.tzinfo is None:
            raise InvalidRecordError("event times are aware datetimes (UTC)")
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_EVENTS:
        raise InvalidRecordError(f"a listing holds 1 to {MAX_EVENTS} events")


async def insert_reveals(
    session: AsyncSession,
    viewer_id: str | None,
    conversation_id: str | None,
    message_id: str | None,
    items: Sequence[tuple[str, str, Level]],
) -> None:
    now = datetime.now(UTC)
    rows = [
        {"viewer_id": viewer_id, "conversation_id": conversation_id, "message_id": message_id,
         "token": token, "kind": kind, "level": level, "created_at": now}
        for token, kind, level in items
    ]  # fmt: skip
    await session.execute(insert(RevealEventRow), rows)


async def insert_admin(
    session: AsyncSession, actor_id: str | None, action: str, target: str
) -> None:
    session.add(
        AdminEventRow(actor_id=actor_id, action=action, target=target, created_at=datetime.now(UTC))
    )
    await session.flush()


_Event = TypeVar("_Event", RevealEventRow, AdminEventRow)


def _listing(
    row: type[_Event],
    equal: Sequence[tuple[InstrumentedAttribute[Any], str | None]],
    since: datetime | None,
    until: datetime | None,
    limit: int,
) -> Select[_Event]:
    """The newest `limit` events whose columns equal the values given (None: any), from
    `since` (inclusive) until `until` (exclusive)."""
    query = select(row)
    for column, value in equal:
        if value is not None:
            query = query.where(column == value)
    if since is not None:
        query = query.where(row.created_at >= since)
    if until is not None:
        query = query.where(row.created_at < until)
    return query.order_by(row.created_at.desc(), row.id.desc()).limit(limit)


async def reveal_events(
    session: AsyncSession,
    viewer_id: str | None,
    conversation_id: str | None,
    since: datetime | None,
    until: datetime | None,
    limit: int,
) -> list[RevealEvent]:
    equal = [
        (RevealEventRow.viewer_id, viewer_id),
        (RevealEventRow.conversation_id, conversation_id),
    ]
    rows = await session.scalars(_listing(RevealEventRow, equal, since, until, limit))
    return [
        RevealEvent(
            id=row.id,
            viewer_id=row.viewer_id,
            conversation_id=row.conversation_id,
            message_id=row.message_id,
            token=row.token,
            kind=row.kind,
            level=cast(Level, row.level),
            created_at=row.created_at,
        )
        for row in rows
    ]


async def admin_events(
    session: AsyncSession,
    actor_id: str | None,
    action: str | None,
    since: datetime | None,
    until: datetime | None,
    limit: int,
) -> list[AdminEvent]:
    equal = [(AdminEventRow.actor_id, actor_id), (AdminEventRow.action, action)]
    rows = await session.scalars(_listing(AdminEventRow, equal, since, until, limit))
    return [
        AdminEvent(
            id=row.id,
            actor_id=row.actor_id,
            action=row.action,
            target=row.target,
            created_at=row.created_at,
        )
        for row in rows
    ]


async def touch_token(session: AsyncSession, api_token_id: str, now: datetime) -> bool:
    """Set the token's `last_used_at` to `now` unless it was set less than a minute ago."""
    result = await session.execute(
        update(ApiTokenRow)
        .where(
            ApiTokenRow.id == api_token_id,
            or_(
                ApiTokenRow.last_used_at.is_(None),
                ApiTokenRow.last_used_at < now - TOUCH_INTERVAL,
            ),
        )
        .values(last_used_at=now)
    )
    return bool(getattr(result, "rowcount", 0))
