"""Issue #14, item 7: a user's own message reads back exactly as typed.

Two spellings of one value share a token (`4000056655665556` and `4000 0566 5566 5556` are
both `<CREDIT_CARD_1>`; `Sarah@Acme.com` after `sarah@acme.com`), and the token restores to
the spelling seen first: that is what the model's replies show. The user's own message keeps
its spelling: the spans typed otherwise than the vault spells them are sealed with the message,
and the owner's view (`GET /api/conversations/{id}`), the title and `message_accepted` use them.
The second spelling is never stored in the clear: the raw database files are searched for it.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from holdback.app.pipeline import ChatService
from holdback.app.views import restore_message
from holdback.detect import DetectorSet
from holdback.providers.base import ChatRequest
from holdback.providers.events import End, Event, TextDelta
from holdback.pseudonymize import Pseudonymizer, restore_as_typed, spellings
from holdback.store import Store, VaultKey, rotate_vault_key
from holdback.store.errors import VaultEntryCorruptError
from holdback.store.schema import MessageSpellingRow
from holdback.stream import restore
from holdback.vault import Vault
from tests.app.support import chat, make_settings, running_app

pytestmark = pytest.mark.anyio

CARD = "4000056655665556"
CARD_SPACED = "4000 0566 5566 5556"
EMAIL = "sarah.readback-canary@acme-canary.example"
EMAIL_CASED = "Sarah.Readback-Canary@ACME-Canary.example"
SECOND = [CARD_SPACED, EMAIL_CASED]  # the spellings the vault does not hold
FIRST_TEXT = f"Card {CARD}, mail {EMAIL} please"
SECOND_TEXT = f"Again: card {CARD_SPACED} and {EMAIL_CASED}, or {EMAIL}."


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def scan(directory: Path, needles: list[str]) -> list[tuple[str, str]]:
    """Which needles a database's files hold in the clear (UTF-8 or UTF-16), by file."""
    found = []
    for path in sorted(directory.glob("holdback.db*")):
        data = path.read_bytes()
        for needle in needles:
            forms = {needle, needle.lower()}
            if any(f.encode(enc) in data for f in forms for enc in ("utf-8", "utf-16-le")):
                found.append((path.name, needle))
    return found


# -- the core --------------------------------------------------------------------------------


def test_a_respelled_value_keeps_its_token_and_its_spelling() -> None:
    p = Pseudonymizer()
    vault = Vault()
    _, found = p.pseudonymize(FIRST_TEXT, vault)
    assert spellings(found, vault) == {}
    second, found = p.pseudonymize(SECOND_TEXT, vault)
    assert second == "Again: card <CREDIT_CARD_1> and <EMAIL_1>, or <EMAIL_1>."
    typed = spellings(found, vault)
    assert typed == {0: CARD_SPACED, 1: EMAIL_CASED}  # the third span is the vault's spelling
    spans = [(m.start, m.end, m.token) for m in found]
    assert restore_as_typed(second, spans, typed, vault.index()) == SECOND_TEXT
    # Without its spellings the message reads back with the vault's: what a reply shows.
    assert restore(second, vault) == f"Again: card {CARD} and {EMAIL}, or {EMAIL}."
    # Spans that do not fit the text are refused, never guessed at.
    assert restore_as_typed(second, [(0, 4, "<EMAIL_1>")], typed, vault.index()) is None
    assert restore_as_typed(second, [(12, 31, "<NOPE_1>")], {}, vault.index()) is None


SPELLINGS = [
    [CARD, CARD_SPACED, "4000-0566-5566-5556"],
    [EMAIL, EMAIL_CASED, EMAIL.upper()],
    ["+1 415 555 2671", "(415) 555-2671", "415.555.2671"],
    ["<EMAIL_1>", "EMAIL_1", "email\\_2"],
]
FILLER = st.text(alphabet="ab Z09_<>&;\\.,@-é\n", max_size=5)


@given(
    messages=st.lists(
        st.lists(
            st.one_of(FILLER, st.sampled_from([f" {v} " for group in SPELLINGS for v in group])),
            max_size=8,
        ).map("".join),
        min_size=1,
        max_size=4,
    )
)
def test_every_message_reads_back_as_typed_however_its_values_are_spelled(
    messages: list[str],
) -> None:
    p = Pseudonymizer()
    vault = Vault()
    stored = []
    for text in messages:
        masked, found = p.pseudonymize(text, vault)
        spans = [(m.start, m.end, m.token) for m in found]
        stored.append((text, masked, spans, spellings(found, vault)))
    p.pseudonymize("later@example.org 4111 1111 1111 1111", vault)  # the vault grows
    for text, masked, spans, typed in stored:
        assert restore_as_typed(masked, spans, typed, vault.index()) == text
        # Only the spans typed otherwise than the vault spells them are kept, as typed.
        for i, (start, end, token) in enumerate(spans):
            assert (i in typed) == (text[start:end] != vault[token])
            assert typed.get(i, text[start:end]) == text[start:end]


# -- the pipeline and the store ---------------------------------------------------------------


class Echo:
    """A provider that streams the last user message back."""

    @property
    def name(self) -> str:
        return "echo"

    async def stream(self, request: ChatRequest) -> AsyncIterator[Event]:
        last = [m.content for m in request.turns() if m.role == "user"][-1]
        for i in range(0, len(last), 4):
            yield TextDelta("content", last[i : i + 4])
        yield End("stop", None)


@pytest.fixture
def key() -> VaultKey:
    return VaultKey.generate(source="test")


@pytest.fixture
async def store(tmp_path: Path, key: VaultKey) -> AsyncIterator[Store]:
    opened = await Store.open(f"sqlite+aiosqlite:///{tmp_path / 'holdback.db'}", vault_key=key)
    try:
        yield opened
    finally:
        await opened.close()


async def send(svc: ChatService, user_id: str, text: str, cid: str | None) -> list[dict[str, Any]]:
    frames: list[dict[str, Any]] = []
    reply = await svc.submit(user_id, cid, text, frames.append)
    assert reply.task is not None
    await asyncio.wait_for(reply.task, timeout=10)
    return frames


def reply_text(frames: list[dict[str, Any]]) -> str:
    return "".join(f["text"] for f in frames if f["type"] == "assistant_delta")


async def owner_view(store: Store, cid: str) -> list[str]:
    vault = Vault(await store.load_vault(cid))
    typed = await store.load_spellings(cid)
    return [
        restore_message(m, vault, typed.get(m.id))["text"] for m in await store.list_messages(cid)
    ]


async def test_the_history_reads_back_as_typed_and_replies_as_the_vault_spells(
    store: Store, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    user = await store.create_user("alice", None)
    svc = ChatService(store, Echo(), DetectorSet.from_config())
    first = await send(svc, user.id, FIRST_TEXT, None)
    cid = first[0]["conversation_id"]
    second = await send(svc, user.id, SECOND_TEXT, cid)
    assert [m["token"] for m in second[0]["masked"]] == [
        "<CREDIT_CARD_1>",
        "<EMAIL_1>",
        "<EMAIL_1>",
    ]
    # The model's reply restores every token to the vault's value.
    assert reply_text(second) == f"Again: card {CARD} and {EMAIL}, or {EMAIL}."
    assert await owner_view(store, cid) == [
        FIRST_TEXT,
        FIRST_TEXT,
        SECOND_TEXT,  # the user's message: exactly as typed
        f"Again: card {CARD} and {EMAIL}, or {EMAIL}.",
    ]
    assert list((await store.load_spellings(cid)).values()) == [{0: CARD_SPACED, 1: EMAIL_CASED}]
    assert scan(tmp_path, [*SECOND, CARD, EMAIL]) == []
    assert scan(tmp_path, ["Again: card <CREDIT_CARD_1>"])  # the scan sees stored text
    assert all(v not in caplog.text for v in [*SECOND, CARD, EMAIL])
    shown = repr(await store.load_spellings(cid))
    assert all(v not in shown for v in SECOND)


async def test_spellings_are_rotated_shredded_and_bound_to_their_message(
    store: Store, key: VaultKey, tmp_path: Path
) -> None:
    user = await store.create_user("alice", None)
    svc = ChatService(store, Echo(), DetectorSet.from_config())
    cid = (await send(svc, user.id, FIRST_TEXT, None))[0]["conversation_id"]
    await send(svc, user.id, SECOND_TEXT, cid)
    other = (await send(svc, user.id, SECOND_TEXT + " " + FIRST_TEXT, cid))[0]["message_id"]
    url = f"sqlite+aiosqlite:///{tmp_path / 'holdback.db'}"
    # Rotation re-seals them: they read back under the new key only.
    new_key = VaultKey.generate()
    report = await rotate_vault_key(url, key, new_key)
    assert report.message_spellings == 2
    rotated = await Store.open(url, vault_key=new_key)
    try:
        assert (await owner_view(rotated, cid))[2] == SECOND_TEXT

        # A ciphertext moved to another message does not open.
        async def move(session: AsyncSession) -> None:
            rows = (await session.execute(select(MessageSpellingRow))).scalars().all()
            first = next(r for r in rows if r.message_id != other)
            await session.execute(
                update(MessageSpellingRow)
                .where(MessageSpellingRow.message_id == other)
                .values(spellings_ciphertext=first.spellings_ciphertext)
            )

        await rotated.database.write(move, what="moving a ciphertext")
        with pytest.raises(VaultEntryCorruptError) as moved:
            await rotated.load_spellings(cid)
        assert all(v not in str(moved.value) for v in SECOND)
        # Deleting the conversation deletes them with it.
        assert await rotated.delete_conversation(cid, user.id)
        assert await rotated.load_spellings(cid) == {}
        left = await rotated.database.read(
            lambda s: s.scalar(select(func.count()).select_from(MessageSpellingRow))
        )
        assert left == 0
    finally:
        await rotated.close()
    assert scan(tmp_path, [*SECOND, CARD, EMAIL]) == []


# -- the server ------------------------------------------------------------------------------


def test_the_owner_view_and_message_accepted_show_the_text_as_typed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    both = f"Cards {CARD} and {CARD_SPACED}"  # one message, both spellings, in its title
    with running_app(make_settings(tmp_path)) as client:
        with client.websocket_connect("/ws") as ws:
            first = chat(ws, both)
            cid = first[0]["conversation_id"]
            assert first[0]["title"] == both
            second = chat(ws, SECOND_TEXT, cid)
            third = chat(ws, FIRST_TEXT, cid)
        assert [f["type"] for f in second[:2]] == ["message_accepted", "assistant_start"]
        assert third[-1]["status"] == "complete"
        owner = client.get(f"/api/conversations/{cid}").json()
        model = client.get(f"/api/conversations/{cid}?view=model").json()
    users = [m["text"] for m in owner["messages"] if m["role"] == "user"]
    assert users == [both, SECOND_TEXT, FIRST_TEXT]
    assert owner["title"] == both
    wire_model = json.dumps(model)
    assert all(v not in wire_model for v in [*SECOND, CARD, EMAIL])
    assert scan(tmp_path / "data", [*SECOND, CARD, EMAIL]) == []
    assert all(v not in caplog.text for v in [*SECOND, CARD, EMAIL])
