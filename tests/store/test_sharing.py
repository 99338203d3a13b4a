"""Shared conversations: shares with users and groups, access, and what a viewer is shown."""

from __future__ import annotations

import asyncio

import pytest

from holdback.store import Store
from holdback.store.errors import (
    ConversationNotFoundError,
    GroupNotFoundError,
    InvalidRecordError,
    UserNotFoundError,
)
from holdback.store.records import User

pytestmark = pytest.mark.anyio


async def team(store: Store) -> tuple[User, User, User]:
    ada = await store.create_user("ada", None)
    grace = await store.create_user("grace", None)
    linus = await store.create_user("linus", None)
    return ada, grace, linus


async def test_a_share_with_a_user_gives_access_and_sharing_again_changes_it(
    store: Store,
) -> None:
    ada, grace, linus = await team(store)
    chat = await store.create_conversation(ada.id, "plans")
    assert await store.access_of(chat.id, ada.id) == "owner"
    assert await store.access_of(chat.id, grace.id) is None

    first = await store.share(chat.id, ada.id, user="grace", access="read")
    assert (first.conversation_id, first.user, first.group, first.access) == (
        chat.id, "grace", None, "read",
    )  # fmt: skip
    assert await store.access_of(chat.id, grace.id) == "read"
    again = await store.share(chat.id, ada.id, user="grace", access="write")
    assert (again.id, again.access, again.created_at) == (first.id, "write", first.created_at)
    assert await store.access_of(chat.id, grace.id) == "write"
    assert await store.access_of(chat.id, linus.id) is None
    assert await store.list_shares(chat.id, ada.id) == [again]

    assert await store.unshare(chat.id, ada.id, first.id) is True
    assert await store.unshare(chat.id, ada.id, first.id) is False
    assert await store.access_of(chat.id, grace.id) is None
    assert await store.list_shares(chat.id, ada.id) == []


async def test_group_shares_reach_members_and_write_beats_read(store: Store) -> None:
    ada, grace, linus = await team(store)
    ops = await store.create_group("ops")
    await store.add_member("ops", "grace")
    chat = await store.create_conversation(ada.id)
    shared = await store.share(chat.id, ada.id, group="ops", access="write")
    assert (shared.user, shared.group, shared.access) == (None, "ops", "write")
    direct = await store.share(chat.id, ada.id, user="grace", access="read")
    assert await store.access_of(chat.id, grace.id) == "write"
    assert await store.access_of(chat.id, linus.id) is None
    await store.add_member("ops", "linus")
    assert await store.access_of(chat.id, linus.id) == "write"
    await store.share(chat.id, ada.id, group="ops", access="read")
    assert await store.access_of(chat.id, grace.id) == "read"
    await store.remove_member("ops", "grace")
    assert await store.access_of(chat.id, grace.id) == "read"  # still shared with her
    await store.unshare(chat.id, ada.id, direct.id)
    assert await store.access_of(chat.id, grace.id) is None
    assert [(s.user, s.group) for s in await store.list_shares(chat.id, ada.id)] == [
        (None, "ops"),
    ]
    await store.rename_group("ops", "operations")
    assert [s.group for s in await store.list_shares(chat.id, ada.id)] == ["operations"]
    assert ops.id  # shares follow the group's id, not its name


async def test_only_the_owner_shares_and_never_with_themselves(store: Store) -> None:
    ada, grace, _ = await team(store)
    chat = await store.create_conversation(ada.id)
    await store.share(chat.id, ada.id, user="grace", access="write")
    with pytest.raises(ConversationNotFoundError):
        await store.share(chat.id, grace.id, user="linus", access="read")  # write is not own
    with pytest.raises(ConversationNotFoundError):
        await store.list_shares(chat.id, grace.id)
    with pytest.raises(ConversationNotFoundError):
        await store.unshare(chat.id, grace.id, "x" * 32)
    with pytest.raises(ConversationNotFoundError):
        await store.share("0" * 32, ada.id, user="grace", access="read")
    with pytest.raises(InvalidRecordError, match="not shared with its owner"):
        await store.share(chat.id, ada.id, user="ada", access="read")
    with pytest.raises(InvalidRecordError, match="one user or one group"):
        await store.share(chat.id, ada.id, access="read")
    with pytest.raises(InvalidRecordError, match="one user or one group"):
        await store.share(chat.id, ada.id, user="grace", group="ops", access="read")
    with pytest.raises(InvalidRecordError, match="read, write"):
        await store.share(chat.id, ada.id, user="grace", access="admin")  # type: ignore[arg-type]
    with pytest.raises(UserNotFoundError):
        await store.share(chat.id, ada.id, user="nobody", access="read")
    with pytest.raises(GroupNotFoundError):
        await store.share(chat.id, ada.id, group="nobody", access="read")
    assert len(await store.list_shares(chat.id, ada.id)) == 1


async def test_disabled_viewers_have_no_access(store: Store) -> None:
    ada, grace, _ = await team(store)
    chat = await store.create_conversation(ada.id)
    await store.share(chat.id, ada.id, user="grace", access="read")
    await store.disable_user("grace")
    assert await store.access_of(chat.id, grace.id) is None
    assert await store.shared_with(grace.id) == []
    await store.enable_user("grace")
    assert await store.access_of(chat.id, grace.id) == "read"
    await store.disable_user("ada")
    assert await store.access_of(chat.id, ada.id) is None
    assert await store.access_of(chat.id, "0" * 32) is None
    assert await store.access_of("0" * 32, grace.id) is None


async def test_shared_with_lists_others_conversations_with_the_best_access(
    store: Store,
) -> None:
    ada, grace, linus = await team(store)
    await store.create_group("ops")
    await store.add_member("ops", "grace")
    older = await store.create_conversation(ada.id, "older")
    newer = await store.create_conversation(linus.id, "newer")
    own = await store.create_conversation(grace.id, "own")
    await store.share(older.id, ada.id, user="grace", access="read")
    await store.share(older.id, ada.id, group="ops", access="write")
    await store.share(newer.id, linus.id, group="ops", access="read")
    await store.share(own.id, grace.id, group="ops", access="read")  # her own: not "shared"
    await store.add_message(newer.id, "user", "latest")  # moves it to the top

    shared = await store.shared_with(grace.id)
    assert [(s.conversation.id, s.owner, s.access) for s in shared] == [
        (newer.id, "linus", "read"),
        (older.id, "ada", "write"),
    ]
    assert shared[1].conversation.title == "older"
    assert [s.conversation.id for s in await store.shared_with(ada.id)] == []
    assert [s.conversation.id for s in await store.shared_with(linus.id)] == []


async def test_shares_go_with_their_conversation(store: Store) -> None:
    ada, grace, _ = await team(store)
    chat = await store.create_conversation(ada.id)
    await store.share(chat.id, ada.id, user="grace", access="read")
    assert await store.delete_conversation(chat.id, ada.id)
    assert await store.shared_with(grace.id) == []
    assert await store.access_of(chat.id, grace.id) is None


async def test_concurrent_shares_with_one_user_make_one_share(store: Store) -> None:
    ada, _, _ = await team(store)
    chat = await store.create_conversation(ada.id)
    made = await asyncio.gather(
        *(store.share(chat.id, ada.id, user="grace", access="read") for _ in range(6))
    )
    assert len({share.id for share in made}) == 1
    assert len(await store.list_shares(chat.id, ada.id)) == 1
