"""The frames of replies in flight, published for the other processes on one PostgreSQL.

The rules:
- A row is one released frame of a reply as its process's gate released it: tokenized, as it
  may be stored, numbered as every viewer's frame of it is (`seq`, the start is 1). Never an
  original value: values are tokens here, as in every stored message.
- Rows are written in batches, every reply a process publishes in one transaction, and each
  reply's batch is announced in that transaction (`pg_notify` on its conversation's channel,
  `frames_channel`, with the message id and the last number), so a listener that hears of a
  frame can always read it, and only processes that watch the conversation hear of it. A
  listener that missed an announcement reads what it lacks by number (`after`): the table
  is the replay buffer.
- A channel name is a digest of the conversation's id (or of a process's holder name, for
  the requests to stop a reply it runs: `control_channel`), so it is a short, valid name
  whatever the id, and it says nothing about the id beyond what the payload says.
- Rows outlive their reply for `KEPT` (a resume through any process), then `forget` drops
  them; a process drops its own reply's rows as soon as they are older than that.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta

from sqlalchemy import delete, func, insert, select, text
from sqlalchemy.ext.asyncio import AsyncSession

from holdback.store.schema import ReplyFrameRow

KEPT = timedelta(minutes=10)
MAX_READ = 5000  # frames one read gives back

# (conversation id, message id) -> numbered frames (JSON text)
Batches = Mapping[tuple[str, str], Sequence[tuple[int, str]]]


def _channel(prefix: str, name: str) -> str:
    return prefix + hashlib.blake2b(name.encode(), digest_size=12).hexdigest()


def frames_channel(conversation_id: str) -> str:
    """The channel a conversation's published frames are announced on."""
    return _channel("holdback_f_", conversation_id)


def control_channel(holder: str) -> str:
    """The channel a process (by its holder name) hears requests to stop its replies on."""
    return _channel("holdback_c_", holder)


async def publish(session: AsyncSession, batches: Batches, *, notify: bool) -> None:
    """Store numbered frames (JSON text) of every reply given, and announce each reply's."""
    batches = {key: frames for key, frames in batches.items() if frames}
    if not batches:
        return
    now = datetime.now(UTC)
    await session.execute(
        insert(ReplyFrameRow),
        [
            {
                "message_id": message_id,
                "seq": seq,
                "conversation_id": conversation_id,
                "frame": frame,
                "created_at": now,
            }
            for (conversation_id, message_id), frames in batches.items()
            for seq, frame in frames
        ],
    )
    if notify:
        announcements = [
            func.pg_notify(
                frames_channel(conversation_id),
                json.dumps({"m": message_id, "s": frames[-1][0]}),
            )
            for (conversation_id, message_id), frames in batches.items()
        ]
        await session.execute(select(*announcements))


async def after(session: AsyncSession, message_id: str, seq: int) -> list[tuple[int, str]]:
    rows = await session.execute(
        select(ReplyFrameRow.seq, ReplyFrameRow.frame)
        .where(ReplyFrameRow.message_id == message_id, ReplyFrameRow.seq > seq)
        .order_by(ReplyFrameRow.seq)
        .limit(MAX_READ)
    )
    return [(int(s), str(f)) for s, f in rows.all()]


async def forget(session: AsyncSession, now: datetime | None = None) -> int:
    cutoff = (now or datetime.now(UTC)) - KEPT
    result = await session.execute(delete(ReplyFrameRow).where(ReplyFrameRow.created_at < cutoff))
    return int(getattr(result, "rowcount", 0) or 0)


async def notify(session: AsyncSession, channel: str, payload: str) -> None:
    await session.execute(
        text("SELECT pg_notify(:channel, :payload)"), {"channel": channel, "payload": payload}
    )
