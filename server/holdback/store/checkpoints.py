"""Replies saved as they stream, so a crash loses at most the last moment of what was seen.

The rules:
- What is saved is what the reply's filters released as storable (screened and tokenized),
  taken from the reply's own snapshot; never wire text, never held text.
- A reply is checkpointed when `size` bytes of text have been released since its last
  checkpoint, or `interval` seconds after the first byte not yet saved, whichever comes
  first. One writer per store writes, in one transaction, every reply that has text not yet
  saved once any one of them is due (each is then saved before its own time), so a busy
  server makes about one commit per interval, not one per chunk or per reply, however the
  replies are staggered; a round that is still being written delays the next, it never
  stacks up writes.
- A checkpoint appends: a row per changed channel says where the saved value is cut and
  what follows, so each round writes only the new text. Reading a message applies its rows
  in order (`fold`); `finish_reply` writes the final text and deletes the rows in one
  transaction, after the reply's last checkpoint has committed (`ReplyCheckpoint.close`).
- A failed round (locked, full disk) is logged by type, loses nothing already saved, and is
  tried again after `interval`. A reply whose message is gone (its conversation deleted by
  another server) stops being checkpointed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, cast

from sqlalchemy import Table, bindparam, exists, insert, select

from holdback.errors import describe
from holdback.store.database import Database
from holdback.store.records import Message
from holdback.store.runner import Runner
from holdback.store.schema import CHANNEL_RE, MessageRow, ReplyCheckpointRow

log = logging.getLogger(__name__)

DEFAULT_INTERVAL = 1.0  # seconds
DEFAULT_SIZE = 2048  # bytes of released text (UTF-8)
ROUND_REPLIES = 32  # replies saved in one round, at most
TEXT = ""  # the `part` of a row that continues the message's text

# The reply's text and parts as they may be stored now (screened, tokenized).
Snapshot = Callable[[], tuple[str, Mapping[str, str]]]

_table = cast(Table, ReplyCheckpointRow.__table__)
_messages = cast(Table, MessageRow.__table__)
# A row, saved only if its message exists (a reply whose conversation was deleted has none).
_SAVE = insert(_table).from_select(
    [c.key for c in _table.c],
    select(*(bindparam(c.key, type_=c.type) for c in _table.c)).where(
        exists().where(_messages.c.id == bindparam("message_id"))
    ),
)
# Which of the round's messages exist (an expanding IN: one compiled shape for any count).
_EXISTING = select(_messages.c.id).where(_messages.c.id.in_(bindparam("ids", expanding=True)))


_ROWS = (
    select(_table.c.message_id, _table.c.part, _table.c.start, _table.c.text)
    .where(_table.c.conversation_id == bindparam("conversation_id"))
    .order_by(_table.c.message_id, _table.c.seq)
)


# -- reading ------------------------------------------------------------------------------------


def fold(messages: Sequence[Message], rows: Iterable[Any]) -> list[Message]:
    """The messages with their checkpoint rows (`message_id`, `part`, `start`, `text`, in
    `seq` order per message) applied."""
    values: dict[str, dict[str, str]] = {}
    by_id = {m.id: m for m in messages}
    for row in rows:
        message = by_id.get(row.message_id)
        if message is None:
            continue
        current = values.get(row.message_id)
        if current is None:
            current = values[row.message_id] = {TEXT: message.text, **message.parts}
        current[row.part] = current.get(row.part, "")[: row.start] + row.text
    if not values:
        return list(messages)
    out = []
    for message in messages:
        current = values.get(message.id)
        if current is None:
            out.append(message)
            continue
        text = current.pop(TEXT)
        out.append(replace(message, text=text, parts=current))
    return out


def apply(run: Runner, conversation_id: str, messages: list[Message]) -> list[Message]:
    """`messages` of one conversation as far as their checkpoints go. Only a reply that was
    not stored whole (status "incomplete") can have checkpoints, so others cost nothing."""
    if all(m.status != "incomplete" for m in messages):
        return messages
    rows = run.rows(_ROWS, {"conversation_id": conversation_id})
    return fold(messages, rows) if rows else messages


# -- writing ------------------------------------------------------------------------------------


def check_bounds(interval: float, size: int) -> None:
    if not interval > 0:
        raise ValueError("the checkpoint interval must be positive")
    if size < 1:
        raise ValueError("the checkpoint size must be at least one byte")


def common_prefix(old: str, new: str) -> int:
    """How many leading characters `old` and `new` share (fast when `new` extends `old`)."""
    if new.startswith(old):
        return len(old)
    lo, hi = 0, min(len(old), len(new))  # old[:lo] == new[:lo]; they differ before hi + 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if new.startswith(old[lo:mid], lo):
            lo = mid
        else:
            hi = mid - 1
    return lo


class ReplyCheckpoint:
    """One streaming reply's checkpoints. `released(n)` after sending n bytes of its text;
    `await close()` before its final write."""

    def __init__(
        self, journal: Journal, conversation_id: str, message_id: str, snapshot: Snapshot
    ) -> None:
        self._journal = journal
        self.conversation_id = conversation_id
        self.message_id = message_id
        self._snapshot = snapshot
        self._saved: dict[str, str] = {TEXT: ""}  # each channel as its rows leave it
        self._seq = 0
        self._pending = 0  # bytes released since the last snapshot
        self._timer: asyncio.TimerHandle | None = None
        self.writing: asyncio.Future[None] | None = None  # the round that holds our rows
        self.closed = False
        self.saves = 0  # rounds that committed rows of this reply
        self.failures = 0  # rounds holding rows of this reply that did not commit
        self.tried = False  # a round held rows of this reply (committed or not, who knows)
        self._changed = asyncio.Event()  # set after each round that held this reply

    @property
    def saved(self) -> tuple[str, dict[str, str]]:
        """What the database holds of the reply: its text and parts as last committed."""
        parts = dict(self._saved)
        return parts.pop(TEXT), parts

    @property
    def unsaved(self) -> bool:
        """Text was released since the last round that held this reply."""
        return self._pending > 0

    @property
    def queued(self) -> bool:
        """Due now, or being written."""
        return self.writing is not None or self._journal.is_due(self)

    async def until_saved(self, saves: int) -> None:
        """Wait until `saves` rounds holding this reply have committed."""
        while self.saves < saves:
            self._changed.clear()
            await self._changed.wait()

    async def until_failed(self, failures: int) -> None:
        """Wait until `failures` rounds holding this reply have failed."""
        while self.failures < failures:
            self._changed.clear()
            await self._changed.wait()

    def released(self, nbytes: int) -> None:
        """`nbytes` of the reply's text reached the client."""
        if self.closed or nbytes <= 0:
            return
        self._pending += nbytes
        if self._pending >= self._journal.size:
            self._due()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self._journal.interval, self._due)

    async def close(self) -> None:
        """No more checkpoints; returns once a round holding this reply has committed (or
        failed), so the final write comes after every checkpoint."""
        self.closed = True
        self._cancel_timer()
        self._journal.forget(self)
        writing = self.writing
        if writing is not None:
            await asyncio.shield(writing)

    # -- for the journal --------------------------------------------------------------------

    def _due(self) -> None:
        self._cancel_timer()
        if not self.closed:
            self._journal.due(self)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def take(self, now: datetime) -> tuple[list[dict[str, object]], dict[str, str]]:
        """The rows that bring the saved reply up to now, and the values they leave."""
        self._pending = 0
        self._cancel_timer()
        try:
            text, parts = self._snapshot()
        except Exception as exc:  # a snapshot must never stop the reply it belongs to
            log.warning("could not read reply %s to save it: %s", self.message_id, describe(exc))
            return [], self._saved
        values = {TEXT: text}
        # A part the final write would refuse is not saved either.
        values.update((k, v) for k, v in parts.items() if CHANNEL_RE.match(k))
        rows: list[dict[str, object]] = []
        for part, value in values.items():
            old = self._saved.get(part, "")
            if value == old:
                continue
            start = common_prefix(old, value)
            rows.append(
                {
                    "message_id": self.message_id,
                    "seq": self._seq + len(rows) + 1,
                    "conversation_id": self.conversation_id,
                    "part": part,
                    "start": start,
                    "text": value[start:],
                    "created_at": now,
                }
            )
        self.tried = self.tried or bool(rows)
        return rows, values

    def committed(self, rows: int, values: dict[str, str]) -> None:
        self._seq += rows
        self._saved = values
        self.saves += 1
        self._changed.set()

    def failed(self) -> None:
        """The round did not commit: try again after the interval (nothing saved is lost)."""
        self.failures += 1
        self._changed.set()
        if not self.closed and self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self._journal.interval, self._due)

    def gone(self) -> None:
        """The reply's message no longer exists: nothing more to save."""
        self.closed = True
        self._cancel_timer()
        self._journal.forget(self)
        self._changed.set()


class Journal:
    """The checkpoint writer of one store: every due reply, one transaction per round."""

    def __init__(self, db: Database, *, interval: float, size: int) -> None:
        check_bounds(interval, size)
        self._db = db
        self.interval = interval
        self.size = size
        self._due: dict[ReplyCheckpoint, None] = {}  # in order, without repeats
        self._open: dict[ReplyCheckpoint, None] = {}  # every reply not closed yet
        self._writer: asyncio.Task[None] | None = None
        self._closed = False
        self.rounds = 0  # committed rounds, for tests and measurements
        self._round = asyncio.Event()  # set after each committed round

    def open(self, conversation_id: str, message_id: str, snapshot: Snapshot) -> ReplyCheckpoint:
        reply = ReplyCheckpoint(self, conversation_id, message_id, snapshot)
        self._open[reply] = None
        return reply

    def due(self, reply: ReplyCheckpoint) -> None:
        if self._closed:
            return
        self._due[reply] = None
        if self._writer is None or self._writer.done():
            self._writer = asyncio.get_running_loop().create_task(
                self._drain(), name="reply-checkpoints"
            )

    def forget(self, reply: ReplyCheckpoint) -> None:
        self._due.pop(reply, None)
        self._open.pop(reply, None)

    def is_due(self, reply: ReplyCheckpoint) -> bool:
        return reply in self._due

    async def until_rounds(self, rounds: int) -> None:
        """Wait until `rounds` rounds have committed."""
        while self.rounds < rounds:
            self._round.clear()
            await self._round.wait()

    async def close(self) -> None:
        """Stop writing (at store close, after the replies have ended)."""
        self._closed = True
        self._due.clear()
        self._open.clear()
        writer, self._writer = self._writer, None
        if writer is not None and not writer.done():
            writer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await writer

    async def _drain(self) -> None:
        loop = asyncio.get_running_loop()
        while self._due:
            # The due replies, and every other with text not yet saved: one commit saves
            # them all, before each one's own time.
            batch = [reply for reply in self._due if not reply.closed]
            batch += [r for r in self._open if r.unsaved and not r.closed and r not in self._due]
            self._due.clear()
            # A round is bounded, so one never holds the event loop long: the rest of the
            # batch goes in the rounds right after it.
            for reply in batch[ROUND_REPLIES:]:
                self._due[reply] = None
            batch = batch[:ROUND_REPLIES]
            now = datetime.now(UTC)
            taken = [(reply, *reply.take(now)) for reply in batch]
            taken = [(reply, rows, values) for reply, rows, values in taken if rows]
            if not taken:
                continue
            round_done: asyncio.Future[None] = loop.create_future()
            for reply, _, _ in taken:
                reply.writing = round_done
            try:
                gone = await self._write([row for _, rows, _ in taken for row in rows])
            except Exception as exc:  # StoreError, or a bug: the replies go on either way
                log.warning("could not save %d streaming replies: %s", len(taken), describe(exc))
                for reply, _, _ in taken:
                    reply.failed()
            else:
                self.rounds += 1
                self._round.set()
                for reply, rows, values in taken:
                    if reply.message_id in gone:
                        reply.gone()
                    else:
                        reply.committed(len(rows), values)
            finally:
                round_done.set_result(None)
                for reply, _, _ in taken:
                    if reply.writing is round_done:
                        reply.writing = None

    async def _write(self, rows: list[dict[str, object]]) -> set[str]:
        """Insert the rows of the replies whose messages still exist; the ids that do not."""
        ids = sorted({str(row["message_id"]) for row in rows})

        def work(run: Runner) -> set[str]:
            if run.many(_SAVE, rows) == len(rows):
                return set()  # every row saved (where the driver counts them)
            return set(ids) - {row.id for row in run.rows(_EXISTING, {"ids": ids})}

        return await self._db.transact(work, write=True, what="saving streaming replies")
