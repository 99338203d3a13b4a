"""How the conversation writes reach the database: one implementation (`turns.py`), whose
transactions run on SQLite whole in a lane thread, through SQLAlchemy's sync Core on pysqlite,
and elsewhere in a session (`run_sync`). Both ways into a SQLite file store the same bytes as
each other and as the engine every other method uses, every statement of a turn comes from
SQLAlchemy's compiled cache, and the single-purpose methods write what a turn writes."""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

import anyio
import pytest
from sqlalchemy import event, text
from sqlalchemy.engine import Engine

from holdback.store import Store, Turn, VaultItem
from holdback.store.engine import create_engine, parse_database_url
from holdback.store.runner import Runner
from tests.store import test_turns as scenarios

pytestmark = pytest.mark.anyio

SQLITE_TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{6}\Z")


async def raw(store: Store, sql: str, chat: str) -> list[tuple[object, ...]]:
    """The driver's values, with no SQLAlchemy type processing: what is really stored."""
    async with store.database.engine.connect() as conn:
        result = await conn.exec_driver_sql(sql.format(chat=chat))
        return [tuple(row) for row in result]


MESSAGES = (
    "SELECT role, text, parts, status, finish_reason, meta, model, created_at, updated_at "
    "FROM messages WHERE conversation_id = '{chat}' ORDER BY seq"
)
AUDIT = "SELECT action, counts, created_at FROM audit_events WHERE conversation_id = '{chat}'"
REVEALS = (
    "SELECT token, kind, level, created_at FROM reveal_events WHERE conversation_id = '{chat}'"
)
VAULT = (
    "SELECT token, kind, detector_kind, number, length(value_ciphertext), created_at "
    "FROM vault_entries WHERE conversation_id = '{chat}' ORDER BY token"
)
CONVERSATION = "SELECT title, created_at, updated_at FROM conversations WHERE id = '{chat}'"
TABLES = (MESSAGES, AUDIT, REVEALS, VAULT, CONVERSATION)


def is_stamp(value: object) -> bool:
    return isinstance(value, datetime) or (
        isinstance(value, str) and SQLITE_TIMESTAMP.match(value) is not None
    )


def stamps_apart(rows: list[tuple[object, ...]]) -> tuple[list[tuple[object, ...]], list[object]]:
    """The rows without their timestamps (which differ run to run), and the timestamps."""
    kept = [tuple(v for v in row if not is_stamp(v)) for row in rows]
    return kept, [v for row in rows for v in row if is_stamp(v)]


async def a_turn(store: Store, owner_id: str) -> str:
    """A chat turn as the pipeline makes it, in a new conversation, with a checkpoint round."""
    chat = store.new_conversation_id()
    update = await store.update_vault(
        chat, [VaultItem("email", "ann@example.org", "ann@example.org")], create_for=owner_id
    )
    spans = {"masked": [{"start": 0, "end": 9, "kind": "email", "token": "<EMAIL_1>"}], "é": 1}
    turn = await store.begin_reply(
        chat, "<EMAIL_1> hi", meta=spans, title="hi", owner_id=owner_id, masked={"email": 1},
        model="demo", reply_meta={"system": "ü"},
    )  # fmt: skip
    text = f"ok {update.tokens[0]} " * 300
    saving = store.reply_checkpoints(chat, turn.assistant.id, lambda: (text, {}))
    rounds = store.checkpoint_rounds
    saving.released(len(text))  # past the size: a checkpoint round now
    await store.until_checkpoint_rounds(rounds + 1)
    await saving.close()
    await store.finish_reply(
        chat, turn.assistant.id, text=text, parts={"reasoning": "ü"}, status="complete",
        finish_reason="stop", redacted={"phone": 2}, checkpointed=saving.tried,
        reveals=[(owner_id, "<EMAIL_1>", "email", "plain")],
    )  # fmt: skip
    return chat


@pytest.mark.parametrize("engine_name", ["sqlite"], indirect=True)
async def test_the_lanes_and_the_sessions_store_the_same_bytes(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    user = await store.ensure_local_user()
    in_lanes = await a_turn(store, user.id)
    with monkeypatch.context() as patch:
        patch.setattr(store.database, "_lanes", None)  # aiosqlite, the engine's sessions
        in_sessions = await a_turn(store, user.id)
        # And each reads what the other wrote as it reads its own.
        through_sessions = await store.list_messages(in_lanes)
    assert await store.list_messages(in_lanes) == through_sessions
    stamps = []
    for sql in TABLES:
        lanes_rows, lanes_stamps = stamps_apart(await raw(store, sql, in_lanes))
        session_rows, session_stamps = stamps_apart(await raw(store, sql, in_sessions))
        assert lanes_rows == session_rows != []
        assert len(lanes_stamps) == len(session_stamps) > 0
        stamps += lanes_stamps + session_stamps
    assert all(isinstance(s, str) and SQLITE_TIMESTAMP.match(s) for s in stamps)


async def test_the_single_purpose_methods_store_what_a_turn_stores(store: Store) -> None:
    user = await store.ensure_local_user()
    old = await store.create_conversation(user.id)
    new = await store.create_conversation(user.id)
    spans = {"masked": [{"start": 0, "end": 9, "kind": "email", "token": "<EMAIL_1>"}], "é": 1}
    for chat, batched in ((old.id, False), (new.id, True)):
        done = {"text": "ok <EMAIL_1>", "parts": {"reasoning": "ü"}, "status": "complete"}
        if batched:
            turn = await store.begin_reply(chat, "<EMAIL_1> hi", meta=spans, masked={"email": 1})
            await store.finish_reply(
                chat, turn.assistant.id, **done, finish_reason="stop", redacted={"phone": 2}
            )  # type: ignore[arg-type]
        else:
            message = await store.add_message(chat, "user", "<EMAIL_1> hi", meta=spans)
            await store.record_audit(chat, message.id, "masked", {"email": 1})
            reply = await store.add_message(chat, "assistant", "", status="incomplete")
            await store.update_message(reply.id, **done, finish_reason="stop")  # type: ignore[arg-type]
            await store.record_audit(chat, reply.id, "redacted", {"phone": 2})
    for sql in (MESSAGES, AUDIT):
        old_rows, old_stamps = stamps_apart(await raw(store, sql, old.id))
        new_rows, new_stamps = stamps_apart(await raw(store, sql, new.id))
        # Everything but the timestamps is stored identically, to the byte.
        assert new_rows == old_rows != []
        assert len(new_stamps) == len(old_stamps)


def sync_engine(store: Store) -> Engine:
    lanes = store.database._lanes
    return lanes.engine if lanes is not None else store.database.engine.sync_engine


async def test_every_statement_of_a_turn_is_compiled_once(store: Store) -> None:
    """A statement SQLAlchemy cannot cache (a multi-row VALUES, say) is compiled again for
    every execution: the turn's cost would grow several times over, unnoticed."""
    user = await store.ensure_local_user()
    await a_turn(store, user.id)
    seen: list[tuple[str, str]] = []

    def after(_conn: Any, _cursor: Any, sql: str, _params: Any, context: Any, _many: Any) -> None:
        seen.append((str(context.cache_hit), sql.split("\n")[0]))

    engine = sync_engine(store)
    event.listen(engine, "after_cursor_execute", after)
    try:
        await a_turn(store, user.id)
    finally:
        event.remove(engine, "after_cursor_execute", after)
    assert len(seen) >= 10
    assert [s for s in seen if "CACHE_HIT" not in s[0]] == []


async def test_sqlite_runs_each_transaction_in_a_lane_thread(store: Store) -> None:
    def where(run: Runner) -> tuple[str, str]:
        return threading.current_thread().name, run.dialect

    thread, dialect = await store.database.transact(where, write=False, what="test")
    assert dialect == store.database.dialect
    if dialect == "sqlite":
        assert thread.startswith("holdback-sqlite")
    else:
        assert thread == threading.current_thread().name  # `run_sync`, on the loop's thread


@pytest.mark.parametrize("engine_name", ["sqlite"], indirect=True)
@pytest.mark.parametrize(
    "scenario",
    [
        scenarios.test_open_conversation_is_get_conversation_and_load_vault,
        scenarios.test_a_turn_stores_exactly_what_the_old_sequence_stores,
        scenarios.test_begin_reply_returns_the_history_and_the_placeholder,
        scenarios.test_another_users_or_a_missing_conversation_is_not_found,
        scenarios.test_a_failure_inside_the_transaction_writes_nothing_and_shows_no_value,
        scenarios.test_concurrent_turns_keep_seq_unique_and_ordered,
    ],
)
async def test_sqlite_through_sessions_gets_the_same_results(
    store: Store,
    monkeypatch: pytest.MonkeyPatch,
    scenario: Callable[[Store], Awaitable[None]],
) -> None:
    monkeypatch.setattr(store.database, "_lanes", None)  # transactions in sessions instead
    await scenario(store)


async def test_statement_parameters_are_bound_not_spliced(store: Store) -> None:
    """Quotes and SQL in stored text are data."""
    user = await store.ensure_local_user()
    chat = await store.create_conversation(user.id)
    hostile = "x'); DROP TABLE messages; --"
    turn = await store.begin_reply(chat.id, hostile, title=hostile, owner_id=user.id)
    assert turn.user is not None
    assert turn.user.text == hostile
    assert [m.text for m in await store.list_messages(chat.id)] == [hostile, ""]
    async with store.database.engine.connect() as conn:
        count = await conn.scalar(text("SELECT count(*) FROM messages"))
    assert count == 2


@pytest.mark.postgres
@pytest.mark.parametrize("engine_name", ["postgres"], indirect=True)
async def test_a_writer_that_slips_past_the_lock_makes_begin_reply_retry(
    store: Store, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="holdback.store.database")
    user = await store.ensure_local_user()
    chat = await store.create_conversation(user.id)
    intruder = create_engine(parse_database_url(database_url))
    async with intruder.connect() as conn:
        # An uncommitted message at seq 1, written without the conversation lock: the turn's
        # insert at seq 1 waits on it, fails when it commits, and must run again from the start.
        trans = await conn.begin()
        await conn.execute(
            text(
                "INSERT INTO messages (id, conversation_id, seq, role, text, parts, status,"
                " meta, created_at, updated_at)"
                " VALUES ('intruder', :c, 1, 'user', 'first', '{}', 'complete', '{}', now(), now())"
            ),
            {"c": chat.id},
        )
        async with anyio.create_task_group() as tg:
            results: list[Turn] = []

            async def begin() -> None:
                results.append(await store.begin_reply(chat.id, "second", masked={"email": 1}))

            tg.start_soon(begin)
            await anyio.sleep(0.5)  # the turn is now blocked on the intruder's row
            await trans.commit()
    await intruder.dispose()
    assert "adding a message collided with a concurrent writer" in caplog.text
    [turn] = results
    assert turn.user is not None
    assert [m.id for m in turn.history] == ["intruder", turn.user.id]
    listed = await store.list_messages(chat.id)
    assert [(m.seq, m.text) for m in listed] == [(1, "first"), (2, "second"), (3, "")]
    assert len(await store.list_audit(chat.id)) == 1
