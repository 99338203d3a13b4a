"""Vault key rotation: re-encrypt everything under a new key, in one transaction.

The rule: rotation loses nothing and is never half done. Every vault entry is opened with
the old key and sealed with the new one, its keyed hash is recomputed under the new key (from
the normalized form sealed with it), every term list, pattern set, people list and every
message's sealed spellings are re-sealed, and the key check is replaced, all in one
transaction: if anything fails (a corrupt entry, a full disk), the database is left exactly as
it was, still under the old key.
The rotation takes the key check's row lock first, so writers that seal with the old key have
finished before it reads and the ones that come after see the new check and stop (see
`key_check`).
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from holdback.store.crypto import VaultKey
from holdback.store.database import Database
from holdback.store.driver_errors import DRIVER_ERRORS
from holdback.store.engine import create_engine, parse_database_url
from holdback.store.errors import StoreError
from holdback.store.key_check import KEY_CHECK, stored_check, wrong_key
from holdback.store.migrate import check_schema
from holdback.store.schema import MessageSpellingRow, StoreSetting, TermListRow, VaultEntryRow
from holdback.store.spellings import open_sealed, seal
from holdback.store.team_detectors import reseal_all as reseal_team_detectors
from holdback.store.term_lists import open_terms, seal_terms
from holdback.store.vault import open_entry, seal_entry

BATCH = 500


@dataclass(frozen=True, slots=True)
class RotationReport:
    vault_entries: int
    term_lists: int
    already_rotated: bool = False
    message_spellings: int = 0
    team_detectors: int = 0  # pattern sets and people lists


async def rotate_vault_key(
    url: str, old_key: VaultKey, new_key: VaultKey, *, busy_timeout: float = 30.0
) -> RotationReport:
    """Re-encrypt the database at `url` from `old_key` to `new_key`.

    Running it again after it succeeded (the database already uses `new_key`) changes nothing
    and says so, so an interrupted `holdback vault rotate-key` can simply be repeated.
    """
    target = parse_database_url(url)
    db = Database(
        create_engine(target, busy_timeout=busy_timeout), target, busy_timeout=busy_timeout
    )
    try:
        try:
            await check_schema(db.engine, target)
        except StoreError:
            raise
        except DRIVER_ERRORS as exc:
            raise db.translate(exc) from None
        where = target.describe()

        async def work(session: AsyncSession) -> RotationReport:
            stored = await stored_check(session, lock="update")
            if stored == new_key.check:
                return RotationReport(0, 0, already_rotated=True)
            if stored is not None and stored != old_key.check:
                raise wrong_key(old_key, stored, where)
            entries = await _reseal_entries(session, old_key, new_key)
            lists = await _reseal_term_lists(session, old_key, new_key)
            spelled = await _reseal_spellings(session, old_key, new_key)
            team = await reseal_team_detectors(session, old_key, new_key)
            if stored is None:
                session.add(StoreSetting(name=KEY_CHECK, value=new_key.check))
            else:
                await session.execute(
                    update(StoreSetting)
                    .where(StoreSetting.name == KEY_CHECK)
                    .values(value=new_key.check)
                )
            return RotationReport(entries, lists, message_spellings=spelled, team_detectors=team)

        return await db.write(work, what="rotating the vault key")
    finally:
        await db.dispose()


async def _reseal_entries(session: AsyncSession, old: VaultKey, new: VaultKey) -> int:
    done = 0
    after: tuple[str, str] = ("", "")
    while True:
        rows = (
            await session.execute(
                select(
                    VaultEntryRow.conversation_id,
                    VaultEntryRow.token,
                    VaultEntryRow.kind,
                    VaultEntryRow.value_ciphertext,
                )
                .where(
                    (VaultEntryRow.conversation_id > after[0])
                    | (
                        (VaultEntryRow.conversation_id == after[0])
                        & (VaultEntryRow.token > after[1])
                    )
                )
                .order_by(VaultEntryRow.conversation_id, VaultEntryRow.token)
                .limit(BATCH)
            )
        ).all()
        if not rows:
            return done
        changes = []
        for conversation_id, token, kind, blob in rows:
            value, normalized = open_entry(old, conversation_id, token, bytes(blob))
            changes.append(
                {
                    "conversation_id": conversation_id,
                    "token": token,
                    "value_hash": new.value_hash(kind, normalized),
                    "value_ciphertext": seal_entry(new, conversation_id, value, normalized),
                }
            )
        await session.execute(update(VaultEntryRow), changes)
        done += len(rows)
        after = (rows[-1][0], rows[-1][1])


async def _reseal_term_lists(session: AsyncSession, old: VaultKey, new: VaultKey) -> int:
    rows = (await session.execute(select(TermListRow.name, TermListRow.terms_ciphertext))).all()
    for name, blob in rows:
        terms = open_terms(old, name, bytes(blob))
        await session.execute(
            update(TermListRow)
            .where(TermListRow.name == name)
            .values(terms_ciphertext=seal_terms(new, name, terms))
        )
    return len(rows)


async def _reseal_spellings(session: AsyncSession, old: VaultKey, new: VaultKey) -> int:
    done = 0
    after = ""
    while True:
        rows = (
            await session.execute(
                select(
                    MessageSpellingRow.message_id,
                    MessageSpellingRow.conversation_id,
                    MessageSpellingRow.spellings_ciphertext,
                )
                .where(MessageSpellingRow.message_id > after)
                .order_by(MessageSpellingRow.message_id)
                .limit(BATCH)
            )
        ).all()
        if not rows:
            return done
        changes = [
            {
                "message_id": message_id,
                "spellings_ciphertext": seal(
                    new,
                    conversation_id,
                    message_id,
                    open_sealed(old, conversation_id, message_id, bytes(blob)),
                ),
            }
            for message_id, conversation_id, blob in rows
        ]
        await session.execute(update(MessageSpellingRow), changes)
        done += len(rows)
        after = rows[-1][0]
