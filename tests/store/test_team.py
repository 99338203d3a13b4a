"""The team's store: roles, deleting users, groups and reveal levels; migration 0005."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa
from sqlalchemy import func, select, text
from sqlalchemy.ext.asyncio import AsyncSession

from holdback.reveal import Rules
from holdback.store import Store, VaultItem, VaultKey, downgrade, upgrade
from holdback.store.engine import create_engine, parse_database_url
from holdback.store.errors import (
    ConversationNotFoundError,
    GroupExistsError,
    GroupNotFoundError,
    InvalidRecordError,
    LastAdminError,
    UserExistsError,
    UserNotFoundError,
)
from holdback.store.schema import (
    ConversationRow,
    GroupMemberRow,
    RevealLevelRow,
    ShareRow,
    UTCDateTime,
    VaultEntryRow,
)

pytestmark = pytest.mark.anyio


async def count(store: Store, table: type[object], *where: object) -> int:
    async def read(session: AsyncSession) -> int:
        query = select(func.count()).select_from(table)  # type: ignore[arg-type]
        for condition in where:
            query = query.where(condition)  # type: ignore[arg-type]
        return int(await session.scalar(query) or 0)

    return await store.database.read(read)


# -- roles ----------------------------------------------------------------------------------


async def test_the_first_user_is_an_admin_and_later_ones_are_members(store: Store) -> None:
    ada = await store.create_user("ada", "h")
    grace = await store.create_user("grace", None)
    assert (ada.role, ada.is_admin) == ("admin", True)
    assert (grace.role, grace.is_admin) == ("member", False)
    assert await store.get_user(ada.id) == ada
    assert await store.get_user_by_name("grace") == grace
    assert await store.list_users() == [ada, grace]  # oldest first
    session = await store.create_session(ada.id, timedelta(hours=1))
    found = await store.user_for_session(session)
    assert found is not None
    assert found.is_admin
    with pytest.raises(UserExistsError):
        await store.create_user("ada", None)


async def test_the_local_user_is_an_admin_even_if_it_was_made_a_member(store: Store) -> None:
    await store.create_user("ada", None)
    await store.create_user("local", None)
    local = await store.ensure_local_user()
    assert local.name == "local"
    assert local.is_admin
    assert await store.ensure_local_user() == local


async def test_the_local_user_of_an_empty_database_is_an_admin(store: Store) -> None:
    assert (await store.ensure_local_user()).is_admin
    assert not (await store.create_user("ada", None)).is_admin


async def test_concurrent_first_users_make_exactly_one_admin(
    database_url: str, vault_key: VaultKey, store: Store
) -> None:
    other = await Store.open(database_url, vault_key=vault_key)
    try:
        for round_no in range(4):
            await store.database.autocommit("DELETE FROM users")
            names = [f"user{round_no}-{i}" for i in range(8)]
            stores = [store, other] * 4
            made = await asyncio.gather(
                *(s.create_user(name, None) for s, name in zip(stores, names, strict=True))
            )
            assert sorted(u.name for u in made) == sorted(names)
            assert [u.role for u in made].count("admin") == 1
            listed = await store.list_users()
            assert [u.role for u in listed].count("admin") == 1
            assert listed[0].is_admin  # the one created first
    finally:
        await other.close()


async def test_roles_are_set_and_the_last_admin_stays(store: Store) -> None:
    ada = await store.create_user("ada", None)
    await store.create_user("grace", None)
    with pytest.raises(LastAdminError, match="'ada' is the last admin"):
        await store.set_role("ada", "member")
    grace, changed = await store.set_role("grace", "admin")
    assert grace.is_admin
    assert changed
    assert await store.set_role("grace", "admin") == (grace, False)
    demoted, changed = await store.set_role("ada", "member")
    assert changed
    assert demoted == replace(ada, role="member")
    with pytest.raises(LastAdminError):
        await store.set_role("grace", "member")
    with pytest.raises(UserNotFoundError, match="nobody"):
        await store.set_role("nobody", "admin")
    for bad in ("owner", "", "ADMIN"):
        with pytest.raises(InvalidRecordError, match="a role is one of admin, member"):
            await store.set_role("ada", bad)


async def test_a_deleted_users_conversations_go_to_an_admin(store: Store) -> None:
    ada = await store.create_user("ada", None)
    grace = await store.create_user("grace", None)
    await store.create_user("linus", None)
    chat = await store.create_conversation(grace.id, "<EMAIL_1>")
    await store.assign_tokens(chat.id, [VaultItem("email", "g@example.org", "g@example.org")])
    await store.share(chat.id, grace.id, user="ada", access="read")
    await store.share(chat.id, grace.id, user="linus", access="write")
    token = await store.create_api_token(grace.id, "laptop")
    await store.create_group("ops")
    await store.add_member("ops", "grace")

    with pytest.raises(InvalidRecordError, match="'linus' is not one"):
        await store.delete_user("grace", conversations_to="linus")
    with pytest.raises(InvalidRecordError, match="another user"):
        await store.delete_user("grace", conversations_to="grace")
    with pytest.raises(UserNotFoundError):
        await store.delete_user("grace", conversations_to="nobody")
    assert await store.delete_user("grace", conversations_to="ada") == 1

    assert await store.get_user_by_name("grace") is None
    assert await store.user_for_api_token(token) is None
    assert [c.id for c in await store.list_conversations(ada.id)] == [chat.id]
    assert dict(await store.load_vault(chat.id)) == {"<EMAIL_1>": "g@example.org"}
    assert [s.user for s in await store.list_shares(chat.id, ada.id)] == ["linus"]
    assert await store.access_of(chat.id, ada.id) == "owner"
    assert (await store.list_groups())[0].members == ()


async def test_a_deleted_users_conversations_can_go_with_their_vaults(store: Store) -> None:
    ada = await store.create_user("ada", None)
    grace = await store.create_user("grace", None)
    chats = [await store.create_conversation(grace.id) for _ in range(2)]
    for chat in chats:
        await store.assign_tokens(chat.id, [VaultItem("email", "g@example.org", "g@example.org")])
        await store.add_message(chat.id, "user", "<EMAIL_1>")
        await store.share(chat.id, grace.id, user="ada", access="read")
    kept = await store.create_conversation(ada.id)
    await store.assign_tokens(kept.id, [VaultItem("email", "a@example.org", "a@example.org")])

    assert await store.delete_user("grace", conversations_to=None) == 2
    assert await count(store, ConversationRow) == 1
    assert await count(store, VaultEntryRow) == 1
    assert await count(store, ShareRow) == 0
    assert await store.shared_with(ada.id) == []
    assert [c.id for c in await store.list_conversations(ada.id)] == [kept.id]


async def test_the_last_admin_cannot_be_deleted(store: Store) -> None:
    await store.create_user("ada", None)
    await store.create_user("grace", None)
    with pytest.raises(LastAdminError, match="cannot be deleted"):
        await store.delete_user("ada", conversations_to=None)
    with pytest.raises(UserNotFoundError):
        await store.delete_user("nobody", conversations_to=None)
    assert await store.delete_user("grace", conversations_to=None) == 0
    await store.create_user("linus", None)
    await store.set_role("linus", "admin")
    assert await store.delete_user("ada", conversations_to="linus") == 0
    assert [u.name for u in await store.list_users()] == ["linus"]


# -- groups ---------------------------------------------------------------------------------


async def test_groups_are_created_renamed_listed_and_deleted(store: Store) -> None:
    ops = await store.create_group("ops")
    assert (ops.name, ops.members) == ("ops", ())
    assert len(ops.id) == 32
    with pytest.raises(GroupExistsError, match="'ops' already exists"):
        await store.create_group("ops")
    for bad in ("", "  ", "x" * 201, "new\nline"):
        with pytest.raises(InvalidRecordError):
            await store.create_group(bad)
    legal = await store.create_group("legal")
    assert [g.name for g in await store.list_groups()] == ["legal", "ops"]

    renamed = await store.rename_group("ops", "operations")
    assert (renamed.id, renamed.name) == (ops.id, "operations")
    assert await store.rename_group("operations", "operations") == renamed
    with pytest.raises(GroupExistsError):
        await store.rename_group("operations", "legal")
    with pytest.raises(GroupNotFoundError, match="no group named 'ops'"):
        await store.rename_group("ops", "x")
    with pytest.raises(InvalidRecordError):
        await store.rename_group("legal", "")
    assert await store.get_group("operations") == renamed
    assert await store.get_group("ops") is None

    await store.delete_group("legal")
    with pytest.raises(GroupNotFoundError):
        await store.delete_group("legal")
    assert await store.list_groups() == [renamed]
    assert legal not in await store.list_groups()


async def test_members_are_added_once_and_removed(store: Store) -> None:
    ada = await store.create_user("ada", None)
    grace = await store.create_user("grace", None)
    ops = await store.create_group("ops")
    legal = await store.create_group("legal")
    assert await store.add_member("ops", "grace") is True
    assert await store.add_member("ops", "ada") is True
    assert await store.add_member("ops", "ada") is False
    assert await store.add_member("legal", "ada") is True
    assert (await store.get_group("ops")).members == ("ada", "grace")  # type: ignore[union-attr]
    assert await store.groups_of(ada.id) == sorted([ops.id, legal.id])
    assert await store.groups_of(grace.id) == [ops.id]
    with pytest.raises(GroupNotFoundError):
        await store.add_member("nobody", "ada")
    with pytest.raises(UserNotFoundError):
        await store.add_member("ops", "nobody")
    with pytest.raises(UserNotFoundError):
        await store.remove_member("ops", "nobody")
    assert await store.remove_member("ops", "ada") is True
    assert await store.remove_member("ops", "ada") is False
    assert await store.groups_of(ada.id) == [legal.id]
    listed = {g.name: g.members for g in await store.list_groups()}
    assert listed == {"legal": ("ada",), "ops": ("grace",)}


async def test_deleting_a_group_deletes_its_members_shares_and_levels(store: Store) -> None:
    ada = await store.create_user("ada", None)
    grace = await store.create_user("grace", None)
    ops = await store.create_group("ops")
    await store.add_member("ops", "grace")
    await store.set_level("ops", "email", "plain")
    await store.set_level(None, "email", "masked")
    chat = await store.create_conversation(ada.id)
    await store.share(chat.id, ada.id, group="ops", access="read")
    assert await store.access_of(chat.id, grace.id) == "read"

    await store.delete_group("ops")
    assert await store.groups_of(grace.id) == []
    assert await store.access_of(chat.id, grace.id) is None
    assert await count(store, GroupMemberRow) == 0
    assert await count(store, RevealLevelRow, RevealLevelRow.scope == ops.id) == 0
    assert await store.reveal_rules() == Rules({"email": "masked"}, {}, frozenset())


async def test_concurrent_adds_of_one_member_add_it_once(store: Store) -> None:
    await store.create_user("ada", None)
    await store.create_group("ops")
    added = await asyncio.gather(*(store.add_member("ops", "ada") for _ in range(6)))
    assert added.count(True) == 1


# -- reveal levels --------------------------------------------------------------------------


async def test_levels_make_the_rules(store: Store) -> None:
    ada = await store.create_user("ada", None)
    grace = await store.create_user("grace", None)
    ops = await store.create_group("ops")
    legal = await store.create_group("legal")
    await store.add_member("ops", "grace")
    assert await store.reveal_rules() == Rules({}, {}, frozenset())

    assert await store.set_level(None, "email", "masked") is True
    assert await store.set_level(None, "email", "masked") is False
    assert await store.set_level(None, "phone", "plain") is True
    assert await store.set_level("ops", "email", "plain") is True
    assert await store.set_level("legal", "client-names", "label") is True
    assert await store.set_level("ops", "credit_card", "masked") is True
    assert await store.never_restore("credit_card") is True
    assert await store.never_restore("credit_card") is False

    rules = await store.reveal_rules()
    assert rules == Rules(
        default={"email": "masked", "phone": "plain"},
        groups={ops.id: {"email": "plain", "credit_card": "masked"},
                legal.id: {"client-names": "label"}},
        never_restore=frozenset({"credit_card"}),
    )  # fmt: skip
    viewer = rules.for_viewer(owner=False, groups=await store.groups_of(grace.id))
    assert (viewer.level("email"), viewer.level("phone"), viewer.level("iban")) == (
        "plain", "plain", "label",
    )  # fmt: skip
    assert rules.for_viewer(owner=True).level("credit_card") == "label"
    assert await store.groups_of(ada.id) == []

    listed = [(s.group, s.kind, s.level) for s in await store.list_levels()]
    assert listed == [
        (None, "email", "masked"),
        (None, "phone", "plain"),
        ("legal", "client-names", "label"),
        ("ops", "credit_card", "masked"),
        ("ops", "email", "plain"),
    ]
    await store.rename_group("ops", "operations")
    assert ("operations", "email", "plain") in [
        (s.group, s.kind, s.level) for s in await store.list_levels()
    ]

    assert await store.clear_level("operations", "email") is True
    assert await store.clear_level("operations", "email") is False
    assert await store.clear_level(None, "phone") is True
    assert await store.allow_restore("credit_card") is True
    assert await store.allow_restore("credit_card") is False
    assert await store.reveal_rules() == Rules(
        {"email": "masked"},
        {ops.id: {"credit_card": "masked"}, legal.id: {"client-names": "label"}},
        frozenset(),
    )


async def test_levels_refuse_bad_kinds_levels_and_groups(store: Store) -> None:
    for kind in ("", "Email", "e mail", "x" * 201, "<EMAIL_1>", "a@b.org", "-x"):
        with pytest.raises(InvalidRecordError, match="kind"):
            await store.set_level(None, kind, "plain")
        with pytest.raises(InvalidRecordError, match="kind"):
            await store.never_restore(kind)
    await store.set_level(None, "k" * 200, "plain")
    for level in ("", "PLAIN", "hidden"):
        with pytest.raises(InvalidRecordError, match="a reveal level is one of"):
            await store.set_level(None, "email", level)
    with pytest.raises(GroupNotFoundError):
        await store.set_level("nobody", "email", "plain")
    with pytest.raises(GroupNotFoundError):
        await store.clear_level("nobody", "email")


# -- migration 0005 -------------------------------------------------------------------------


async def test_a_database_at_0004_upgrades_with_its_oldest_user_as_admin(
    database_url: str, vault_key: VaultKey
) -> None:
    await upgrade(database_url, "0004")
    # The tables as they were at 0004 (no role), written with holdback's own timestamp type.
    users = sa.table("users", sa.column("id"), sa.column("name"), sa.column("password_hash"),
                     sa.column("created_at", UTCDateTime()))  # fmt: skip
    chats = sa.table("conversations", sa.column("id"), sa.column("owner_id"), sa.column("title"),
                     sa.column("created_at", UTCDateTime()),
                     sa.column("updated_at", UTCDateTime()))  # fmt: skip
    start = datetime(2026, 1, 1, tzinfo=UTC)
    engine = create_engine(parse_database_url(database_url))
    try:
        async with engine.begin() as conn:
            await conn.execute(
                sa.insert(users),
                [
                    {"id": "b" * 32, "name": "grace", "password_hash": None,
                     "created_at": start + timedelta(hours=1)},
                    {"id": "c" * 32, "name": "ada", "password_hash": None, "created_at": start},
                    {"id": "a" * 32, "name": "linus", "password_hash": "h", "created_at": start},
                ],
            )  # fmt: skip
            await conn.execute(
                sa.insert(chats).values(
                    id="d" * 32, owner_id="b" * 32, title="t", created_at=start, updated_at=start
                )
            )
    finally:
        await engine.dispose()

    await upgrade(database_url)
    store = await Store.open(database_url, vault_key=vault_key)
    try:
        roles = {u.name: u.role for u in await store.list_users()}
        # ada and linus were created at the same moment: the smaller id ("a…", linus) wins.
        assert roles == {"linus": "admin", "ada": "member", "grace": "member"}
        grace = await store.get_user_by_name("grace")
        assert grace is not None
        assert [c.id for c in await store.list_conversations(grace.id)] == ["d" * 32]
        await store.create_group("ops")
        await store.add_member("ops", "grace")
        await store.share("d" * 32, grace.id, group="ops", access="read")
        await store.set_level("ops", "email", "plain")
        await store.record_reveals(grace.id, "d" * 32, None, [("<EMAIL_1>", "email", "plain")])
        await store.record_admin(grace.id, "group.create", "ops")
        assert not (await store.create_user("new", None)).is_admin
    finally:
        await store.close()

    await downgrade(database_url, "0004")
    engine = create_engine(parse_database_url(database_url))
    try:
        async with engine.connect() as conn:
            hashes = dict((await conn.execute(text("SELECT name, password_hash FROM users"))).all())
            found = await conn.execute(text("SELECT owner_id FROM conversations"))
            owners = list(found.scalars())
            columns = await conn.run_sync(
                lambda sync: {c["name"] for c in sa.inspect(sync).get_columns("users")}
            )
            tables = await conn.run_sync(lambda sync: set(sa.inspect(sync).get_table_names()))
    finally:
        await engine.dispose()
    assert hashes == {"ada": None, "grace": None, "linus": "h", "new": None}
    assert owners == ["b" * 32]
    assert "role" not in columns
    assert tables.isdisjoint({"groups", "group_members", "shares", "reveal_levels",
                              "never_restore", "reveal_events", "admin_events"})  # fmt: skip

    await upgrade(database_url)
    store = await Store.open(database_url, vault_key=vault_key)
    try:
        assert [u.name for u in await store.list_users() if u.is_admin] == ["linus"]
        assert await store.list_groups() == []
        with pytest.raises(ConversationNotFoundError):
            await store.list_shares("d" * 32, "c" * 32)
    finally:
        await store.close()
