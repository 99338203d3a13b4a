"""`holdback db upgrade` and `holdback vault rotate-key`."""

from __future__ import annotations

import argparse
import io
import stat
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from holdback.store import Store, VaultItem, VaultKey, rotate_vault_key
from holdback.store.commands import db_upgrade, register, vault_rotate_key
from holdback.store.crypto import ENV_KEY, load_vault_key, read_key_file, write_key_file
from holdback.store.errors import WrongVaultKeyError
from holdback.store.migrate import head_revision

pytestmark = pytest.mark.anyio
REPO = Path(__file__).resolve().parents[2]


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="holdback")
    register(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(argv)


def run(argv: list[str], env: dict[str, str]) -> tuple[int, str, str]:
    args = parse(argv)
    out, err = io.StringIO(), io.StringIO()
    handler = vault_rotate_key if args.command == "vault" else db_upgrade
    assert args.handler is handler
    code = handler(args, env=env, out=out, err=err)
    return code, out.getvalue(), err.getvalue()


async def arun(argv: list[str], env: dict[str, str]) -> tuple[int, str, str]:
    """Run a command from async code: the handlers run their own event loop."""
    return await anyio.to_thread.run_sync(run, argv, env)


def test_register_adds_both_commands_with_their_flags() -> None:
    args = parse(["db", "upgrade", "--database-url", "sqlite:///x.db", "--data-dir", "/d"])
    assert (args.database_url, args.data_dir) == ("sqlite:///x.db", "/d")
    args = parse(["vault", "rotate-key", "--new-key-file", "/k"])
    assert args.new_key_file == Path("/k")
    with pytest.raises(SystemExit):
        parse(["db"])


def test_db_upgrade_defaults_to_sqlite_in_the_data_dir(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    code, out, err = run(["db", "upgrade"], {"HOLDBACK_DATA_DIR": str(data_dir)})
    assert (code, err) == (0, "")
    assert (data_dir / "holdback.db").is_file()
    assert stat.S_IMODE(data_dir.stat().st_mode) == 0o700
    assert head_revision() in out
    # Idempotent.
    assert run(["db", "upgrade", "--data-dir", str(data_dir)], {})[0] == 0


def test_db_upgrade_takes_the_url_from_flag_or_environment(database_url: str) -> None:
    code, out, _ = run(["db", "upgrade"], {"HOLDBACK_DATABASE_URL": database_url})
    assert code == 0
    assert "schema revision" in out
    assert run(["db", "upgrade", "--database-url", database_url], {})[0] == 0


@pytest.mark.parametrize(
    "argv",
    [
        ["db", "upgrade", "--database-url", "mysql://localhost/x"],
        ["db", "upgrade", "--database-url", "postgresql://u:topsecret@127.0.0.1:1/x"],
        ["vault", "rotate-key", "--database-url", "sqlite:////no/such/dir/x.db"],
    ],
)
def test_commands_fail_with_one_clear_line_and_no_traceback(
    argv: list[str], tmp_path: Path
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "holdback.store.commands", *argv, "--data-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), ENV_KEY: VaultKey.generate().encode()},
        check=False,
    )
    assert done.returncode == 1
    assert done.stderr.startswith("holdback: error: ")
    assert "Traceback" not in done.stderr
    assert "topsecret" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


async def seeded(url: str, key: VaultKey) -> dict[str, str]:
    store = await Store.open(url, vault_key=key)
    user = await store.ensure_local_user()
    chat = await store.create_conversation(user.id)
    await store.assign_tokens(chat.id, [VaultItem("email", "a@x.io", "a@x.io")])
    await store.save_term_list("clients", "client", "sensitive", ["Acme"])
    await store.close()
    return {"chat": chat.id}


async def reopen_vault(url: str, key: VaultKey, chat: str) -> dict[str, str]:
    store = await Store.open(url, vault_key=key)
    try:
        return await store.load_vault(chat)
    finally:
        await store.close()


async def test_rotate_key_replaces_the_key_file(tmp_path: Path, database_url: str) -> None:
    data_dir = tmp_path / "data"
    old = load_vault_key(data_dir, {})
    chat = (await seeded(database_url, old))["chat"]
    argv = ["vault", "rotate-key", "--data-dir", str(data_dir), "--database-url", database_url]
    code, out, err = await arun(argv, {})
    assert (code, err) == (0, "")
    assert "re-encrypted 1 vault entries and 1 term lists" in out
    new = read_key_file(data_dir / "vault.key")
    assert new != old
    assert new.fingerprint in out
    assert stat.S_IMODE((data_dir / "vault.key").stat().st_mode) == 0o600
    assert not (data_dir / "vault.key.new").exists()
    assert old.encode() not in out
    assert new.encode() not in out
    assert await reopen_vault(database_url, new, chat) == {"<EMAIL_1>": "a@x.io"}
    with pytest.raises(WrongVaultKeyError):
        await reopen_vault(database_url, old, chat)


async def test_rotate_key_from_the_environment_writes_the_new_key_aside(
    tmp_path: Path, database_url: str
) -> None:
    old = VaultKey.generate()
    chat = (await seeded(database_url, old))["chat"]
    argv = ["vault", "rotate-key", "--data-dir", str(tmp_path), "--database-url", database_url]
    code, out, _ = await arun(argv, {ENV_KEY: old.encode()})
    assert code == 0
    pending = tmp_path / "vault.key.new"
    assert f"set it to the new key in {pending}" in out
    new = read_key_file(pending)
    assert not (tmp_path / "vault.key").exists()
    assert await reopen_vault(database_url, new, chat) == {"<EMAIL_1>": "a@x.io"}


async def test_rotate_key_to_a_given_key_file(tmp_path: Path, database_url: str) -> None:
    old = VaultKey.generate()
    chat = (await seeded(database_url, old))["chat"]
    chosen = VaultKey.generate()
    key_file = tmp_path / "chosen.key"
    write_key_file(key_file, chosen)
    argv = ["vault", "rotate-key", "--data-dir", str(tmp_path), "--database-url", database_url]
    code, out, _ = await arun([*argv, "--new-key-file", str(key_file)], {ENV_KEY: old.encode()})
    assert code == 0
    assert str(key_file) in out
    assert not (tmp_path / "vault.key.new").exists()
    assert await reopen_vault(database_url, chosen, chat) == {"<EMAIL_1>": "a@x.io"}
    # The same key again is refused, and leaves nothing behind.
    code, _, err = await arun([*argv, "--new-key-file", str(key_file)], {ENV_KEY: chosen.encode()})
    assert code == 1
    assert "already in use" in err
    assert not (tmp_path / "vault.key.new").exists()


async def test_an_interrupted_rotation_is_finished_by_running_it_again(
    tmp_path: Path, database_url: str
) -> None:
    old = load_vault_key(tmp_path, {})
    chat = (await seeded(database_url, old))["chat"]
    # Crash after the commit, before the key file was moved into place.
    new = VaultKey.generate()
    write_key_file(tmp_path / "vault.key.new", new)
    await rotate_vault_key(database_url, old, new)
    with pytest.raises(WrongVaultKeyError, match=r"vault\.key\.new"):
        await reopen_vault(database_url, old, chat)
    argv = ["vault", "rotate-key", "--data-dir", str(tmp_path), "--database-url", database_url]
    other = tmp_path / "other.key"
    write_key_file(other, VaultKey.generate())
    code, _, err = await arun([*argv, "--new-key-file", str(other)], {})
    assert code == 1
    assert "interrupted rotation" in err
    code, out, _ = await arun(argv, {})
    assert code == 0
    assert "already uses the new key" in out
    assert read_key_file(tmp_path / "vault.key") == new
    assert not (tmp_path / "vault.key.new").exists()
    assert await reopen_vault(database_url, new, chat) == {"<EMAIL_1>": "a@x.io"}


async def test_rotate_key_with_the_wrong_key_changes_nothing(
    tmp_path: Path, database_url: str
) -> None:
    right = VaultKey.generate()
    chat = (await seeded(database_url, right))["chat"]
    argv = ["vault", "rotate-key", "--data-dir", str(tmp_path), "--database-url", database_url]
    code, _, err = await arun(argv, {ENV_KEY: VaultKey.generate().encode()})
    assert code == 1
    assert "is not the key" in err
    assert not (tmp_path / "vault.key.new").exists()
    assert await reopen_vault(database_url, right, chat) == {"<EMAIL_1>": "a@x.io"}


def test_rotate_key_without_any_key_is_an_error(tmp_path: Path) -> None:
    code, _, err = run(["vault", "rotate-key", "--data-dir", str(tmp_path)], {})
    assert code == 1
    assert "no vault key" in err
    assert not (tmp_path / "vault.key").exists()
