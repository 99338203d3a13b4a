"""Issue #15, item 1: a conversation's vault is bounded.

A vault holds at most `max_vault_entries` rows (tokens and reserved ids; 10,000 unless the
store is told otherwise). An update that would go past it is refused whole with
`VaultFullError` (wire code `vault_full`): nothing of it is written, what was there stays,
and values the vault already holds still get their tokens. Through the pipeline, the message
is refused before anything is stored or sent to the model.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from holdback.app.pipeline import ChatService
from holdback.detect import DetectorSet
from holdback.errors import WIRE_ERRORS
from holdback.providers.base import ChatRequest
from holdback.providers.events import End, Event, TextDelta
from holdback.store import Store, VaultItem, VaultKey
from holdback.store.errors import VaultFullError
from holdback.store.vault import MAX_VAULT_ENTRIES
from tests.store.conftest import sqlite_url

pytestmark = pytest.mark.anyio

LIMIT = 5


def emails(*numbers: int) -> list[VaultItem]:
    return [
        VaultItem("email", f"bound{n}@canary.example", f"bound{n}@canary.example") for n in numbers
    ]


@pytest.fixture
async def bounded(database_url: str, vault_key: VaultKey) -> AsyncIterator[Store]:
    store = await Store.open(database_url, vault_key=vault_key, max_vault_entries=LIMIT)
    try:
        yield store
    finally:
        await store.close()


async def conversation(store: Store) -> str:
    user = await store.create_user("alice", None)
    return (await store.create_conversation(user.id)).id


async def test_a_vault_fills_up_to_its_limit_and_refuses_one_more(bounded: Store) -> None:
    chat = await conversation(bounded)
    assert await bounded.assign_tokens(chat, emails(1, 2, 3, 4, 5)) == [
        f"<EMAIL_{n}>" for n in range(1, 6)
    ]  # at the limit
    with pytest.raises(VaultFullError) as refused:
        await bounded.assign_tokens(chat, emails(6))  # just past it
    assert refused.value.code == "vault_full"
    assert "vault_full" in WIRE_ERRORS
    message = str(refused.value)
    assert "limit is 5" in message
    assert "canary" not in message
    assert len(await bounded.load_vault(chat)) == LIMIT  # nothing lost, nothing added
    # Values it already holds keep their tokens, full or not.
    assert await bounded.assign_tokens(chat, emails(5, 1)) == ["<EMAIL_5>", "<EMAIL_1>"]


async def test_an_update_that_would_cross_the_limit_is_refused_whole(bounded: Store) -> None:
    chat = await conversation(bounded)
    await bounded.assign_tokens(chat, emails(1, 2, 3))
    with pytest.raises(VaultFullError, match="cannot take 3 more"):
        await bounded.assign_tokens(chat, emails(1, 4, 5, 6))
    assert sorted(await bounded.load_vault(chat)) == ["<EMAIL_1>", "<EMAIL_2>", "<EMAIL_3>"]
    assert await bounded.assign_tokens(chat, emails(4, 5)) == ["<EMAIL_4>", "<EMAIL_5>"]


async def test_reserved_ids_count_toward_the_limit(bounded: Store) -> None:
    chat = await conversation(bounded)
    await bounded.assign_tokens(chat, emails(1, 2, 3, 4))
    with pytest.raises(VaultFullError):
        await bounded.update_vault(chat, [], reserve=["PHONE_1", "PHONE_2"])
    assert (await bounded.load_vault(chat)).reserved == frozenset()
    update = await bounded.update_vault(chat, [], reserve=["PHONE_1"])
    assert update.reserved == frozenset({"PHONE_1"})
    with pytest.raises(VaultFullError):
        await bounded.update_vault(chat, [], reserve=["PHONE_2"])
    # An id too large to ever be assigned needs no row, so it costs nothing.
    assert (await bounded.update_vault(chat, [], reserve=["PHONE_99999999999"])).reserved


async def test_the_limit_is_per_conversation(bounded: Store) -> None:
    user = await bounded.create_user("bob", None)
    first = (await bounded.create_conversation(user.id)).id
    second = (await bounded.create_conversation(user.id)).id
    await bounded.assign_tokens(first, emails(1, 2, 3, 4, 5))
    assert len(await bounded.assign_tokens(second, emails(1, 2, 3, 4, 5))) == LIMIT


async def test_the_default_limit_is_10_000_entries(tmp_path: Path) -> None:
    store = await Store.open(sqlite_url(tmp_path / "holdback.db"), vault_key=VaultKey.generate())
    try:
        assert store.max_vault_entries == MAX_VAULT_ENTRIES == 10_000
        chat = await conversation(store)
        tokens = await store.assign_tokens(chat, emails(*range(1, 10_001)))
        assert tokens[-1] == "<EMAIL_10000>"
        with pytest.raises(VaultFullError, match="holds 10000 and the limit is 10000"):
            await store.assign_tokens(chat, emails(10_001))
    finally:
        await store.close()


async def test_the_limit_must_allow_an_entry(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="at least one entry"):
        await Store.open(
            sqlite_url(tmp_path / "holdback.db"), vault_key=VaultKey.generate(), max_vault_entries=0
        )


# -- through the pipeline ----------------------------------------------------------------------


class Echo:
    """A provider that streams the last user message back."""

    def __init__(self) -> None:
        self.requests: list[ChatRequest] = []

    @property
    def name(self) -> str:
        return "echo"

    async def stream(self, request: ChatRequest) -> AsyncIterator[Event]:
        self.requests.append(request)
        yield TextDelta("content", [m.content for m in request.turns() if m.role == "user"][-1])
        yield End("stop", None)


async def send(svc: ChatService, user_id: str, text: str, cid: str | None) -> list[dict[str, Any]]:
    frames: list[dict[str, Any]] = []
    reply = await svc.submit(user_id, cid, text, frames.append)
    assert reply.task is not None
    await asyncio.wait_for(reply.task, timeout=10)
    return frames


async def test_a_message_past_the_limit_is_refused_before_anything_is_stored(
    bounded: Store,
) -> None:
    provider = Echo()
    svc = ChatService(bounded, provider, DetectorSet.from_config())
    user = await bounded.create_user("carol", None)
    values = " ".join(f"bound{n}@canary.example" for n in range(1, LIMIT + 1))
    frames = await send(svc, user.id, f"Mail {values}", None)
    cid = frames[0]["conversation_id"]
    assert len(frames[0]["masked"]) == LIMIT  # at the limit: accepted
    before = await bounded.list_messages(cid)
    with pytest.raises(VaultFullError):
        await svc.submit(user.id, cid, "and bound6@canary.example too", lambda _: None)
    assert await bounded.list_messages(cid) == before  # nothing stored
    assert len(provider.requests) == 1  # nothing sent to the model
    assert cid not in svc.replies  # the conversation is not left busy
    # The conversation goes on with the values it holds.
    frames = await send(svc, user.id, "again bound1@canary.example", cid)
    assert frames[-1]["status"] == "complete"
