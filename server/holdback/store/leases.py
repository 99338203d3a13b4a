"""Reply leases and shared rate buckets: the rules several processes on one database keep together.

The rules:
- A conversation has at most one reply in flight, cluster-wide: the holder of its row in
  `reply_leases`. A lease is taken when there is none, or when the one there has expired;
  a live lease of another holder refuses it. Its holder may take it again (to name its
  reply's placeholder, or after a retry): that renews it.
- A lease lapses at `expires_at` unless its holder renews it. A holder that is still alive
  keeps a lease it renews late, so long as nobody took it meanwhile; one that lost it is told
  so (`renew`) and must stop its reply.
- A lapsed lease's reply is closed by whichever process notices first, in the transaction
  that takes the lease over (`acquire`) or sweeps it away (`close_expired`): marked as
  `branches.close_unfinished` marks a reply a stop cut off (incomplete, finish reason
  `other`, `ended_by` the server), if it is still unfinished. A lease that named no reply yet
  closes every unfinished reply of its conversation: none can be running without the lease.
  Two processes sweeping at once close each reply once (row locks, `SKIP LOCKED`).
- Time is the database's clock on PostgreSQL (processes on several hosts agree on it), the
  process's on SQLite (one host). It is read at the start of each transaction, so a lock
  waited for only makes a lease look younger and a bucket fuller: never the wrong way round.
- A user's rate bucket holds at most `per_minute` tokens and refills `per_minute / 60` a
  second; taking one is a locked read and a write in one transaction, so concurrent takes
  from any number of processes never spend a token twice.
- Each function here is one transaction's work; on PostgreSQL two writers meet on the row
  (`FOR UPDATE`, `ON CONFLICT`), on SQLite the write lock (`BEGIN IMMEDIATE`) serializes them.
  A first insert racing another is a unique violation, which `Database.write` retries whole.
  Rows hold ids, a process name and times: never a value.
"""

from __future__ import annotations

import math
import os
import secrets
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import delete, select, text, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession

from holdback.store.errors import ConcurrentWriteError
from holdback.store.schema import HOLDER_LENGTH, MessageRow, RateBucketRow, ReplyLeaseRow

SWEEP_BATCH = 500  # expired leases one `close_expired` takes; the next call takes the rest
_TRIES = 8  # a lease row vanishing between our insert and our lock, again and again


@dataclass(frozen=True, slots=True)
class LeaseTaken:
    """What `acquire` did: `ok`, the lease is this holder's now; `expired_message_id`, the
    reply of the lapsed lease it took over, which the same transaction closed (if unfinished)."""

    ok: bool
    expired_message_id: str | None = None

    def __bool__(self) -> bool:
        return self.ok


@dataclass(frozen=True, slots=True)
class Lease:
    """A conversation's lease as stored; `expired` against the database's clock at the read."""

    conversation_id: str
    holder: str
    message_id: str | None
    expires_at: datetime
    expired: bool


def new_holder() -> str:
    """A name for this process as a lease holder: `host:pid:random` (random, so a process
    that reuses a dead one's pid on the same host is another holder)."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(6)}"[-HOLDER_LENGTH:]


def check_holder(holder: str) -> str:
    if not holder or len(holder) > HOLDER_LENGTH:
        raise ValueError(f"a lease holder is 1 to {HOLDER_LENGTH} characters")
    return holder


def check_ttl(ttl: float) -> timedelta:
    if not math.isfinite(ttl) or ttl < 0:
        raise ValueError("a lease's time to live is a finite number of seconds, not negative")
    return timedelta(seconds=ttl)


def check_rate(per_minute: int) -> int:
    if per_minute < 1:
        raise ValueError("a rate bucket holds at least one token a minute")
    return per_minute


async def clock(session: AsyncSession) -> datetime:
    """Now, by the database's clock on PostgreSQL (this transaction's start), else ours."""
    if _dialect(session) == "postgresql":
        value = await session.scalar(text("SELECT now()"))
        assert isinstance(value, datetime)
        return value.astimezone(UTC)
    return datetime.now(UTC)


def _dialect(session: AsyncSession) -> str:
    return session.get_bind().dialect.name


def _insert(session: AsyncSession, row: type[Any]) -> Any:
    """An INSERT that can say ON CONFLICT DO NOTHING, in the session's dialect."""
    return (postgresql.insert if _dialect(session) == "postgresql" else sqlite.insert)(row)


async def acquire(
    session: AsyncSession,
    conversation_id: str,
    message_id: str | None,
    holder: str,
    ttl: timedelta,
) -> LeaseTaken:
    message_id = message_id or None  # "" names no reply either
    now = await clock(session)
    expires = now + ttl
    for _ in range(_TRIES):
        inserted = await session.execute(
            _insert(session, ReplyLeaseRow)
            .values(
                conversation_id=conversation_id,
                message_id=message_id,
                holder=holder,
                expires_at=expires,
            )
            .on_conflict_do_nothing(index_elements=["conversation_id"])
            .returning(ReplyLeaseRow.conversation_id)
        )
        if inserted.first() is not None:
            return LeaseTaken(True)
        found = (
            await session.execute(
                select(ReplyLeaseRow.holder, ReplyLeaseRow.message_id, ReplyLeaseRow.expires_at)
                .where(ReplyLeaseRow.conversation_id == conversation_id)
                .with_for_update()
            )
        ).first()
        if found is None:
            continue  # released between our insert and our lock: insert again
        old_holder, old_message, old_expiry = found
        values: dict[str, object] = {"holder": holder, "expires_at": expires}
        if message_id is not None or old_holder != holder:
            values["message_id"] = message_id
        mine = old_holder == holder
        if not mine and old_expiry > now:
            return LeaseTaken(False)
        await session.execute(
            update(ReplyLeaseRow)
            .where(ReplyLeaseRow.conversation_id == conversation_id)
            .values(**values)
        )
        if mine:
            return LeaseTaken(True)
        await close_replies(session, conversation_id, old_message, now)
        return LeaseTaken(True, old_message)
    raise ConcurrentWriteError(
        f"the lease of conversation {conversation_id} kept vanishing under concurrent writers"
    )


async def renew(
    session: AsyncSession, holder: str, conversation_ids: Sequence[str], ttl: timedelta
) -> list[str]:
    """Extend the holder's leases among `conversation_ids`; the ids it does not hold (lost),
    in the order given."""
    wanted = sorted(set(conversation_ids))
    if not wanted:
        return []
    now = await clock(session)
    held_rows = ReplyLeaseRow.conversation_id.in_(wanted), ReplyLeaseRow.holder == holder
    await session.execute(update(ReplyLeaseRow).where(*held_rows).values(expires_at=now + ttl))
    # Our updated rows stay locked until commit: what this reads is what we hold.
    held = set(await session.scalars(select(ReplyLeaseRow.conversation_id).where(*held_rows)))
    lost: list[str] = []
    for conversation_id in conversation_ids:
        if conversation_id not in held and conversation_id not in lost:
            lost.append(conversation_id)
    return lost


async def release(session: AsyncSession, conversation_id: str, holder: str) -> None:
    await session.execute(
        delete(ReplyLeaseRow).where(
            ReplyLeaseRow.conversation_id == conversation_id, ReplyLeaseRow.holder == holder
        )
    )


async def lease_of(session: AsyncSession, conversation_id: str) -> Lease | None:
    found = (
        await session.execute(
            select(ReplyLeaseRow.holder, ReplyLeaseRow.message_id, ReplyLeaseRow.expires_at).where(
                ReplyLeaseRow.conversation_id == conversation_id
            )
        )
    ).first()
    if found is None:
        return None
    holder, message_id, expires_at = found
    now = await clock(session)
    return Lease(conversation_id, holder, message_id, expires_at, expired=expires_at <= now)


async def close_expired(session: AsyncSession, now: datetime | None) -> list[tuple[str, str]]:
    """Delete up to `SWEEP_BATCH` leases expired at `now` (default: the database's clock) and
    close their replies; (conversation id, message id) of each reply this call closed."""
    if now is None:
        now = await clock(session)
    rows = (
        await session.execute(
            select(ReplyLeaseRow.conversation_id, ReplyLeaseRow.message_id)
            .where(ReplyLeaseRow.expires_at <= now)
            .order_by(ReplyLeaseRow.expires_at)
            .limit(SWEEP_BATCH)
            # A lease another sweeper, an acquirer or its renewing holder has locked is theirs.
            .with_for_update(skip_locked=True)
        )
    ).all()
    if not rows:
        return []
    await session.execute(
        delete(ReplyLeaseRow).where(
            ReplyLeaseRow.conversation_id.in_([c for c, _ in rows]),
            ReplyLeaseRow.expires_at <= now,
        )
    )
    closed: list[tuple[str, str]] = []
    for conversation_id, message_id in rows:
        for done in await close_replies(session, conversation_id, message_id, now):
            closed.append((conversation_id, done))
    return closed


async def close_replies(
    session: AsyncSession, conversation_id: str, message_id: str | None, now: datetime
) -> list[str]:
    """Mark the lapsed lease's reply (or, if it named none, every unfinished reply of the
    conversation) as ended by the server, if still unfinished; the ids marked."""
    unfinished = [
        MessageRow.conversation_id == conversation_id,
        MessageRow.role == "assistant",
        MessageRow.status == "incomplete",
        MessageRow.finish_reason.is_(None),
    ]
    if message_id is not None:
        unfinished.append(MessageRow.id == message_id)
    found = (
        await session.execute(
            select(MessageRow.id, MessageRow.meta).where(*unfinished).with_for_update()
        )
    ).all()
    for found_id, meta in found:
        await session.execute(
            update(MessageRow)
            .where(MessageRow.id == found_id, *unfinished)
            .values(
                finish_reason="other",
                meta={**dict(meta or {}), "ended_by": "server"},
                updated_at=now,
            )
        )
    return [found_id for found_id, _ in found]


async def take_token(
    session: AsyncSession, user_id: str, per_minute: int, now: datetime | None
) -> bool:
    """Spend one of the user's tokens if the bucket (`per_minute` at most, refilling
    `per_minute / 60` a second) holds one at `now` (default: the database's clock)."""
    capacity = float(per_minute)
    if now is None:
        now = await clock(session)
    for _ in range(_TRIES):
        found = (
            await session.execute(
                select(RateBucketRow.tokens, RateBucketRow.updated_at)
                .where(RateBucketRow.user_id == user_id)
                .with_for_update()
            )
        ).first()
        if found is None:
            inserted = await session.execute(
                _insert(session, RateBucketRow)
                .values(user_id=user_id, tokens=capacity - 1, updated_at=now)
                .on_conflict_do_nothing(index_elements=["user_id"])
                .returning(RateBucketRow.user_id)
            )
            if inserted.first() is not None:
                return True
            continue  # another process made it first: lock it and read it
        tokens, updated_at = found
        elapsed = max(0.0, (now - updated_at).total_seconds())
        tokens = min(capacity, tokens + elapsed * per_minute / 60.0)
        if tokens < 1:
            return False  # nothing written: the row still refills from its own time
        await session.execute(
            update(RateBucketRow)
            .where(RateBucketRow.user_id == user_id)
            .values(tokens=tokens - 1, updated_at=max(now, updated_at))
        )
        return True
    raise ConcurrentWriteError(f"the rate bucket of user {user_id} kept vanishing")
