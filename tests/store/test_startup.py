"""Issue #15, item 6: every startup failure is one line on stderr and the documented status.

docs/storage.md promises it: a wrong vault key, a damaged database, a read-only mount, a
zero-length database file and a data directory other users can access each stop holdback
with one line, `holdback: error: <what, and which file>`, and exit status 1; no traceback,
no key, no stored value. Checked on real processes: `holdback db upgrade` and `holdback
serve` (which builds its runtime before uvicorn starts, and logs nothing before that line).
"""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from holdback.store import Store, VaultItem, VaultKey, load_vault_key
from holdback.store.locations import default_database_url
from tests.app.support import process_env, run_holdback

pytestmark = pytest.mark.server

CANARY = "startup.canary@example.org"


def make_database(data: Path) -> VaultKey:
    """A private data directory with a database holding one vault value."""

    data.mkdir(mode=0o700, parents=True, exist_ok=True)
    key = load_vault_key(data, {})

    async def fill() -> VaultKey:
        store = await Store.open(default_database_url(data), vault_key=key)
        try:
            user = await store.ensure_local_user()
            chat = await store.create_conversation(user.id)
            await store.assign_tokens(chat.id, [VaultItem("email", CANARY, CANARY)])
        finally:
            await store.close()
        return key

    return asyncio.run(fill())


def wrong_key(data: Path) -> dict[str, str]:
    make_database(data)
    return {"HOLDBACK_VAULT_KEY": VaultKey.generate().encode()}


def damaged(data: Path) -> dict[str, str]:
    make_database(data)
    path = data / "holdback.db"
    blob = bytearray(path.read_bytes())
    blob[0:100] = b"\x5a" * 100  # the header is gone
    path.write_bytes(bytes(blob))
    return {}


def zero_length(data: Path) -> dict[str, str]:
    data.mkdir(mode=0o700)
    (data / "holdback.db").write_bytes(b"")
    return {}


def open_data_directory(data: Path) -> dict[str, str]:
    data.mkdir()
    data.chmod(0o755)
    return {}


CASES: dict[str, tuple[Callable[[Path], dict[str, str]], str]] = {
    "wrong key": (wrong_key, "is not the key"),
    "damaged database": (damaged, "is damaged or is not a SQLite database"),
    "zero-length database": (zero_length, "is an empty file (0 bytes)"),
    "data directory open to others": (open_data_directory, "chmod 700"),
}


@pytest.fixture
def read_only_mount(tmp_path: Path) -> Iterator[Path]:
    mount_point = tmp_path / "data"
    mount_point.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=16m,mode=0700", "tmpfs", str(mount_point)],
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root in a VM or privileged container)")
    try:
        make_database(mount_point)
        subprocess.run(["mount", "-o", "remount,ro", str(mount_point)], check=True)
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def assert_one_line(done: subprocess.CompletedProcess[str], fragment: str) -> None:
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 1, done.stderr
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("holdback: error: ")
    assert fragment in lines[0]
    assert CANARY not in done.stderr + done.stdout


def run(
    tmp_path: Path, command: list[str], extra: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    env = process_env(tmp_path, {"HOLDBACK_DATA_DIR": str(tmp_path / "data"), **extra})
    return run_holdback(command, env, timeout=60)


@pytest.mark.parametrize("case", [c for c in CASES if c != "wrong key"])
def test_db_upgrade_fails_with_one_line(tmp_path: Path, case: str) -> None:
    make, fragment = CASES[case]
    extra = make(tmp_path / "data")
    assert_one_line(run(tmp_path, ["db", "upgrade"], extra), fragment)


def test_db_upgrade_on_a_read_only_mount_fails_with_one_line(
    tmp_path: Path, read_only_mount: Path
) -> None:
    assert_one_line(run(tmp_path, ["db", "upgrade"], {}), "read-only")


@pytest.mark.parametrize("case", list(CASES))
def test_serve_fails_with_one_line(tmp_path: Path, case: str) -> None:
    make, fragment = CASES[case]
    extra = make(tmp_path / "data")
    done = run(tmp_path, ["serve", "--port", "0"], extra)
    assert_one_line(done, fragment)
    # Neither key is printed: the one given, nor the one the database was made with.
    keys = [*extra.values()]
    key_file = tmp_path / "data" / "vault.key"
    if key_file.exists():
        keys.append(key_file.read_text(encoding="utf-8").strip())
    for key in keys:
        assert key not in done.stderr + done.stdout


def test_serve_on_a_read_only_mount_fails_with_one_line(
    tmp_path: Path, read_only_mount: Path
) -> None:
    assert_one_line(run(tmp_path, ["serve", "--port", "0"], {}), "read-only")
