"""Disabled users and revoked API tokens (#15, item 3), on SQLite and PostgreSQL.

The rule: a credential that was taken away names nobody. A disabled user's sessions are
deleted and their tokens name nobody until they are enabled; a revoked token names nobody for
good. Listing tokens shows ids and names, never a token's text, and a downgrade past 0004
never brings a taken-away credential back.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import text

from holdback.store import Store, VaultKey, downgrade, upgrade
from holdback.store.engine import create_engine, parse_database_url
from holdback.store.errors import RecordNotFoundError, UserNotFoundError

pytestmark = pytest.mark.anyio


async def test_a_disabled_user_has_no_working_credential(store: Store) -> None:
    user = await store.create_user("ada", "hash")
    session = await store.create_session(user.id, timedelta(hours=1))
    token = await store.create_api_token(user.id, "laptop")
    other = await store.create_user("grace", "hash")
    other_token = await store.create_api_token(other.id, "laptop")

    disabled, changed = await store.disable_user("ada")
    assert changed
    assert disabled.disabled
    assert (await store.get_user_by_name("ada")).disabled  # type: ignore[union-attr]
    assert await store.user_for_session(session) is None
    assert await store.user_for_api_token(token) is None
    assert await store.user_for_api_token(other_token) == other  # nobody else is touched
    assert (await store.disable_user("ada"))[1] is False  # already disabled

    enabled, changed = await store.enable_user("ada")
    assert changed
    assert not enabled.disabled
    assert await store.user_for_session(session) is None  # sessions were deleted for good
    found = await store.user_for_api_token(token)  # the token was not revoked: it works again
    assert found is not None
    assert found.id == user.id
    assert (await store.enable_user("ada"))[1] is False


async def test_a_session_made_while_disabled_names_nobody(store: Store) -> None:
    user = await store.create_user("ada", "hash")
    await store.disable_user("ada")
    # A login that read the user just before it was disabled may still write a session.
    session = await store.create_session(user.id, timedelta(hours=1))
    assert await store.user_for_session(session) is None


async def test_unknown_users_cannot_be_disabled(store: Store) -> None:
    with pytest.raises(UserNotFoundError):
        await store.disable_user("nobody")
    with pytest.raises(UserNotFoundError):
        await store.enable_user("nobody")


async def test_a_revoked_token_names_nobody_for_good(store: Store) -> None:
    user = await store.create_user("ada", "hash")
    first = await store.create_api_token(user.id, "laptop")
    second = await store.create_api_token(user.id, "phone")
    listed = await store.find_api_token(first)
    assert listed is not None
    assert listed.active

    revoked, changed = await store.revoke_api_token(listed.id)
    assert changed
    assert revoked.revoked_at is not None
    assert not revoked.active
    assert await store.user_for_api_token(first) is None
    assert await store.user_for_api_token(second) == user
    again, changed = await store.revoke_api_token(listed.id)
    assert not changed
    assert again.revoked_at == revoked.revoked_at
    await store.disable_user("ada")
    await store.enable_user("ada")
    assert await store.user_for_api_token(first) is None  # enabling does not undo a revoke


async def test_revoking_an_unknown_id_does_not_echo_it(store: Store) -> None:
    user = await store.create_user("ada", "hash")
    token = await store.create_api_token(user.id, "laptop")
    with pytest.raises(RecordNotFoundError) as refused:
        await store.revoke_api_token(token)  # the token's text pasted for its id
    assert token not in str(refused.value)
    assert await store.user_for_api_token(token) is not None


async def test_tokens_are_listed_without_their_text(store: Store) -> None:
    ada = await store.create_user("ada", "hash")
    grace = await store.create_user("grace", "hash")
    tokens = [
        await store.create_api_token(ada.id, "laptop"),
        await store.create_api_token(grace.id, "ci"),
        await store.create_api_token(ada.id, "phone"),
    ]
    listed = await store.list_api_tokens()
    assert [(t.user_name, t.name) for t in listed] == [
        ("ada", "laptop"),
        ("grace", "ci"),
        ("ada", "phone"),
    ]
    assert [t.name for t in await store.list_api_tokens(ada.id)] == ["laptop", "phone"]
    await store.disable_user("grace")
    statuses = {t.name: (t.active, t.user_disabled) for t in await store.list_api_tokens()}
    assert statuses == {"laptop": (True, False), "ci": (False, True), "phone": (True, False)}
    shown = repr(await store.list_api_tokens())
    for token in tokens:
        assert token not in shown
        assert token.removeprefix("hb_") not in shown


async def test_a_downgrade_never_brings_a_credential_back(
    database_url: str, vault_key: VaultKey
) -> None:
    store = await Store.open(database_url, vault_key=vault_key)
    try:
        ada = await store.create_user("ada", "ada-hash")
        grace = await store.create_user("grace", "grace-hash")
        ada_token = await store.create_api_token(ada.id, "laptop")
        ada_session = await store.create_session(ada.id, timedelta(hours=1))
        revoked = await store.create_api_token(grace.id, "old")
        kept = await store.create_api_token(grace.id, "new")
        found = await store.find_api_token(revoked)
        assert found is not None
        await store.revoke_api_token(found.id)
        await store.disable_user("ada")
        # A session written after the disable (see above) must go as well.
        await store.create_session(ada.id, timedelta(hours=1))
    finally:
        await store.close()

    await downgrade(database_url, "0003")
    engine = create_engine(parse_database_url(database_url))
    try:
        async with engine.connect() as conn:
            hashes = dict((await conn.execute(text("SELECT name, password_hash FROM users"))).all())
            token_users = (
                await conn.execute(text("SELECT user_id FROM api_tokens ORDER BY name"))
            ).scalars()
            sessions = (await conn.execute(text("SELECT count(*) FROM auth_sessions"))).scalar()
    finally:
        await engine.dispose()
    assert hashes == {"ada": None, "grace": "grace-hash"}
    assert list(token_users) == [grace.id]  # "new"; the revoked one and ada's are gone
    assert sessions == 0

    await upgrade(database_url)
    store = await Store.open(database_url, vault_key=vault_key)
    try:
        assert await store.user_for_api_token(kept) == await store.get_user_by_name("grace")
        assert await store.user_for_api_token(ada_token) is None
        assert await store.user_for_api_token(revoked) is None
        assert await store.user_for_session(ada_session) is None
    finally:
        await store.close()
