"""Database URLs and engines: which databases holdback accepts, and how it connects to them.

The rules:
- Two engines only: SQLite through aiosqlite (the embedded default) and PostgreSQL through
  asyncpg. `sqlite://` and `postgresql://` (or `postgres://`) are accepted and given those
  drivers; anything else is refused with `InvalidDatabaseUrlError`. In-memory SQLite is
  refused too, because everything in it is lost when the server stops.
- A SQLite file is created private (0600) and whole, and a zero-length one is refused
  (`holdback.store.files`), before SQLite opens it.
- Every SQLite connection, the engine's and the store's own (`lanes.py`), is set up by one
  `SqliteSetup`: WAL mode with a busy timeout, foreign keys enforced, deleted content
  overwritten (`secure_delete`, so a deleted vault does not linger in free pages), and the
  synchronous level: `normal` by default (a commit survives the process crashing; see
  docs/storage.md) or `full` (it also survives the machine losing power).
- SQLite transactions are begun by us, not by the driver: reads with a deferred `BEGIN`,
  writes with `BEGIN IMMEDIATE`, so a writer waits for the write lock up front (up to the busy
  timeout) instead of failing halfway when it upgrades a read lock. This also makes DDL
  transactional, so a failed migration leaves nothing half-applied.
- Statement parameters are never rendered into error messages (`hide_parameters`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import URL, Connection, Engine, make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from holdback.store.errors import DatabaseUnreachableError, InvalidDatabaseUrlError
from holdback.store.files import prepare_sqlite_file

SQLITE = "sqlite+aiosqlite"
POSTGRES = "postgresql+asyncpg"
_SCHEMES = {
    "sqlite": SQLITE,
    SQLITE: SQLITE,
    "postgresql": POSTGRES,
    "postgres": POSTGRES,
    POSTGRES: POSTGRES,
}

SYNCHRONOUS = ("normal", "full")

# Execution options read by the `begin` hook on SQLite.
WRITE = "holdback_write"
AUTOCOMMIT = "holdback_autocommit"


@dataclass(frozen=True, slots=True)
class DatabaseTarget:
    """A checked database URL and a description of it that is safe to print."""

    url: URL

    @property
    def is_sqlite(self) -> bool:
        return self.url.get_backend_name() == "sqlite"

    @property
    def sqlite_path(self) -> Path:
        return Path(self.url.database or "")

    def listen_dsn(self) -> str:
        """The PostgreSQL URL as asyncpg's own connections take it (for LISTEN)."""
        return self.url.set(drivername="postgresql").render_as_string(hide_password=False)

    def describe(self) -> str:
        """`SQLite file /path` or `PostgreSQL at host:port/db` (never the password)."""
        if self.is_sqlite:
            return f"the SQLite file {self.sqlite_path}"
        host = self.url.host or "the local socket"
        port = f":{self.url.port}" if self.url.port else ""
        return f"PostgreSQL at {host}{port}/{self.url.database or ''}"


def parse_database_url(text: str) -> DatabaseTarget:
    """Check a database URL and give it holdback's driver, or raise `InvalidDatabaseUrlError`."""
    if not text or not text.strip():
        raise InvalidDatabaseUrlError("the database URL is empty")
    try:
        url = make_url(text.strip())
    except ArgumentError:
        raise InvalidDatabaseUrlError(
            "the database URL cannot be parsed; expected sqlite+aiosqlite:///path/to/file.db "
            "or postgresql+asyncpg://user:password@host:port/database"
        ) from None
    driver = _SCHEMES.get(url.drivername)
    if driver is None:
        raise InvalidDatabaseUrlError(
            f"holdback does not support {url.drivername!r} databases; use "
            "sqlite+aiosqlite:///path/to/file.db or postgresql+asyncpg://host/database"
        )
    url = url.set(drivername=driver)
    if driver == SQLITE:
        if not url.database or url.database == ":memory:" or "mode=memory" in str(url.query):
            raise InvalidDatabaseUrlError(
                "an in-memory SQLite database would lose everything when holdback stops; "
                "give a file path, e.g. sqlite+aiosqlite:////var/lib/holdback/holdback.db"
            )
        if url.host:
            raise InvalidDatabaseUrlError(
                "a SQLite URL has no host: write sqlite+aiosqlite:///relative/path.db "
                "or sqlite+aiosqlite:////absolute/path.db"
            )
    elif not url.database:
        raise InvalidDatabaseUrlError("the PostgreSQL URL names no database (…/database)")
    return DatabaseTarget(url)


@dataclass(frozen=True, slots=True)
class SqliteSetup:
    """How every SQLite connection holdback opens is set up; call it on a new connection."""

    busy_timeout: float = 5.0
    foreign_keys: bool = True
    synchronous: str = "normal"

    def __post_init__(self) -> None:
        if self.synchronous not in SYNCHRONOUS:
            raise ValueError(f"the SQLite synchronous level is one of {', '.join(SYNCHRONOUS)}")

    @property
    def pragmas(self) -> tuple[str, ...]:
        return (
            f"PRAGMA busy_timeout = {max(0, int(self.busy_timeout * 1000))}",
            "PRAGMA journal_mode = WAL",
            f"PRAGMA foreign_keys = {'ON' if self.foreign_keys else 'OFF'}",
            f"PRAGMA synchronous = {self.synchronous.upper()}",
            "PRAGMA secure_delete = ON",
        )

    def __call__(self, dbapi_connection: Any) -> None:
        cursor = dbapi_connection.cursor()
        try:
            for pragma in self.pragmas:
                cursor.execute(pragma)
        finally:
            cursor.close()


def create_engine(
    target: DatabaseTarget,
    *,
    busy_timeout: float = 5.0,
    connect_timeout: float = 10.0,
    foreign_keys: bool = True,
    synchronous: str = "normal",
) -> AsyncEngine:
    """An async engine for a checked target. SQLite files need their directory to exist."""
    if target.is_sqlite:
        setup = SqliteSetup(busy_timeout, foreign_keys, synchronous)
        return _sqlite_engine(target, setup)
    return create_async_engine(
        target.url,
        hide_parameters=True,
        pool_pre_ping=True,
        connect_args={"timeout": connect_timeout},
    )


def _sqlite_engine(target: DatabaseTarget, setup: SqliteSetup) -> AsyncEngine:
    directory = target.sqlite_path.absolute().parent
    if not directory.is_dir():
        raise DatabaseUnreachableError(
            f"cannot open {target.describe()}: the directory {directory} does not exist"
        )
    prepare_sqlite_file(target.sqlite_path.absolute(), target.describe())
    # The driver's own timeout also waits for locks; keep it equal to ours.
    engine = create_async_engine(
        target.url, hide_parameters=True, connect_args={"timeout": setup.busy_timeout}
    )
    set_up_sqlite(engine.sync_engine, setup)

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(conn: Connection) -> None:
        options = conn.get_execution_options()
        if options.get(AUTOCOMMIT):
            return
        conn.exec_driver_sql("BEGIN IMMEDIATE" if options.get(WRITE) else "BEGIN")

    return engine


def set_up_sqlite(engine: Engine, setup: Callable[[Any], None]) -> None:
    """Set up every connection of a SQLite engine with `setup`, and take BEGIN away from the
    driver (SQLAlchemy's recipe for pysqlite and aiosqlite): whoever begins a transaction
    emits `BEGIN` or `BEGIN IMMEDIATE` itself."""

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        setup(dbapi_connection)
