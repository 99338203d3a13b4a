"""The errors of the persistence layer, each named for what went wrong.

The rule: a database or key problem reaches the user as one of these, with a message that
names the cause (which file, which server, which setting) and never a stored value, a
password or a key. Driver exceptions are translated at the store's boundary
(`holdback.store.driver_errors`), so nothing above the store sees SQLAlchemy or driver types.
"""

from __future__ import annotations

from holdback.errors import ConfigurationError, HoldbackError


class StoreError(HoldbackError):
    """Something went wrong in the persistence layer."""

    code = "storage_failed"


# Where the database is and whether we can use it.


class InvalidDatabaseUrlError(StoreError, ConfigurationError):
    """The database URL is malformed or names a database holdback does not support."""


class DatabaseUnreachableError(StoreError):
    """The database server cannot be reached, or the database file cannot be opened."""


class DatabaseAccessDeniedError(StoreError):
    """The database refused us: bad credentials, missing privileges or a read-only file."""


class DataDirectoryError(DatabaseAccessDeniedError):
    """The data directory cannot be created or used, or other users can access it."""


class DatabaseLockedError(StoreError):
    """Another process or connection held a lock for longer than the busy timeout."""


class DiskFullError(StoreError):
    """The disk (or quota) holding the database is full; the write was rolled back."""


class DatabaseCorruptError(StoreError):
    """The database file is damaged or is not a database at all."""


class SchemaVersionError(StoreError):
    """The database schema is not the one this holdback expects (upgrade, or newer data)."""


class StorageFailedError(StoreError):
    """The database failed in a way that has no more specific error."""


class ConcurrentWriteError(StoreError):
    """A write kept colliding with concurrent writers and was given up; nothing was written."""


# The vault key.


class VaultKeyError(StoreError):
    """The vault key cannot be obtained or is not the right one."""


class VaultKeyFormatError(VaultKeyError, ConfigurationError):
    """A vault key is not 32 bytes written in base64url or hex."""


class VaultKeyFileError(VaultKeyError):
    """The vault key file cannot be created or read, or its permissions are unsafe."""


class WrongVaultKeyError(VaultKeyError):
    """The vault key is not the key this database was encrypted with."""


class VaultEntryCorruptError(StoreError):
    """A stored ciphertext failed authentication: it was altered or belongs elsewhere."""


class VaultFullError(StoreError):
    """A conversation's vault would grow past its bound; the update was refused whole."""

    code = "vault_full"


# Records.


class RecordNotFoundError(StoreError, LookupError):
    """A record the caller named does not exist (or belongs to someone else)."""

    code = "not_found"


class UserNotFoundError(RecordNotFoundError):
    """No user has this id."""


class ConversationNotFoundError(RecordNotFoundError):
    """No conversation has this id."""


class MessageNotFoundError(RecordNotFoundError):
    """No message has this id."""


class GroupNotFoundError(RecordNotFoundError):
    """No group has this name."""


class UserExistsError(StoreError):
    """A user with this name already exists."""


class GroupExistsError(StoreError):
    """A group with this name already exists."""


class LastAdminError(StoreError):
    """The change would leave no admin: the last admin cannot be deleted or made a member."""


class InvalidRecordError(StoreError, ValueError):
    """A value given to the store does not fit the schema (empty name, unknown status…)."""
