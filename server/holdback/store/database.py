"""Transactions: every store operation is one transaction, translated and, if it can be, retried.

The rules:
- A write is all or nothing. It runs as one transaction; any failure rolls it back, so a
  locked file, a full disk or a lost server leaves nothing half-written.
- A write that collides with a concurrent writer (a unique or foreign-key violation, a
  serialization failure or deadlock) is rolled back and run again from the start, with a
  growing, jittered pause, so it re-reads what the other writer committed. The database's
  unique constraints, not the code, are what make duplicates impossible.
- Driver exceptions never escape: they become the `StoreError` that names their cause.
- The hot path's transactions are functions of a `Runner` (`transact`): on SQLite each runs
  whole in a lane thread (`lanes.py`, a sync engine's connection), one thread hop per
  transaction; elsewhere in a session, through `run_sync`. Both take the same turns and
  retries as `write`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from holdback.store.driver_errors import DRIVER_ERRORS, is_retryable, translate
from holdback.store.engine import AUTOCOMMIT, WRITE, DatabaseTarget, SqliteSetup
from holdback.store.errors import ConcurrentWriteError, StoreError
from holdback.store.lanes import SYNC_INTERVAL, SqliteLanes
from holdback.store.runner import CoreRunner, Work

T = TypeVar("T")
log = logging.getLogger(__name__)

MAX_ATTEMPTS = 12
_FIRST_PAUSE = 0.005
_LONGEST_PAUSE = 0.5


class Database:
    """An engine with read and write sessions for one database target."""

    def __init__(
        self,
        engine: AsyncEngine,
        target: DatabaseTarget,
        *,
        busy_timeout: float,
        synchronous: str = "normal",
    ) -> None:
        self.engine = engine
        self.target = target
        self.busy_timeout = busy_timeout
        self._hooks: list[Callable[[Any], None]] = []
        self._lanes: SqliteLanes | None = None
        if engine.dialect.name == "sqlite":
            setup = SqliteSetup(busy_timeout, True, synchronous)

            def connect(conn: Any) -> None:
                setup(conn)
                for hook in list(self._hooks):
                    hook(conn)

            self._lanes = SqliteLanes(
                target.sqlite_path.absolute(),
                connect,
                busy_timeout=busy_timeout,
                sync_interval=None if synchronous == "full" else SYNC_INTERVAL,
            )
        self._readers = async_sessionmaker(engine, expire_on_commit=False)
        self._writers = async_sessionmaker(
            engine.execution_options(**{WRITE: True}), expire_on_commit=False
        )
        # SQLite has one writer at a time. Writers of this process take turns here instead of
        # spinning on the file lock, so a busy server does not run into the busy timeout;
        # writers in other processes still meet the busy timeout.
        self._one_writer = asyncio.Lock() if engine.dialect.name == "sqlite" else None

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    def translate(self, exc: BaseException) -> StoreError:
        return translate(exc, self.target, busy_timeout=self.busy_timeout)

    async def read(self, work: Callable[[AsyncSession], Awaitable[T]]) -> T:
        """Run `work` in a read transaction."""
        try:
            async with self._readers() as session, session.begin():
                return await work(session)
        except StoreError:
            raise
        except DRIVER_ERRORS as exc:
            raise self.translate(exc) from None

    async def write(self, work: Callable[[AsyncSession], Awaitable[T]], *, what: str) -> T:
        """Run `work` in a write transaction, retrying it whole after a concurrent conflict.

        `work` must be safe to run again: it reads what it needs inside the transaction.
        `what` names the operation in the error raised when every attempt collided.
        """

        async def attempt() -> T:
            async with self._writers() as session, session.begin():
                return await work(session)

        return await self._retried(attempt, what=what)

    async def transact(self, work: Work[T], *, write: bool, what: str) -> T:
        """Run `work(runner)` as one transaction (see `runner.py`); a write is retried whole
        after a concurrent conflict, like `write`."""
        lanes = self._lanes
        if lanes is not None:
            if not write:
                try:
                    return await lanes.run(work, write=False)
                except DRIVER_ERRORS as exc:
                    raise self.translate(exc) from None
            return await self._retried(lambda: lanes.run(work, write=True), what=what)

        async def in_session(session: AsyncSession) -> T:
            conn = await session.connection()
            return await conn.run_sync(lambda sync: work(CoreRunner(sync)))

        if write:
            return await self.write(in_session, what=what)
        return await self.read(in_session)

    async def _retried(self, attempt: Callable[[], Awaitable[T]], *, what: str) -> T:
        pause = _FIRST_PAUSE
        for number in range(1, MAX_ATTEMPTS + 1):
            try:
                async with contextlib.AsyncExitStack() as turn:
                    if self._one_writer is not None:
                        await turn.enter_async_context(self._one_writer)
                    result = await attempt()
                if self._lanes is not None:
                    self._lanes.wrote()
                return result
            except StoreError:
                raise
            except DRIVER_ERRORS as exc:
                if not is_retryable(exc):
                    raise self.translate(exc) from None
                log.debug("%s collided with a concurrent writer (attempt %d)", what, number)
            await asyncio.sleep(random.uniform(0, pause))
            pause = min(pause * 2, _LONGEST_PAUSE)
        raise ConcurrentWriteError(
            f"{what} kept colliding with concurrent writers on {self.target.describe()} "
            f"and was given up after {MAX_ATTEMPTS} attempts; nothing was written"
        )

    async def autocommit(self, sql: str) -> None:
        """Run one statement outside any transaction (e.g. a SQLite WAL checkpoint)."""
        try:
            async with self.engine.connect() as plain:
                conn = await plain.execution_options(**{AUTOCOMMIT: True})
                await conn.exec_driver_sql(sql)
                await conn.commit()
        except DRIVER_ERRORS as exc:
            raise self.translate(exc) from None

    def connect_hook(self, hook: Callable[[Any], None]) -> Callable[[], None]:
        """Run `hook(dbapi_connection)` on every connection opened from now on (the engine's
        and the lanes'; a maintenance or test hook). Returns what removes it."""
        self._hooks.append(hook)
        listener = _engine_hook(hook)
        event.listen(self.engine.sync_engine, "connect", listener)

        def remove() -> None:
            if hook in self._hooks:
                self._hooks.remove(hook)
            event.remove(self.engine.sync_engine, "connect", listener)

        return remove

    async def reconnect(self) -> None:
        """Close pooled connections; the next transactions open new ones."""
        await self.engine.dispose()
        if self._lanes is not None:
            self._lanes.reconnect()

    async def dispose(self) -> None:
        if self._lanes is not None:
            await self._lanes.aclose()
        await self.engine.dispose()


def _engine_hook(hook: Callable[[Any], None]) -> Callable[[Any, Any], None]:
    def listener(dbapi_connection: Any, _record: Any) -> None:
        hook(dbapi_connection)

    return listener
