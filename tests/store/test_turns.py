"""The batched turn methods: the same stored state as the single-purpose calls, in one
transaction each, all or nothing, with `seq` still unique and ordered under concurrency."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

import anyio
import pytest
from sqlalchemy import text

from holdback.store import Store, Turn, VaultItem
from holdback.store.errors import (
    ConversationNotFoundError,
    InvalidRecordError,
    MessageNotFoundError,
    StoreError,
)

pytestmark = pytest.mark.anyio

CANARY = "canary.turns.5e8c1@example.org"
SPANS = {"masked": [{"start": 6, "end": 15, "kind": "email", "token": "<EMAIL_1>"}]}

State = tuple[str, list[tuple[object, ...]], list[tuple[object, ...]]]


async def state(store: Store, owner_id: str, conversation_id: str) -> State:
    """What a conversation holds, without ids and timestamps (which differ run to run)."""
    conversation = await store.get_conversation(conversation_id, owner_id)
    assert conversation is not None
    messages = await store.list_messages(conversation_id)
    seq_of = {m.id: m.seq for m in messages}
    audit = await store.list_audit(conversation_id)
    return (
        conversation.title,
        [(m.seq, m.role, m.text, m.parts, m.status, m.finish_reason, m.meta) for m in messages],
        [(e.action, seq_of.get(e.message_id or ""), e.counts) for e in audit],
    )


async def old_turn(
    store: Store,
    owner_id: str,
    chat: str,
    said: str,
    reply: str,
    *,
    redacted: Mapping[str, int],
    blocked: Mapping[str, int],
) -> None:
    """The pipeline's sequence of single-purpose calls, as it was before `begin_reply`."""
    conversation = await store.get_conversation(chat, owner_id)
    assert conversation is not None
    await store.load_vault(chat)
    message = await store.add_message(chat, "user", said, meta=SPANS)
    if not conversation.title:
        await store.rename_conversation(chat, owner_id, said[:20])
    await store.record_audit(chat, message.id, "masked", Counter({"email": 1}))
    await store.list_messages(chat)
    assistant = await store.add_message(chat, "assistant", "", status="incomplete")
    if blocked:
        await store.record_audit(chat, assistant.id, "blocked", blocked)
    await store.update_message(
        assistant.id, text=reply, parts={"reasoning": "hm"}, status="complete", finish_reason="stop"
    )
    if redacted:
        await store.record_audit(chat, assistant.id, "redacted", redacted)


async def new_turn(
    store: Store,
    owner_id: str,
    chat: str,
    said: str,
    reply: str,
    *,
    redacted: Mapping[str, int],
    blocked: Mapping[str, int],
) -> Turn:
    opened = await store.open_conversation(chat, owner_id)
    assert opened is not None
    conversation, _ = opened
    turn = await store.begin_reply(
        chat,
        said,
        meta=SPANS,
        title=None if conversation.title else said[:20],
        owner_id=owner_id,
        masked=Counter({"email": 1}),
    )
    await store.finish_reply(
        chat,
        turn.assistant.id,
        text=reply,
        parts={"reasoning": "hm"},
        status="complete",
        finish_reason="stop",
        redacted=redacted,
        blocked=blocked,
    )
    return turn


async def test_open_conversation_is_get_conversation_and_load_vault(store: Store) -> None:
    alice = await store.create_user("alice", None)
    bob = await store.create_user("bob", None)
    chat = await store.create_conversation(alice.id, "plans")
    assert await store.open_conversation(chat.id, alice.id) == (chat, {})
    items = [VaultItem("email", "a@x.io", "a@x.io"), VaultItem("phone", "+1 555", "+1555")]
    items.append(VaultItem("email", "b@x.io", "b@x.io"))
    await store.assign_tokens(chat.id, items)
    vault = await store.load_vault(chat.id)
    opened = await store.open_conversation(chat.id, alice.id)
    assert opened == (await store.get_conversation(chat.id, alice.id), vault)
    assert opened is not None
    assert list(opened[1]) == list(vault)  # the same order too
    assert await store.open_conversation(chat.id, bob.id) is None
    assert await store.open_conversation("missing", alice.id) is None


async def test_a_turn_stores_exactly_what_the_old_sequence_stores(store: Store) -> None:
    user = await store.ensure_local_user()
    old = await store.create_conversation(user.id)
    new = await store.create_conversation(user.id)
    turns = [
        ("Hello <EMAIL_1>, first", "Hi.", {}, {}),
        ("And <EMAIL_1> again", "Sure [redacted email]", {"email": 1}, {}),
        ("Third", "Stopped", {"phone": 2}, {"credit_card": 1}),
    ]
    for said, reply, redacted, blocked in turns:
        before = await store.get_conversation(new.id, user.id)
        assert before is not None
        await old_turn(store, user.id, old.id, said, reply, redacted=redacted, blocked=blocked)
        turn = await new_turn(
            store, user.id, new.id, said, reply, redacted=redacted, blocked=blocked
        )
        assert await state(store, user.id, new.id) == await state(store, user.id, old.id)
        after = await store.get_conversation(new.id, user.id)
        assert after is not None
        assert after.updated_at > before.updated_at
        listed = await store.list_messages(new.id)
        assert after.updated_at == listed[-1].updated_at
        assert listed[-1].updated_at >= turn.assistant.created_at
        assert listed[-2] == turn.user == turn.history[-1]
    title, messages, audit = await state(store, user.id, new.id)
    assert title == "Hello <EMAIL_1>, fir"
    assert [m[1] for m in messages] == ["user", "assistant"] * 3
    assert messages[0][6] == SPANS
    actions = ["masked", "masked", "redacted", "masked", "blocked", "redacted"]
    assert [a[0] for a in audit] == actions


async def test_begin_reply_returns_the_history_and_the_placeholder(store: Store) -> None:
    user = await store.ensure_local_user()
    chat = await store.create_conversation(user.id, "kept")
    first = await store.begin_reply(chat.id, "one")
    assert (first.user.seq, first.assistant.seq) == (1, 2)
    assert first.history == [first.user]
    assert (first.user.role, first.user.status, first.user.meta, first.user.parts) == (
        "user",
        "complete",
        {},
        {},
    )
    listed = await store.list_messages(chat.id)
    assert listed == [first.user, first.assistant]
    assert (first.assistant.role, first.assistant.text, first.assistant.status) == (
        "assistant",
        "",
        "incomplete",
    )
    # Meta reads back as JSON gives it: what `begin_reply` returns is what is stored.
    second = await store.begin_reply(chat.id, "two", meta={"spans": (1, 2), "n": 3})
    assert second.user.meta == {"spans": [1, 2], "n": 3}
    assert second.history == [*listed, second.user] == (await store.list_messages(chat.id))[:-1]
    assert await store.list_audit(chat.id) == []  # no counts, no audit event
    conversation = await store.get_conversation(chat.id, user.id)
    assert conversation is not None
    assert conversation.title == "kept"
    # A partial finish keeps the finish reason, as `update_message` does.
    await store.finish_reply(
        chat.id, second.assistant.id, text="x", parts={}, status="blocked", finish_reason=None
    )
    done = (await store.list_messages(chat.id))[-1]
    assert (done.text, done.status, done.finish_reason) == ("x", "blocked", None)
    assert await store.list_audit(chat.id) == []


async def test_another_users_or_a_missing_conversation_is_not_found(store: Store) -> None:
    alice = await store.create_user("alice", None)
    bob = await store.create_user("bob", None)
    chat = await store.create_conversation(alice.id, "")
    before = await store.get_conversation(chat.id, alice.id)
    with pytest.raises(ConversationNotFoundError):
        await store.begin_reply(chat.id, "hi", title="mine", owner_id=bob.id, masked={"email": 1})
    with pytest.raises(ConversationNotFoundError):
        await store.begin_reply("missing", "hi", title="t", owner_id=alice.id)
    with pytest.raises(ConversationNotFoundError):
        await store.begin_reply("missing", "hi")
    assert await state(store, alice.id, chat.id) == ("", [], [])
    assert await store.get_conversation(chat.id, alice.id) == before

    turn = await store.begin_reply(chat.id, "hi", owner_id=alice.id)
    other = await store.create_conversation(alice.id, "other")
    done = {"text": "x", "parts": {}, "status": "complete", "finish_reason": "stop"}
    with pytest.raises(ConversationNotFoundError):
        await store.finish_reply("missing", turn.assistant.id, **done)  # type: ignore[arg-type]
    with pytest.raises(MessageNotFoundError):
        await store.finish_reply(other.id, turn.assistant.id, **done, redacted={"email": 1})  # type: ignore[arg-type]
    with pytest.raises(MessageNotFoundError):
        await store.finish_reply(chat.id, "missing", **done)  # type: ignore[arg-type]
    # The failed finishes touched nothing: not the message, the audit, nor `updated_at`.
    assert await store.list_messages(chat.id) == [turn.user, turn.assistant]
    assert await store.list_audit(other.id) == []
    assert await store.get_conversation(other.id, alice.id) == other


async def test_invalid_input_is_refused_and_nothing_is_written(store: Store) -> None:
    user = await store.ensure_local_user()
    chat = await store.create_conversation(user.id, "")
    refused: list[dict[str, object]] = [
        {"title": "x" * 501},
        {"meta": {"nan": float("nan")}},
        {"meta": {"when": object()}},
        {"masked": {"email": -1}},
        {"masked": {"": 1}},
        {"masked": {"email": True}},
    ]
    for bad in refused:
        with pytest.raises(InvalidRecordError):
            await store.begin_reply(chat.id, "hi", owner_id=user.id, **bad)  # type: ignore[arg-type]
    assert await state(store, user.id, chat.id) == ("", [], [])

    turn = await store.begin_reply(chat.id, "hi", owner_id=user.id)
    done: dict[str, object] = {
        "text": "x",
        "parts": {},
        "status": "complete",
        "finish_reason": "stop",
    }
    refused = [
        {"status": "finished"},
        {"parts": {"bad channel!": "x"}},
        {"parts": {"reasoning": 3}},
        {"finish_reason": "x" * 65},
        {"redacted": {"email": 1.5}},
        {"blocked": {"email": -2}},
    ]
    for bad in refused:
        with pytest.raises(InvalidRecordError):
            await store.finish_reply(chat.id, turn.assistant.id, **{**done, **bad})  # type: ignore[arg-type]
    assert await store.list_messages(chat.id) == [turn.user, turn.assistant]
    assert await store.list_audit(chat.id) == []


async def fail_audit_inserts(store: Store) -> None:
    """A trigger that makes every audit insert fail inside the database, mid-transaction."""
    if store.database.dialect == "sqlite":
        statements = [
            "CREATE TRIGGER no_audit BEFORE INSERT ON audit_events "
            "BEGIN SELECT RAISE(ABORT, 'no audit'); END"
        ]
    else:
        statements = [
            "CREATE FUNCTION no_audit() RETURNS trigger LANGUAGE plpgsql AS "
            "$$ BEGIN RAISE EXCEPTION 'no audit'; END $$",
            "CREATE TRIGGER no_audit BEFORE INSERT ON audit_events "
            "FOR EACH ROW EXECUTE FUNCTION no_audit()",
        ]
    async with store.database.engine.begin() as conn:
        for statement in statements:
            await conn.execute(text(statement))


def assert_names_no_value(exc: BaseException) -> None:
    for shown in (str(exc), repr(exc), str(exc.__context__), repr(exc.__context__)):
        assert CANARY not in shown
        assert "<EMAIL_1>" not in shown


async def test_a_failure_inside_the_transaction_writes_nothing_and_shows_no_value(
    store: Store,
) -> None:
    user = await store.ensure_local_user()
    chat = await store.create_conversation(user.id, "")
    kept = await store.begin_reply(chat.id, "kept")
    before = await state(store, user.id, chat.id)
    updated = await store.get_conversation(chat.id, user.id)
    await fail_audit_inserts(store)

    with pytest.raises(StoreError) as raised:
        await store.begin_reply(
            chat.id,
            f"mail {CANARY} <EMAIL_1>",
            meta={"canary": CANARY},
            title=f"about {CANARY}",
            owner_id=user.id,
            masked={"email": 1},
        )
    assert_names_no_value(raised.value)
    with pytest.raises(StoreError) as raised:
        await store.finish_reply(
            chat.id,
            kept.assistant.id,
            text=f"to {CANARY}",
            parts={"reasoning": CANARY},
            status="complete",
            finish_reason="stop",
            redacted={"email": 1},
        )
    assert_names_no_value(raised.value)
    # Neither the user message, nor the title, nor the reply's text: nothing at all.
    assert await state(store, user.id, chat.id) == before
    assert await store.get_conversation(chat.id, user.id) == updated


async def test_concurrent_turns_keep_seq_unique_and_ordered(store: Store) -> None:
    user = await store.ensure_local_user()
    chat = await store.create_conversation(user.id, "")
    turns: dict[str, list[Turn]] = {}

    async def tab(name: str) -> None:
        mine = turns.setdefault(name, [])
        for i in range(6):
            turn = await store.begin_reply(
                chat.id, f"{name}-{i}", title=f"{name}", owner_id=user.id, masked={"email": i}
            )
            mine.append(turn)
            await store.finish_reply(
                chat.id,
                turn.assistant.id,
                text=f"re {name}-{i}",
                parts={},
                status="complete",
                finish_reason="stop",
                redacted={"email": 1},
            )

    async def old_writer() -> None:
        for i in range(6):
            await store.add_message(chat.id, "user", f"old-{i}")

    async with anyio.create_task_group() as tg:
        for name in ("tab-a", "tab-b", "tab-c", "tab-d"):
            tg.start_soon(tab, name)
        tg.start_soon(old_writer)
    messages = await store.list_messages(chat.id)
    assert [m.seq for m in messages] == list(range(1, 4 * 12 + 6 + 1))
    index = {m.id: i for i, m in enumerate(messages)}
    for name, mine in turns.items():
        assert [t.user.text for t in mine] == [f"{name}-{i}" for i in range(6)]
        for turn in mine:
            at = index[turn.user.id]
            # The placeholder directly follows its message; the history is the prefix then.
            assert index[turn.assistant.id] == at + 1
            assert [m.id for m in turn.history] == [m.id for m in messages[: at + 1]]
            assert messages[at + 1].text == f"re {turn.user.text}"
    assert [m.text for m in messages if m.text.startswith("old-")] == [f"old-{i}" for i in range(6)]
    audit = await store.list_audit(chat.id)
    assert Counter(e.action for e in audit) == {"masked": 24, "redacted": 24}


async def test_a_new_conversation_is_created_by_its_first_write(store: Store) -> None:
    user = await store.ensure_local_user()
    # By the vault update: the conversation, untitled, and its tokens, in one transaction.
    first = store.new_conversation_id()
    update = await store.update_vault(
        first, [VaultItem("email", CANARY, CANARY)], create_for=user.id
    )
    assert update.tokens == ["<EMAIL_1>"]
    turn = await store.begin_reply(first, "mail <EMAIL_1>", title="mail", owner_id=user.id)
    assert await state(store, user.id, first) == (
        "mail",
        [(1, "user", "mail <EMAIL_1>", {}, "complete", None, {}),
         (2, "assistant", "", {}, "incomplete", None, {})],
        [],
    )  # fmt: skip
    assert turn.history[-1].text == "mail <EMAIL_1>"
    # By the turn itself, when the message has no values.
    second = store.new_conversation_id()
    await store.begin_reply(second, "hello", title="hello", owner_id=user.id, create_for=user.id)
    assert (await state(store, user.id, second))[0] == "hello"
    listed = {c.id for c in await store.list_conversations(user.id)}
    assert {first, second} <= listed


async def test_a_failed_first_write_leaves_no_conversation(store: Store) -> None:
    user = await store.ensure_local_user()
    await fail_audit_inserts(store)
    chat = store.new_conversation_id()
    with pytest.raises(StoreError) as raised:
        await store.begin_reply(
            chat, f"mail {CANARY}", owner_id=user.id, masked={"email": 1}, create_for=user.id
        )
    assert_names_no_value(raised.value)
    assert await store.get_conversation(chat, user.id) is None
    assert await store.list_conversations(user.id) == []
