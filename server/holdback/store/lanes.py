"""SQLite transactions in one thread hop each: a few threads, each with its own connection.

The rules:
- A transaction runs whole in one lane thread, through SQLAlchemy's sync Core on pysqlite
  (the same dialect, compiled-statement cache and type processing as every other statement):
  `BEGIN IMMEDIATE` (writes) or `BEGIN` (reads), the function's statements, `COMMIT`; any
  exception rolls it back before it propagates, so nothing is ever left half-written or
  holding the write lock. The event loop waits for one future per transaction, never for a
  statement.
- Every connection is set up as the engine's are (`engine.set_up_sqlite` with
  `SqliteSetup`: WAL, busy timeout, foreign keys, the synchronous level, secure delete), so
  the pragmas that make the file safe hold whichever way a statement reaches it.
- A connection is used by one thread at a time (the lane that opened it, which keeps it) and
  closed by `close()` after every lane has stopped. `reconnect()` drops the connections so
  the next transactions open new ones (as `AsyncEngine.dispose` does for the engine's pool).
- Writers of this process take turns before a lane is used (`Database`), so a lane never
  waits on this process's own write lock; readers run beside the writer (WAL).
- With `synchronous = NORMAL` a commit is not synced; a write makes the lanes run a passive
  WAL checkpoint (which syncs the WAL first) `sync_interval` seconds later, so whatever was
  committed is on disk within about that time, at one `fsync` per interval however many
  commits it holds. A failed sync is logged by type and tried again after the next write.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar, cast

from sqlalchemy import URL, Connection, Engine, RootTransaction, create_engine
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.pool import NullPool

from holdback.errors import describe
from holdback.store.engine import set_up_sqlite
from holdback.store.runner import CoreRunner, Work

T = TypeVar("T")
log = logging.getLogger(__name__)
LANES = 3  # one writer at a time, and readers beside it
SYNC_INTERVAL = 1.0  # seconds from a commit to its sync, at most (synchronous = NORMAL)


class SqliteLanes:
    def __init__(
        self,
        path: Path,
        setup: Callable[[Any], None],
        *,
        busy_timeout: float,
        lanes: int = LANES,
        sync_interval: float | None = SYNC_INTERVAL,
    ) -> None:
        # No pool: each lane keeps its connection, and one closed is closed at once.
        self._engine = create_engine(
            URL.create("sqlite+pysqlite", database=str(path)),
            poolclass=NullPool,
            hide_parameters=True,
            connect_args={"timeout": busy_timeout, "check_same_thread": False},
        )
        set_up_sqlite(self._engine, setup)
        self._pool = ThreadPoolExecutor(max_workers=lanes, thread_name_prefix="holdback-sqlite")
        self._local = threading.local()
        self._lock = threading.Lock()
        self._opened: list[Connection] = []
        self._generation = 0
        self._sync_interval = sync_interval
        self._sync_timer: asyncio.TimerHandle | None = None
        self._syncing: asyncio.Future[None] | None = None
        self._closed = False
        self.syncs = 0  # WAL syncs done (for tests and benchmarks)
        self._synced_event: asyncio.Event | None = None

    @property
    def engine(self) -> Engine:
        """The sync engine whose connections the lanes keep (for tests and tools)."""
        return self._engine

    async def run(self, work: Work[T], *, write: bool) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, self._transaction, work, write)

    def wrote(self) -> None:
        """A write committed: have it synced within `sync_interval` (if syncs are needed)."""
        if self._sync_interval is None or self._sync_timer is not None or self._closed:
            return
        loop = asyncio.get_running_loop()
        self._sync_timer = loop.call_later(self._sync_interval, self._sync_due, loop)

    def _sync_due(self, loop: asyncio.AbstractEventLoop) -> None:
        self._sync_timer = None
        if self._closed:
            return
        if self._syncing is not None and not self._syncing.done():
            self.wrote()  # one sync at a time: this one's commits get the next
            return
        self._syncing = loop.run_in_executor(self._pool, self._sync)
        self._syncing.add_done_callback(self._synced)

    def _synced(self, done: asyncio.Future[None]) -> None:
        if done.cancelled():
            return
        exc = done.exception()
        if exc is not None:
            log.warning("could not sync the SQLite WAL to disk: %s", describe(exc))
        else:
            self.syncs += 1
        if self._synced_event is not None:
            self._synced_event.set()

    @property
    def sync_due(self) -> bool:
        """A commit waits for its sync (one is scheduled or running)."""
        return self._sync_timer is not None or (
            self._syncing is not None and not self._syncing.done()
        )

    async def until_syncs(self, syncs: int) -> None:
        """Return once `syncs` syncs were done (tried, failed or not)."""
        while self.syncs < syncs:
            self._synced_event = event = asyncio.Event()
            await event.wait()

    def _sync(self) -> None:
        # Outside any transaction: on the driver's connection, which SQLAlchemy leaves idle.
        cursor = self._connection().connection.cursor()
        try:
            cursor.execute("PRAGMA wal_checkpoint(PASSIVE)")
            cursor.fetchall()
        finally:
            cursor.close()

    async def aclose(self) -> None:
        """Stop: a sync due is done now, then every lane stops and its connection closes."""
        self._closed = True
        timer, self._sync_timer = self._sync_timer, None
        if timer is not None:
            timer.cancel()
        if self._syncing is not None:
            with contextlib.suppress(Exception):
                await self._syncing
        await asyncio.to_thread(self.close)

    def reconnect(self) -> None:
        """Connections in use finish their transaction; every later one opens anew."""
        with self._lock:
            self._generation += 1

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        with self._lock:
            opened, self._opened = self._opened, []
        for conn in opened:
            conn.close()
        self._engine.dispose()

    def _connection(self) -> Connection:
        local = self._local
        conn: Connection | None = getattr(local, "conn", None)
        if conn is not None and local.generation == self._generation:
            return conn
        if conn is not None:
            self._drop(conn)
        # Used by this lane only; closed by `close` from another thread once lanes stopped.
        conn = self._engine.connect()
        with self._lock:
            self._opened.append(conn)
        local.conn, local.generation = conn, self._generation
        return conn

    def _drop(self, conn: Connection) -> None:
        with self._lock:
            if conn in self._opened:
                self._opened.remove(conn)
        self._local.conn = None
        with contextlib.suppress(SQLAlchemyError, sqlite3.Error):
            conn.close()

    def _transaction(self, work: Work[T], write: bool) -> T:
        conn = self._connection()
        transaction: RootTransaction | None = None
        try:
            # SQLAlchemy's transaction, whose COMMIT and ROLLBACK the driver emits; its BEGIN
            # is ours (the driver's is off: `engine.set_up_sqlite`).
            transaction = conn.begin()
            driver = cast(sqlite3.Connection, conn.connection.dbapi_connection)
            driver.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            result = work(CoreRunner(conn))
            transaction.commit()
        except BaseException:
            self._roll_back(conn, transaction)
            raise
        return result

    def _roll_back(self, conn: Connection, transaction: RootTransaction | None) -> None:
        """Roll back; a connection that cannot, or that is left in a transaction (a failed
        COMMIT) or invalidated, is dropped: closing it rolls back."""
        try:
            if transaction is not None and transaction.is_active:
                transaction.rollback()
            driver = None if conn.invalidated else conn.connection.dbapi_connection
            clean = driver is not None and not getattr(driver, "in_transaction", True)
        except (SQLAlchemyError, sqlite3.Error):
            clean = False
        if not clean:
            self._drop(conn)
