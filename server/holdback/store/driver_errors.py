"""Translation of driver exceptions into store errors that name their cause.

The rule: nothing above the store sees a SQLAlchemy, sqlite3, asyncpg or socket exception.
Each is mapped, by SQLite result code or PostgreSQL SQLSTATE, to the `StoreError` subclass
that names what went wrong and where (the file or the server, never the password), and the
message never includes statement parameters, which could hold stored data. Errors that mean
"a concurrent writer got there first" are recognised here too, so the store can retry them.
"""

from __future__ import annotations

import socket
import sqlite3
from collections.abc import Iterator

import asyncpg
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError, SQLAlchemyError

from holdback.store.engine import DatabaseTarget
from holdback.store.errors import (
    DatabaseAccessDeniedError,
    DatabaseCorruptError,
    DatabaseLockedError,
    DatabaseUnreachableError,
    DiskFullError,
    InvalidDatabaseUrlError,
    StorageFailedError,
    StoreError,
)

# SQLite primary result codes (https://sqlite.org/rescode.html).
_SQLITE_PERM, _SQLITE_BUSY, _SQLITE_LOCKED, _SQLITE_READONLY = 3, 5, 6, 8
_SQLITE_IOERR, _SQLITE_CORRUPT, _SQLITE_FULL, _SQLITE_CANTOPEN = 10, 11, 13, 14
_SQLITE_CONSTRAINT, _SQLITE_AUTH, _SQLITE_NOTADB = 19, 23, 26
_SQLITE_CONSTRAINT_FOREIGNKEY, _SQLITE_CONSTRAINT_PRIMARYKEY = 787, 1555
_SQLITE_CONSTRAINT_UNIQUE, _SQLITE_BUSY_SNAPSHOT = 2067, 517

# PostgreSQL SQLSTATEs a retry can cure: unique and foreign-key violations (a concurrent
# writer inserted or deleted first), serialization failures and deadlocks.
_PG_RETRYABLE = frozenset({"23505", "23503", "40001", "40P01"})


# What the store translates; anything else is a bug and propagates as it is.
DRIVER_ERRORS: tuple[type[BaseException], ...] = (
    SQLAlchemyError,
    OSError,
    sqlite3.Error,
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
)


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        if isinstance(current, DBAPIError) and current.orig is not None:
            current = current.orig
        else:
            current = current.__cause__ or current.__context__


def _sqlite_code(exc: BaseException) -> int | None:
    for item in _chain(exc):
        if isinstance(item, sqlite3.Error):
            code = getattr(item, "sqlite_errorcode", None)
            return code if isinstance(code, int) else None
    return None


def _sqlstate(exc: BaseException) -> str | None:
    for item in _chain(exc):
        state = getattr(item, "sqlstate", None)
        if isinstance(state, str) and state:
            return state
    return None


def is_retryable(exc: BaseException) -> bool:
    """A conflict with a concurrent writer: rolling back and trying again can succeed."""
    code = _sqlite_code(exc)
    if code is not None:
        return code in (
            _SQLITE_CONSTRAINT_UNIQUE,
            _SQLITE_CONSTRAINT_PRIMARYKEY,
            _SQLITE_CONSTRAINT_FOREIGNKEY,
            _SQLITE_BUSY_SNAPSHOT,
        )
    return _sqlstate(exc) in _PG_RETRYABLE


def translate(exc: BaseException, target: DatabaseTarget, *, busy_timeout: float) -> StoreError:
    """The store error for a driver or connection failure while using `target`."""
    if isinstance(exc, StoreError):
        return exc
    where = target.describe()
    if isinstance(exc, (ArgumentError, NoSuchModuleError)):
        return InvalidDatabaseUrlError(f"cannot use {where}: the URL or its options are invalid")
    code = _sqlite_code(exc)
    if code is not None:
        return _translate_sqlite(code, where, busy_timeout)
    state = _sqlstate(exc)
    if state is not None:
        return _translate_postgres(state, where, exc)
    for item in _chain(exc):
        if isinstance(item, socket.gaierror):
            return DatabaseUnreachableError(f"cannot reach {where}: the host name does not resolve")
        if isinstance(item, ConnectionRefusedError):
            return DatabaseUnreachableError(
                f"cannot reach {where}: connection refused (is the server running and "
                "listening on that port?)"
            )
        if isinstance(item, TimeoutError):
            return DatabaseUnreachableError(f"cannot reach {where}: the connection timed out")
        if isinstance(item, OSError):
            reason = item.strerror or type(item).__name__
            return DatabaseUnreachableError(f"cannot reach {where}: {reason}")
    name = type(exc).__name__
    if isinstance(exc, SQLAlchemyError | OSError) or "asyncpg" in type(exc).__module__:
        return StorageFailedError(f"the database failed ({where}): {name}")
    return StorageFailedError(f"unexpected failure using {where}: {name}")


def _translate_sqlite(code: int, where: str, busy_timeout: float) -> StoreError:
    primary = code & 0xFF
    if primary in (_SQLITE_BUSY, _SQLITE_LOCKED):
        return DatabaseLockedError(
            f"{where} is locked by another process or connection; gave up after waiting "
            f"{busy_timeout:g}s. Nothing was written"
        )
    if primary == _SQLITE_FULL:
        return DiskFullError(
            f"the disk holding {where} is full (or its size limit is reached); "
            "the write was rolled back. Free some space and try again"
        )
    if primary == _SQLITE_CANTOPEN:
        return DatabaseUnreachableError(
            f"cannot open {where}: check that the path exists and is a file holdback can read"
        )
    if primary in (_SQLITE_READONLY, _SQLITE_PERM, _SQLITE_AUTH):
        return DatabaseAccessDeniedError(
            f"cannot write to {where}: the file or its directory is read-only for this user"
        )
    if primary in (_SQLITE_CORRUPT, _SQLITE_NOTADB):
        return DatabaseCorruptError(f"{where} is damaged or is not a SQLite database")
    if primary == _SQLITE_IOERR:
        return StorageFailedError(f"disk I/O error on {where}; nothing was written")
    if primary == _SQLITE_CONSTRAINT:
        return StorageFailedError(f"a write to {where} broke a constraint of the schema")
    return StorageFailedError(f"SQLite failed on {where} (result code {code})")


def _translate_postgres(state: str, where: str, exc: BaseException) -> StoreError:
    if state == "53100":
        return DiskFullError(
            f"the disk of {where} is full; the write was rolled back. Free some space"
        )
    if state in ("28P01", "28000"):
        return DatabaseAccessDeniedError(f"{where} refused the login: wrong user name or password")
    if state == "42501":
        return DatabaseAccessDeniedError(f"{where}: the database user lacks a privilege")
    if state == "3D000":
        return DatabaseUnreachableError(f"cannot use {where}: that database does not exist")
    if state.startswith("08") or state in ("57P01", "57P02", "57P03"):
        return DatabaseUnreachableError(f"lost or refused the connection to {where}")
    if state in ("55P03", "57014"):
        return DatabaseLockedError(f"{where}: gave up waiting for a lock; nothing was written")
    if state.startswith("53"):
        return StorageFailedError(f"{where} ran out of a resource (SQLSTATE {state})")
    return StorageFailedError(
        f"PostgreSQL failed on {where} (SQLSTATE {state}, {type(exc).__name__})"
    )
