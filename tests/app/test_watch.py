"""Watching a live reply: the owner and a restricted viewer on two connections, one reply.

The restricted viewer's raw frames never carry the owner's values; the owner's carry them
exactly; a viewer the conversation is not shared with gets `not_found`; a revoked share holds
from the next reply on. Values are canaries; the oracle is plain substring search.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from holdback.store import Store
from tests.app.conftest import Accounts
from tests.app.support import (
    EchoUpstream,
    echo_upstream,
    make_settings,
    openai_provider,
    recv,
    running_app,
    send,
    store_op,
)

EMAIL = "ann.watchcanary@example.org"
PHONE = "+1 415 555 0187"
MESSAGE = f"Please mail {EMAIL} or call {PHONE} about the plan."


@pytest.fixture
def slow_upstream() -> Iterator[EchoUpstream]:
    with echo_upstream(chunk_delay=0.02, low=2, high=4) as server:
        yield server


@pytest.fixture
def client(tmp_path: Path, accounts: Accounts, slow_upstream: EchoUpstream) -> Iterator[TestClient]:
    settings = make_settings(tmp_path, auth="password")
    with running_app(settings, openai_provider(slow_upstream)) as c:
        yield c


def frames_until_done(ws: Any, limit: int = 5000) -> list[dict[str, Any]]:
    out = []
    for _ in range(limit):
        frame = recv(ws)
        out.append(frame)
        if frame.get("type") == "assistant_done":
            return out
    raise AssertionError("no assistant_done")


def text_of(frames: list[dict[str, Any]]) -> str:
    return "".join(f["text"] for f in frames if f.get("type") == "assistant_delta")


def test_owner_and_restricted_viewer_watch_one_live_reply(
    client: TestClient, accounts: Accounts
) -> None:
    alice, bob = accounts.bearer("alice"), accounts.bearer("bob")

    async def policy(store: Store) -> None:
        await store.set_level(None, "email", "masked")  # phone: label (named nowhere)

    store_op(accounts.data_dir, policy)
    with client.websocket_connect("/ws", headers=alice) as owner:
        send(owner, {"type": "user_message", "conversation_id": None, "text": MESSAGE})
        accepted = recv(owner)
        assert accepted["type"] == "message_accepted"
        chat = accepted["conversation_id"]

        async def share(store: Store) -> None:
            users = {u.name: u for u in await store.list_users()}
            await store.share(chat, users["alice"].id, user="bob", access="read")

        store_op(accounts.data_dir, share)
        first = recv(owner)  # the reply is under way before bob watches
        with client.websocket_connect("/ws", headers=bob) as viewer:
            send(viewer, {"type": "watch", "conversation_id": chat})
            seen = frames_until_done(viewer)
        mine = [first, *frames_until_done(owner)]
    raw = json.dumps(seen)
    assert EMAIL not in raw
    assert PHONE not in raw
    assert "watchcanary" not in raw
    assert seen[0]["type"] == "assistant_start"
    assert seen[-1]["status"] == "complete"
    assert text_of(seen) == MESSAGE.replace(EMAIL, "a\u2022\u2022\u2022@example.org").replace(
        PHONE, "[phone number]"
    )
    assert text_of(mine) == MESSAGE  # the owner's frames carry the values exactly
    assert {f["message_id"] for f in seen if "message_id" in f} == {mine[-1]["message_id"]}

    async def audit(store: Store) -> tuple[set[tuple[str, str, str]], str]:
        names = {u.id: u.name for u in await store.list_users()}
        events = await store.list_reveal_events(conversation_id=chat)
        return {(names[e.viewer_id or ""], e.token, e.level) for e in events}, repr(events)

    reveals, shown = store_op(accounts.data_dir, audit)
    # Every value shown plain or masked, to whom and how; a label reveals nothing.
    assert reveals == {
        ("alice", "<EMAIL_1>", "plain"),
        ("alice", "<PHONE_1>", "plain"),
        ("bob", "<EMAIL_1>", "masked"),
    }
    assert EMAIL not in shown
    assert PHONE not in shown


def test_a_viewer_it_is_not_shared_with_gets_not_found(
    client: TestClient, accounts: Accounts
) -> None:
    with client.websocket_connect("/ws", headers=accounts.bearer("alice")) as owner:
        send(owner, {"type": "user_message", "conversation_id": None, "text": MESSAGE})
        chat = recv(owner)["conversation_id"]
        frames_until_done(owner)
    with client.websocket_connect("/ws", headers=accounts.bearer("bob")) as stranger:
        send(stranger, {"type": "watch", "conversation_id": chat})
        refused = recv(stranger)
        send(stranger, {"type": "watch", "conversation_id": "no-such-conversation"})
        missing = recv(stranger)
    assert refused["type"] == "error"
    assert refused["code"] == "not_found"
    assert {k: v for k, v in missing.items() if k != "conversation_id"} == {
        k: v for k, v in refused.items() if k != "conversation_id"
    }


def seqs_of(frames: list[dict[str, Any]]) -> list[int]:
    return [f["seq"] for f in frames if "seq" in f]


def increasing(seqs: list[int]) -> bool:
    """Each frame once, in order (frames a connection watches may be merged: gaps allowed)."""
    return all(a < b for a, b in itertools.pairwise(seqs))


def start_reply(ws: Any, frames: int) -> tuple[str, list[dict[str, Any]]]:
    """Send MESSAGE in a new conversation; its id and the reply's first `frames` frames."""
    send(ws, {"type": "user_message", "conversation_id": None, "text": MESSAGE})
    chat: str = recv(ws)["conversation_id"]
    return chat, [recv(ws) for _ in range(frames)]


def test_a_connection_watching_the_reply_it_asked_for_gets_each_frame_once(
    client: TestClient, accounts: Accounts
) -> None:
    with client.websocket_connect("/ws", headers=accounts.bearer("alice")) as owner:
        chat, first = start_reply(owner, 1)
        send(owner, {"type": "watch", "conversation_id": chat})
        frames = [*first, *frames_until_done(owner)]
    assert increasing(seqs_of(frames))
    assert text_of(frames) == MESSAGE


def test_a_resumed_then_watched_reply_is_sent_once_from_where_it_resumed(
    client: TestClient, accounts: Accounts
) -> None:
    with client.websocket_connect("/ws", headers=accounts.bearer("alice")) as owner:
        chat, seen = start_reply(owner, 2)  # then the tab is reloaded
        message = seen[0]["message_id"]
        with client.websocket_connect("/ws", headers=accounts.bearer("alice")) as again:
            resume = {"type": "resume", "conversation_id": chat, "message_id": message,
                      "after_seq": seen[-1]["seq"]}  # fmt: skip
            send(again, resume)
            send(again, {"type": "watch", "conversation_id": chat})
            rest = frames_until_done(again)
        frames_until_done(owner)
    assert increasing(seqs_of(rest))
    assert seqs_of(rest)[0] > seen[-1]["seq"]
    assert text_of([*seen, *rest]) == MESSAGE
