"""The vault key: parsing, the key file, sealing and the keyed hash."""

from __future__ import annotations

import base64
import os
import stat
from pathlib import Path

import pytest

from holdback.errors import HoldbackError
from holdback.store.crypto import (
    ENV_KEY,
    VaultKey,
    key_file_path,
    load_vault_key,
    read_key_file,
    write_key_file,
)
from holdback.store.errors import VaultEntryCorruptError, VaultKeyFileError, VaultKeyFormatError

RAW = bytes(range(32))


def test_key_parses_from_hex_and_base64url() -> None:
    hex_key = VaultKey.parse(RAW.hex())
    b64 = base64.urlsafe_b64encode(RAW).decode()
    assert hex_key == VaultKey.parse(b64)  # padded
    assert hex_key == VaultKey.parse(b64.rstrip("="))  # unpadded
    assert hex_key == VaultKey.parse(RAW.hex().upper() + "\n")
    assert hex_key == VaultKey.parse(hex_key.encode())


@pytest.mark.parametrize(
    "text",
    [
        "",
        "too short",
        RAW.hex()[:-2],  # 31 bytes of hex
        base64.urlsafe_b64encode(RAW + b"x").decode(),  # 33 bytes
        base64.b64encode(bytes([251] * 32)).decode(),  # standard alphabet: '+' and '/'
        "g" * 64,  # 64 chars, not hex, not 32 bytes of base64
    ],
)
def test_bad_key_text_is_refused_without_echoing_it(text: str) -> None:
    with pytest.raises(VaultKeyFormatError) as info:
        VaultKey.parse(text, source=ENV_KEY)
    assert isinstance(info.value, HoldbackError)
    assert ENV_KEY in str(info.value)
    if len(text) > 4:
        assert text not in str(info.value)


def test_repr_and_messages_never_show_the_key() -> None:
    key = VaultKey(RAW)
    assert RAW.hex() not in repr(key)
    assert key.encode() not in repr(key)
    assert key.fingerprint in repr(key)


def test_seal_round_trips_and_binds_associated_data() -> None:
    key = VaultKey.generate()
    blob = key.seal(b"sarah@acme.com", b"conversation-a")
    assert b"sarah" not in blob
    assert key.open(blob, b"conversation-a", what="x") == b"sarah@acme.com"
    # Random nonces: sealing twice never gives the same blob.
    assert blob != key.seal(b"sarah@acme.com", b"conversation-a")
    with pytest.raises(VaultEntryCorruptError, match="does not authenticate"):
        key.open(blob, b"conversation-b", what="entry")
    with pytest.raises(VaultEntryCorruptError):
        VaultKey.generate().open(blob, b"conversation-a", what="entry")
    tampered = blob[:-1] + bytes([blob[-1] ^ 1])
    with pytest.raises(VaultEntryCorruptError):
        key.open(tampered, b"conversation-a", what="entry")
    with pytest.raises(VaultEntryCorruptError, match="malformed"):
        key.open(b"\x02" + blob[1:], b"conversation-a", what="entry")


def test_value_hash_is_keyed_and_separates_kinds() -> None:
    key, other = VaultKey.generate(), VaultKey.generate()
    assert key.value_hash("EMAIL", "a@b.c") == key.value_hash("EMAIL", "a@b.c")
    assert key.value_hash("EMAIL", "a@b.c") != other.value_hash("EMAIL", "a@b.c")
    assert key.value_hash("EMAIL", "a@b.c") != key.value_hash("PHONE", "a@b.c")
    # The NUL separator is unambiguous because a kind label cannot contain one.
    assert key.value_hash("AB", "C") != key.value_hash("A", "BC")
    with pytest.raises(ValueError, match="NUL"):
        key.value_hash("A\0B", "C")
    assert len(key.value_hash("EMAIL", "x")) == 32


def test_key_check_differs_per_key_and_reveals_no_key_bytes() -> None:
    key = VaultKey(RAW)
    assert key.check == VaultKey(RAW).check
    assert key.check != VaultKey.generate().check
    assert RAW.hex() not in key.check


def test_key_file_is_created_on_first_run_with_mode_0600(tmp_path: Path) -> None:
    data_dir = tmp_path / "fresh" / "data"
    key = load_vault_key(data_dir, {})
    path = key_file_path(data_dir)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(data_dir.stat().st_mode) == 0o700
    assert key.source == str(path)
    # Second run: same key, file untouched.
    before = path.read_bytes()
    assert load_vault_key(data_dir, {}) == key
    assert path.read_bytes() == before
    assert not [p for p in data_dir.iterdir() if p.name != "vault.key"]  # no temp files left


def test_environment_key_wins_and_creates_no_file(tmp_path: Path) -> None:
    key = load_vault_key(tmp_path, {ENV_KEY: RAW.hex()})
    assert key == VaultKey(RAW)
    assert key.source == ENV_KEY
    assert not key_file_path(tmp_path).exists()


def test_missing_key_is_an_error_when_creation_is_not_allowed(tmp_path: Path) -> None:
    with pytest.raises(VaultKeyFileError, match="no vault key"):
        load_vault_key(tmp_path, {}, create=False)


def test_key_file_readable_by_others_is_refused(tmp_path: Path) -> None:
    path = key_file_path(tmp_path)
    write_key_file(path, VaultKey(RAW))
    path.chmod(0o644)
    with pytest.raises(VaultKeyFileError, match=r"chmod 600") as info:
        load_vault_key(tmp_path, {})
    assert "0644" in str(info.value)
    assert RAW.hex() not in str(info.value)


def test_key_file_with_garbage_is_refused(tmp_path: Path) -> None:
    path = key_file_path(tmp_path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, b"not a key at all\n")
    os.close(fd)
    with pytest.raises(VaultKeyFileError, match="32 bytes"):
        read_key_file(path)
    path.write_bytes(b"\xff\xfe binary")
    with pytest.raises(VaultKeyFileError, match="does not hold a key"):
        read_key_file(path)


def test_key_file_that_is_a_directory_is_refused(tmp_path: Path) -> None:
    key_file_path(tmp_path).mkdir(mode=0o700)
    with pytest.raises(VaultKeyFileError, match="not a regular file"):
        load_vault_key(tmp_path, {})


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file; permissions cannot fail")
def test_unreadable_key_file_is_a_clear_error(tmp_path: Path) -> None:
    path = key_file_path(tmp_path)
    write_key_file(path, VaultKey(RAW))
    path.chmod(0o000)
    with pytest.raises(VaultKeyFileError, match="cannot read"):
        load_vault_key(tmp_path, {})


def test_key_file_in_unwritable_place_is_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(VaultKeyFileError, match=r"cannot (write|look for)"):
        load_vault_key(blocker / "data", {})


def test_write_key_file_never_replaces_unless_asked(tmp_path: Path) -> None:
    path = tmp_path / "k"
    first, second = VaultKey.generate(), VaultKey.generate()
    write_key_file(path, first)
    with pytest.raises(FileExistsError):
        write_key_file(path, second)
    assert read_key_file(path) == first
    write_key_file(path, second, replace=True)
    assert read_key_file(path) == second
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
