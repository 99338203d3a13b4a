"""Reserved ids: what a conversation's text spelled before any value had it is never assigned.

Issue #13, item 5. Every test runs on SQLite and on PostgreSQL (see conftest.py).
"""

from __future__ import annotations

import logging
import random

import anyio
import pytest
from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncSession

from holdback.pseudonymize import Masked, Pseudonymizer
from holdback.store import Store, StoredVault, VaultItem, VaultKey, rotate_vault_key
from holdback.store.engine import create_engine, parse_database_url
from holdback.store.errors import InvalidRecordError
from holdback.store.schema import VaultEntryRow
from holdback.store.vault import seal_entry
from holdback.stream import restore
from holdback.tokens import parse_id, token_id
from holdback.vault import Vault

pytestmark = pytest.mark.anyio


def email(value: str) -> VaultItem:
    return VaultItem("email", value, value.lower())


async def new_conversation(store: Store) -> str:
    user = await store.ensure_local_user()
    return (await store.create_conversation(user.id)).id


async def mask(store: Store, chat: str, text: str, vault: Vault) -> tuple[str, list[Masked]]:
    """The chat pipeline's loop: analyze, have the store reserve and assign, until complete."""
    pseudonymizer = Pseudonymizer()
    while True:
        analysis = pseudonymizer.analyze(text, vault)
        if analysis.complete:
            assert analysis.masked_text is not None
            return analysis.masked_text, analysis.masked
        items = [VaultItem(m.kind, m.value, m.normalized) for m in analysis.missing]
        update = await store.update_vault(chat, items, reserve=analysis.reserve)
        for ident in update.reserved:
            vault.reserve(ident)
        for item, token in zip(analysis.missing, update.tokens, strict=True):
            vault.add(token, item.kind, item.value, item.normalized)
        for token, value in update.taken.items():
            vault.add(token, parse_id(token_id(token))[0].lower(), value)


async def send(store: Store, chat: str, text: str) -> str:
    """One user message as the server handles it: open, mask, store; the masked text."""
    user = await store.ensure_local_user()
    opened = await store.open_conversation(chat, user.id)
    assert opened is not None
    vault = Vault(opened[1])
    masked, _ = await mask(store, chat, text, vault)
    await store.begin_reply(chat, masked, owner_id=user.id)
    return masked


async def history(store: Store, chat: str) -> list[str]:
    """The user messages as `GET /api/conversations/{id}` restores them for their owner."""
    vault = Vault(await store.load_vault(chat))
    return [restore(m.text, vault.index()) for m in await store.list_messages(chat) if m.text]


async def test_a_bare_id_typed_first_is_never_rewritten_in_the_history(store: Store) -> None:
    chat = await new_conversation(store)
    first = "Until we know her address, call it EMAIL_1 (or email\\_1) and <EMAIL_2>."
    assert await send(store, chat, first) != first  # the typed <EMAIL_2> became a literal
    assert "EMAIL_1 (or email\\_1)" in await send(store, chat, first)  # bare ids stay as typed
    masked = await send(store, chat, "Her address is sarah@acme.com, his bob@acme.com.")
    assert masked == "Her address is <EMAIL_3>, his <EMAIL_4>."
    assert await history(store, chat) == [
        first,
        first,
        "Her address is sarah@acme.com, his bob@acme.com.",
    ]
    stored = await store.load_vault(chat)
    assert stored.reserved == {"EMAIL_1", "EMAIL_2"}
    assert set(stored) == {"<LITERAL_1>", "<EMAIL_3>", "<EMAIL_4>"}


async def test_reserved_ids_are_skipped_by_the_allocator(store: Store) -> None:
    chat = await new_conversation(store)
    update = await store.update_vault(chat, [], reserve=["EMAIL_1", "EMAIL_3", "PHONE_1"])
    assert update.tokens == []
    assert update.taken == {}
    assert update.reserved == {"EMAIL_1", "EMAIL_3", "PHONE_1"}
    tokens = await store.assign_tokens(chat, [email("a@x.io"), email("b@x.io"), email("c@x.io")])
    assert tokens == ["<EMAIL_2>", "<EMAIL_4>", "<EMAIL_5>"]
    # In one call the reservations come first.
    update = await store.update_vault(chat, [email("d@x.io")], reserve=["EMAIL_6"])
    assert update.tokens == ["<EMAIL_7>"]
    assert update.reserved == {"EMAIL_6"}
    stored = await store.load_vault(chat)
    assert isinstance(stored, StoredVault)
    assert stored == {
        "<EMAIL_2>": "a@x.io",
        "<EMAIL_4>": "b@x.io",
        "<EMAIL_5>": "c@x.io",
        "<EMAIL_7>": "d@x.io",
    }
    assert stored.reserved == {"EMAIL_1", "EMAIL_3", "EMAIL_6", "PHONE_1"}
    user = await store.ensure_local_user()
    opened = await store.open_conversation(chat, user.id)
    assert opened is not None
    assert opened[1] == stored
    assert opened[1].reserved == stored.reserved
    vault = Vault(opened[1])
    assert vault.reserved == stored.reserved
    assert set(vault.index().values) == {"EMAIL_2", "EMAIL_4", "EMAIL_5", "EMAIL_7"}
    # Reserving again changes nothing; other conversations are not affected.
    again = await store.update_vault(chat, [], reserve=["EMAIL_1", "EMAIL_1"])
    assert again.reserved == {"EMAIL_1"}
    other = await new_conversation(store)
    assert await store.assign_tokens(other, [email("a@x.io")]) == ["<EMAIL_1>"]
    assert (await store.load_vault(other)).reserved == frozenset()


async def test_an_id_that_is_a_token_already_comes_back_with_its_value(store: Store) -> None:
    chat = await new_conversation(store)
    await store.assign_tokens(chat, [email("first@x.io"), email("second@x.io")])
    update = await store.update_vault(
        chat, [email("second@x.io")], reserve=["EMAIL_1", "EMAIL_2", "EMAIL_9"]
    )
    assert update.tokens == ["<EMAIL_2>"]
    assert update.reserved == {"EMAIL_9"}
    assert update.taken == {"<EMAIL_1>": "first@x.io"}  # <EMAIL_2> is in `tokens` already
    assert "first@x.io" not in repr(update)


async def test_a_concurrent_writer_took_the_id_first(store: Store) -> None:
    # This writer read the vault before another one gave EMAIL_1 to a value: its reservation
    # fails, it learns the token, and the spelling is neutralized instead.
    chat = await new_conversation(store)
    user = await store.ensure_local_user()
    opened = await store.open_conversation(chat, user.id)
    assert opened is not None
    await send(store, chat, "mail bob@acme.com")  # the other writer
    vault = Vault(opened[1])
    masked, _ = await mask(store, chat, "is email_1 his?", vault)
    assert masked == "is <LITERAL_1> his?"
    await store.begin_reply(chat, masked, owner_id=user.id)
    assert await history(store, chat) == ["mail bob@acme.com", "is email_1 his?"]


async def test_ids_no_token_can_have_need_no_row(store: Store) -> None:
    chat = await new_conversation(store)
    huge = "EMAIL_" + "9" * 30
    long = "K" * 120 + "_1"
    update = await store.update_vault(chat, [], reserve=[huge, long])
    assert update.reserved == {huge, long}
    assert (await store.load_vault(chat)).reserved == frozenset()
    assert await store.assign_tokens(chat, [email("a@x.io")]) == ["<EMAIL_1>"]


async def test_bad_ids_are_refused_before_anything_is_written(store: Store) -> None:
    chat = await new_conversation(store)
    for bad in (["EMAIL_1", "email_2"], ["<EMAIL_1>"], ["EMAIL_0"], ["secret@x.io"], [""]):
        with pytest.raises(InvalidRecordError) as info:
            await store.update_vault(chat, [email("ok@x.io")], reserve=bad)
        assert "secret" not in str(info.value)
        assert "ok@x.io" not in str(info.value)
    stored = await store.load_vault(chat)
    assert stored == {}
    assert stored.reserved == frozenset()


async def test_a_reservation_row_holds_nothing_but_the_id(store: Store) -> None:
    chat = await new_conversation(store)
    await store.update_vault(chat, [], reserve=["EMAIL_1"])

    async def rows(session: AsyncSession) -> list[tuple[str, str, int, bytes, bytes]]:
        result = await session.execute(
            select(
                VaultEntryRow.token,
                VaultEntryRow.kind,
                VaultEntryRow.number,
                VaultEntryRow.value_hash,
                VaultEntryRow.value_ciphertext,
            )
        )
        return [(r[0], r[1], r[2], bytes(r[3]), bytes(r[4])) for r in result]

    ((token, kind, number, value_hash, blob),) = await store.database.read(rows)
    assert (token, kind, number) == ("<EMAIL_1>", "reserved", 1)
    assert len(value_hash) == 32
    assert blob[:1] == b"\x01"  # sealed like any entry, so rotation and key checks treat it so


async def test_reservations_survive_key_rotation(database_url: str, vault_key: VaultKey) -> None:
    store = await Store.open(database_url, vault_key=vault_key)
    chat = await new_conversation(store)
    await store.update_vault(chat, [email("a@x.io")], reserve=["EMAIL_1", "PHONE_2"])
    await store.close()
    new_key = VaultKey.generate()
    report = await rotate_vault_key(database_url, vault_key, new_key)
    assert report.vault_entries == 3
    store = await Store.open(database_url, vault_key=new_key)
    try:
        stored = await store.load_vault(chat)
        assert stored == {"<EMAIL_2>": "a@x.io"}
        assert stored.reserved == {"EMAIL_1", "PHONE_2"}
        update = await store.update_vault(chat, [email("b@x.io")], reserve=["PHONE_2"])
        assert update.tokens == ["<EMAIL_3>"]
        assert update.reserved == {"PHONE_2"}
    finally:
        await store.close()


async def test_concurrent_writers_never_assign_a_reserved_id(store: Store) -> None:
    chat = await new_conversation(store)
    values = [f"person{i}@example.org" for i in range(30)]
    ids = [f"EMAIL_{n}" for n in range(1, 40)]
    reserved_by: dict[str, bool] = {}
    assigned: list[tuple[str, str]] = []

    async def writer(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(4):
            items = [email(v) for v in rng.sample(values, rng.randint(0, 6))]
            reserve = rng.sample(ids, rng.randint(0, 3))
            update = await store.update_vault(chat, items, reserve=reserve)
            assigned.extend(zip((i.value for i in items), update.tokens, strict=True))
            for ident in update.reserved:
                reserved_by[ident] = True
            assert not {token_id(t) for t in update.taken} & update.reserved

    async with anyio.create_task_group() as tg:
        for seed in range(12):
            tg.start_soon(writer, seed)
    stored = await store.load_vault(chat)
    assert set(reserved_by) <= stored.reserved
    assert not stored.reserved & {token_id(t) for t in stored}
    assert {token for _, token in assigned} == set(stored)
    token_of: dict[str, str] = {}
    for value, token in assigned:
        assert token_of.setdefault(value, token) == token
        assert token_id(token) not in stored.reserved
    # Numbering is dense apart from the reserved numbers.
    numbers = {n for n in range(1, 80)} - {parse_id(i)[1] for i in stored.reserved}
    expected = sorted(numbers)[: len(stored)]
    assert sorted(parse_id(token_id(t))[1] for t in stored) == expected


@pytest.mark.postgres
@pytest.mark.parametrize("engine_name", ["postgres"], indirect=True)
async def test_a_reservation_that_slips_past_the_lock_causes_a_retry_not_a_reuse(
    store: Store, database_url: str, vault_key: VaultKey, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="holdback.store.database")
    chat = await new_conversation(store)
    intruder = create_engine(parse_database_url(database_url))
    async with intruder.connect() as conn:
        # An uncommitted reservation of EMAIL_1 made without the conversation lock: the
        # store's insert of <EMAIL_1> waits on it, fails when it commits, and must retry.
        trans = await conn.begin()
        await conn.execute(
            text(
                "INSERT INTO vault_entries (conversation_id, token, kind, number, value_hash,"
                " value_ciphertext, created_at)"
                " VALUES (:c, '<EMAIL_1>', 'reserved', 1, :h, :v, now())"
            ),
            {
                "c": chat,
                "h": vault_key.value_hash("reserved", "EMAIL_1"),
                "v": seal_entry(vault_key, chat, "EMAIL_1", "EMAIL_1"),
            },
        )
        results: list[list[str]] = []

        async def assign() -> None:
            results.append(await store.assign_tokens(chat, [email("first@x.io")]))

        async with anyio.create_task_group() as tg:
            tg.start_soon(assign)
            await anyio.sleep(0.5)  # the store is now blocked on the intruder's row
            await trans.commit()
    await intruder.dispose()
    assert results == [["<EMAIL_2>"]]
    assert "assigning vault tokens collided with a concurrent writer" in caplog.text
    stored = await store.load_vault(chat)
    assert stored == {"<EMAIL_2>": "first@x.io"}
    assert stored.reserved == {"EMAIL_1"}
