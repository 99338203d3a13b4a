"""Failures: each names its cause, shows no secret, and leaves nothing half-written."""

from __future__ import annotations

import socket
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import delete

from holdback.errors import HoldbackError
from holdback.store import Store, VaultItem, VaultKey, upgrade
from holdback.store.engine import parse_database_url
from holdback.store.errors import (
    DatabaseCorruptError,
    DatabaseLockedError,
    DatabaseUnreachableError,
    DiskFullError,
    InvalidDatabaseUrlError,
    WrongVaultKeyError,
)
from holdback.store.schema import StoreSetting
from tests.store.conftest import sqlite_url
from tests.support.postgres import PostgresServer

pytestmark = pytest.mark.anyio


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@pytest.mark.parametrize(
    ("url", "fragment"),
    [
        ("", "empty"),
        ("not a url at all", "cannot be parsed"),
        ("mysql://user@localhost/holdback", "does not support 'mysql'"),
        ("postgresql+psycopg2://localhost/db", "does not support"),
        ("sqlite+aiosqlite://", "in-memory"),
        ("sqlite+aiosqlite:///:memory:", "in-memory"),
        ("sqlite://somehost/file.db", "no host"),
        ("postgresql://localhost", "names no database"),
    ],
)
async def test_bad_urls_are_refused_with_the_reason(url: str, fragment: str) -> None:
    with pytest.raises(InvalidDatabaseUrlError, match=fragment):
        await Store.open(url, vault_key=VaultKey.generate())


def test_accepted_url_spellings_get_holdbacks_drivers() -> None:
    assert parse_database_url("sqlite:///x.db").url.drivername == "sqlite+aiosqlite"
    assert parse_database_url("postgres://h/db").url.drivername == "postgresql+asyncpg"
    assert parse_database_url("postgresql://h/db").url.drivername == "postgresql+asyncpg"


async def test_unreachable_postgres_names_the_server_and_hides_the_password() -> None:
    url = f"postgresql://holdback:s3cr3t-pw@127.0.0.1:{closed_port()}/holdback"
    for attempt in (Store.open(url, vault_key=VaultKey.generate()), upgrade(url)):
        with pytest.raises(DatabaseUnreachableError) as info:
            await attempt
        message = str(info.value)
        assert "connection refused" in message
        assert "127.0.0.1" in message
        assert "s3cr3t-pw" not in message


async def test_unresolvable_host_is_named() -> None:
    url = "postgresql://holdback@no-such-host.invalid:5432/holdback"
    with pytest.raises(DatabaseUnreachableError, match="does not resolve"):
        await Store.open(url, vault_key=VaultKey.generate(), connect_timeout=5)


@pytest.mark.postgres
async def test_missing_postgres_database_is_named(postgres_server: PostgresServer) -> None:
    url = postgres_server.url("holdback_no_such_database")
    with pytest.raises(DatabaseUnreachableError, match="does not exist"):
        await Store.open(url, vault_key=VaultKey.generate())


async def test_missing_sqlite_directory_is_named(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path / "nowhere" / "holdback.db")
    with pytest.raises(DatabaseUnreachableError, match="does not exist"):
        await Store.open(url, vault_key=VaultKey.generate())
    assert not (tmp_path / "nowhere").exists()


async def test_a_file_that_is_not_a_database_is_named(tmp_path: Path) -> None:
    path = tmp_path / "holdback.db"
    path.write_bytes(b"this is a text file, not SQLite " * 200)
    before = path.read_bytes()
    with pytest.raises(DatabaseCorruptError, match="not a SQLite database"):
        await Store.open(sqlite_url(path), vault_key=VaultKey.generate())
    assert path.read_bytes() == before


@pytest.fixture
def exclusive_lock(tmp_path: Path) -> Iterator[tuple[Path, sqlite3.Connection]]:
    path = tmp_path / "holdback.db"
    holder = sqlite3.connect(path, isolation_level=None, timeout=0)
    holder.execute("PRAGMA journal_mode = WAL")  # a database, not a zero-length file
    yield path, holder
    holder.close()


async def test_locked_sqlite_file_gives_up_after_the_busy_timeout_and_writes_nothing(
    exclusive_lock: tuple[Path, sqlite3.Connection],
) -> None:
    path, holder = exclusive_lock
    store = await Store.open(sqlite_url(path), vault_key=VaultKey.generate(), busy_timeout=0.3)
    try:
        user = await store.ensure_local_user()
        chat = await store.create_conversation(user.id)
        await store.add_message(chat.id, "user", "first")
        holder.execute("BEGIN EXCLUSIVE")
        started = time.monotonic()
        with pytest.raises(DatabaseLockedError, match=r"locked by another process.*0\.3s"):
            await store.add_message(chat.id, "user", "second")
        assert time.monotonic() - started >= 0.25
        with pytest.raises(DatabaseLockedError):
            await store.assign_tokens(chat.id, [VaultItem("email", "a@x.io", "a@x.io")])
        holder.execute("ROLLBACK")
        assert [m.text for m in await store.list_messages(chat.id)] == ["first"]
        assert await store.load_vault(chat.id) == {}
        await store.add_message(chat.id, "user", "third")
        assert [m.seq for m in await store.list_messages(chat.id)] == [1, 2]
    finally:
        await store.close()


async def test_opening_a_locked_sqlite_file_is_a_clear_error(
    exclusive_lock: tuple[Path, sqlite3.Connection],
) -> None:
    path, holder = exclusive_lock
    holder.execute("PRAGMA journal_mode = WAL")
    holder.execute("BEGIN EXCLUSIVE")
    with pytest.raises(DatabaseLockedError, match="locked"):
        await Store.open(sqlite_url(path), vault_key=VaultKey.generate(), busy_timeout=0.2)
    holder.execute("ROLLBACK")
    store = await Store.open(sqlite_url(path), vault_key=VaultKey.generate(), busy_timeout=0.2)
    await store.close()


def limit_pages(store: Store, pages: int | None) -> Any:
    """Cap the database's size (SQLite's max_page_count) on every new connection; returns
    what removes the cap."""

    def on_connect(dbapi_connection: Any) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA max_page_count = {pages or 1073741823}")
        cursor.close()

    return store.database.connect_hook(on_connect)


async def test_full_sqlite_database_rolls_back_the_whole_write(tmp_path: Path) -> None:
    path = tmp_path / "holdback.db"
    store = await Store.open(sqlite_url(path), vault_key=VaultKey.generate())
    try:
        user = await store.ensure_local_user()
        chat = await store.create_conversation(user.id)
        await store.assign_tokens(chat.id, [VaultItem("name", "Before", "before")])
        pages = sqlite3.connect(path).execute("PRAGMA page_count").fetchone()[0]
        remove = limit_pages(store, pages + 3)
        await store.database.reconnect()
        big = [VaultItem("note", f"{i:04d}" + "v" * 20_000, f"n{i}") for i in range(20)]
        with pytest.raises(DiskFullError, match="full") as info:
            await store.assign_tokens(chat.id, big)
        assert "vvvv" not in str(info.value)
        with pytest.raises(DiskFullError):
            await store.add_message(chat.id, "user", "x" * 200_000)
        # Nothing of the failed writes is there, and what was there still is.
        assert await store.load_vault(chat.id) == {"<NAME_1>": "Before"}
        assert await store.list_messages(chat.id) == []
        remove()
        await store.database.reconnect()
        tokens = await store.assign_tokens(chat.id, big)
        assert tokens == [f"<NOTE_{i}>" for i in range(1, 21)]
    finally:
        await store.close()


@pytest.fixture
def tiny_filesystem(tmp_path: Path) -> Iterator[Path]:
    mount_point = tmp_path / "tiny"
    mount_point.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount_point)],
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip("cannot mount a small tmpfs here (needs root in a VM or privileged container)")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


async def fill_until_full(store: Store, chat: str) -> tuple[int, str]:
    """Add batches of five large values until the disk is full: how many went in, and why not."""
    written = 0
    for batch in range(200):
        items = [VaultItem("note", f"{batch}-{i}-" + "v" * 4000, f"{batch}-{i}") for i in range(5)]
        try:
            await store.assign_tokens(chat, items)
        except DiskFullError as exc:
            return written, str(exc)
        written += 5
    pytest.fail("the 1 MiB file system never filled up")


@pytest.mark.slow
async def test_a_really_full_disk_rolls_back_and_names_the_cause(tiny_filesystem: Path) -> None:
    path = tiny_filesystem / "holdback.db"
    store = await Store.open(sqlite_url(path), vault_key=VaultKey.generate())
    try:
        user = await store.ensure_local_user()
        chat = await store.create_conversation(user.id)
        written, reason = await fill_until_full(store, chat.id)
        assert "is full" in reason
        assert "vvvv" not in reason
        vault = await store.load_vault(chat.id)
        assert len(vault) == written  # every batch whole, the failed one not at all
        assert sorted(int(t[6:-1]) for t in vault) == list(range(1, written + 1))
    finally:
        await store.close()


async def test_wrong_vault_key_is_refused_at_open(database_url: str) -> None:
    right = VaultKey.generate(source="the test's first key")
    store = await Store.open(database_url, vault_key=right)
    user = await store.ensure_local_user()
    chat = await store.create_conversation(user.id)
    await store.assign_tokens(chat.id, [VaultItem("email", "a@x.io", "a@x.io")])
    await store.close()

    wrong = VaultKey.generate(source="HOLDBACK_VAULT_KEY")
    with pytest.raises(WrongVaultKeyError) as info:
        await Store.open(database_url, vault_key=wrong)
    message = str(info.value)
    assert wrong.fingerprint in message
    assert right.fingerprint in message
    assert "HOLDBACK_VAULT_KEY" in message
    assert wrong.encode() not in message
    assert right.encode() not in message
    assert isinstance(info.value, HoldbackError)

    store = await Store.open(database_url, vault_key=right)
    assert await store.load_vault(chat.id) == {"<EMAIL_1>": "a@x.io"}
    await store.close()


async def test_lost_key_check_is_rebuilt_only_by_the_right_key(database_url: str) -> None:
    right = VaultKey.generate()
    store = await Store.open(database_url, vault_key=right)
    user = await store.ensure_local_user()
    chat = await store.create_conversation(user.id)
    await store.assign_tokens(chat.id, [VaultItem("email", "a@x.io", "a@x.io")])

    async def drop_check(session: Any) -> None:
        await session.execute(delete(StoreSetting))

    await store.database.write(drop_check, what="test")
    await store.close()
    with pytest.raises(WrongVaultKeyError, match="another vault key"):
        await Store.open(database_url, vault_key=VaultKey.generate())
    store = await Store.open(database_url, vault_key=right)
    await store.close()
    with pytest.raises(WrongVaultKeyError):
        await Store.open(database_url, vault_key=VaultKey.generate())
