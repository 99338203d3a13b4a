"""Issue #15, item 5: a streaming reply is saved as it goes, so a crash loses at most one
checkpoint of what the user saw.

Checked on both engines, through the store's own API: a reply is saved once `size` bytes
have been released (not one byte before) or `interval` seconds after the first unsaved byte;
each round appends only the new text; every due reply goes in one transaction; what was
saved reads back (history and the model's next turn) until the final write replaces it; a
failed round loses nothing and is tried again. The kill -9 of a real server is in
tests/app/test_kill_mid_reply.py.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import sqlite3
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from holdback.app.pipeline import ChatService
from holdback.detect import DetectorSet
from holdback.providers.base import ChatRequest
from holdback.providers.events import End, Event, TextDelta
from holdback.store import Store, VaultKey, downgrade, upgrade
from holdback.store.checkpoints import ReplyCheckpoint, common_prefix
from holdback.store.schema import ReplyCheckpointRow
from tests.store.conftest import sqlite_url
from tests.support.postgres import PostgresServer

pytestmark = pytest.mark.anyio

HOUR = 3600.0


class Reply:
    """What a reply's filters have released so far, as the pipeline's snapshot gives it."""

    def __init__(self) -> None:
        self.text = ""
        self.parts: dict[str, str] = {}

    def snapshot(self) -> tuple[str, dict[str, str]]:
        return self.text, dict(self.parts)


async def open_store(url: str, key: VaultKey, **options: float) -> Store:
    return await Store.open(url, vault_key=key, **options)  # type: ignore[arg-type]


@pytest.fixture
async def sized(database_url: str, vault_key: VaultKey) -> AsyncIterator[Store]:
    """A store that checkpoints by size only (the interval is an hour)."""
    store = await open_store(database_url, vault_key, checkpoint_interval=HOUR)
    try:
        yield store
    finally:
        await store.close()


async def streaming(store: Store) -> tuple[str, str]:
    user = await store.create_user("alice", None)
    chat = await store.create_conversation(user.id)
    turn = await store.begin_reply(chat.id, "tell me a story")
    return chat.id, turn.assistant.id


async def stored_reply(store: Store, chat_id: str) -> tuple[str, dict[str, str], str]:
    message = (await store.list_messages(chat_id))[-1]
    assert message.role == "assistant"
    return message.text, message.parts, message.status


async def rows_of(store: Store, message_id: str) -> list[ReplyCheckpointRow]:
    async def work(session: AsyncSession) -> list[ReplyCheckpointRow]:
        found = await session.scalars(
            select(ReplyCheckpointRow)
            .where(ReplyCheckpointRow.message_id == message_id)
            .order_by(ReplyCheckpointRow.seq)
        )
        return list(found)

    return await store.database.read(work)


async def saved(checkpoint: ReplyCheckpoint, saves: int) -> None:
    await asyncio.wait_for(checkpoint.until_saved(saves), timeout=15)


# -- when a reply is saved --------------------------------------------------------------------


async def test_a_reply_is_saved_at_2_kib_of_released_text_not_a_byte_before(sized: Store) -> None:
    chat_id, message_id = await streaming(sized)
    reply = Reply()
    checkpoint = sized.reply_checkpoints(chat_id, message_id, reply.snapshot)
    reply.text = "é" * 1023 + "a"  # 2047 bytes of UTF-8
    checkpoint.released(len(reply.text.encode()))
    assert not checkpoint.queued  # just under the limit: nothing to write yet
    assert await stored_reply(sized, chat_id) == ("", {}, "incomplete")
    reply.text += "b"
    checkpoint.released(1)  # 2048 bytes: due now
    assert checkpoint.queued
    await saved(checkpoint, 1)
    assert await stored_reply(sized, chat_id) == (reply.text, {}, "incomplete")
    assert checkpoint.saved == (reply.text, {})
    await checkpoint.close()


async def test_a_reply_is_saved_an_interval_after_its_first_unsaved_byte(
    database_url: str, vault_key: VaultKey
) -> None:
    interval = 0.3
    store = await open_store(database_url, vault_key, checkpoint_interval=interval)
    try:
        chat_id, message_id = await streaming(store)
        reply = Reply()
        checkpoint = store.reply_checkpoints(chat_id, message_id, reply.snapshot)
        reply.text = "Once"
        started = time.monotonic()
        checkpoint.released(4)
        assert not checkpoint.queued  # far below 2 KiB: it waits for the interval
        reply.text = "Once upon"
        checkpoint.released(5)  # more text does not restart the clock
        await saved(checkpoint, 1)
        took = time.monotonic() - started
        assert interval * 0.95 <= took < interval + 5
        assert (await stored_reply(store, chat_id))[0] == "Once upon"
        await checkpoint.close()
    finally:
        await store.close()


async def test_each_round_appends_only_the_new_text_of_each_channel(sized: Store) -> None:
    chat_id, message_id = await streaming(sized)
    reply = Reply()
    checkpoint = sized.reply_checkpoints(chat_id, message_id, reply.snapshot)
    calls: list[dict[str, str]] = []
    for round_ in range(1, 6):
        reply.text += f"Round {round_} with <EMAIL_1>. " + "x" * 2048
        reply.parts["reasoning"] = reply.parts.get("reasoning", "") + f"thought {round_} "
        calls.append({"call_id": f"call_{round_}", "name": "lookup", "arguments": '{"q": 1}'})
        reply.parts["tool_calls"] = json.dumps(calls)
        checkpoint.released(len(reply.text.encode()))
        await saved(checkpoint, round_)
        assert await stored_reply(sized, chat_id) == (reply.text, reply.parts, "incomplete")
    rows = await rows_of(sized, message_id)
    text_rows = [row for row in rows if row.part == ""]
    # Linear, not quadratic: together the rows hold the text once.
    assert sum(len(row.text) for row in text_rows) == len(reply.text)
    assert [row.seq for row in rows] == list(range(1, len(rows) + 1))
    # A tool call list grows inside its JSON: only what follows the shared prefix is written.
    tool_rows = [row for row in rows if row.part == "tool_calls"]
    assert all(row.start > 0 for row in tool_rows[1:])
    assert sum(len(row.text) for row in tool_rows) < 2 * len(reply.parts["tool_calls"])
    await checkpoint.close()


async def test_every_due_reply_goes_in_one_transaction(sized: Store) -> None:
    user = await sized.create_user("alice", None)
    replies: list[tuple[str, Reply, ReplyCheckpoint]] = []
    for n in range(12):
        chat = await sized.create_conversation(user.id)
        turn = await sized.begin_reply(chat.id, f"question {n}")
        reply = Reply()
        checkpoint = sized.reply_checkpoints(chat.id, turn.assistant.id, reply.snapshot)
        replies.append((chat.id, reply, checkpoint))
    before = sized.checkpoint_rounds
    for n, (_, reply, checkpoint) in enumerate(replies):
        reply.text = f"answer {n} " + "y" * 2048
        checkpoint.released(len(reply.text))
    for _, _, checkpoint in replies:
        await saved(checkpoint, 1)
    assert sized.checkpoint_rounds == before + 1
    for chat_id, reply, checkpoint in replies:
        assert (await stored_reply(sized, chat_id))[0] == reply.text
        await checkpoint.close()


async def test_staggered_replies_share_rounds(database_url: str, vault_key: VaultKey) -> None:
    """Replies whose times fall apart are saved together once one is due: each is saved
    before its own time, in about one commit per interval however many there are."""
    store = await open_store(database_url, vault_key, checkpoint_interval=0.5)
    try:
        user = await store.create_user("alice", None)
        replies: list[tuple[str, Reply, ReplyCheckpoint]] = []
        for n in range(10):
            chat = await store.create_conversation(user.id)
            turn = await store.begin_reply(chat.id, f"question {n}")
            reply = Reply()
            replies.append(
                (
                    chat.id,
                    reply,
                    store.reply_checkpoints(chat.id, turn.assistant.id, reply.snapshot),
                )
            )
        before = store.checkpoint_rounds
        started = time.monotonic()
        for n, (_, reply, checkpoint) in enumerate(replies):  # one new reply every 40 ms
            reply.text = f"answer {n}"
            checkpoint.released(len(reply.text))
            await asyncio.sleep(0.04)
        for _, _, checkpoint in replies:
            await saved(checkpoint, 1)
        assert time.monotonic() - started < 0.5 + 0.4 + 1.0  # none waited past its time
        assert store.checkpoint_rounds - before <= 2  # not one round per reply
        for chat_id, reply, checkpoint in replies:
            assert (await stored_reply(store, chat_id))[0] == reply.text
            await checkpoint.close()
    finally:
        await store.close()


async def test_text_released_while_a_round_is_written_goes_in_the_next(sized: Store) -> None:
    chat_id, message_id = await streaming(sized)
    reply = Reply()
    checkpoint = sized.reply_checkpoints(chat_id, message_id, reply.snapshot)
    reply.text = "a" * 2048
    checkpoint.released(2048)
    reply.text += "b" * 2048  # before the writer has run: the first round takes both
    checkpoint.released(2048)
    await saved(checkpoint, 1)
    reply.text += "c" * 2048
    checkpoint.released(2048)
    await saved(checkpoint, 2)
    assert (await stored_reply(sized, chat_id))[0] == reply.text
    await checkpoint.close()


# -- what reads it back ------------------------------------------------------------------------


async def test_the_saved_reply_is_history_for_the_next_turn(sized: Store) -> None:
    chat_id, message_id = await streaming(sized)
    reply = Reply()
    checkpoint = sized.reply_checkpoints(chat_id, message_id, reply.snapshot)
    reply.text = "Partial answer about <EMAIL_1> " + "z" * 2048
    checkpoint.released(len(reply.text))
    await saved(checkpoint, 1)
    # The server died here: no close, no final write. The next message reads it back.
    turn = await sized.begin_reply(chat_id, "go on")
    assert [m.text for m in turn.history] == ["tell me a story", reply.text, "go on"]
    assert turn.history[1].status == "incomplete"


async def test_the_final_write_replaces_the_checkpoints(sized: Store) -> None:
    chat_id, message_id = await streaming(sized)
    reply = Reply()
    checkpoint = sized.reply_checkpoints(chat_id, message_id, reply.snapshot)
    reply.text = "Stopped early " + "w" * 2048
    reply.parts["reasoning"] = "hmm"
    checkpoint.released(len(reply.text))
    await saved(checkpoint, 1)
    await checkpoint.close()
    assert checkpoint.tried
    # A Stop: the final text is what was released, status incomplete; nothing is doubled.
    await sized.finish_reply(
        chat_id,
        message_id,
        text=reply.text,
        parts={"reasoning": "hmm"},
        status="incomplete",
        finish_reason="other",
    )
    assert await stored_reply(sized, chat_id) == (reply.text, {"reasoning": "hmm"}, "incomplete")
    assert await rows_of(sized, message_id) == []
    checkpoint.released(5000)  # after close: ignored
    assert not checkpoint.queued


async def test_update_message_replaces_the_checkpoints(sized: Store) -> None:
    chat_id, message_id = await streaming(sized)
    reply = Reply()
    checkpoint = sized.reply_checkpoints(chat_id, message_id, reply.snapshot)
    reply.text = "v" * 3000
    checkpoint.released(3000)
    await saved(checkpoint, 1)
    await checkpoint.close()
    await sized.update_message(message_id, text="rewritten")
    assert (await stored_reply(sized, chat_id))[0] == "rewritten"
    assert await rows_of(sized, message_id) == []


async def test_a_deleted_conversation_stops_its_checkpoints_and_spares_the_others(
    sized: Store,
) -> None:
    user = await sized.create_user("alice", None)
    handles = []
    for title in ("kept", "deleted"):
        chat = await sized.create_conversation(user.id, title)
        turn = await sized.begin_reply(chat.id, "hi")
        reply = Reply()
        handles.append(
            (chat.id, reply, sized.reply_checkpoints(chat.id, turn.assistant.id, reply.snapshot))
        )
    (kept_id, kept, kept_cp), (gone_id, gone, gone_cp) = handles
    assert await sized.delete_conversation(gone_id, user.id)  # by another server, say
    for reply, checkpoint in ((kept, kept_cp), (gone, gone_cp)):
        reply.text = "q" * 2100
        checkpoint.released(2100)
    await saved(kept_cp, 1)
    assert (await stored_reply(sized, kept_id))[0] == kept.text
    assert gone_cp.closed
    assert gone_cp.saves == 0
    await kept_cp.close()
    await gone_cp.close()


async def test_a_failed_round_loses_nothing_and_is_tried_again(
    tmp_path: Path, vault_key: VaultKey, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "holdback.db"
    store = await open_store(sqlite_url(path), vault_key, checkpoint_interval=0.2, busy_timeout=0.2)
    holder = sqlite3.connect(path, isolation_level=None, timeout=0)
    try:
        chat_id, message_id = await streaming(store)
        reply = Reply()
        checkpoint = store.reply_checkpoints(chat_id, message_id, reply.snapshot)
        reply.text = "first " + "f" * 2048
        checkpoint.released(len(reply.text))
        await saved(checkpoint, 1)
        holder.execute("BEGIN EXCLUSIVE")  # another process holds the write lock
        reply.text += "second canary-looking words " + "s" * 2048
        with caplog.at_level(logging.WARNING, logger="holdback.store.checkpoints"):
            checkpoint.released(2100)
            await asyncio.wait_for(checkpoint.until_failed(1), timeout=15)
        assert "could not save 1 streaming replies" in caplog.text
        assert "DatabaseLockedError" in caplog.text
        assert "canary-looking" not in caplog.text
        holder.execute("ROLLBACK")
        await saved(checkpoint, 2)  # tried again after the interval, without new text
        assert (await stored_reply(store, chat_id))[0] == reply.text
        await checkpoint.close()
    finally:
        holder.close()
        await store.close()


async def test_a_downgrade_folds_the_checkpoints_into_their_messages(
    database_url: str, vault_key: VaultKey
) -> None:
    store = await open_store(database_url, vault_key, checkpoint_interval=HOUR)
    try:
        chat_id, message_id = await streaming(store)
        reply = Reply()
        checkpoint = store.reply_checkpoints(chat_id, message_id, reply.snapshot)
        for n in range(3):
            reply.text += f"part {n} " + "d" * 2048
            reply.parts["reasoning"] = reply.parts.get("reasoning", "") + f"r{n}"
            checkpoint.released(2100)
            await saved(checkpoint, n + 1)
    finally:
        await store.close()
    await downgrade(database_url, "0002")
    await upgrade(database_url)
    store = await open_store(database_url, vault_key)
    try:
        assert await stored_reply(store, chat_id) == (reply.text, reply.parts, "incomplete")
        assert await rows_of(store, message_id) == []
    finally:
        await store.close()


# -- the pieces --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("old", "new", "shared"),
    [
        ("", "", 0),
        ("", "abc", 0),
        ("abc", "abcdef", 3),
        ('[{"a": "x"}]', '[{"a": "xy"}]', 9),
        ("abc", "abd", 2),
        ("abc", "ab", 2),
        ("abc", "xyz", 0),
    ],
)
def test_common_prefix(old: str, new: str, shared: int) -> None:
    assert common_prefix(old, new) == shared


def test_common_prefix_agrees_with_a_character_walk() -> None:
    rng = random.Random(15)
    for _ in range(500):
        old = "".join(rng.choice("ab") for _ in range(rng.randint(0, 40)))
        new = old[: rng.randint(0, len(old))] + "".join(
            rng.choice("ab") for _ in range(rng.randint(0, 40))
        )
        walked = 0
        while walked < min(len(old), len(new)) and old[walked] == new[walked]:
            walked += 1
        assert common_prefix(old, new) == walked


async def test_the_bounds_are_checked(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path / "holdback.db")
    with pytest.raises(ValueError, match="interval"):
        await open_store(url, VaultKey.generate(), checkpoint_interval=0)
    with pytest.raises(ValueError, match="size"):
        await open_store(url, VaultKey.generate(), checkpoint_bytes=0)
    assert not (tmp_path / "holdback.db").exists()  # refused before anything is made


# -- through the pipeline: only tokenized text is saved ------------------------------------------

CANARY = "ckpt.canary.4417@example.org"
CONTROL = "checkpoint-control-7d2e"


class HalfThenWait:
    """A provider that streams half of the last user message back, then waits for `gate`."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()

    @property
    def name(self) -> str:
        return "half-then-wait"

    async def stream(self, request: ChatRequest) -> AsyncIterator[Event]:
        last = [m.content for m in request.turns() if m.role == "user"][-1]
        half = len(last) // 2
        for i in range(0, half, 3):
            yield TextDelta("content", last[i : min(i + 3, half)])
        await self.gate.wait()
        for i in range(half, len(last), 3):
            yield TextDelta("content", last[i : i + 3])
        yield End("stop", None)


def raw_files(store: Store, pg_server: PostgresServer | None) -> list[Path]:
    if pg_server is None:
        db = Path(store.database.target.sqlite_path)
        return [
            p for p in (db, *(db.with_name(db.name + s) for s in ("-wal", "-shm"))) if p.exists()
        ]
    assert pg_server.workdir is not None
    pg_server.execute("CHECKPOINT")
    return [p for p in pg_server.workdir.rglob("*") if p.is_file()]


def holding(files: list[Path], needle: str) -> list[str]:
    forms = (needle.encode(), needle.encode("utf-16-le"))
    return [p.name for p in files if any(form in _bytes_of(p) for form in forms)]


def _bytes_of(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:  # PostgreSQL rewrites some files (relcache init) at any time
        return b""


async def test_a_streaming_reply_is_saved_tokenized_and_never_in_clear(
    database_url: str, vault_key: VaultKey, pg_server: PostgresServer | None
) -> None:
    if pg_server is not None and pg_server.workdir is None:
        pytest.skip("an external PostgreSQL server: its files are not readable here")
    store = await open_store(database_url, vault_key, checkpoint_interval=0.05)
    provider = HalfThenWait()
    try:
        svc = ChatService(store, provider, DetectorSet.from_config())
        user = await store.create_user("alice", None)
        frames: list[dict[str, object]] = []
        text = f"Write to {CANARY} about {CONTROL} and the quarterly numbers. " * 40
        reply = await svc.submit(user.id, None, text, frames.append)
        await asyncio.wait_for(store.until_checkpoint_rounds(1), timeout=15)
        saved_text = (await store.list_messages(reply.conversation_id))[1].text
        seen = "".join(str(f["text"]) for f in frames if f["type"] == "assistant_delta")
        assert CANARY in seen  # the user saw the value
        assert "<EMAIL_1>" in saved_text  # the database holds its token
        assert CANARY not in saved_text
        files = raw_files(store, pg_server)
        assert holding(files, CONTROL)  # the scan sees the saved reply
        assert holding(files, CANARY) == []
        provider.gate.set()
        assert reply.task is not None
        await asyncio.wait_for(reply.task, timeout=15)
        final = (await store.list_messages(reply.conversation_id))[1]
        assert final.status == "complete"
        assert final.text == text.replace(CANARY, "<EMAIL_1>")
        assert await rows_of(store, final.id) == []
        assert holding(raw_files(store, pg_server), CANARY) == []
    finally:
        await store.close()
