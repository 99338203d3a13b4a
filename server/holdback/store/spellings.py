"""A user message's own spellings: what it needs to read back exactly as typed, sealed.

The rule: a value the user typed is stored only as ciphertext, never in message text. The
stored text of a message is tokenized, and a token restores to its vault value, the spelling
seen first; when the user typed another spelling of that value (`Sarah@Acme.com` after
`sarah@acme.com`, a card number with spaces after one without), the typed spellings of those
spans, and only those, are kept in a `message_spellings` row, sealed with AES-256-GCM under the
vault key with the associated data `message-spellings:<conversation id>:<message id>`, so a
ciphertext moved to another message or conversation fails to open. It goes with its message
and its conversation (`ON DELETE CASCADE`), and key rotation re-seals it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from holdback.store.crypto import VaultKey
from holdback.store.errors import InvalidRecordError, VaultEntryCorruptError
from holdback.store.records import Spellings
from holdback.store.schema import MessageSpellingRow

MAX_SPELLING_CHARS = 100_000


def associated_data(conversation_id: str, message_id: str) -> bytes:
    return f"message-spellings:{conversation_id}:{message_id}".encode()


def check(spellings: Mapping[int, str]) -> Spellings:
    """Span index -> typed text, checked (outside any transaction)."""
    checked = Spellings()
    for index, text in spellings.items():
        if isinstance(index, bool) or not isinstance(index, int) or index < 0:
            raise InvalidRecordError("a spelling is keyed by the index of its masked span")
        if not isinstance(text, str) or not text or len(text) > MAX_SPELLING_CHARS:
            raise InvalidRecordError(f"the spelling of span {index} is not a non-empty text")
        checked[index] = text
    return checked


def seal(key: VaultKey, conversation_id: str, message_id: str, spellings: Spellings) -> bytes:
    pairs = sorted(spellings.items())
    plaintext = json.dumps(pairs, ensure_ascii=False).encode("utf-8")
    return key.seal(plaintext, associated_data(conversation_id, message_id))


def open_sealed(key: VaultKey, conversation_id: str, message_id: str, blob: bytes) -> Spellings:
    what = f"the spellings of message {message_id}"
    plaintext = key.open(blob, associated_data(conversation_id, message_id), what=what)
    try:
        pairs: Any = json.loads(plaintext.decode("utf-8"))
    except ValueError:
        raise VaultEntryCorruptError(f"{what}: the decrypted spellings are malformed") from None
    out = Spellings()
    if not isinstance(pairs, list):
        raise VaultEntryCorruptError(f"{what}: the decrypted spellings are malformed")
    for pair in pairs:
        if not (
            isinstance(pair, list)
            and len(pair) == 2
            and isinstance(pair[0], int)
            and isinstance(pair[1], str)
        ):
            raise VaultEntryCorruptError(f"{what}: the decrypted spellings are malformed")
        out[pair[0]] = pair[1]
    return out


async def load(session: AsyncSession, key: VaultKey, conversation_id: str) -> dict[str, Spellings]:
    """Message id -> its spellings, for the conversation's messages that have any."""
    rows = (
        await session.execute(
            select(MessageSpellingRow.message_id, MessageSpellingRow.spellings_ciphertext).where(
                MessageSpellingRow.conversation_id == conversation_id
            )
        )
    ).all()
    return {
        message_id: open_sealed(key, conversation_id, message_id, bytes(blob))
        for message_id, blob in rows
    }
