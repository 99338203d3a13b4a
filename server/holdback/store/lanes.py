"""SQLite transactions in one thread hop each: a few threads, each with its own connection.

The rules:
- A transaction runs whole in one lane thread: `BEGIN IMMEDIATE` (writes) or `BEGIN`
  (reads), the function's statements, `COMMIT`; any exception rolls it back before it
  propagates, so nothing is ever left half-written or holding the write lock. The event loop
  waits for one future per transaction, never for a statement.
- Every connection is set up as the engine's are (`engine.sqlite_setup`: WAL, busy timeout,
  foreign keys, the synchronous level, secure delete), so the pragmas that make the file
  safe hold whichever way a statement reaches it.
- A connection is used by one thread at a time (the lane that opened it) and closed by
  `close()` after every lane has stopped. `reconnect()` drops the connections so the next
  transactions open new ones (as `AsyncEngine.dispose` does for the engine's pool).
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
from typing import TypeVar

from sqlalchemy import Dialect

from holdback.errors import describe
from holdback.store.runner import SqliteRunner, Work

T = TypeVar("T")
log = logging.getLogger(__name__)
LANES = 3  # one writer at a time, and readers beside it
SYNC_INTERVAL = 1.0  # seconds from a commit to its sync, at most (synchronous = NORMAL)


class SqliteLanes:
    def __init__(
        self,
        path: Path,
        dialect: Dialect,
        setup: Callable[[sqlite3.Connection], None],
        *,
        busy_timeout: float,
        lanes: int = LANES,
        sync_interval: float | None = SYNC_INTERVAL,
    ) -> None:
        self._path = path
        self._dialect = dialect
        self._setup = setup
        self._busy_timeout = busy_timeout
        self._pool = ThreadPoolExecutor(max_workers=lanes, thread_name_prefix="holdback-sqlite")
        self._local = threading.local()
        self._lock = threading.Lock()
        self._opened: list[sqlite3.Connection] = []
        self._generation = 0
        self._sync_interval = sync_interval
        self._sync_timer: asyncio.TimerHandle | None = None
        self._syncing: asyncio.Future[None] | None = None
        self._closed = False
        self.syncs = 0  # WAL syncs done (for tests and benchmarks)
        self._synced_event: asyncio.Event | None = None

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
        self._connection().execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()

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

    def _connection(self) -> sqlite3.Connection:
        local = self._local
        conn: sqlite3.Connection | None = getattr(local, "conn", None)
        if conn is not None and local.generation == self._generation:
            return conn
        if conn is not None:
            with self._lock:
                if conn in self._opened:
                    self._opened.remove(conn)
            conn.close()
            local.conn = None
        # Used by this lane only; closed by `close` from another thread once lanes stopped.
        conn = sqlite3.connect(
            self._path, timeout=self._busy_timeout, isolation_level=None, check_same_thread=False
        )
        try:
            self._setup(conn)
        except BaseException:
            conn.close()
            raise
        with self._lock:
            self._opened.append(conn)
        local.conn, local.generation = conn, self._generation
        return conn

    def _transaction(self, work: Work[T], write: bool) -> T:
        conn = self._connection()
        conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
        try:
            result = work(SqliteRunner(conn, self._dialect))
            conn.execute("COMMIT")
        except BaseException:
            self._roll_back(conn)
            raise
        return result

    def _roll_back(self, conn: sqlite3.Connection) -> None:
        """Roll back; a connection that cannot is dropped (closing it rolls back)."""
        try:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
        except sqlite3.Error:
            with self._lock:
                if conn in self._opened:
                    self._opened.remove(conn)
            self._local.conn = None
            conn.close()
