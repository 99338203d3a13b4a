"""The chat path's reads, in one statement each where they can be: a conversation opened
with its vault, its messages as the model is given them, its owner.

The rules:
- A conversation is visible only to its owner (`open_owned`): another user's conversation is
  "not found", as one that does not exist.
- A reply cut off mid-stream reads back as far as its checkpoints saved it
  (`checkpoints.apply`), in `history` too, so the model is given what its user saw.
- They are functions of a `Runner` (`runner.py`), so a write's transaction reads through them
  after its lock (`turns.py`).
"""

from __future__ import annotations

import dataclasses
from typing import cast

from sqlalchemy import Table, bindparam, select

from holdback.store import checkpoints, vault
from holdback.store.crypto import VaultKey
from holdback.store.records import Conversation, Message, StoredVault
from holdback.store.runner import Runner
from holdback.store.schema import ConversationRow, MessageRow, VaultEntryRow

_conversations = cast(Table, ConversationRow.__table__)
_messages = cast(Table, MessageRow.__table__)
_vault = cast(Table, VaultEntryRow.__table__)

# A row's columns are its record's fields, in order (rows are read by position: a row's
# attribute lookups cost more than the statement's own execution).
_CONVERSATION_FIELDS = [_conversations.c[f.name] for f in dataclasses.fields(Conversation)][1:]
_MESSAGE_FIELDS = [_messages.c[f.name] for f in dataclasses.fields(Message)]
_VAULT_ENTRY = len(_CONVERSATION_FIELDS)  # where an `_OPEN` row's vault entry starts

# The conversation and its vault entries, in `vault.load`'s order, in one statement.
_OPEN = (
    select(
        *_CONVERSATION_FIELDS,
        _vault.c.token,
        _vault.c.kind,
        _vault.c.detector_kind,
        _vault.c.value_ciphertext,
    )
    .select_from(_conversations.outerjoin(_vault, _vault.c.conversation_id == _conversations.c.id))
    .where(
        _conversations.c.id == bindparam("conversation_id"),
        _conversations.c.owner_id == bindparam("owner_id"),
    )
    .order_by(_vault.c.kind, _vault.c.number)
)

_HISTORY = (
    select(*_MESSAGE_FIELDS)
    .where(_messages.c.conversation_id == bindparam("conversation_id"))
    .order_by(_messages.c.seq)
)

_OWNER = select(_conversations.c.owner_id).where(
    _conversations.c.id == bindparam("conversation_id")
)


def owner(run: Runner, conversation_id: str) -> str | None:
    """The id of the conversation's owner, or None if there is no such conversation."""
    rows = run.rows(_OWNER, {"conversation_id": conversation_id})
    return str(rows[0].owner_id) if rows else None


def history(run: Runner, conversation_id: str) -> list[Message]:
    """The conversation's messages, a reply cut off mid-stream as far as it was saved."""
    messages = [Message(*row) for row in run.rows(_HISTORY, {"conversation_id": conversation_id})]
    return checkpoints.apply(run, conversation_id, messages)


def open_owned(
    run: Runner, key: VaultKey, conversation_id: str, owner_id: str
) -> tuple[Conversation, StoredVault] | None:
    """The owned conversation and its decrypted vault (token -> value, reserved ids), or None."""
    rows = run.rows(_OPEN, {"conversation_id": conversation_id, "owner_id": owner_id})
    if not rows:
        return None
    conversation = Conversation(conversation_id, *rows[0][:_VAULT_ENTRY])
    entries = (row for row in rows if row.token is not None)
    return conversation, vault.stored_vault(key, conversation_id, entries)
