"""Who may send which WebSocket frame for a conversation: the authorization matrix of frames.

Rows: the owner, a viewer it is shared with read-only, one it is shared with to continue, a
member it is not shared with, an admin it is not shared with, a disabled user and a revoked
token. Columns: `watch`, `user_message` to the conversation, `cancel`. Every cell is checked:
allowed, or refused exactly as a conversation that does not exist (`not_found`), or, for a
credential that names nobody, refused at the handshake.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient
from starlette.websockets import WebSocketDisconnect

from holdback.app.auth import hash_password
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

ROWS = ("owner", "read", "write", "member", "admin", "disabled", "revoked")
ALLOWED = {
    "owner": {"watch", "user_message", "cancel"},
    "read": {"watch"},
    "write": {"watch", "user_message", "cancel"},
    "member": set(),
    "admin": set(),  # an admin reads others' conversations only when they are shared
}


@pytest.fixture
def upstream() -> Iterator[EchoUpstream]:
    with echo_upstream(chunk_delay=0.005) as server:
        yield server


@pytest.fixture
def world(
    tmp_path: Path, accounts: Accounts, upstream: EchoUpstream
) -> Iterator[tuple[TestClient, dict[str, dict[str, str]], str]]:
    """bob owns a conversation; headers for each row of the matrix."""
    data = accounts.data_dir

    async def people(store: Store) -> dict[str, str]:
        tokens = {}
        for name in ("carol", "dave", "erin", "frank"):
            user = await store.create_user(name, hash_password(f"{name}'s long password"))
            tokens[name] = await store.create_api_token(user.id, "test")
        revoked_token = await store.create_api_token(
            (await store.get_user_by_name("carol")).id, "old"
        )  # type: ignore[union-attr]
        listed = await store.find_api_token(revoked_token)
        assert listed is not None
        await store.revoke_api_token(listed.id)
        await store.disable_user("frank")
        tokens["revoked"] = revoked_token
        return tokens

    tokens = store_op(data, people)
    headers = {
        "owner": accounts.bearer("bob"),
        "read": {"Authorization": f"Bearer {tokens['carol']}"},
        "write": {"Authorization": f"Bearer {tokens['dave']}"},
        "member": {"Authorization": f"Bearer {tokens['erin']}"},
        "admin": accounts.bearer("alice"),  # the first user: an admin
        "disabled": {"Authorization": f"Bearer {tokens['frank']}"},
        "revoked": {"Authorization": f"Bearer {tokens['revoked']}"},
    }
    settings = make_settings(tmp_path, auth="password")
    with running_app(settings, openai_provider(upstream)) as client:
        with client.websocket_connect("/ws", headers=headers["owner"]) as ws:
            send(ws, {"type": "user_message", "conversation_id": None, "text": "hello there"})
            chat = recv(ws)["conversation_id"]
            while recv(ws).get("type") != "assistant_done":
                pass

        async def share(store: Store) -> None:
            bob = await store.get_user_by_name("bob")
            assert bob is not None
            await store.share(chat, bob.id, user="carol", access="read")
            await store.share(chat, bob.id, user="dave", access="write")

        store_op(data, share)
        yield client, headers, chat


def frames_until_settled(ws: Any, first: dict[str, Any]) -> list[dict[str, Any]]:
    frames = [first]
    while frames[-1].get("type") not in ("assistant_done", "error"):
        frames.append(recv(ws))
    return frames


@pytest.mark.parametrize("row", ROWS)
def test_the_frame_matrix(
    world: tuple[TestClient, dict[str, dict[str, str]], str], row: str
) -> None:
    client, headers, chat = world
    if row in ("disabled", "revoked"):
        with (
            pytest.raises(WebSocketDisconnect),
            client.websocket_connect("/ws", headers=headers[row]),
        ):
            pass
        return
    allowed = ALLOWED[row]
    with client.websocket_connect("/ws", headers=headers[row]) as ws:
        send(ws, {"type": "user_message", "conversation_id": chat, "text": f"{row} writes"})
        answer = frames_until_settled(ws, recv(ws))
        if "user_message" in allowed:
            assert answer[0]["type"] == "message_accepted"
            assert answer[-1]["type"] == "assistant_done"
        else:
            assert [f["type"] for f in answer] == ["error"]
            assert answer[0]["code"] == "not_found"
        send(ws, {"type": "cancel", "conversation_id": chat})
        send(ws, {"type": "watch", "conversation_id": chat})
        # A refused frame gets `not_found`; an allowed cancel (nothing to cancel) and watch
        # (no reply in flight) are silent. A marker frame after them shows which.
        send(ws, {"type": "bogus"})
        replies = []
        while True:
            frame = recv(ws)
            if frame.get("code") == "unknown_type":
                break
            replies.append(frame)
        refused = {"cancel", "watch"} - allowed
        assert [f["code"] for f in replies] == ["not_found"] * len(refused)
    if row == "owner":
        return
    # Nothing the refused rows sent was stored.
    with client.websocket_connect("/ws", headers=headers["owner"]) as ws:
        pass
    stored = client.get(f"/api/conversations/{chat}", headers=headers["owner"]).json()
    texts = [m.get("text") for m in stored["messages"] if m["role"] == "user"]
    assert (f"{row} writes" in texts) == ("user_message" in allowed)


# The frames that act on one message of the conversation: who may branch it, and who may
# resume its reply. A refused frame reads exactly as for a message that does not exist.
MESSAGE_ALLOWED = {
    "owner": {"edit", "regenerate", "continue", "resume"},
    "read": {"resume"},
    "write": {"edit", "regenerate", "continue", "resume"},
    "member": set(),
    "admin": set(),
}


@pytest.mark.parametrize("row", [r for r in ROWS if r in MESSAGE_ALLOWED])
def test_the_message_frame_matrix(
    world: tuple[TestClient, dict[str, dict[str, str]], str], row: str
) -> None:
    client, headers, chat = world
    stored = client.get(f"/api/conversations/{chat}", headers=headers["owner"]).json()
    user_id, reply_id = stored["current_path"][-2:]
    allowed = MESSAGE_ALLOWED[row]
    with client.websocket_connect("/ws", headers=headers[row]) as ws:
        send(ws, {"type": "resume", "conversation_id": chat, "message_id": reply_id,
                  "after_seq": 0})  # fmt: skip
        first = recv(ws)
        if "resume" in allowed:
            assert first["type"] == "assistant_start"
            assert frames_until_settled(ws, first)[-1]["type"] == "assistant_done"
        else:
            assert (first["type"], first["code"]) == ("error", "not_found")
        send(ws, {"type": "continue", "message_id": reply_id})
        answer = recv(ws)  # the reply was not cut by its length: not_editable for those allowed
        expected = "not_editable" if "continue" in allowed else "message_not_found"
        assert (answer["type"], answer["code"]) == ("error", expected)
        send(ws, {"type": "regenerate", "message_id": reply_id})
        answer = frames_until_settled(ws, recv(ws))
        if "regenerate" in allowed:
            assert answer[0]["type"] == "assistant_start"
            assert answer[-1]["type"] == "assistant_done"
        else:
            assert [(f["type"], f["code"]) for f in answer] == [("error", "message_not_found")]
        send(ws, {"type": "edit", "message_id": user_id, "text": f"{row} edits"})
        answer = frames_until_settled(ws, recv(ws))
        if "edit" in allowed:
            assert answer[0]["type"] == "message_accepted"
            assert answer[-1]["type"] == "assistant_done"
        else:
            assert [(f["type"], f["code"]) for f in answer] == [("error", "message_not_found")]
    after = client.get(f"/api/conversations/{chat}", headers=headers["owner"]).json()
    added = len(after["messages"]) - len(stored["messages"])
    assert added == (3 if "edit" in allowed else 0)  # a regenerated reply, an edit and its reply
