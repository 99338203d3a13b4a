"""Persistence: users, conversations, tokenized messages and the encrypted vault.

The rule this package keeps: the database holds the tokenized text the model saw; original
values exist in it only as AES-256-GCM ciphertext under the vault key. See docs/storage.md.
"""

from holdback.store.crypto import VaultKey, load_vault_key
from holdback.store.errors import StoreError
from holdback.store.locations import (
    default_database_url,
    ensure_data_dir,
    resolve_data_dir,
    resolve_database_url,
)
from holdback.store.migrate import downgrade, upgrade
from holdback.store.records import (
    ApiToken,
    AuditAction,
    AuditEvent,
    Conversation,
    Message,
    MessageStatus,
    StoredVault,
    TermList,
    TermPurpose,
    Turn,
    User,
    VaultItem,
    VaultUpdate,
)
from holdback.store.repository import Store
from holdback.store.rotation import RotationReport, rotate_vault_key

__all__ = [
    "ApiToken",
    "AuditAction",
    "AuditEvent",
    "Conversation",
    "Message",
    "MessageStatus",
    "RotationReport",
    "Store",
    "StoreError",
    "StoredVault",
    "TermList",
    "TermPurpose",
    "Turn",
    "User",
    "VaultItem",
    "VaultKey",
    "VaultUpdate",
    "default_database_url",
    "downgrade",
    "ensure_data_dir",
    "load_vault_key",
    "resolve_data_dir",
    "resolve_database_url",
    "rotate_vault_key",
    "upgrade",
]
