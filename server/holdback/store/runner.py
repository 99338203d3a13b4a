"""Running prebuilt Core statements inside one transaction, through SQLAlchemy's sync Core.

The hot path's transactions (a turn, a vault update, a checkpoint round, a conversation's
creation, and the single-purpose message writes) are plain functions of a `Runner`: they run
a few fixed statements and decide between them. `Database.transact` runs such a function
whole, in one step: on SQLite in a lane thread that keeps a connection of a sync pysqlite
engine (`lanes.py`: one thread hop per transaction, not four per statement as SQLAlchemy's
aiosqlite adapter spends), elsewhere inside an async session through `run_sync` (on asyncpg).
Both are a sync `Connection`, so there is one runner.

The rules:
- A statement is a Core construct, compiled by SQLAlchemy for the engine's dialect (and kept
  in its compiled cache: the statements are module-level constants, one shape each), every
  parameter and result value through its column type's processors (UTC timestamps, JSON),
  so every way into a database stores and reads identical values.
- A function given a `Runner` does no I/O of its own and awaits nothing: it may be run again
  from the start after a conflict (`Database.transact` retries it), and it runs where the
  connection lives.
- Errors are SQLAlchemy's (wrapping the driver's), which name no parameter and which the
  store translates and retries exactly as it does its sessions'.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, TypeVar

from sqlalchemy import Insert, Table, bindparam, insert
from sqlalchemy.engine import Connection
from sqlalchemy.sql.dml import UpdateBase
from sqlalchemy.sql.expression import Executable

Params = Mapping[str, object]
T = TypeVar("T")


class Runner(Protocol):
    @property
    def dialect(self) -> str:
        """`sqlite` or `postgresql`."""
        ...

    def rows(self, statement: Executable, params: Params) -> Sequence[Any]:
        """The result rows (of a SELECT, or a statement's RETURNING), with their columns as
        attributes."""
        ...

    def count(self, statement: UpdateBase, params: Params) -> int:
        """How many rows the statement changed."""
        ...

    def run(self, statement: Executable, params: Params) -> None: ...

    def many(self, statement: Executable, rows: Sequence[Params]) -> int | None:
        """The statement once per row, as one batch (the driver's `executemany`, or
        SQLAlchemy's multi-row VALUES where it batches so); how many rows it changed, where
        the driver counts them for a batch (None elsewhere)."""
        ...


# A transaction's body: statements and decisions, no I/O of its own.
Work = Callable[[Runner], T]


class CoreRunner:
    """Statements through a sync SQLAlchemy connection (a lane's, or inside `run_sync`)."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn

    @property
    def dialect(self) -> str:
        return self._conn.dialect.name

    def rows(self, statement: Executable, params: Params) -> Sequence[Any]:
        rows: Sequence[Any] = self._conn.execute(statement, params).all()
        return rows

    def count(self, statement: UpdateBase, params: Params) -> int:
        return self._conn.execute(statement, params).rowcount

    def run(self, statement: Executable, params: Params) -> None:
        self._conn.execute(statement, params)

    def many(self, statement: Executable, rows: Sequence[Params]) -> int | None:
        if not rows:
            return 0
        result = self._conn.execute(statement, list(rows))
        return result.rowcount if self._conn.dialect.supports_sane_multi_rowcount else None


@functools.cache
def insert_rows(table: Table) -> Insert:
    """An INSERT of every column of `table` but a generated key, for `Runner.many`: one
    constant per table, so SQLAlchemy compiles it once (a multi-row VALUES never is
    cached)."""
    columns = [c for c in table.c if not (c.primary_key and c.autoincrement is True)]
    return insert(table).values({c.key: bindparam(c.key, type_=c.type) for c in columns})
