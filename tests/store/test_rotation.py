"""Vault key rotation: everything re-encrypted, nothing lost, never half done."""

from __future__ import annotations

import pytest
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from holdback.store import Store, VaultItem, VaultKey, rotate_vault_key
from holdback.store.errors import VaultEntryCorruptError, WrongVaultKeyError
from holdback.store.schema import StoreSetting, VaultEntryRow

pytestmark = pytest.mark.anyio


async def fill(store: Store) -> dict[str, dict[str, str]]:
    user = await store.ensure_local_user()
    vaults = {}
    for n in range(3):
        chat = await store.create_conversation(user.id, f"chat {n}")
        items = [VaultItem("email", f"user{i}@c{n}.io", f"user{i}@c{n}.io") for i in range(4)]
        items.append(VaultItem("name", f"Person {n}", f"person {n}"))
        await store.assign_tokens(chat.id, items)
        vaults[chat.id] = await store.load_vault(chat.id)
    await store.save_term_list("clients", "client", "sensitive", ["Acme", "Globex"])
    await store.save_term_list("banned", "slur", "forbidden", ["word"])
    return vaults


async def test_rotation_loses_nothing_and_retires_the_old_key(
    database_url: str, vault_key: VaultKey
) -> None:
    store = await Store.open(database_url, vault_key=vault_key)
    vaults = await fill(store)
    lists = [(t.name, t.terms) for t in await store.load_term_lists()]
    await store.close()

    new_key = VaultKey.generate()
    report = await rotate_vault_key(database_url, vault_key, new_key)
    assert (report.vault_entries, report.term_lists, report.already_rotated) == (15, 2, False)

    with pytest.raises(WrongVaultKeyError):
        await Store.open(database_url, vault_key=vault_key)
    store = await Store.open(database_url, vault_key=new_key)
    try:
        for chat, vault in vaults.items():
            assert await store.load_vault(chat) == vault
        assert [(t.name, t.terms) for t in await store.load_term_lists()] == lists
        # Keyed hashes were recomputed: known values keep their tokens, new ones come next.
        chat = next(iter(vaults))
        tokens = await store.assign_tokens(
            chat,
            [
                VaultItem("email", next(iter(vaults[chat].values())), "user0@c0.io"),
                VaultItem("email", "fresh@c0.io", "fresh@c0.io"),
            ],
        )
        assert tokens == ["<EMAIL_1>", "<EMAIL_5>"]
    finally:
        await store.close()

    again = await rotate_vault_key(database_url, vault_key, new_key)
    assert again.already_rotated
    with pytest.raises(WrongVaultKeyError):
        await rotate_vault_key(database_url, VaultKey.generate(), VaultKey.generate())


async def test_rotation_pages_through_large_vaults(database_url: str, vault_key: VaultKey) -> None:
    store = await Store.open(database_url, vault_key=vault_key)
    user = await store.ensure_local_user()
    chat = await store.create_conversation(user.id)
    items = [VaultItem("email", f"u{i}@x.io", f"u{i}@x.io") for i in range(1203)]
    await store.assign_tokens(chat.id, items)
    before = await store.load_vault(chat.id)
    await store.close()
    new_key = VaultKey.generate()
    report = await rotate_vault_key(database_url, vault_key, new_key)
    assert report.vault_entries == 1203
    store = await Store.open(database_url, vault_key=new_key)
    assert await store.load_vault(chat.id) == before
    await store.close()


async def test_a_failed_rotation_changes_nothing(database_url: str, vault_key: VaultKey) -> None:
    store = await Store.open(database_url, vault_key=vault_key)
    vaults = await fill(store)
    broken_chat = list(vaults)[-1]

    async def corrupt(session: AsyncSession) -> None:
        await session.execute(
            update(VaultEntryRow)
            .where(VaultEntryRow.conversation_id == broken_chat, VaultEntryRow.token == "<NAME_1>")
            .values(value_ciphertext=b"\x01" + b"\0" * 40)
        )

    await store.database.write(corrupt, what="test")

    async def snapshot(session: AsyncSession) -> list[tuple[str, str, bytes, bytes]]:
        rows = await session.execute(
            select(
                VaultEntryRow.conversation_id,
                VaultEntryRow.token,
                VaultEntryRow.value_hash,
                VaultEntryRow.value_ciphertext,
            ).order_by(VaultEntryRow.conversation_id, VaultEntryRow.token)
        )
        return [(r[0], r[1], bytes(r[2]), bytes(r[3])) for r in rows]

    before = await store.database.read(snapshot)
    await store.close()

    new_key = VaultKey.generate()
    with pytest.raises(VaultEntryCorruptError, match="<NAME_1>"):
        await rotate_vault_key(database_url, vault_key, new_key)
    with pytest.raises(WrongVaultKeyError):
        await Store.open(database_url, vault_key=new_key)
    store = await Store.open(database_url, vault_key=vault_key)
    try:
        assert await store.database.read(snapshot) == before
        for chat, vault in vaults.items():
            if chat != broken_chat:
                assert await store.load_vault(chat) == vault
    finally:
        await store.close()


async def test_a_running_store_with_the_retired_key_cannot_write(
    database_url: str, vault_key: VaultKey
) -> None:
    stale = await Store.open(database_url, vault_key=vault_key)
    try:
        user = await stale.ensure_local_user()
        chat = await stale.create_conversation(user.id)
        await stale.assign_tokens(chat.id, [VaultItem("email", "a@x.io", "a@x.io")])
        new_key = VaultKey.generate()
        await rotate_vault_key(database_url, vault_key, new_key)
        with pytest.raises(WrongVaultKeyError):
            await stale.assign_tokens(chat.id, [VaultItem("email", "b@x.io", "b@x.io")])
        with pytest.raises(WrongVaultKeyError):
            await stale.save_term_list("clients", "client", "sensitive", ["Acme"])

        async def check(session: AsyncSession) -> str | None:
            return await session.scalar(select(StoreSetting.value))

        assert await stale.database.read(check) == new_key.check
    finally:
        await stale.close()
    fresh = await Store.open(database_url, vault_key=new_key)
    try:
        assert await fresh.load_vault(chat.id) == {"<EMAIL_1>": "a@x.io"}
        assert await fresh.load_term_lists() == []
    finally:
        await fresh.close()
