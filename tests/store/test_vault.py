"""Token assignment and the vault's ciphertext."""

from __future__ import annotations

import pytest
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from holdback.store import Store, VaultItem
from holdback.store.errors import (
    ConversationNotFoundError,
    InvalidRecordError,
    VaultEntryCorruptError,
)
from holdback.store.schema import VaultEntryRow

pytestmark = pytest.mark.anyio


def email(value: str, normalized: str | None = None) -> VaultItem:
    return VaultItem("email", value, normalized if normalized is not None else value.lower())


async def new_conversation(store: Store) -> str:
    user = await store.ensure_local_user()
    return (await store.create_conversation(user.id)).id


async def test_tokens_are_numbered_per_kind_in_order_of_first_appearance(store: Store) -> None:
    chat = await new_conversation(store)
    tokens = await store.assign_tokens(
        chat,
        [
            email("sarah@acme.com"),
            VaultItem("phone", "+1 555 0100", "+15550100"),
            email("bob@acme.com"),
            VaultItem("credit card", "4111 1111 1111 1111", "4111111111111111"),
            email("SARAH@acme.com"),  # same normalized value as the first
        ],
    )
    assert tokens == ["<EMAIL_1>", "<PHONE_1>", "<EMAIL_2>", "<CREDIT_CARD_1>", "<EMAIL_1>"]
    # Later calls continue the numbering and reuse known values.
    more = await store.assign_tokens(chat, [email("carol@acme.com"), email("bob@acme.com")])
    assert more == ["<EMAIL_3>", "<EMAIL_2>"]
    assert await store.load_vault(chat) == {
        "<EMAIL_1>": "sarah@acme.com",  # the first spelling seen is the one restored
        "<EMAIL_2>": "bob@acme.com",
        "<EMAIL_3>": "carol@acme.com",
        "<PHONE_1>": "+1 555 0100",
        "<CREDIT_CARD_1>": "4111 1111 1111 1111",
    }


async def test_same_value_of_different_kinds_gets_different_tokens(store: Store) -> None:
    chat = await new_conversation(store)
    tokens = await store.assign_tokens(
        chat, [VaultItem("name", "Jordan", "jordan"), VaultItem("city", "Jordan", "jordan")]
    )
    assert tokens == ["<NAME_1>", "<CITY_1>"]
    # Kinds that spell the same label are the same kind.
    assert await store.assign_tokens(chat, [VaultItem("NAME", "Jordan", "jordan")]) == ["<NAME_1>"]


async def test_each_conversation_has_its_own_vault(store: Store) -> None:
    first, second = await new_conversation(store), await new_conversation(store)
    assert await store.assign_tokens(first, [email("a@x.io"), email("b@x.io")]) == [
        "<EMAIL_1>",
        "<EMAIL_2>",
    ]
    assert await store.assign_tokens(second, [email("b@x.io")]) == ["<EMAIL_1>"]
    assert await store.load_vault(second) == {"<EMAIL_1>": "b@x.io"}


async def test_unicode_and_long_values_round_trip(store: Store) -> None:
    chat = await new_conversation(store)
    values = ["Zoë Ångström", "名前 山田", "emoji 🙂 x", "x" * 5000, 'quote " and \\ slash']
    tokens = await store.assign_tokens(chat, [VaultItem("name", v, v) for v in values])
    vault = await store.load_vault(chat)
    assert [vault[t] for t in tokens] == values


async def test_bad_items_are_refused_before_anything_is_written(store: Store) -> None:
    chat = await new_conversation(store)
    for bad in (
        [email("ok@x.io"), VaultItem("email", "", "")],
        [email("ok@x.io"), VaultItem("!!", "v", "v")],
        [VaultItem("email", "x" * 100_001, "x")],
    ):
        with pytest.raises(InvalidRecordError) as info:
            await store.assign_tokens(chat, bad)
        assert "ok@x.io" not in str(info.value)
    assert await store.load_vault(chat) == {}
    assert await store.assign_tokens(chat, []) == []


async def test_unknown_conversation_is_an_error(store: Store) -> None:
    with pytest.raises(ConversationNotFoundError):
        await store.assign_tokens("0" * 32, [email("a@x.io")])


async def test_ciphertext_moved_to_another_conversation_does_not_open(store: Store) -> None:
    first, second = await new_conversation(store), await new_conversation(store)
    await store.assign_tokens(first, [email("secret@x.io")])
    await store.assign_tokens(second, [email("other@x.io")])

    async def swap(session: AsyncSession) -> None:
        stolen = await session.scalar(
            select(VaultEntryRow.value_ciphertext).where(VaultEntryRow.conversation_id == first)
        )
        await session.execute(
            update(VaultEntryRow)
            .where(VaultEntryRow.conversation_id == second)
            .values(value_ciphertext=stolen)
        )

    await store.database.write(swap, what="test")
    with pytest.raises(VaultEntryCorruptError) as info:
        await store.load_vault(second)
    assert "<EMAIL_1>" in str(info.value)
    assert "secret" not in str(info.value)
    assert await store.load_vault(first) == {"<EMAIL_1>": "secret@x.io"}


async def test_stored_rows_hold_no_plaintext(store: Store) -> None:
    chat = await new_conversation(store)
    await store.assign_tokens(chat, [email("plain-canary@x.io")])

    async def rows(session: AsyncSession) -> list[tuple[str, str, bytes, bytes]]:
        result = await session.execute(
            select(
                VaultEntryRow.token,
                VaultEntryRow.kind,
                VaultEntryRow.value_hash,
                VaultEntryRow.value_ciphertext,
            )
        )
        return [(r[0], r[1], bytes(r[2]), bytes(r[3])) for r in result]

    (token, kind, value_hash, blob), *rest = await store.database.read(rows)
    assert not rest
    assert (token, kind) == ("<EMAIL_1>", "EMAIL")
    assert len(value_hash) == 32
    assert b"plain-canary" not in blob
    assert b"plain-canary" not in value_hash
