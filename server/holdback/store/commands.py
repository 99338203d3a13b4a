"""The `holdback db …` and `holdback vault …` commands.

The rules:
- Each command prints a clear error to stderr and returns a non-zero exit code; a user never
  sees a traceback, a key or a stored value.
- `vault rotate-key` never leaves the only copy of a key in memory: the new key is written
  durably to `<data dir>/vault.key.new` (mode 0600) *before* the database is re-encrypted,
  and moved over `vault.key` after. An interrupted rotation is finished by running the
  command again, which picks up `vault.key.new`.

Wiring: `register(subparsers)` adds the commands; each parsed namespace carries `handler`,
a function of the namespace that returns the exit code.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from holdback.errors import HoldbackError
from holdback.store.crypto import (
    ENV_KEY,
    PENDING_KEY_FILE_NAME,
    VaultKey,
    key_file_path,
    load_vault_key,
    read_key_file,
    write_key_file,
)
from holdback.store.engine import parse_database_url
from holdback.store.errors import (
    DatabaseUnreachableError,
    StorageFailedError,
    StoreError,
    VaultKeyFileError,
)
from holdback.store.locations import ensure_data_dir, resolve_data_dir, resolve_database_url
from holdback.store.migrate import head_revision, upgrade
from holdback.store.rotation import rotate_vault_key

Handler = Callable[[argparse.Namespace], int]


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add `db upgrade` and `vault rotate-key` to a `holdback` argument parser."""
    db = subparsers.add_parser("db", help="database maintenance")
    db_commands = db.add_subparsers(dest="db_command", metavar="COMMAND", required=True)
    up = db_commands.add_parser(
        "upgrade", help="migrate the database schema to this holdback's version"
    )
    _add_location_flags(up)
    up.set_defaults(handler=db_upgrade)

    vault = subparsers.add_parser("vault", help="vault key maintenance")
    vault_commands = vault.add_subparsers(dest="vault_command", metavar="COMMAND", required=True)
    rotate = vault_commands.add_parser(
        "rotate-key",
        help="re-encrypt every stored value and term list under a new vault key",
        description=(
            "Re-encrypt the vault under a new key, in one transaction. Stop the servers "
            "that use this database first. The new key is read from --new-key-file, or "
            "generated and written to vault.key.new in the data directory."
        ),
    )
    _add_location_flags(rotate)
    rotate.add_argument(
        "--new-key-file",
        type=Path,
        help="a file (mode 0600) holding the new key, 32 bytes in base64url or hex",
    )
    rotate.set_defaults(handler=vault_rotate_key)


def _add_location_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--database-url",
        help="database URL (default: $HOLDBACK_DATABASE_URL, else holdback.db in the data dir)",
    )
    parser.add_argument(
        "--data-dir",
        help="data directory (default: $HOLDBACK_DATA_DIR, else ~/.local/share/holdback)",
    )


def _locations(args: argparse.Namespace, env: Mapping[str, str]) -> tuple[Path, str]:
    data_dir = resolve_data_dir(args.data_dir, env)
    url = resolve_database_url(args.database_url, env, data_dir)
    target = parse_database_url(url)
    if target.is_sqlite and target.sqlite_path.absolute().parent == data_dir.absolute():
        ensure_data_dir(data_dir)
    return data_dir, url


def _run(work: Callable[[], int], err: TextIO) -> int:
    try:
        return work()
    except HoldbackError as exc:
        print(f"holdback: error: {exc}", file=err)
        return 1
    except KeyboardInterrupt:
        print("holdback: interrupted; nothing was committed", file=err)
        return 130


def db_upgrade(
    args: argparse.Namespace,
    *,
    env: Mapping[str, str] | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    env = os.environ if env is None else env
    out, err = out or sys.stdout, err or sys.stderr

    def work() -> int:
        _, url = _locations(args, env)
        asyncio.run(upgrade(url))
        description = parse_database_url(url).describe()
        print(f"{description} is at schema revision {head_revision()}", file=out)
        return 0

    return _run(work, err)


def vault_rotate_key(
    args: argparse.Namespace,
    *,
    env: Mapping[str, str] | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    env = os.environ if env is None else env
    out, err = out or sys.stdout, err or sys.stderr

    def work() -> int:
        data_dir, url = _locations(args, env)
        old_key = load_vault_key(data_dir, env, create=False)
        pending = data_dir / PENDING_KEY_FILE_NAME
        resuming = pending.exists()
        new_key = _new_key(args.new_key_file, pending, old_key)
        try:
            report = asyncio.run(rotate_vault_key(url, old_key, new_key))
        except (DatabaseUnreachableError, StorageFailedError):
            raise  # the commit may or may not have happened: keep the new key
        except StoreError:
            # Rotation is one transaction and it did not commit: the new key is not needed.
            if not resuming:
                pending.unlink(missing_ok=True)
            raise
        if report.already_rotated:
            print(
                f"the database already uses the new key (fingerprint {new_key.fingerprint})",
                file=out,
            )
        else:
            print(
                f"re-encrypted {report.vault_entries} vault entries and {report.term_lists} "
                f"term lists (and {report.message_spellings} messages' own spellings, "
                f"{report.team_detectors} pattern sets and people lists) under "
                f"the new key (fingerprint {new_key.fingerprint})",
                file=out,
            )
        _finish(old_key, new_key, data_dir, pending, args.new_key_file, out)
        return 0

    return _run(work, err)


def _new_key(new_key_file: Path | None, pending: Path, old_key: VaultKey) -> VaultKey:
    """The rotation's new key, already written durably to `pending`."""
    if pending.exists():
        resumed = read_key_file(pending)
        if new_key_file is not None and read_key_file(new_key_file) != resumed:
            raise VaultKeyFileError(
                f"{pending} is left from an interrupted rotation and holds another key; "
                "finish that rotation first by running this command without --new-key-file"
            )
        return resumed
    key = read_key_file(new_key_file) if new_key_file is not None else VaultKey.generate()
    if key == old_key:
        raise VaultKeyFileError(f"{new_key_file} holds the key already in use; nothing to do")
    write_key_file(pending, key)
    return VaultKey.parse(key.encode(), source=str(pending))


def _finish(
    old_key: VaultKey,
    new_key: VaultKey,
    data_dir: Path,
    pending: Path,
    new_key_file: Path | None,
    out: TextIO,
) -> None:
    key_path = key_file_path(data_dir)
    if old_key.source == ENV_KEY:
        where = new_key_file if new_key_file is not None else pending
        print(
            f"{ENV_KEY} still holds the old key: set it to the new key in {where} "
            f"(fingerprint {new_key.fingerprint}) before starting holdback again"
            + (f", then delete {pending}" if new_key_file is None else ""),
            file=out,
        )
        if new_key_file is not None:
            pending.unlink(missing_ok=True)
        return
    try:
        os.replace(pending, key_path)
        dir_fd = os.open(data_dir, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except OSError as exc:
        raise VaultKeyFileError(
            f"the database now uses the key in {pending}, but it could not be moved to "
            f"{key_path} ({exc.strerror}); move it there by hand before starting holdback"
        ) from None
    print(f"{key_path} now holds the new key", file=out)


def main(argv: Sequence[str] | None = None) -> int:
    """Run these commands on their own: `python -m holdback.store.commands db upgrade`."""
    parser = argparse.ArgumentParser(prog="holdback")
    register(parser.add_subparsers(dest="command", metavar="COMMAND", required=True))
    args = parser.parse_args(argv)
    handler: Handler = args.handler
    return handler(args)


if __name__ == "__main__":
    sys.exit(main())
