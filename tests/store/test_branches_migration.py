"""Migration 0006 on both engines: an existing conversation becomes one branch (each
message's parent the one before it), keeps reading as it did, and takes new branches; a
downgrade keeps the branch shown and drops the others."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from holdback.store import Store, VaultKey, downgrade, upgrade
from holdback.store.engine import create_engine, parse_database_url
from holdback.store.schema import UTCDateTime

pytestmark = pytest.mark.anyio
OWNER, CHAT = "a" * 32, "c" * 32


async def test_existing_conversations_become_one_branch(
    database_url: str, vault_key: VaultKey
) -> None:
    await upgrade(database_url, "0005")
    start = datetime(2026, 1, 1, tzinfo=UTC)
    users = sa.table("users", sa.column("id"), sa.column("name"), sa.column("password_hash"),
                     sa.column("created_at", UTCDateTime()), sa.column("role"))  # fmt: skip
    chats = sa.table("conversations", sa.column("id"), sa.column("owner_id"), sa.column("title"),
                     sa.column("created_at", UTCDateTime()),
                     sa.column("updated_at", UTCDateTime()))  # fmt: skip
    messages = sa.table("messages", sa.column("id"), sa.column("conversation_id"),
                        sa.column("seq"), sa.column("role"), sa.column("text"),
                        sa.column("parts", sa.JSON()), sa.column("status"),
                        sa.column("finish_reason"), sa.column("meta", sa.JSON()),
                        sa.column("created_at", UTCDateTime()),
                        sa.column("updated_at", UTCDateTime()))  # fmt: skip
    rows = [
        {"id": f"{i:032x}", "conversation_id": CHAT, "seq": i + 1,
         "role": "user" if i % 2 == 0 else "assistant", "text": f"m{i} <EMAIL_1>", "parts": {},
         "status": "complete", "finish_reason": None if i % 2 == 0 else "stop", "meta": {},
         "created_at": start + timedelta(seconds=i), "updated_at": start + timedelta(seconds=i)}
        for i in range(4)
    ]  # fmt: skip
    engine = create_engine(parse_database_url(database_url))
    try:
        async with engine.begin() as conn:
            await conn.execute(sa.insert(users).values(id=OWNER, name="ada", password_hash=None,
                                                       created_at=start, role="admin"))  # fmt: skip
            await conn.execute(sa.insert(chats).values(id=CHAT, owner_id=OWNER, title="t",
                                                       created_at=start, updated_at=start))  # fmt: skip
            await conn.execute(sa.insert(messages), rows)
    finally:
        await engine.dispose()

    await upgrade(database_url)
    store = await Store.open(database_url, vault_key=vault_key)
    try:
        found = await store.list_messages(CHAT)
        assert [m.text for m in found] == [r["text"] for r in rows]  # reads as it did
        assert [m.parent_id for m in found] == [None, *(m.id for m in found[:-1])]
        conversation = await store.get_conversation(CHAT, OWNER)
        assert conversation is not None
        assert (conversation.current_leaf, conversation.system_prompt) == (None, None)
        # A new message follows the branch; a regenerated reply is a sibling of the last one.
        turn = await store.begin_reply(CHAT, "next", owner_id=OWNER)
        assert turn.user is not None
        assert turn.user.parent_id == found[-1].id
        assert [m.id for m in turn.history] == [*(m.id for m in found), turn.user.id]
        again = await store.begin_reply(CHAT, None, owner_id=OWNER, parent=turn.user.id)
        assert again.assistant.parent_id == turn.user.id
        assert again.user is None
        assert (await store.get_conversation(CHAT, OWNER)).current_leaf == again.assistant.id  # type: ignore[union-attr]
    finally:
        await store.close()

    await downgrade(database_url, "0005")
    engine = create_engine(parse_database_url(database_url))
    try:
        async with engine.connect() as conn:
            kept = (await conn.execute(sa.text("SELECT id FROM messages ORDER BY seq"))).all()
    finally:
        await engine.dispose()
    # The branch shown stays (the four, the new message and the regenerated reply); the
    # reply it replaced goes.
    assert [k[0] for k in kept] == [*(m.id for m in found), turn.user.id, again.assistant.id]
