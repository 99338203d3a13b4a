"""Running prebuilt Core statements: through SQLAlchemy, or straight on the SQLite driver.

The chat pipeline's per-message steps (`turns.py`) run a few fixed statements per
transaction, so how a statement reaches the database is most of their cost. SQLAlchemy's
aiosqlite adapter spends four thread hops on each (open a cursor, execute, fetch, close);
the driver's `execute_fetchall` spends one and keeps the cursor inside the driver's thread.

The rules:
- A statement means the same whichever way it runs: the SQL is what SQLAlchemy compiles for
  the engine's dialect, and every parameter and result value goes through its column type's
  own processors (UTC timestamps, JSON), so both ways store and read identical values.
- The direct way runs on the session's own connection, inside the transaction the session
  began (`BEGIN IMMEDIATE` for writes), so commit, rollback and retry stay the session's.
  Its errors are the driver's sqlite3 errors, which name no parameter and which the store
  translates and retries exactly as it does SQLAlchemy's.
- DML that must report how many rows it changed runs with `RETURNING`, so the direct way is
  used only where SQLite has it (3.35 and later); elsewhere SQLAlchemy runs the same statements.
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast

import aiosqlite
from sqlalchemy import Dialect, literal_column
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.dml import UpdateBase
from sqlalchemy.sql.expression import ClauseElement, Executable, Select

Params = Mapping[str, object]


class Runner(Protocol):
    async def rows(self, statement: Select[Any], params: Params) -> Sequence[Any]:
        """The result rows, with their columns as attributes."""
        ...

    async def count(self, statement: UpdateBase, params: Params) -> int:
        """How many rows the statement changed."""
        ...

    async def run(self, statement: Executable, params: Params) -> None: ...


async def runner(session: AsyncSession) -> Runner:
    """The cheapest way to run statements in the session's transaction (which this begins)."""
    conn = await session.connection()
    dialect = conn.dialect
    if dialect.name == "sqlite" and dialect.update_returning:
        raw = await conn.get_raw_connection()
        return _Direct(cast(aiosqlite.Connection, raw.driver_connection), dialect)
    return _Core(conn)


class _Core:
    def __init__(self, conn: AsyncConnection) -> None:
        self._conn = conn

    async def rows(self, statement: Select[Any], params: Params) -> Sequence[Any]:
        rows: Sequence[Any] = (await self._conn.execute(statement, params)).all()
        return rows

    async def count(self, statement: UpdateBase, params: Params) -> int:
        return (await self._conn.execute(statement, params)).rowcount

    async def run(self, statement: Executable, params: Params) -> None:
        await self._conn.execute(statement, params)


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


def _compile(dialect: Dialect, statement: Executable, counting: bool) -> _Compiled:
    cache: dict[tuple[Executable, bool], _Compiled] | None = getattr(
        dialect, _CACHE_ATTRIBUTE, None
    )
    if cache is None:
        cache = {}
        setattr(dialect, _CACHE_ATTRIBUTE, cache)
    found = cache.get((statement, counting))
    if found is not None:
        return found
    target = cast(ClauseElement, statement)
    if counting:
        target = cast(UpdateBase, statement).returning(literal_column("1"))
    compiled = cast(SQLCompiler, target.compile(dialect=dialect))
    names = tuple(compiled.positiontup or ())
    binds = tuple(
        compiled.binds[name].type.dialect_impl(dialect).bind_processor(dialect) for name in names
    )
    columns = list(statement.selected_columns) if isinstance(statement, Select) else []
    results = tuple(
        column.type.dialect_impl(dialect).result_processor(dialect, None) for column in columns
    )
    row = namedtuple("Row", [column.key for column in columns], rename=True)  # type: ignore[misc]
    made = cache[(statement, counting)] = _Compiled(compiled.string, names, binds, results, row)
    return made


class _Direct:
    def __init__(self, driver: aiosqlite.Connection, dialect: Dialect) -> None:
        self._driver = driver
        self._dialect = dialect

    async def rows(self, statement: Select[Any], params: Params) -> Sequence[Any]:
        compiled = _compile(self._dialect, statement, False)
        found = await self._driver.execute_fetchall(compiled.sql, compiled.parameters(params))
        return [compiled.convert(raw) for raw in found]

    async def count(self, statement: UpdateBase, params: Params) -> int:
        compiled = _compile(self._dialect, statement, True)
        return len(
            list(await self._driver.execute_fetchall(compiled.sql, compiled.parameters(params)))
        )

    async def run(self, statement: Executable, params: Params) -> None:
        compiled = _compile(self._dialect, statement, False)
        await self._driver.execute_fetchall(compiled.sql, compiled.parameters(params))
