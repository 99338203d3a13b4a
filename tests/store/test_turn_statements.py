"""How the hot path's transactions reach the database: on SQLite whole in a lane thread,
straight through sqlite3, with the SQL and type conversions SQLAlchemy would use, so the
stored bytes are the same as the single-purpose methods'; through SQLAlchemy (`run_sync` in
a session) the same transactions give the same results."""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable

import anyio
import pytest
from sqlalchemy import text

from holdback.store import Store, Turn
from holdback.store.engine import create_engine, parse_database_url
from holdback.store.runner import CoreRunner, Runner, SqliteRunner
from tests.store import test_turns as scenarios

pytestmark = pytest.mark.anyio

SQLITE_TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{6}\Z")


async def raw_messages(store: Store, chat: str) -> list[tuple[object, ...]]:
    """The driver's values, with no SQLAlchemy type processing: what is really stored."""
    async with store.database.engine.connect() as conn:
        result = await conn.exec_driver_sql(
            "SELECT role, text, parts, status, finish_reason, meta, created_at, updated_at "
            f"FROM messages WHERE conversation_id = '{chat}' ORDER BY seq"
        )
        return [tuple(row) for row in result]


async def raw_audit(store: Store, chat: str) -> list[tuple[object, ...]]:
    async with store.database.engine.connect() as conn:
        result = await conn.exec_driver_sql(
            "SELECT action, counts, created_at FROM audit_events "
            f"WHERE conversation_id = '{chat}' ORDER BY id"
        )
        return [tuple(row) for row in result]


async def test_the_turn_methods_store_the_same_values_as_the_others(store: Store) -> None:
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
    old_rows, new_rows = await raw_messages(store, old.id), await raw_messages(store, new.id)
    old_audit, new_audit = await raw_audit(store, old.id), await raw_audit(store, new.id)
    # Everything but the timestamps is stored identically, to the byte.
    assert [r[:6] for r in new_rows] == [r[:6] for r in old_rows]
    assert [r[:2] for r in new_audit] == [r[:2] for r in old_audit]
    stamps = [r[i] for r in (*old_rows, *new_rows) for i in (6, 7)]
    stamps += [r[2] for r in (*old_audit, *new_audit)]
    assert len({type(s) for s in stamps}) == 1
    if store.database.dialect == "sqlite":
        assert all(isinstance(s, str) and SQLITE_TIMESTAMP.match(s) for s in stamps)


async def test_sqlite_runs_the_transactions_in_a_lane(store: Store) -> None:
    def which(run: Runner) -> type:
        return type(run)

    used = await store.database.transact(which, write=False, what="test")
    assert used is (SqliteRunner if store.database.dialect == "sqlite" else CoreRunner)


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
async def test_sqlite_through_sqlalchemy_gets_the_same_results(
    store: Store,
    monkeypatch: pytest.MonkeyPatch,
    scenario: Callable[[Store], Awaitable[None]],
) -> None:
    monkeypatch.setattr(store.database, "_lanes", None)  # transactions in sessions instead
    await scenario(store)


async def test_statement_parameters_are_bound_not_spliced(store: Store) -> None:
    """Quotes and SQL in stored text are data (the direct path binds like SQLAlchemy)."""
    user = await store.ensure_local_user()
    chat = await store.create_conversation(user.id)
    hostile = "x'); DROP TABLE messages; --"
    turn = await store.begin_reply(chat.id, hostile, title=hostile, owner_id=user.id)
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
    assert [m.id for m in turn.history] == ["intruder", turn.user.id]
    listed = await store.list_messages(chat.id)
    assert [(m.seq, m.text) for m in listed] == [(1, "first"), (2, "second"), (3, "")]
    assert len(await store.list_audit(chat.id)) == 1
