"""Issue #14, item 6: the vault keeps what it knows, so a value always finds its token again.

Each entry is stored with the detector kind it was found as and the normalized form it was
given then (sealed with the value); the vault is built from those, never rebuilt from a token's
label. The bugs this pins down: with the phone region GB, a repeated `020 7946 0958` failed with
`storage_failed` (its number was normalized again under US rules); so did the second mention of
a term from `client-names.txt` (kind `client-names`, label `CLIENT_NAMES`, rebuilt as
`client_names`). And a database from before (revision 0001) keeps finding its values after the
migration.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import pytest
from sqlalchemy import Table, insert
from sqlalchemy.ext.asyncio import AsyncSession

from holdback.app import pipeline
from holdback.app.pipeline import ChatService
from holdback.app.views import restore_message
from holdback.detect import DetectorSet
from holdback.detect.dictionary import normalize_term
from holdback.providers.base import ChatRequest
from holdback.providers.events import End, Event, TextDelta
from holdback.store import Store, StoredVault, VaultItem, VaultKey, upgrade
from holdback.store.engine import create_engine, parse_database_url
from holdback.store.migrate import head_revision
from holdback.store.schema import (
    ConversationRow,
    MessageRow,
    TermListRow,
    UserRow,
    VaultEntryRow,
)
from holdback.store.term_lists import seal_terms
from holdback.store.vault import seal_entry
from holdback.stream import Guard
from holdback.vault import Vault, VaultConflictError, VaultEntry
from tests.store.conftest import sqlite_url

pytestmark = pytest.mark.anyio

PHONE = "020 7946 0958"  # a London number: valid in GB, not in the default region US
PHONE_E164 = "+442079460958"
PHONE_AGAIN = "+44 20 7946 0958"  # another spelling of the same number
CLIENT = "Quillfeather Canary Partners"
VIP = "Marrowbone Canary Trust"


class Echo:
    """A provider that streams the last user message back, as a model quoting it would."""

    def __init__(self) -> None:
        self.requests: list[ChatRequest] = []

    @property
    def name(self) -> str:
        return "echo"

    async def stream(self, request: ChatRequest) -> AsyncIterator[Event]:
        self.requests.append(request)
        last = [m.content for m in request.turns() if m.role == "user"][-1]
        for i in range(0, len(last), 3):
            yield TextDelta("content", last[i : i + 3])
        yield End("stop", None)


def gb_service(store: Store, provider: Echo, **terms: list[str]) -> ChatService:
    dictionaries: dict[str, list[str]] = {"client-names": [CLIENT], **terms}
    detectors = DetectorSet.from_config(dictionaries, phone_region="GB")
    return ChatService(store, provider, detectors, phone_region="GB")


async def send(
    svc: ChatService, user_id: str, text: str, cid: str | None = None
) -> list[dict[str, Any]]:
    """One user message through the whole pipeline; every frame it produced."""
    frames: list[dict[str, Any]] = []
    reply = await svc.submit(user_id, cid, text, frames.append)
    assert reply.task is not None
    await asyncio.wait_for(reply.task, timeout=10)
    return frames


def errors(frames: list[dict[str, Any]]) -> list[str]:
    return [f["code"] for f in frames if f["type"] == "error"]


def tokens(frames: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(m["kind"], m["token"]) for m in frames[0]["masked"]]


@pytest.fixture
async def sqlite_store(tmp_path: Path) -> AsyncIterator[Store]:
    opened = await Store.open(
        sqlite_url(tmp_path / "chat.db"), vault_key=VaultKey.generate(source="test")
    )
    try:
        yield opened
    finally:
        await opened.close()


# -- the pipeline, end to end ---------------------------------------------------------------


async def test_a_gb_phone_number_and_a_term_file_kind_find_their_tokens_again(
    sqlite_store: Store,
) -> None:
    store = sqlite_store
    user = await store.create_user("alice", None)
    provider = Echo()
    svc = gb_service(store, provider)
    first = await send(svc, user.id, f"Call {PHONE} about {CLIENT} today")
    assert errors(first) == []
    assert tokens(first) == [("phone", "<PHONE_1>"), ("client-names", "<CLIENT_NAMES_1>")]
    cid = first[0]["conversation_id"]
    # Each later message reads the vault back from the store: same values, same tokens.
    for text in (
        f"Again: {PHONE}",
        f"and {CLIENT.lower()} once more",
        f"both {PHONE_AGAIN} and {CLIENT}",
    ):
        frames = await send(svc, user.id, text, cid)
        assert errors(frames) == [], text
        assert frames[-1]["status"] == "complete"
        assert {t for _, t in tokens(frames)} <= {"<PHONE_1>", "<CLIENT_NAMES_1>"}
    assert [m.content for m in provider.requests[-1].turns() if m.role == "user"][-1] == (
        "both <PHONE_1> and <CLIENT_NAMES_1>"
    )
    stored = await store.load_vault(cid)
    assert [(e.token, e.kind, e.normalized) for e in stored.entries] == [
        ("<CLIENT_NAMES_1>", "client-names", normalize_term(CLIENT)),
        ("<PHONE_1>", "phone", PHONE_E164),
    ]
    assert dict(stored) == {"<CLIENT_NAMES_1>": CLIENT, "<PHONE_1>": PHONE}
    # A server started afresh (nothing kept in memory) finds them too.
    again = await send(gb_service(store, Echo()), user.id, f"{PHONE} / {CLIENT}", cid)
    assert errors(again) == []
    assert [t for _, t in tokens(again)] == ["<PHONE_1>", "<CLIENT_NAMES_1>"]


async def test_the_reply_guard_gets_the_vault_with_its_real_kinds(
    sqlite_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = sqlite_store
    user = await store.create_user("alice", None)
    svc = gb_service(store, Echo())
    cid = (await send(svc, user.id, f"Call {PHONE} about {CLIENT}"))[0]["conversation_id"]
    seen: list[object] = []

    def spy(*args: Any, **kwargs: Any) -> Guard:
        seen.append(kwargs.get("vault"))
        return Guard(*args, **kwargs)

    monkeypatch.setattr(pipeline, "Guard", spy)
    frames = await send(svc, user.id, f"{CLIENT} at {PHONE}", cid)
    assert "".join(f["text"] for f in frames if f["type"] == "assistant_delta") == (
        f"{CLIENT} at {PHONE}"
    )
    assert seen
    assert all(isinstance(v, Vault) for v in seen)
    kinds = {(e.kind, e.normalized) for e in cast(Vault, seen[0]).entries()}
    assert kinds == {("phone", PHONE_E164), ("client-names", normalize_term(CLIENT))}


# -- the store and the vault ----------------------------------------------------------------


async def test_entries_come_back_as_they_were_stored(store: Store) -> None:
    user = await store.ensure_local_user()
    chat = (await store.create_conversation(user.id)).id
    items = [
        VaultItem("client-names", CLIENT, normalize_term(CLIENT)),
        VaultItem("phone", PHONE, PHONE_E164),
    ]
    assert await store.assign_tokens(chat, items) == ["<CLIENT_NAMES_1>", "<PHONE_1>"]
    stored = await store.load_vault(chat)
    assert isinstance(stored, StoredVault)
    assert stored.entries == (
        VaultEntry("<CLIENT_NAMES_1>", "client-names", CLIENT, normalize_term(CLIENT)),
        VaultEntry("<PHONE_1>", "phone", PHONE, PHONE_E164),
    )
    opened = await store.open_conversation(chat, user.id)
    assert opened is not None
    assert opened[1].entries == stored.entries
    vault = Vault(stored)
    assert vault.entries() == list(stored.entries)
    assert vault.lookup("phone", PHONE_E164) == "<PHONE_1>"
    assert CLIENT not in repr(stored) + repr(stored.entries)


async def test_a_value_another_writer_stored_first_comes_back_as_it_is_stored(
    store: Store,
) -> None:
    user = await store.ensure_local_user()
    chat = (await store.create_conversation(user.id)).id
    await store.assign_tokens(chat, [VaultItem("email", "Sarah@Acme.com", "sarah@acme.com")])
    # This writer's vault did not have it yet: it asks with its own spelling.
    update = await store.update_vault(
        chat, [VaultItem("email", "sarah@acme.com", "sarah@acme.com")], reserve=["EMAIL_7"]
    )
    assert update.tokens == ["<EMAIL_1>"]
    assert update.entries == {
        "<EMAIL_1>": VaultEntry("<EMAIL_1>", "email", "Sarah@Acme.com", "sarah@acme.com")
    }
    assert "Sarah" not in repr(update)


def test_a_vault_is_built_from_entries_not_from_a_bare_mapping() -> None:
    with pytest.raises(TypeError):
        Vault(cast(Any, {"<PHONE_1>": PHONE}))
    vault = Vault([VaultEntry("<PHONE_1>", "phone", PHONE, PHONE_E164)])
    # The normalized form is the stored one, not one made again under another region.
    assert vault.lookup("phone", PHONE_E164) == "<PHONE_1>"
    assert vault.assign("phone", PHONE_AGAIN, PHONE_E164) == "<PHONE_1>"
    # Kinds that spell one label share its numbering and, for one value, its token.
    vault.add("<CLIENT_NAMES_1>", "client-names", CLIENT, normalize_term(CLIENT))
    assert vault.lookup("client_names", normalize_term(CLIENT)) == "<CLIENT_NAMES_1>"
    vault.add("<CLIENT_NAMES_1>", "client_names", CLIENT.upper(), normalize_term(CLIENT))
    assert vault.entry("<CLIENT_NAMES_1>").kind == "client-names"
    with pytest.raises(VaultConflictError):
        vault.add("<CLIENT_NAMES_1>", "client-names", VIP, normalize_term(VIP))
    with pytest.raises(VaultConflictError):
        vault.add("<EMAIL_1>", "phone", PHONE, PHONE_E164)  # a token of another label


# -- a database from revision 0001 ----------------------------------------------------------


async def fill_at_0001(url: str, key: VaultKey) -> tuple[str, str]:
    """Rows as holdback wrote them at revision 0001: the vault kept the label only.

    Returns (user id, conversation id).
    """
    await upgrade(url, "0001")
    engine = create_engine(parse_database_url(url))
    now = datetime.now(UTC)
    user, chat = "u" * 32, "c" * 32

    def entry(token: str, label: str, number: int, value: str, normalized: str) -> dict[str, Any]:
        # No detector_kind: the column did not exist yet.
        return {
            "conversation_id": chat,
            "token": token,
            "kind": label,
            "number": number,
            "value_hash": key.value_hash(label, normalized),
            "value_ciphertext": seal_entry(key, chat, value, normalized),
            "created_at": now,
        }

    try:
        async with AsyncSession(engine) as session, session.begin():
            await session.execute(
                insert(cast(Table, UserRow.__table__)).values(
                    id=user, name="local", password_hash=None, created_at=now
                )
            )
            await session.execute(
                insert(cast(Table, ConversationRow.__table__)).values(
                    id=chat, owner_id=user, title="Call <PHONE_1>", created_at=now, updated_at=now
                )
            )
            await session.execute(
                insert(cast(Table, MessageRow.__table__)).values(
                    id="m" * 32,
                    conversation_id=chat,
                    seq=1,
                    role="user",
                    text="Call <PHONE_1> about <CLIENT_NAMES_1> and <VIP_LIST_1>; EMAIL_1",
                    parts={},
                    status="complete",
                    finish_reason=None,
                    meta={},
                    created_at=now,
                    updated_at=now,
                )
            )
            await session.execute(
                insert(cast(Table, VaultEntryRow.__table__)),
                [
                    entry("<PHONE_1>", "PHONE", 1, PHONE, PHONE_E164),
                    entry("<CLIENT_NAMES_1>", "CLIENT_NAMES", 1, CLIENT, normalize_term(CLIENT)),
                    entry("<VIP_LIST_1>", "VIP_LIST", 1, VIP, normalize_term(VIP)),
                    entry("<EMAIL_1>", "reserved", 1, "EMAIL_1", "EMAIL_1"),
                ],
            )
            # The term file `client-names.txt` was stored with its kind; `vip-list.txt` was
            # not (it was given on an earlier run only).
            await session.execute(
                insert(cast(Table, TermListRow.__table__)).values(
                    name="sensitive:client-names",
                    kind="client-names",
                    purpose="sensitive",
                    terms_ciphertext=seal_terms(key, "sensitive:client-names", [CLIENT]),
                    created_at=now,
                    updated_at=now,
                )
            )
    finally:
        await engine.dispose()
    return user, chat


async def test_a_database_from_revision_0001_keeps_finding_its_values(
    database_url: str, vault_key: VaultKey
) -> None:
    user_id, chat = await fill_at_0001(database_url, vault_key)
    store = await Store.open(database_url, vault_key=vault_key)  # migrates to head
    try:
        assert head_revision() != "0001"
        stored = await store.load_vault(chat)
        # Kinds: a term list's own kind where one names the label, else the label's lower case.
        assert [(e.token, e.kind, e.value, e.normalized) for e in stored.entries] == [
            ("<CLIENT_NAMES_1>", "client-names", CLIENT, normalize_term(CLIENT)),
            ("<PHONE_1>", "phone", PHONE, PHONE_E164),
            ("<VIP_LIST_1>", "vip_list", VIP, normalize_term(VIP)),
        ]
        assert stored.reserved == {"EMAIL_1"}
        # Every stored value is found again, in every spelling, under the server's region;
        # new values are numbered after the old ones, past the reserved id.
        svc = gb_service(store, Echo(), **{"vip-list": [VIP]})
        frames = await send(
            svc,
            user_id,
            f"{PHONE_AGAIN}, {CLIENT.upper()} and {VIP}; mail bob@example.org",
            chat,
        )
        assert errors(frames) == []
        assert tokens(frames) == [
            ("phone", "<PHONE_1>"),
            ("client-names", "<CLIENT_NAMES_1>"),
            ("vip-list", "<VIP_LIST_1>"),
            ("email", "<EMAIL_2>"),
        ]
        assert frames[-1]["status"] == "complete"
        # The message spelled two values otherwise than the vault: it reads back as typed.
        vault = Vault(await store.load_vault(chat))
        typed = await store.load_spellings(chat)
        history = await store.list_messages(chat)
        assert typed[history[1].id] == {0: PHONE_AGAIN, 1: CLIENT.upper()}
        assert restore_message(history[1], vault, typed.get(history[1].id))["text"] == (
            f"{PHONE_AGAIN}, {CLIENT.upper()} and {VIP}; mail bob@example.org"
        )
    finally:
        await store.close()


async def test_the_migration_runs_on_a_fresh_database_and_on_one_at_0001(
    tmp_path: Path, vault_key: VaultKey
) -> None:
    fresh = sqlite_url(tmp_path / "fresh.db")
    await upgrade(fresh)
    old = sqlite_url(tmp_path / "old.db")
    await fill_at_0001(old, vault_key)
    await upgrade(old)
    await upgrade(old)  # twice is a no-op
    for url in (fresh, old):
        store = await Store.open(url, vault_key=vault_key, migrate=False)
        await store.close()
