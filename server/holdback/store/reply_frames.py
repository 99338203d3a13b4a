"""The frames of replies in flight, published for the other processes on one PostgreSQL.

The rules:
- A row is one released frame of a reply as its process's gate released it: tokenized, as it
  may be stored, numbered as every viewer's frame of it is (`seq`, the start is 1). Never an
  original value: values are tokens here, as in every stored message.
- Rows are written in batches, and each batch is announced in the same transaction
  (`pg_notify` on `FRAMES_CHANNEL` with the message id and the last number), so a listener
  that hears of a frame can always read it. A listener that missed an announcement reads
  what it lacks by number (`after`): the table is the replay buffer.
- Rows outlive their reply for `KEPT` (a resume through any process), then `forget` drops
  them; a process drops its own reply's rows as soon as they are older than that.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from sqlalchemy import delete, insert, select, text
from sqlalchemy.ext.asyncio import AsyncSession

from holdback.store.schema import ReplyFrameRow

FRAMES_CHANNEL = "holdback_frames"
CONTROL_CHANNEL = "holdback_control"
KEPT = timedelta(minutes=10)
MAX_READ = 5000  # frames one read gives back


async def publish(
    session: AsyncSession,
    conversation_id: str,
    message_id: str,
    frames: Sequence[tuple[int, str]],
    *,
    notify: bool,
) -> None:
    """Store numbered frames (JSON text) and announce them."""
    if not frames:
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
            for seq, frame in frames
        ],
    )
    if notify:
        payload = json.dumps({"c": conversation_id, "m": message_id, "s": frames[-1][0]})
        await session.execute(
            text("SELECT pg_notify(:channel, :payload)"),
            {"channel": FRAMES_CHANNEL, "payload": payload},
        )


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
