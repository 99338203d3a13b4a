"""SQLite transactions in lane threads: set up like every connection, all or nothing, and
synced to disk within a second of a commit when commits themselves do not sync."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import anyio
import pytest
from sqlalchemy import Table, bindparam, select, update

from holdback.store import Store, VaultKey
from holdback.store.errors import StoreError
from holdback.store.lanes import SqliteLanes
from holdback.store.runner import Runner
from holdback.store.schema import ConversationRow
from tests.store.conftest import sqlite_url

pytestmark = pytest.mark.anyio

_conversations: Table = ConversationRow.__table__  # type: ignore[assignment]
_TITLE = select(_conversations.c.title).where(_conversations.c.id == bindparam("id"))
_RENAME = (
    update(_conversations)
    .where(_conversations.c.id == bindparam("b_id"))
    .values(title=bindparam("b_title"))
)


async def open_store(path: Path, **options: Any) -> Store:
    return await Store.open(sqlite_url(path), vault_key=VaultKey.generate(), **options)


@pytest.mark.parametrize("level", ["normal", "full"])
async def test_every_lane_connection_gets_the_pragmas(tmp_path: Path, level: str) -> None:
    store = await open_store(tmp_path / "h.db", synchronous=level)
    seen: list[tuple[Any, ...]] = []

    def record(conn: Any) -> None:
        cursor = conn.cursor()
        row = []
        for name in PRAGMAS:
            cursor.execute(f"PRAGMA {name}")  # the engine's cursor returns no cursor
            row.append(cursor.fetchone()[0])
        seen.append(tuple(row))
        cursor.close()

    try:
        store.database.connect_hook(record)
        await store.database.reconnect()
        user = await store.ensure_local_user()  # a session: the engine's connection
        await store.create_conversation(user.id)  # a lane's connection
    finally:
        await store.close()
    expected = ("wal", 1, 1 if level == "normal" else 2, 1)
    assert len(seen) >= 2
    assert all(row == expected for row in seen)


PRAGMAS = ("journal_mode", "foreign_keys", "synchronous", "secure_delete")


async def test_a_failing_transaction_leaves_nothing_and_the_lane_goes_on(tmp_path: Path) -> None:
    store = await open_store(tmp_path / "h.db")
    try:
        user = await store.ensure_local_user()
        chat = await store.create_conversation(user.id, "before")

        def rename_then_fail(run: Runner) -> None:
            assert run.count(_RENAME, {"b_id": chat.id, "b_title": "after"}) == 1
            raise sqlite3.OperationalError("disk I/O error")

        with pytest.raises(StoreError):
            await store.database.transact(rename_then_fail, write=True, what="test")

        def title(run: Runner) -> str:
            return str(run.rows(_TITLE, {"id": chat.id})[0].title)

        # Rolled back, and the next transactions (on every lane) work.
        for _ in range(6):
            assert await store.database.transact(title, write=False, what="test") == "before"
        await store.rename_conversation(chat.id, user.id, "renamed")
        assert await store.database.transact(title, write=False, what="test") == "renamed"
    finally:
        await store.close()


async def test_a_bug_in_a_transaction_is_not_retried_and_rolls_back(tmp_path: Path) -> None:
    store = await open_store(tmp_path / "h.db")
    calls = 0
    try:
        user = await store.ensure_local_user()
        chat = await store.create_conversation(user.id, "before")

        def broken(run: Runner) -> None:
            nonlocal calls
            calls += 1
            run.count(_RENAME, {"b_id": chat.id, "b_title": "after"})
            raise KeyError("bug")

        with pytest.raises(KeyError):
            await store.database.transact(broken, write=True, what="test")
        assert calls == 1
        assert (await store.get_conversation(chat.id, user.id)).title == "before"  # type: ignore[union-attr]
    finally:
        await store.close()


def lanes_of(store: Store) -> SqliteLanes:
    lanes = store.database._lanes
    assert lanes is not None
    return lanes


async def test_normal_commits_are_synced_within_the_interval(tmp_path: Path) -> None:
    store = await open_store(tmp_path / "h.db")
    try:
        lanes = lanes_of(store)
        user = await store.ensure_local_user()
        for _ in range(20):
            await store.create_conversation(user.id)
        assert lanes.sync_due
        with anyio.fail_after(5):
            await lanes.until_syncs(1)
        # Twenty commits within the interval, one sync, and nothing left to sync.
        assert lanes.syncs == 1
        assert not lanes.sync_due
    finally:
        await store.close()


async def test_full_commits_need_no_sync(tmp_path: Path) -> None:
    store = await open_store(tmp_path / "h.db", synchronous="full")
    try:
        user = await store.ensure_local_user()
        await store.create_conversation(user.id)
        assert not lanes_of(store).sync_due
        assert lanes_of(store).syncs == 0
    finally:
        await store.close()


async def test_an_unknown_synchronous_level_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="normal, full"):
        await open_store(tmp_path / "h.db", synchronous="off")
