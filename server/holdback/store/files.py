"""The SQLite database file: created private and whole, and checked before SQLite opens it.

The rules:
- The database file is created with mode 0600, whatever the directory's mode or the umask.
  SQLite gives its `-wal`, `-shm` and `-journal` files the mode of the database file, so they
  are 0600 too. An existing database (or one of those files) that group or others can
  access was made by an older holdback or by hand: it is made private (`chmod 600`).
- A new database is created whole: SQLite writes its header into a private temporary file,
  which is then linked into place. So the path never holds a zero-length file of holdback's,
  and a zero-length file there is refused (`DatabaseCorruptError`): it is a truncated or
  foreign file, never a database to initialize silently.
- A read-only file system, or a file this user may not write, is named as such.
- The database file is never opened here once it exists: closing any descriptor of a file
  drops the POSIX locks the process holds on it, which SQLite's connections rely on.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import secrets
import sqlite3
import stat
from pathlib import Path

from holdback.store.errors import (
    DatabaseAccessDeniedError,
    DatabaseCorruptError,
    DatabaseUnreachableError,
    StorageFailedError,
    StoreError,
)

log = logging.getLogger(__name__)

PRIVATE = 0o600
SIDE_FILES = ("-wal", "-shm", "-journal")


def prepare_sqlite_file(path: Path, where: str) -> None:
    """Make sure `path` is a private, non-empty SQLite file this process can write, creating
    a new database there if nothing is. `where` names the file in errors."""
    try:
        info = path.stat()
    except FileNotFoundError:
        _create(path, where)
        return
    except OSError as exc:
        raise DatabaseUnreachableError(f"cannot open {where}: {_reason(exc)}") from None
    if not stat.S_ISREG(info.st_mode):
        raise DatabaseUnreachableError(f"cannot open {where}: it is not a regular file")
    if info.st_size == 0:
        raise DatabaseCorruptError(
            f"{where} is an empty file (0 bytes): holdback never leaves one, so it was "
            "truncated or made by something else. Restore it from a backup, or delete it "
            "to start with a new database"
        )
    if _read_only_fs(path.parent):
        raise DatabaseAccessDeniedError(f"cannot write to {where}: its file system is read-only")
    if not os.access(path, os.W_OK):
        raise DatabaseAccessDeniedError(
            f"cannot write to {where}: the file is read-only for this user"
        )
    for file in (path, *(path.with_name(path.name + side) for side in SIDE_FILES)):
        _make_private(file, where)


def _make_private(file: Path, where: str) -> None:
    try:
        mode = stat.S_IMODE(file.stat().st_mode)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise DatabaseUnreachableError(f"cannot open {where}: {_reason(exc)}") from None
    if not mode & 0o077:
        return
    try:
        os.chmod(file, PRIVATE)
    except OSError as exc:
        raise DatabaseAccessDeniedError(
            f"{file} is accessible to other users (mode {mode:04o}) and cannot be made "
            f"private: {_reason(exc)}; run `chmod 600 {file}`"
        ) from None
    log.warning("made %s private: it was accessible to other users (mode %04o)", file, mode)


def _create(path: Path, where: str) -> None:
    directory = path.parent
    tmp = directory / f".{path.name}.{secrets.token_hex(6)}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE)
        os.close(fd)
        try:
            # The header goes in now (WAL mode is recorded in it), so the file is whole.
            made = sqlite3.connect(tmp, isolation_level=None)
            try:
                made.execute("PRAGMA journal_mode = WAL")
            finally:
                made.close()
            fd = os.open(tmp, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            with contextlib.suppress(FileExistsError):  # another process made it first
                os.link(tmp, path)
        finally:
            for leftover in (tmp, *(tmp.with_name(tmp.name + side) for side in SIDE_FILES)):
                with contextlib.suppress(FileNotFoundError):
                    leftover.unlink()
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except StoreError:
        raise
    except OSError as exc:
        if exc.errno == errno.EROFS:
            raise DatabaseAccessDeniedError(
                f"cannot create {where}: its file system is read-only"
            ) from None
        raise DatabaseAccessDeniedError(f"cannot create {where}: {_reason(exc)}") from None
    except sqlite3.Error as exc:
        raise StorageFailedError(
            f"cannot create {where}: SQLite failed ({type(exc).__name__})"
        ) from None


def _read_only_fs(directory: Path) -> bool:
    try:
        return bool(os.statvfs(directory).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def _reason(exc: OSError) -> str:
    return exc.strerror or type(exc).__name__
