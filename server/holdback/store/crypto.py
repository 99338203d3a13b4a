"""The vault key and what it does: AES-256-GCM sealing, keyed value hashes and the key check.

The rule: an original value is stored only as AES-256-GCM ciphertext, bound by its associated
data to the record it belongs to (a vault entry to its conversation id, a term list to its
name), and found again only through a keyed hash, never by decrypting. Three independent
subkeys are derived from the 32-byte vault key with HKDF-SHA256, one per purpose, so the
hash key and the key check reveal nothing about the encryption key.

The key comes from `HOLDBACK_VAULT_KEY` (32 bytes in base64url or hex) or from the key file
`<data dir>/vault.key`, created on first run with mode 0600. A key file that other users can
read is refused. Keys never appear in messages, logs or `repr`.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import hmac
import os
import re
import secrets
import stat
from collections.abc import Mapping
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from holdback.store.errors import (
    VaultEntryCorruptError,
    VaultKeyFileError,
    VaultKeyFormatError,
)

KEY_BYTES = 32
NONCE_BYTES = 12
BLOB_VERSION = b"\x01"
ENV_KEY = "HOLDBACK_VAULT_KEY"
KEY_FILE_NAME = "vault.key"
PENDING_KEY_FILE_NAME = "vault.key.new"
_CHECK_MESSAGE = b"holdback vault key check v1"
_BASE64URL_RE = re.compile(r"[A-Za-z0-9_-]+={0,2}\Z")


def _subkey(key: bytes, purpose: bytes) -> bytes:
    return HKDF(
        algorithm=hashes.SHA256(), length=KEY_BYTES, salt=None, info=b"holdback/" + purpose
    ).derive(key)


class VaultKey:
    """A 32-byte vault key with its derived subkeys. Its repr shows only its fingerprint."""

    __slots__ = ("_aead", "_hash_key", "_raw", "check", "source")

    def __init__(self, raw: bytes, *, source: str = "given") -> None:
        if len(raw) != KEY_BYTES:
            raise VaultKeyFormatError(f"a vault key is {KEY_BYTES} bytes, not {len(raw)}")
        self._raw = bytes(raw)
        self._aead = AESGCM(_subkey(raw, b"aes-256-gcm"))
        self._hash_key = _subkey(raw, b"value-hash")
        # Stored in the database: it tells a wrong key from the right one without decrypting.
        self.check = hmac.new(
            _subkey(raw, b"key-check"), _CHECK_MESSAGE, hashlib.sha256
        ).hexdigest()
        self.source = source

    @classmethod
    def generate(cls, *, source: str = "generated") -> VaultKey:
        return cls(secrets.token_bytes(KEY_BYTES), source=source)

    @classmethod
    def parse(cls, text: str, *, source: str = "given") -> VaultKey:
        """A key written as 64 hex digits or as base64url (padding optional)."""
        return cls(decode_key_text(text, source), source=source)

    @property
    def fingerprint(self) -> str:
        """A short public name for the key (a prefix of its key check), safe to print."""
        return self.check[:16]

    def encode(self) -> str:
        """The key as unpadded base64url, the form key files hold."""
        return base64.urlsafe_b64encode(self._raw).rstrip(b"=").decode("ascii")

    def __repr__(self) -> str:
        return f"VaultKey(fingerprint={self.fingerprint!r}, source={self.source!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, VaultKey) and hmac.compare_digest(self._raw, other._raw)

    def __hash__(self) -> int:
        return hash(self.check)

    def seal(self, plaintext: bytes, associated: bytes) -> bytes:
        """Version byte, random 96-bit nonce, then ciphertext and tag."""
        nonce = secrets.token_bytes(NONCE_BYTES)
        return BLOB_VERSION + nonce + self._aead.encrypt(nonce, plaintext, associated)

    def open(self, blob: bytes, associated: bytes, *, what: str) -> bytes:
        """Decrypt a sealed blob; `what` names the record in the error (never its content)."""
        if len(blob) < 1 + NONCE_BYTES + 16 or blob[:1] != BLOB_VERSION:
            raise VaultEntryCorruptError(f"{what}: the stored ciphertext is malformed")
        nonce, body = blob[1 : 1 + NONCE_BYTES], blob[1 + NONCE_BYTES :]
        try:
            return self._aead.decrypt(nonce, body, associated)
        except InvalidTag:
            raise VaultEntryCorruptError(
                f"{what}: the ciphertext does not authenticate under this key "
                "(altered, moved from another record, or sealed with another key)"
            ) from None

    def value_hash(self, kind: str, normalized: str) -> bytes:
        """HMAC-SHA256 of `kind NUL normalized`: equal values of a kind meet without decrypting."""
        if "\0" in kind:
            raise ValueError("a kind label cannot contain NUL")
        message = kind.encode("utf-8") + b"\0" + normalized.encode("utf-8")
        return hmac.new(self._hash_key, message, hashlib.sha256).digest()


def decode_key_text(text: str, source: str) -> bytes:
    """32 key bytes from hex or base64url text; the error names the source, never the text."""
    stripped = text.strip()
    if len(stripped) == 2 * KEY_BYTES and all(c in "0123456789abcdefABCDEF" for c in stripped):
        return bytes.fromhex(stripped)
    raw = b""
    if _BASE64URL_RE.match(stripped):
        padded = stripped.rstrip("=") + "=" * (-len(stripped.rstrip("=")) % 4)
        with contextlib.suppress(binascii.Error, ValueError):
            raw = base64.urlsafe_b64decode(padded)
    if len(raw) != KEY_BYTES:
        raise VaultKeyFormatError(
            f"the vault key from {source} is not {KEY_BYTES} bytes written as 64 hex digits "
            "or as base64url (43 characters); generate one with "
            "`python -c 'import secrets; print(secrets.token_urlsafe(32))'`"
        )
    return raw


def key_file_path(data_dir: Path) -> Path:
    return data_dir / KEY_FILE_NAME


def read_key_file(path: Path) -> VaultKey:
    """Read a key file, refusing one that group or others may read or write."""
    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):
            raise VaultKeyFileError(f"the vault key file {path} is not a regular file")
        if info.st_mode & 0o077:
            raise VaultKeyFileError(
                f"the vault key file {path} is accessible to other users "
                f"(mode {stat.S_IMODE(info.st_mode):04o}); run `chmod 600 {path}`"
            )
        text = path.read_text(encoding="ascii")
    except UnicodeDecodeError:
        raise VaultKeyFileError(f"the vault key file {path} does not hold a key") from None
    except OSError as exc:
        raise VaultKeyFileError(
            f"cannot read the vault key file {path}: {exc.strerror or type(exc).__name__}"
        ) from None
    try:
        return VaultKey.parse(text, source=str(path))
    except VaultKeyFormatError as exc:
        raise VaultKeyFileError(str(exc)) from None


def write_key_file(path: Path, key: VaultKey, *, replace: bool = False) -> None:
    """Write a key file with mode 0600, durably; never leaves a partial file in place."""
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, (key.encode() + "\n").encode("ascii"))
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            if replace:
                os.replace(tmp, path)
            else:
                os.link(tmp, path)  # fails if the file appeared meanwhile
        finally:
            tmp.unlink(missing_ok=True)
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except FileExistsError:
        raise
    except OSError as exc:
        raise VaultKeyFileError(
            f"cannot write the vault key file {path}: {exc.strerror or type(exc).__name__}"
        ) from None


def load_vault_key(data_dir: Path, env: Mapping[str, str], *, create: bool = True) -> VaultKey:
    """The vault key from `HOLDBACK_VAULT_KEY`, else from `<data_dir>/vault.key`.

    The key file is created (mode 0600, in a data directory created with mode 0700) the first
    time no key exists, which is the first run; with `create=False` a missing key is an error.
    """
    text = env.get(ENV_KEY, "").strip()
    if text:
        return VaultKey.parse(text, source=ENV_KEY)
    path = key_file_path(data_dir)
    try:
        missing = not path.exists()
    except OSError as exc:
        raise VaultKeyFileError(
            f"cannot look for the vault key file {path}: {exc.strerror or type(exc).__name__}"
        ) from None
    if missing and not create:
        raise VaultKeyFileError(
            f"no vault key: {ENV_KEY} is not set and there is no key file {path}"
        )
    if missing:
        # If another process creates it first, its key is the one to use.
        with contextlib.suppress(FileExistsError):
            write_key_file(path, VaultKey.generate(source=str(path)))
    return read_key_file(path)
