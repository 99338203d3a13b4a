"""Issue #15, item 6: the files the store keeps, and the data directory they live in.

The database and its -wal and -shm files are created 0600 whatever the directory's mode and
the umask; older, wider files are made private; a zero-length database file is refused,
never initialized; a data directory that other users can access is refused like the key
file; a read-only file system is named. Each refusal is one line that names the file.
"""

from __future__ import annotations

import logging
import os
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from holdback.store import Store, VaultKey, ensure_data_dir, upgrade
from holdback.store.engine import create_engine, parse_database_url
from holdback.store.errors import (
    DatabaseAccessDeniedError,
    DatabaseCorruptError,
    DataDirectoryError,
    StoreError,
)
from tests.store.conftest import sqlite_url

pytestmark = pytest.mark.anyio


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def open_umask() -> Iterator[None]:
    """The most permissive umask, so only holdback's own modes protect the files."""
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


def one_line(error: StoreError) -> str:
    text = str(error)
    assert "\n" not in text
    assert text
    return text


async def test_new_database_files_are_0600_in_a_0755_directory(
    tmp_path: Path, open_umask: None
) -> None:
    directory = tmp_path / "shared"
    directory.mkdir(mode=0o755)
    path = directory / "holdback.db"
    store = await Store.open(sqlite_url(path), vault_key=VaultKey.generate())
    try:
        user = await store.ensure_local_user()
        await store.create_conversation(user.id, "written")
        files = sorted(os.listdir(directory))
        assert files == ["holdback.db", "holdback.db-shm", "holdback.db-wal"]  # no leftovers
        assert {name: mode(directory / name) for name in files} == dict.fromkeys(files, 0o600)
    finally:
        await store.close()
    assert mode(path) == 0o600


async def test_wider_database_files_from_before_are_made_private(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "holdback.db"
    key = VaultKey.generate()
    store = await Store.open(sqlite_url(path), vault_key=key)
    await store.close()
    path.chmod(0o644)  # as holdback made them before
    side = path.with_name("holdback.db-wal")
    side.write_bytes(b"")
    side.chmod(0o640)
    with caplog.at_level(logging.WARNING, logger="holdback.store.files"):
        store = await Store.open(sqlite_url(path), vault_key=key)
    try:
        assert mode(side) == 0o600  # made private before SQLite took it over
    finally:
        await store.close()
    assert mode(path) == 0o600
    assert "made " in caplog.text
    assert "mode 0644" in caplog.text


async def test_a_zero_length_database_file_is_refused_not_initialized(tmp_path: Path) -> None:
    path = tmp_path / "holdback.db"
    path.write_bytes(b"")
    for attempt in (
        Store.open(sqlite_url(path), vault_key=VaultKey.generate()),
        upgrade(sqlite_url(path)),
    ):
        with pytest.raises(DatabaseCorruptError) as refused:
            await attempt  # the store and the migration alike
        message = one_line(refused.value)
        assert "empty file (0 bytes)" in message
        assert str(path) in message
    assert path.stat().st_size == 0
    assert os.listdir(tmp_path) == ["holdback.db"]


async def test_a_new_database_is_never_a_zero_length_file(tmp_path: Path) -> None:
    # The file appears whole: what a crash right after creating it would leave is a database.
    path = tmp_path / "holdback.db"
    await create_engine(parse_database_url(sqlite_url(path))).dispose()
    assert path.read_bytes()[:16] == b"SQLite format 3\x00"


# -- the data directory ------------------------------------------------------------------------


@pytest.mark.parametrize("wide", [0o755, 0o750, 0o701, 0o770, 0o707])
def test_a_data_directory_other_users_can_access_is_refused(tmp_path: Path, wide: int) -> None:
    data = tmp_path / "data"
    data.mkdir()
    data.chmod(wide)
    with pytest.raises(DataDirectoryError) as refused:
        ensure_data_dir(data)
    message = one_line(refused.value)
    assert f"mode {wide:04o}" in message
    assert f"chmod 700 {data}" in message
    assert isinstance(refused.value, DatabaseAccessDeniedError)


def test_a_private_data_directory_is_accepted_and_a_new_one_is_made_private(
    tmp_path: Path, open_umask: None
) -> None:
    existing = tmp_path / "existing"
    existing.mkdir(mode=0o700)
    assert ensure_data_dir(existing) == existing
    made = ensure_data_dir(tmp_path / "a" / "new")
    assert mode(made) == 0o700


def test_a_data_directory_that_is_a_file_is_refused(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.write_text("not a directory")
    with pytest.raises(DataDirectoryError):
        ensure_data_dir(data)


# -- a read-only file system -------------------------------------------------------------------


@pytest.fixture
def small_mount(tmp_path: Path) -> Iterator[Path]:
    mount_point = tmp_path / "mount"
    mount_point.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=8m,mode=0700", "tmpfs", str(mount_point)],
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root in a VM or privileged container)")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def remount_read_only(mount_point: Path) -> None:
    subprocess.run(["mount", "-o", "remount,ro", str(mount_point)], check=True)


async def test_a_read_only_file_system_is_named(small_mount: Path) -> None:
    path = small_mount / "holdback.db"
    store = await Store.open(sqlite_url(path), vault_key=VaultKey.generate())
    await store.close()
    remount_read_only(small_mount)
    with pytest.raises(DatabaseAccessDeniedError) as refused:
        await Store.open(sqlite_url(path), vault_key=VaultKey.generate())
    assert "read-only" in one_line(refused.value)
    with pytest.raises(DatabaseAccessDeniedError) as refused:
        await Store.open(sqlite_url(small_mount / "new.db"), vault_key=VaultKey.generate())
    assert "read-only" in one_line(refused.value)
