"""The key check: how a database knows which vault key it was encrypted with.

The rule: a server with the wrong vault key refuses to start rather than failing later. The
database stores the key check of its key (an HMAC of a constant under a subkey, which says
nothing about the key); a store opens only with a key whose check matches. A database with
no check yet adopts the key it is first opened with, but only if that key opens whatever
encrypted data it already holds. Every write that encrypts verifies the check under a shared
lock, which `holdback vault rotate-key` takes exclusively, so no writer can seal with a key
the database has just stopped using.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Select, bindparam, select
from sqlalchemy.ext.asyncio import AsyncSession

from holdback.store.crypto import VaultKey
from holdback.store.errors import VaultEntryCorruptError, WrongVaultKeyError
from holdback.store.runner import Runner
from holdback.store.schema import MessageSpellingRow, StoreSetting, TermListRow, VaultEntryRow
from holdback.store.spellings import open_sealed
from holdback.store.term_lists import open_terms
from holdback.store.vault import open_entry

KEY_CHECK = "vault_key_check"


def _check_query(lock: str) -> Select[Any]:
    query = select(StoreSetting.value).where(StoreSetting.name == bindparam("setting"))
    if lock:
        query = query.with_for_update(read=lock == "share")
    return query


# By lock: "" (none), "share" (writers that seal) or "update" (rotation, adoption).
_CHECKS = {lock: _check_query(lock) for lock in ("", "share", "update")}


async def stored_check(session: AsyncSession, *, lock: str = "") -> str | None:
    """The stored key check; `lock` is "", "share" (writers) or "update" (rotation)."""
    value: str | None = await session.scalar(_CHECKS[lock], {"setting": KEY_CHECK})
    return value


def wrong_key(key: VaultKey, stored: str, where: str) -> WrongVaultKeyError:
    return WrongVaultKeyError(
        f"the vault key from {key.source} (fingerprint {key.fingerprint}) is not the key "
        f"{where} was encrypted with (fingerprint {stored[:16]}). Start holdback with the "
        "original key (HOLDBACK_VAULT_KEY or vault.key in the data directory); if "
        "`holdback vault rotate-key` was interrupted, the new key is in vault.key.new"
    )


async def verify(session: AsyncSession, key: VaultKey, where: str, *, lock: str = "") -> None:
    """Raise `WrongVaultKeyError` unless the database's key check is `key`'s."""
    _judge(await stored_check(session, lock=lock), key, where)


def verify_in(run: Runner, key: VaultKey, where: str, *, lock: str = "") -> None:
    """`verify`, as a statement of a `Runner` transaction."""
    rows = run.rows(_CHECKS[lock], {"setting": KEY_CHECK})
    _judge(rows[0][0] if rows else None, key, where)


def _judge(stored: str | None, key: VaultKey, where: str) -> None:
    if stored is None:
        raise WrongVaultKeyError(f"{where} has no vault key check; open it with the store first")
    if stored != key.check:
        raise wrong_key(key, stored, where)


async def adopt_or_verify(session: AsyncSession, key: VaultKey, where: str) -> None:
    """At open: record the key's check if there is none, else insist that it matches."""
    stored = await stored_check(session, lock="update")
    if stored is not None:
        if stored != key.check:
            raise wrong_key(key, stored, where)
        return
    await _opens_existing_data(session, key, where)
    session.add(StoreSetting(name=KEY_CHECK, value=key.check))
    await session.flush()


async def _opens_existing_data(session: AsyncSession, key: VaultKey, where: str) -> None:
    entry = (
        await session.execute(
            select(
                VaultEntryRow.conversation_id, VaultEntryRow.token, VaultEntryRow.value_ciphertext
            ).limit(1)
        )
    ).first()
    term_list = (
        await session.execute(select(TermListRow.name, TermListRow.terms_ciphertext).limit(1))
    ).first()
    spelled = (
        await session.execute(
            select(
                MessageSpellingRow.conversation_id,
                MessageSpellingRow.message_id,
                MessageSpellingRow.spellings_ciphertext,
            ).limit(1)
        )
    ).first()
    try:
        if entry is not None:
            open_entry(key, entry[0], entry[1], bytes(entry[2]))
        if term_list is not None:
            open_terms(key, term_list[0], bytes(term_list[1]))
        if spelled is not None:
            open_sealed(key, spelled[0], spelled[1], bytes(spelled[2]))
    except VaultEntryCorruptError:
        raise WrongVaultKeyError(
            f"{where} holds data encrypted with another vault key than the one from "
            f"{key.source} (fingerprint {key.fingerprint})"
        ) from None
