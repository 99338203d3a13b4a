"""Running prebuilt Core statements inside one transaction: straight on SQLite, or through
SQLAlchemy.

The hot path's transactions (a turn, a vault update, a checkpoint round, a conversation's
creation) are plain functions of a `Runner`: they run a few fixed statements and decide
between them. `Database.transact` runs such a function whole, in one step: on SQLite in a
thread of its own that owns a `sqlite3` connection (one thread hop per transaction, not four
per statement as SQLAlchemy's aiosqlite adapter spends), elsewhere inside an async session
through `run_sync` (SQLAlchemy's own execution, on asyncpg).

The rules:
- A statement means the same whichever way it runs: the SQL is what SQLAlchemy compiles for
  the engine's dialect, and every parameter and result value goes through its column type's
  own processors (UTC timestamps, JSON), so both ways store and read identical values.
- A function given a `Runner` does no I/O of its own and awaits nothing: it may be run again
  from the start after a conflict (`Database.transact` retries it), and it runs where the
  connection lives.
- Errors are the driver's (sqlite3's, SQLAlchemy's), which name no parameter and which the
  store translates and retries exactly as it does its sessions'.
"""

from __future__ import annotations

import functools
import sqlite3
from collections import namedtuple
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, cast

from sqlalchemy import Dialect, Insert, Table, bindparam, insert
from sqlalchemy.engine import Connection
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.dml import UpdateBase
from sqlalchemy.sql.expression import ClauseElement, Executable, Select

Params = Mapping[str, object]
T = TypeVar("T")


class Runner(Protocol):
    @property
    def dialect(self) -> str:
        """`sqlite` or `postgresql`."""
        ...

    def rows(self, statement: Select[Any], params: Params) -> Sequence[Any]:
        """The result rows, with their columns as attributes."""
        ...

    def count(self, statement: UpdateBase, params: Params) -> int:
        """How many rows the statement changed."""
        ...

    def run(self, statement: Executable, params: Params) -> None: ...


# A transaction's body: statements and decisions, no I/O of its own.
Work = Callable[[Runner], T]


class CoreRunner:
    """Statements through a (sync) SQLAlchemy connection: inside `AsyncConnection.run_sync`."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn

    @property
    def dialect(self) -> str:
        return self._conn.dialect.name

    def rows(self, statement: Select[Any], params: Params) -> Sequence[Any]:
        rows: Sequence[Any] = self._conn.execute(statement, params).all()
        return rows

    def count(self, statement: UpdateBase, params: Params) -> int:
        return self._conn.execute(statement, params).rowcount

    def run(self, statement: Executable, params: Params) -> None:
        self._conn.execute(statement, params)


Processor = Callable[[Any], Any] | None


@dataclass(frozen=True, slots=True)
class _Compiled:
    sql: str
    names: tuple[str, ...]  # the parameters, in the order of the SQL's placeholders
    binds: tuple[Processor, ...]
    results: tuple[Processor, ...]
    row: Callable[..., Any]

    def parameters(self, params: Params) -> list[object]:
        return [
            params[name] if bind is None else bind(params[name])
            for name, bind in zip(self.names, self.binds, strict=True)
        ]

    def convert(self, raw: Sequence[Any]) -> Any:
        return self.row(
            *(
                v if result is None else result(v)
                for v, result in zip(raw, self.results, strict=True)
            )
        )


# Compiled once per dialect and statement; the statements are module-level constants. The
# cache lives on the dialect object itself, so it goes when its engine goes (a cache keyed by
# dialect would keep every dialect alive: the bind processors refer back to it).
_CACHE_ATTRIBUTE = "_holdback_compiled"


def compiled(dialect: Dialect, statement: Executable) -> _Compiled:
    cache: dict[Executable, _Compiled] | None = getattr(dialect, _CACHE_ATTRIBUTE, None)
    if cache is None:
        cache = {}
        setattr(dialect, _CACHE_ATTRIBUTE, cache)
    found = cache.get(statement)
    if found is not None:
        return found
    made = cast(SQLCompiler, cast(ClauseElement, statement).compile(dialect=dialect))
    names = tuple(made.positiontup or ())
    binds = tuple(
        made.binds[name].type.dialect_impl(dialect).bind_processor(dialect) for name in names
    )
    columns = list(statement.selected_columns) if isinstance(statement, Select) else []
    results = tuple(
        column.type.dialect_impl(dialect).result_processor(dialect, None) for column in columns
    )
    row = namedtuple("Row", [column.key for column in columns], rename=True)  # type: ignore[misc]
    entry = cache[statement] = _Compiled(made.string, names, binds, results, row)
    return entry


class SqliteRunner:
    """Statements straight on a `sqlite3` connection, compiled by SQLAlchemy's dialect."""

    def __init__(self, conn: sqlite3.Connection, dialect: Dialect) -> None:
        self._conn = conn
        self._dialect = dialect

    @property
    def dialect(self) -> str:
        return "sqlite"

    def rows(self, statement: Select[Any], params: Params) -> Sequence[Any]:
        made = compiled(self._dialect, statement)
        found = self._conn.execute(made.sql, made.parameters(params)).fetchall()
        return [made.convert(raw) for raw in found]

    def count(self, statement: UpdateBase, params: Params) -> int:
        made = compiled(self._dialect, statement)
        return self._conn.execute(made.sql, made.parameters(params)).rowcount

    def run(self, statement: Executable, params: Params) -> None:
        made = compiled(self._dialect, statement)
        self._conn.execute(made.sql, made.parameters(params))


@functools.cache
def insert_rows(table: Table, rows: int) -> Insert:
    """A multi-row INSERT of every column but a generated key; parameters `<column>_<row>`
    (fill them with `numbered`). One shape per table and row count, compiled once."""
    columns = [c for c in table.c if not (c.primary_key and c.autoincrement is True)]
    return insert(table).values(
        [{c.key: bindparam(f"{c.key}_{i}", type_=c.type) for c in columns} for i in range(rows)]
    )


def numbered(rows: Sequence[Mapping[str, object]]) -> dict[str, object]:
    """The parameters of `insert_rows` for these rows."""
    return {f"{name}_{i}": value for i, row in enumerate(rows) for name, value in row.items()}
