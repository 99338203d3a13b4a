"""The team's trails: reveal events, admin events and API tokens' last use; never a value."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from holdback.store import Store, VaultItem
from holdback.store.errors import InvalidRecordError
from holdback.store.schema import AdminEventRow, ApiTokenRow, RevealEventRow

pytestmark = pytest.mark.anyio
CANARY = "canary-7f3a9c@example.org"


async def test_reveals_are_recorded_without_labels_and_listed_newest_first(
    store: Store,
) -> None:
    ada = await store.create_user("ada", None)
    grace = await store.create_user("grace", None)
    chat = await store.create_conversation(ada.id)
    other = await store.create_conversation(ada.id)
    message = await store.add_message(chat.id, "assistant", "<EMAIL_1> <PHONE_1>")
    before = datetime.now(UTC)
    written = await store.record_reveals(
        grace.id,
        chat.id,
        message.id,
        [("<EMAIL_1>", "email", "plain"), ("<PHONE_1>", "phone", "masked"),
         ("<IBAN_1>", "iban", "label"), ("CLIENT_NAMES_2", "client-names", "plain")],
    )  # fmt: skip
    assert written == 3
    assert await store.record_reveals(grace.id, chat.id, None, [("<X_1>", "x", "label")]) == 0
    assert await store.record_reveals(grace.id, chat.id, None, []) == 0
    await store.record_reveals(ada.id, other.id, None, [("<EMAIL_1>", "email", "masked")])

    events = await store.list_reveal_events()
    assert [(e.viewer_id, e.conversation_id, e.token, e.kind, e.level) for e in events] == [
        (ada.id, other.id, "<EMAIL_1>", "email", "masked"),
        (grace.id, chat.id, "<CLIENT_NAMES_2>", "client-names", "plain"),
        (grace.id, chat.id, "<PHONE_1>", "phone", "masked"),
        (grace.id, chat.id, "<EMAIL_1>", "email", "plain"),
    ]
    assert {e.message_id for e in events[1:]} == {message.id}
    assert all(e.created_at >= before for e in events)
    assert len(await store.list_reveal_events(viewer_id=grace.id)) == 3
    assert len(await store.list_reveal_events(conversation_id=other.id)) == 1
    assert len(await store.list_reveal_events(viewer_id=grace.id, conversation_id=other.id)) == 0
    assert len(await store.list_reveal_events(limit=2)) == 2
    later = datetime.now(UTC) + timedelta(seconds=1)
    assert await store.list_reveal_events(since=later) == []
    assert await store.list_reveal_events(until=before) == []
    assert len(await store.list_reveal_events(since=before, until=later)) == 4

    # The trail outlives the viewer and the conversation.
    await store.delete_conversation(chat.id, ada.id)
    await store.delete_user("grace", conversations_to=None)
    assert len(await store.list_reveal_events(viewer_id=grace.id)) == 3


async def test_one_read_is_recorded_in_one_transaction(store: Store) -> None:
    ada = await store.create_user("ada", None)
    chat = await store.create_conversation(ada.id)
    first = await store.add_message(chat.id, "user", "<EMAIL_1>")
    second = await store.add_message(chat.id, "assistant", "<EMAIL_1> <PHONE_1>")
    writes: list[str] = []
    real = store._db.write

    async def counted(work, **kwargs):  # type: ignore[no-untyped-def]
        writes.append(kwargs.get("what", ""))
        return await real(work, **kwargs)

    store._db.write = counted  # type: ignore[method-assign]
    shown = [
        (None, [("<EMAIL_1>", "email", "plain")]),
        (first.id, [("<EMAIL_1>", "email", "plain")]),
        (second.id, [("<EMAIL_1>", "email", "plain"), ("<PHONE_1>", "phone", "label")]),
    ]
    assert await store.record_read(ada.id, chat.id, shown) == 3
    assert writes == ["recording reveals"]
    events = await store.list_reveal_events()
    assert sorted((e.message_id or "", e.token) for e in events) == sorted(
        [("", "<EMAIL_1>"), (first.id, "<EMAIL_1>"), (second.id, "<EMAIL_1>")]
    )
    # A read that showed nothing worth recording writes nothing; a bad part refuses it all.
    assert await store.record_read(ada.id, chat.id, [(first.id, [("<X_1>", "x", "label")])]) == 0
    assert writes == ["recording reveals"]
    with pytest.raises(InvalidRecordError):
        await store.record_read(ada.id, chat.id, [*shown, (second.id, [("<E_1>", "e", "loud")])])
    assert len(await store.list_reveal_events()) == 3


async def test_reveals_refuse_what_is_not_a_token_kind_or_level(store: Store) -> None:
    ada = await store.create_user("ada", None)
    for token in (CANARY, "<email_1>", "<EMAIL_0>", "", "<" + "A" * 120 + "_1>"):
        with pytest.raises(InvalidRecordError) as caught:
            await store.record_reveals(ada.id, None, None, [(token, "email", "plain")])
        assert CANARY not in str(caught.value)
    with pytest.raises(InvalidRecordError, match="kind"):
        await store.record_reveals(ada.id, None, None, [("<EMAIL_1>", CANARY, "plain")])
    with pytest.raises(InvalidRecordError, match="reveal level"):
        await store.record_reveals(ada.id, None, None, [("<EMAIL_1>", "email", "shown")])
    for bad_id in (CANARY, "x" * 33, ""):
        with pytest.raises(InvalidRecordError, match="id is up to 32") as caught:
            await store.record_reveals(bad_id, None, None, [("<EMAIL_1>", "email", "plain")])
        assert CANARY not in str(caught.value)
    # One bad item refuses the whole call: nothing was written.
    with pytest.raises(InvalidRecordError):
        await store.record_reveals(
            ada.id, None, None, [("<EMAIL_1>", "email", "plain"), (CANARY, "email", "plain")]
        )
    assert await store.list_reveal_events() == []


async def test_admin_events_are_recorded_and_listed(store: Store) -> None:
    ada = await store.create_user("ada", None)
    before = datetime.now(UTC)
    await store.record_admin(ada.id, "group.create", "ops")
    await store.record_admin(ada.id, "user.role", "grace")
    await store.record_admin(None, "level.set", "")
    events = await store.list_admin_events()
    assert [(e.actor_id, e.action, e.target) for e in events] == [
        (None, "level.set", ""),
        (ada.id, "user.role", "grace"),
        (ada.id, "group.create", "ops"),
    ]
    assert [e.action for e in await store.list_admin_events(actor_id=ada.id)] == [
        "user.role", "group.create",
    ]  # fmt: skip
    assert len(await store.list_admin_events(action="group.create")) == 1
    assert len(await store.list_admin_events(limit=1)) == 1
    assert await store.list_admin_events(until=before) == []
    assert len(await store.list_admin_events(since=before)) == 3
    for action in ("", "Group.Create", "x" * 65, "has space"):
        with pytest.raises(InvalidRecordError, match="admin action"):
            await store.record_admin(ada.id, action, "t")
    for target in ("x" * 401, "new\nline"):
        with pytest.raises(InvalidRecordError, match="target"):
            await store.record_admin(ada.id, "group.create", target)
    for limit in (0, -1, 10_001):
        with pytest.raises(InvalidRecordError, match="1 to 10000"):
            await store.list_admin_events(limit=limit)
    with pytest.raises(InvalidRecordError, match="aware"):
        await store.list_reveal_events(since=datetime(2026, 1, 1))


async def test_no_value_reaches_the_trails(store: Store) -> None:
    ada = await store.create_user("ada", None)
    grace = await store.create_user("grace", None)
    chat = await store.create_conversation(ada.id)
    [token] = await store.assign_tokens(chat.id, [VaultItem("email", CANARY, CANARY)])
    message = await store.add_message(chat.id, "assistant", f"Write to {token}")
    await store.record_reveals(grace.id, chat.id, message.id, [(token, "email", "plain")])
    await store.record_admin(ada.id, "conversation.share", "grace")

    async def rows(session: AsyncSession) -> list[str]:
        found: list[str] = []
        for table in (RevealEventRow, AdminEventRow):
            result = await session.execute(select(table.__table__))
            found.extend(repr(tuple(row)) for row in result)
        return found

    stored = await store.database.read(rows)
    assert len(stored) == 2
    assert token in stored[0]
    for row in stored:
        assert CANARY not in row
        assert CANARY.split("@")[0] not in row


async def test_an_api_tokens_use_is_noted_at_most_once_a_minute(store: Store) -> None:
    ada = await store.create_user("ada", None)
    await store.create_api_token(ada.id, "laptop")
    [listed] = await store.list_api_tokens()
    assert listed.last_used_at is None

    await store.touch_api_token(listed.id)
    [touched] = await store.list_api_tokens()
    assert touched.last_used_at is not None
    await store.touch_api_token(listed.id)  # within a minute: nothing is written
    [again] = await store.list_api_tokens()
    assert again.last_used_at == touched.last_used_at

    # Another process (no memory of its own) within the minute: the database says no.
    store._touched.clear()
    await store.touch_api_token(listed.id)
    assert (await store.list_api_tokens())[0].last_used_at == touched.last_used_at

    # A minute later it moves.
    long_ago = datetime.now(UTC) - timedelta(minutes=5)

    async def age(session: AsyncSession) -> None:
        await session.execute(update(ApiTokenRow).values(last_used_at=long_ago))

    await store.database.write(age, what="ageing a token")
    store._touched.clear()
    await store.touch_api_token(listed.id)
    [moved] = await store.list_api_tokens()
    assert moved.last_used_at is not None
    assert moved.last_used_at > long_ago + timedelta(minutes=4)
    await store.touch_api_token("0" * 32)  # an unknown id is no error
