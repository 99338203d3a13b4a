"""The WebSocket protocol in process (Starlette's TestClient), as docs/protocol.md defines it.

The rule under test: bad input never crashes the server and never loses a stored message.
Every bad frame gets an `error` frame with its code and the connection stays usable; a frame
over the size limit gets `frame_too_large` and a 1009 close. One reply streams per
conversation (`busy`), `cancel` stops it as `incomplete`, `user_message` is rate limited per
user, and a reply outlives the connection that asked for it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.websockets import WebSocketDisconnect

from holdback.providers.demo import DemoProvider
from tests.app.conftest import Accounts
from tests.app.support import (
    EMAIL,
    TestClient,
    chat,
    content_of,
    echo_upstream,
    make_settings,
    openai_provider,
    recv,
    running_app,
    send,
    until_done,
    wait_stored,
)


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    with running_app(make_settings(tmp_path), DemoProvider(chunk_delay=0)) as c:
        yield c


def stored_messages(client: TestClient, conversation_id: str) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = client.get(f"/api/conversations/{conversation_id}").json()[
        "messages"
    ]
    return messages


BAD_FRAMES: list[tuple[str, str | bytes, str]] = [
    ("invalid json", "{not json", "bad_frame"),
    ("empty text frame", "", "bad_frame"),
    ("json array", "[1, 2]", "bad_frame"),
    ("json string", '"user_message"', "bad_frame"),
    (
        "lone surrogate",
        '{"type": "user_message", "conversation_id": null, "text": "\\ud800"}',
        "bad_frame",
    ),
    ("binary frame", b'{"type": "user_message"}', "bad_frame"),
    ("no type", '{"conversation_id": null, "text": "hi"}', "missing_field"),
    ("unknown type", '{"type": "delete_everything", "conversation_id": null}', "unknown_type"),
    ("type not a string", '{"type": 7, "conversation_id": null}', "unknown_type"),
    ("no conversation_id", '{"type": "user_message", "text": "hi"}', "missing_field"),
    ("no text", '{"type": "user_message", "conversation_id": null}', "missing_field"),
    (
        "text not a string",
        '{"type": "user_message", "conversation_id": null, "text": 5}',
        "bad_frame",
    ),
    (
        "blank text",
        '{"type": "user_message", "conversation_id": null, "text": "  \\n "}',
        "bad_frame",
    ),
    (
        "id not a string",
        '{"type": "user_message", "conversation_id": 12, "text": "hi"}',
        "bad_frame",
    ),
    ("cancel without id", '{"type": "cancel"}', "missing_field"),
    ("cancel with null id", '{"type": "cancel", "conversation_id": null}', "missing_field"),
    (
        "unknown conversation",
        '{"type": "user_message", "conversation_id": "nope", "text": "hi"}',
        "not_found",
    ),
    ("cancel unknown conversation", '{"type": "cancel", "conversation_id": "nope"}', "not_found"),
]


@pytest.mark.parametrize(
    ("frame", "code"), [(f, c) for _, f, c in BAD_FRAMES], ids=[n for n, _, _ in BAD_FRAMES]
)
def test_bad_frame_gets_error_and_loses_nothing(
    client: TestClient, frame: str | bytes, code: str
) -> None:
    with client.websocket_connect("/ws") as ws:
        first = chat(ws, f"Remember {EMAIL}.")
        conversation_id = first[0]["conversation_id"]
        before = stored_messages(client, conversation_id)
        if isinstance(frame, bytes):
            ws.send_bytes(frame)
        else:
            ws.send_text(frame)
        error = recv(ws)
        assert error["type"] == "error"
        assert error["code"] == code
        assert isinstance(error["message"], str)
        assert error["message"]
        # The connection is still usable, and the conversation carries on where it was.
        second = chat(ws, "And now?", conversation_id)
        assert second[-1]["status"] == "complete"
    after = stored_messages(client, conversation_id)
    assert after[: len(before)] == before
    assert len(after) == len(before) + 2


def test_many_bad_frames_in_a_row_then_a_good_one(client: TestClient) -> None:
    with client.websocket_connect("/ws") as ws:
        for _, frame, code in BAD_FRAMES:
            if isinstance(frame, bytes):
                ws.send_bytes(frame)
            else:
                ws.send_text(frame)
            assert recv(ws)["code"] == code
        frames = chat(ws, "Still there?")
    assert frames[-1]["status"] == "complete"
    assert len(client.get("/api/conversations").json()["conversations"]) == 1


def test_frame_over_the_limit_closes_1009_and_keeps_the_conversation(
    tmp_path: Path,
) -> None:
    settings = make_settings(tmp_path, env={"HOLDBACK_MAX_FRAME_BYTES": "2048"})
    with running_app(settings, DemoProvider(chunk_delay=0)) as client:
        with client.websocket_connect("/ws") as ws:
            conversation_id = chat(ws, f"Keep {EMAIL} safe.")[0]["conversation_id"]
            # Exactly at the limit is fine (the JSON framing counts too).
            head = json.dumps(
                {"type": "user_message", "conversation_id": conversation_id, "text": ""}
            )
            fits = head[:-2] + "x" * (2048 - len(head)) + '"}'
            assert len(fits.encode()) == 2048
            ws.send_text(fits)
            assert until_done(ws)[-1]["status"] == "complete"
            # One byte more (a two-byte character counts as two) is refused and closes.
            over = fits[:-3] + "é" + '"}'
            assert len(over.encode()) == 2049
            ws.send_text(over)
            error = recv(ws)
            assert error["code"] == "frame_too_large"
            assert "2048" in error["message"]
            with pytest.raises(WebSocketDisconnect) as closed:
                ws.receive_text()
            assert closed.value.code == 1009
        messages = stored_messages(client, conversation_id)
        assert [m["role"] for m in messages] == ["user", "assistant"] * 2
        with client.websocket_connect("/ws") as ws:
            assert chat(ws, "Back again.", conversation_id)[-1]["status"] == "complete"


def test_default_frame_limit_is_64_kib(client: TestClient) -> None:
    with client.websocket_connect("/ws") as ws:
        ws.send_text(
            json.dumps({"type": "user_message", "conversation_id": None, "text": "x" * 65536})
        )
        assert recv(ws)["code"] == "frame_too_large"
        with pytest.raises(WebSocketDisconnect) as closed:
            ws.receive_text()
        assert closed.value.code == 1009
    assert client.get("/api/conversations").json()["conversations"] == []


def test_full_reply_frames_in_order(client: TestClient) -> None:
    with client.websocket_connect("/ws") as ws:
        frames = chat(ws, f"Please send a mail to {EMAIL}.")
    kinds = [f["type"] for f in frames]
    assert kinds[0] == "message_accepted"
    assert kinds[1] == "assistant_start"
    assert kinds[-1] == "assistant_done"
    assert set(kinds[2:-1]) == {"assistant_delta"}
    accepted, start, done = frames[0], frames[1], frames[-1]
    assert accepted["masked"] == [
        {"start": 22, "end": 22 + len(EMAIL), "kind": "email", "token": "<EMAIL_1>"}
    ]
    assert {f["message_id"] for f in frames[1:]} == {start["message_id"]}
    assert {f["conversation_id"] for f in frames} == {accepted["conversation_id"]}
    channels = {f["channel"] for f in frames if f["type"] == "assistant_delta"}
    assert channels == {"reasoning", "content", "tool_call"}
    tool = [f for f in frames if f.get("channel") == "tool_call"]
    assert {f["name"] for f in tool} == {"send_email"}
    assert len({f["call_id"] for f in tool}) == 1
    assert json.loads(content_of(frames, "tool_call"))["to"] == EMAIL
    assert EMAIL in content_of(frames)
    assert done["status"] == "complete"
    assert done["finish_reason"] == "tool_calls"


def test_busy_while_a_reply_streams_then_cancel(tmp_path: Path) -> None:
    with (
        echo_upstream(chunk_delay=0.02) as upstream,
        running_app(make_settings(tmp_path), openai_provider(upstream)) as client,
    ):
        with client.websocket_connect("/ws") as ws:
            send(ws, {"type": "user_message", "conversation_id": None, "text": "word " * 60})
            accepted = recv(ws)
            conversation_id = accepted["conversation_id"]
            assert recv(ws)["type"] == "assistant_start"
            send(ws, {"type": "user_message", "conversation_id": conversation_id, "text": "again"})
            frames = [recv(ws)]
            while frames[-1]["type"] != "error":
                frames.append(recv(ws))
            assert frames[-1]["code"] == "busy"
            assert frames[-1]["conversation_id"] == conversation_id
            send(ws, {"type": "cancel", "conversation_id": conversation_id})
            rest = until_done(ws)
            assert rest[-1]["status"] == "incomplete"
            assert rest[-1]["finish_reason"] == "other"
            shown = content_of(frames + rest)
        stored = wait_stored(client, conversation_id)
        assert [m["role"] for m in stored["messages"]] == ["user", "assistant"]
        reply = stored["messages"][1]
        assert reply["status"] == "incomplete"
        assert reply["finish_reason"] == "other"
        assert reply["text"] == shown
        assert ("word " * 60).startswith(shown)
        assert len(shown) < len("word " * 60)
        # Only the first message went to the model; the refused one was not stored.
        assert len(upstream.requests) == 1
        with client.websocket_connect("/ws") as ws:
            assert chat(ws, "go on", conversation_id)[-1]["status"] == "complete"


def test_cancel_without_a_reply_is_quiet(client: TestClient) -> None:
    with client.websocket_connect("/ws") as ws:
        conversation_id = chat(ws, "hello")[0]["conversation_id"]
        send(ws, {"type": "cancel", "conversation_id": conversation_id})
        # No frame answers a cancel with nothing to stop; the next message works.
        frames = chat(ws, "hello again", conversation_id)
    assert frames[0]["type"] == "message_accepted"


def test_rate_limit_is_per_user(tmp_path: Path, accounts: Accounts) -> None:
    alice, bob = accounts.tokens["alice"], accounts.tokens["bob"]
    settings = make_settings(tmp_path, auth="password", env={"HOLDBACK_RATE_LIMIT": "3"})
    with running_app(settings, DemoProvider(chunk_delay=0)) as client:
        as_alice = {"Authorization": f"Bearer {alice}"}
        with client.websocket_connect("/ws", headers=as_alice) as ws:
            for i in range(3):
                assert chat(ws, f"message {i}")[-1]["status"] == "complete"
            send(ws, {"type": "user_message", "conversation_id": None, "text": "one too many"})
            error = recv(ws)
            assert error["code"] == "rate_limited"
        # A second connection of the same user shares the budget.
        with client.websocket_connect("/ws", headers=as_alice) as ws:
            send(ws, {"type": "user_message", "conversation_id": None, "text": "sneaky"})
            assert recv(ws)["code"] == "rate_limited"
        # Another user is not affected.
        with client.websocket_connect("/ws", headers={"Authorization": f"Bearer {bob}"}) as ws:
            assert chat(ws, "hi from bob")[-1]["status"] == "complete"
        listed = client.get("/api/conversations", headers=as_alice).json()["conversations"]
        assert len(listed) == 3  # the refused messages created nothing


def test_other_users_conversation_is_not_found(tmp_path: Path, accounts: Accounts) -> None:
    alice, bob = accounts.tokens["alice"], accounts.tokens["bob"]
    settings = make_settings(tmp_path, auth="password")
    with running_app(settings, DemoProvider(chunk_delay=0)) as client:
        as_alice = {"Authorization": f"Bearer {alice}"}
        with client.websocket_connect("/ws", headers=as_alice) as ws:
            conversation_id = chat(ws, f"private: {EMAIL}")[0]["conversation_id"]
        before = client.get(f"/api/conversations/{conversation_id}", headers=as_alice).json()
        with client.websocket_connect("/ws", headers={"Authorization": f"Bearer {bob}"}) as ws:
            for frame in (
                {"type": "user_message", "conversation_id": conversation_id, "text": "mine now"},
                {"type": "cancel", "conversation_id": conversation_id},
            ):
                send(ws, frame)
                error = recv(ws)
                assert error["type"] == "error"
                assert error["code"] == "not_found"
                assert EMAIL not in json.dumps(error)
            assert chat(ws, "my own chat")[-1]["status"] == "complete"
        after = client.get(f"/api/conversations/{conversation_id}", headers=as_alice).json()
        assert after["messages"] == before["messages"]


def test_reply_completes_after_the_client_disconnects(tmp_path: Path) -> None:
    text = f"Write to {EMAIL} about the contract, please. " * 4
    with (
        echo_upstream(chunk_delay=0.005) as upstream,
        running_app(make_settings(tmp_path), openai_provider(upstream)) as client,
    ):
        with client.websocket_connect("/ws") as ws:
            send(ws, {"type": "user_message", "conversation_id": None, "text": text})
            conversation_id = recv(ws)["conversation_id"]
            assert recv(ws)["type"] == "assistant_start"
        # Gone mid-reply: the reply goes on and is stored whole.
        assert client.get(f"/api/conversations/{conversation_id}").json()["streaming"] is True
        stored = wait_stored(client, conversation_id)
        reply = stored["messages"][1]
        assert reply["status"] == "complete"
        assert reply["text"] == text
        # A new connection to the same conversation carries on from there.
        with client.websocket_connect("/ws") as ws:
            frames = chat(ws, "thanks", conversation_id)
        assert content_of(frames) == "thanks"
        assert upstream.requests[-1].json()["messages"][2]["content"] == text.replace(
            EMAIL, "<EMAIL_1>"
        )
