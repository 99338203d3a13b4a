"""The Store API: users, sessions, tokens, conversations, messages, term lists and audit."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import InstrumentedAttribute

from holdback.store import Store, VaultItem
from holdback.store.errors import (
    ConversationNotFoundError,
    InvalidRecordError,
    MessageNotFoundError,
    UserExistsError,
    UserNotFoundError,
)
from holdback.store.schema import ApiTokenRow, SessionRow

pytestmark = pytest.mark.anyio


async def column(store: Store, attribute: InstrumentedAttribute[str]) -> list[str]:
    async def read(session: AsyncSession) -> list[str]:
        return list((await session.scalars(select(attribute))).all())

    return await store.database.read(read)


async def test_users_are_created_found_and_unique(store: Store) -> None:
    alice = await store.create_user("alice", "$argon2id$hash")
    assert alice.password_hash == "$argon2id$hash"
    assert len(alice.id) == 32
    assert alice.id.isalnum()
    assert await store.get_user_by_name("alice") == alice
    assert await store.get_user(alice.id) == alice
    assert await store.get_user_by_name("bob") is None
    with pytest.raises(UserExistsError):
        await store.create_user("alice", None)
    for bad in ("", "   ", "x" * 201, "tab\there"):
        with pytest.raises(InvalidRecordError):
            await store.create_user(bad, None)


async def test_local_user_is_created_once(store: Store) -> None:
    first = await store.ensure_local_user()
    assert first.name == "local"
    assert first.password_hash is None
    assert await store.ensure_local_user() == first


async def test_sessions_store_only_a_hash_and_expire(store: Store) -> None:
    user = await store.create_user("alice", None)
    secret = await store.create_session(user.id, timedelta(hours=1))
    assert len(secret) >= 40
    assert await store.user_for_session(secret) == user
    assert await store.user_for_session(secret + "x") is None
    stored = await column(store, SessionRow.secret_hash)
    assert secret not in stored
    assert len(stored) == 1
    await store.delete_session(secret)
    assert await store.user_for_session(secret) is None

    short = await store.create_session(user.id, timedelta(microseconds=1))
    assert await store.user_for_session(short) is None  # expired, and now deleted
    assert await store.delete_expired_sessions() == 0
    with pytest.raises(InvalidRecordError):
        await store.create_session(user.id, timedelta(0))
    with pytest.raises(UserNotFoundError):
        await store.create_session("nobody", timedelta(hours=1))


async def test_expired_sessions_can_be_purged(store: Store) -> None:
    user = await store.create_user("alice", None)
    await store.create_session(user.id, timedelta(microseconds=1))
    live = await store.create_session(user.id, timedelta(hours=1))
    assert await store.delete_expired_sessions() == 1
    assert await store.user_for_session(live) == user


async def test_api_tokens_are_shown_once_and_stored_hashed(store: Store) -> None:
    user = await store.create_user("alice", None)
    token = await store.create_api_token(user.id, "laptop")
    assert token.startswith("hb_")
    assert await store.user_for_api_token(token) == user
    assert await store.user_for_api_token("hb_forged") is None
    hashes = await column(store, ApiTokenRow.token_hash)
    assert token not in hashes
    with pytest.raises(UserNotFoundError):
        await store.create_api_token("nobody", "x")


async def test_conversations_belong_to_their_owner(store: Store) -> None:
    alice = await store.create_user("alice", None)
    bob = await store.create_user("bob", None)
    chat = await store.create_conversation(alice.id, "plans")
    assert chat.title == "plans"
    assert chat.owner_id == alice.id
    assert chat.created_at.tzinfo is not None
    assert await store.get_conversation(chat.id, alice.id) == chat
    # Bob sees nothing, renames nothing, deletes nothing.
    assert await store.get_conversation(chat.id, bob.id) is None
    assert await store.list_conversations(bob.id) == []
    assert not await store.rename_conversation(chat.id, bob.id, "mine")
    assert not await store.delete_conversation(chat.id, bob.id)
    assert (await store.get_conversation(chat.id, alice.id)) == chat
    assert await store.rename_conversation(chat.id, alice.id, "new plans")
    renamed = await store.get_conversation(chat.id, alice.id)
    assert renamed is not None
    assert renamed.title == "new plans"
    assert renamed.updated_at >= chat.updated_at
    with pytest.raises(UserNotFoundError):
        await store.create_conversation("nobody")
    with pytest.raises(InvalidRecordError):
        await store.create_conversation(alice.id, "x" * 501)


async def test_conversations_are_listed_most_recently_updated_first(store: Store) -> None:
    user = await store.ensure_local_user()
    first = await store.create_conversation(user.id, "first")
    second = await store.create_conversation(user.id, "second")
    third = await store.create_conversation(user.id, "third")
    assert [c.id for c in await store.list_conversations(user.id)] == [
        third.id,
        second.id,
        first.id,
    ]
    await store.add_message(first.id, "user", "hello")
    assert next(c.id for c in await store.list_conversations(user.id)) == first.id


async def test_messages_keep_order_parts_status_and_meta(store: Store) -> None:
    user = await store.ensure_local_user()
    chat = await store.create_conversation(user.id)
    asked = await store.add_message(chat.id, "user", "Email <EMAIL_1> about it")
    reply = await store.add_message(
        chat.id,
        "assistant",
        "",
        parts={"reasoning": "thinking about <EMAIL_1>"},
        status="incomplete",
        meta={"model": "m-1", "usage": {"input": 10}},
    )
    assert (asked.seq, reply.seq) == (1, 2)
    await store.update_message(
        reply.id,
        text="Done, <EMAIL_1>.",
        parts={"reasoning": "done"},
        status="complete",
        finish_reason="stop",
    )
    listed = await store.list_messages(chat.id)
    assert [m.id for m in listed] == [asked.id, reply.id]
    final = listed[1]
    assert final.text == "Done, <EMAIL_1>."
    assert final.parts == {"reasoning": "done"}
    assert (final.status, final.finish_reason) == ("complete", "stop")
    assert final.meta == {"model": "m-1", "usage": {"input": 10}}
    assert final.updated_at >= final.created_at
    # A partial update changes only what it names.
    await store.update_message(reply.id, status="blocked")
    again = (await store.list_messages(chat.id))[1]
    assert (again.status, again.text, again.finish_reason) == ("blocked", final.text, "stop")


async def test_bad_messages_are_refused_and_nothing_is_written(store: Store) -> None:
    user = await store.ensure_local_user()
    chat = await store.create_conversation(user.id)
    bad_calls: list[dict[str, object]] = [
        dict(role="User"),
        dict(role=""),
        dict(status="done"),
        dict(parts={"bad channel!": "x"}),
        dict(meta={"when": datetime.now(UTC)}),
        dict(meta={"nan": float("nan")}),
        dict(finish_reason="x" * 65),
    ]
    for bad in bad_calls:
        kwargs: dict[str, object] = {"role": "user", **bad}
        role = str(kwargs.pop("role"))
        with pytest.raises(InvalidRecordError):
            await store.add_message(chat.id, role, "text", **kwargs)  # type: ignore[arg-type]
    assert await store.list_messages(chat.id) == []
    with pytest.raises(ConversationNotFoundError):
        await store.add_message("missing", "user", "x")
    with pytest.raises(MessageNotFoundError):
        await store.update_message("missing", status="complete")
    with pytest.raises(InvalidRecordError):
        await store.update_message("missing", status="finished")


async def test_term_lists_round_trip_and_replace(store: Store) -> None:
    await store.save_term_list("clients", "client", "sensitive", ["Acme Corp", "Globex"])
    await store.save_term_list("banned", "slur", "forbidden", ["badword"])
    lists = await store.load_term_lists()
    assert [(t.name, t.kind, t.purpose, t.terms) for t in lists] == [
        ("banned", "slur", "forbidden", ("badword",)),
        ("clients", "client", "sensitive", ("Acme Corp", "Globex")),
    ]
    assert "Acme" not in repr(lists)
    await store.save_term_list("clients", "client", "sensitive", ["Initech"])
    assert [t.terms for t in await store.load_term_lists() if t.name == "clients"] == [("Initech",)]
    assert await store.delete_term_list("banned")
    assert not await store.delete_term_list("banned")
    assert [t.name for t in await store.load_term_lists()] == ["clients"]


@pytest.mark.parametrize(
    ("name", "kind", "purpose", "terms"),
    [
        ("", "client", "sensitive", ["x"]),
        ("n", "!!!", "sensitive", ["x"]),
        ("n", "client", "secret", ["x"]),
        ("n", "client", "sensitive", ["ok", "  "]),
        ("n", "client", "sensitive", "a string is not a list"),
        ("n", "client", "sensitive", ["x" * 1001]),
    ],
)
async def test_bad_term_lists_are_refused(
    store: Store, name: str, kind: str, purpose: str, terms: list[str]
) -> None:
    with pytest.raises(InvalidRecordError):
        await store.save_term_list(name, kind, purpose, terms)  # type: ignore[arg-type]
    assert await store.load_term_lists() == []


async def test_audit_records_kinds_and_counts_only(store: Store) -> None:
    user = await store.ensure_local_user()
    chat = await store.create_conversation(user.id)
    message = await store.add_message(chat.id, "user", "<EMAIL_1>")
    await store.record_audit(chat.id, message.id, "masked", {"email": 1, "phone": 0})
    await store.record_audit(chat.id, None, "redacted", {"credit card": 2, "CREDIT_CARD": 1})
    events = await store.list_audit(chat.id)
    assert [(e.action, e.message_id, e.counts) for e in events] == [
        ("masked", message.id, {"EMAIL": 1, "PHONE": 0}),
        ("redacted", None, {"CREDIT_CARD": 3}),
    ]
    with pytest.raises(InvalidRecordError):
        await store.record_audit(chat.id, None, "leaked", {"email": 1})  # type: ignore[arg-type]
    for bad in ({"email": -1}, {"email": True}, {"": 1}, {"email": 1.5}):
        with pytest.raises(InvalidRecordError):
            await store.record_audit(chat.id, None, "masked", bad)  # type: ignore[arg-type]
    with pytest.raises(ConversationNotFoundError):
        await store.record_audit("missing", None, "masked", {"email": 1})
    other = await store.create_conversation(user.id)
    with pytest.raises(MessageNotFoundError):
        await store.record_audit(other.id, message.id, "masked", {"email": 1})
    assert len(await store.list_audit(chat.id)) == 2
    assert await store.list_audit(other.id) == []


async def test_deleting_a_conversation_deletes_everything_it_owns(store: Store) -> None:
    user = await store.ensure_local_user()
    doomed = await store.create_conversation(user.id, "doomed")
    kept = await store.create_conversation(user.id, "kept")
    for chat in (doomed, kept):
        tokens = await store.assign_tokens(chat.id, [VaultItem("email", "a@b.c", "a@b.c")])
        message = await store.add_message(chat.id, "user", f"write to {tokens[0]}")
        await store.record_audit(chat.id, message.id, "masked", {"email": 1})
    assert await store.delete_conversation(doomed.id, user.id)
    assert await store.get_conversation(doomed.id, user.id) is None
    assert await store.list_messages(doomed.id) == []
    assert await store.load_vault(doomed.id) == {}
    assert await store.list_audit(doomed.id) == []
    assert not await store.delete_conversation(doomed.id, user.id)
    # The other conversation is untouched.
    assert await store.load_vault(kept.id) == {"<EMAIL_1>": "a@b.c"}
    assert len(await store.list_messages(kept.id)) == 1
    assert len(await store.list_audit(kept.id)) == 1
