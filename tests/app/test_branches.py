"""Conversation controls over the WebSocket and HTTP, in process: numbered frames and resume,
regenerate, edit and continue (the message tree and each branch's context), the branch shown,
a conversation's model and system prompt, and a user's instructions.

Values are canaries; what the model was sent is read from the fake upstream's own record of
each request, and every check of the wire and the database is plain substring search.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

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
    until_done,
    wait_stored,
)
from tests.providers.fakeserver import Reply

EMAIL = "branch.canary@example.org"
PHONE = "+1 415 555 0143"
SECRET_NOTE = "instructions-canary@example.net"
Frame = dict[str, Any]


@pytest.fixture
def upstream() -> Iterator[EchoUpstream]:
    with echo_upstream(chunk_delay=0.01, low=2, high=4) as server:
        yield server


@pytest.fixture
def client(tmp_path: Path, upstream: EchoUpstream) -> Iterator[TestClient]:
    with running_app(make_settings(tmp_path), openai_provider(upstream)) as c:
        yield c


def sent_messages(upstream: EchoUpstream) -> list[dict[str, Any]]:
    """The turns of the last request the model got (not the system text: `system_of`)."""
    messages: list[dict[str, Any]] = json.loads(upstream.requests[-1].body)["messages"]
    return [m for m in messages if m["role"] != "system"]


def system_of(upstream: EchoUpstream) -> str:
    """The system text of the last request: holdback's own prompt, then the request's."""
    messages = json.loads(upstream.requests[-1].body)["messages"]
    return "\n".join(m["content"] for m in messages if m["role"] == "system")


def texts(frames: list[Frame]) -> str:
    return "".join(f["text"] for f in frames if f["type"] == "assistant_delta")


def first_turn(client: TestClient, text: str) -> tuple[str, str, str]:
    """Conversation id, user message id and reply id of a new conversation's first turn."""
    with client.websocket_connect("/ws") as ws:
        send(ws, {"type": "user_message", "conversation_id": None, "text": text})
        accepted = recv(ws)
        done = until_done(ws)[-1]
    return accepted["conversation_id"], accepted["message_id"], done["message_id"]


def db_bytes(tmp_path: Path) -> bytes:
    data = tmp_path / "data"
    return b"".join(p.read_bytes() for p in data.iterdir() if p.name.startswith("holdback.db"))


# -- numbered frames and resume ----------------------------------------------------------------


def test_reply_frames_are_numbered_from_one(client: TestClient) -> None:
    with client.websocket_connect("/ws") as ws:
        send(ws, {"type": "user_message", "conversation_id": None, "text": f"hi {EMAIL}"})
        assert recv(ws)["type"] == "message_accepted"
        frames = until_done(ws)
    seqs = [f["seq"] for f in frames]
    assert frames[0]["type"] == "assistant_start"
    assert seqs[0] == 1
    assert seqs == sorted(set(seqs))  # rising, never repeated (merged deltas may skip)
    assert frames[-1]["type"] == "assistant_done"


def test_resume_mid_reply_replays_what_was_missed_then_streams(
    client: TestClient, upstream: EchoUpstream
) -> None:
    text = f"Please write to {EMAIL} and call {PHONE}. " * 6
    with client.websocket_connect("/ws") as first:
        send(first, {"type": "user_message", "conversation_id": None, "text": text})
        accepted = recv(first)
        chat = accepted["conversation_id"]
        seen = [recv(first) for _ in range(4)]  # then the tab "reloads"
    last = seen[-1]["seq"]
    with client.websocket_connect("/ws") as again:
        send(
            again,
            {"type": "resume", "conversation_id": chat, "message_id": seen[0]["message_id"],
             "after_seq": last},
        )  # fmt: skip
        rest = until_done(again)
    assert rest[0]["seq"] > last
    assert texts(seen) + texts(rest) == text  # no gap, no duplicate
    assert rest[-1]["status"] == "complete"
    stored = wait_stored(client, chat)
    assert stored["messages"][-1]["text"] == text


def test_resume_a_finished_reply_and_from_the_start(client: TestClient) -> None:
    chat, _, reply_id = first_turn(client, f"note {EMAIL}")
    with client.websocket_connect("/ws") as ws:
        send(ws, {"type": "resume", "conversation_id": chat, "message_id": reply_id,
                  "after_seq": 0})  # fmt: skip
        whole = until_done(ws)
        send(ws, {"type": "resume", "conversation_id": chat, "message_id": reply_id,
                  "after_seq": whole[-1]["seq"] - 1})  # fmt: skip
        tail = recv(ws)
    assert whole[0]["type"] == "assistant_start"
    assert texts(whole) == f"note {EMAIL}"
    assert tail["type"] == "assistant_done"
    assert tail["seq"] == whole[-1]["seq"]


def test_resume_refusals(client: TestClient) -> None:
    chat, user_id, _ = first_turn(client, "plain words")
    with client.websocket_connect("/ws") as ws:
        for frame, code in [
            ({"conversation_id": chat, "message_id": user_id, "after_seq": 0}, "not_resumable"),
            ({"conversation_id": "nope", "message_id": user_id, "after_seq": 0}, "not_found"),
            ({"conversation_id": chat, "message_id": user_id, "after_seq": -1}, "bad_frame"),
            ({"conversation_id": chat, "message_id": user_id}, "missing_field"),
        ]:
            send(ws, {"type": "resume", **frame})
            answer = recv(ws)
            assert (answer["type"], answer["code"]) == ("error", code)


# -- the tree: regenerate, edit, continue, the branch shown ------------------------------------


def test_regenerate_makes_a_sibling_and_keeps_both(
    client: TestClient, upstream: EchoUpstream
) -> None:
    chat, user_id, first_reply = first_turn(client, f"mail {EMAIL}")
    with client.websocket_connect("/ws") as ws:
        send(ws, {"type": "regenerate", "message_id": first_reply})
        frames = until_done(ws)
    assert frames[0]["type"] == "assistant_start"
    second_reply = frames[0]["message_id"]
    assert second_reply != first_reply
    assert texts(frames) == f"mail {EMAIL}"
    # The model was asked the same question again: its branch, without the first reply.
    assert [m["role"] for m in sent_messages(upstream)] == ["user"]
    body = wait_stored(client, chat)
    by_id = {m["id"]: m for m in body["messages"]}
    assert by_id[first_reply]["parent_id"] == by_id[second_reply]["parent_id"] == user_id
    assert body["current_path"] == [user_id, second_reply]


def test_edit_makes_a_sibling_branch_whose_context_is_its_path(
    client: TestClient, upstream: EchoUpstream
) -> None:
    chat, first_user, first_reply = first_turn(client, "first question")
    with client.websocket_connect("/ws") as ws:
        send(ws, {"type": "user_message", "conversation_id": chat, "text": "second question"})
        second_user = recv(ws)["message_id"]
        until_done(ws)
        send(ws, {"type": "edit", "message_id": second_user, "text": f"edited, to {EMAIL}"})
        accepted = recv(ws)
        frames = until_done(ws)
    assert accepted["type"] == "message_accepted"
    assert accepted["message_id"] != second_user
    assert texts(frames) == f"edited, to {EMAIL}"
    sent = sent_messages(upstream)
    assert [(m["role"], m["content"]) for m in sent] == [
        ("user", "first question"),
        ("assistant", "first question"),
        ("user", "edited, to <EMAIL_1>"),
    ]
    body = wait_stored(client, chat)
    by_id = {m["id"]: m for m in body["messages"]}
    assert by_id[accepted["message_id"]]["parent_id"] == first_reply
    assert by_id[second_user]["parent_id"] == first_reply
    assert body["current_path"][:3] == [first_user, first_reply, accepted["message_id"]]
    # Back to the first branch: the next message follows it.
    picked = client.patch(f"/api/conversations/{chat}", json={"current_leaf": second_user})
    assert picked.status_code == 200
    body = wait_stored(client, chat)
    assert body["current_path"][2] == second_user
    assert len(body["current_path"]) == 4
    with client.websocket_connect("/ws") as ws:
        send(ws, {"type": "user_message", "conversation_id": chat, "text": "third"})
        recv(ws)
        until_done(ws)
    assert [m["content"] for m in sent_messages(upstream)][2:] == [
        "second question",
        "second question",
        "third",
    ]


def test_edit_regenerate_and_continue_are_checked(client: TestClient) -> None:
    chat, user_id, reply_id = first_turn(client, "words")
    with client.websocket_connect("/ws") as ws:
        for frame, code in [
            ({"type": "edit", "message_id": reply_id, "text": "x"}, "not_editable"),
            ({"type": "regenerate", "message_id": user_id}, "not_editable"),
            ({"type": "continue", "message_id": reply_id}, "not_editable"),  # not cut short
            ({"type": "regenerate", "message_id": "nope"}, "message_not_found"),
            ({"type": "edit", "message_id": user_id, "text": " "}, "bad_frame"),
            ({"type": "user_message", "conversation_id": chat, "text": "x", "model": "nope"},
             "unknown_model"),
        ]:  # fmt: skip
            send(ws, frame)
            answer = recv(ws)
            assert (answer["type"], answer["code"]) == ("error", code), frame
    assert len(wait_stored(client, chat)["messages"]) == 2  # nothing changed


def test_continue_extends_a_reply_cut_by_its_length(
    client: TestClient, upstream: EchoUpstream
) -> None:
    pieces = [b'data: {"choices":[{"index":0,"delta":{"content":"Once upon"}}]}\n\n',
              b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}\n\n',
              b"data: [DONE]\n\n"]  # fmt: skip
    upstream.override = lambda request: Reply(chunks=pieces)
    chat, _, cut = first_turn(client, "tell a story")
    assert wait_stored(client, chat)["messages"][-1]["finish_reason"] == "length"
    upstream.override = None
    with client.websocket_connect("/ws") as ws:
        send(ws, {"type": "continue", "message_id": cut})
        frames = until_done(ws)
    sent = sent_messages(upstream)
    assert [m["role"] for m in sent] == ["user", "assistant", "user"]
    assert sent[1]["content"] == "Once upon"  # the cut reply, then the request to go on
    body = wait_stored(client, chat)
    by_id = {m["id"]: m for m in body["messages"]}
    assert by_id[frames[0]["message_id"]]["parent_id"] == cut


# -- model, system prompt and instructions -----------------------------------------------------


def test_system_prompt_and_instructions_reach_the_model_tokenized(
    tmp_path: Path, client: TestClient, upstream: EchoUpstream
) -> None:
    assert client.get("/api/me/instructions").json() == {"text": ""}
    put = client.put("/api/me/instructions", json={"text": f"Sign as {SECRET_NOTE}."})
    assert put.status_code == 200
    assert client.get("/api/me/instructions").json() == {"text": f"Sign as {SECRET_NOTE}."}
    chat, _, _ = first_turn(client, "hello")
    patched = client.patch(
        f"/api/conversations/{chat}", json={"system_prompt": f"Reply to {EMAIL} only."}
    )
    assert patched.status_code == 200
    assert patched.json()["system_prompt"] == f"Reply to {EMAIL} only."
    with client.websocket_connect("/ws") as ws:
        send(ws, {"type": "user_message", "conversation_id": chat, "text": f"and {EMAIL}?"})
        recv(ws)
        until_done(ws)
    system = "Sign as <EMAIL_1>.\n\nReply to <EMAIL_2> only."
    assert system_of(upstream).endswith(system)
    assert SECRET_NOTE not in upstream.bodies()
    assert EMAIL not in upstream.bodies()
    owner = wait_stored(client, chat)
    assert owner["system_prompt"] == f"Reply to {EMAIL} only."
    model = client.get(f"/api/conversations/{chat}?view=model").json()
    assert model["system_prompt"] == "Reply to <EMAIL_2> only."
    assert model["messages"][-1]["system"] == system
    raw = db_bytes(tmp_path)
    assert SECRET_NOTE.encode() not in raw
    assert EMAIL.encode() not in raw


def test_settings_are_checked_and_change_nothing_when_bad(client: TestClient) -> None:
    chat, _, _ = first_turn(client, "hello")
    for body in [
        {},
        {"title": ""},
        {"system_prompt": "x" * 9000},
        {"model": "no-such-model"},
        {"current_leaf": "no-such-message"},
        {"title": "ok", "model": "no-such-model"},
    ]:
        answer = client.patch(f"/api/conversations/{chat}", json=body)
        assert answer.status_code in (400, 404), body
    body = wait_stored(client, chat)
    assert body["title"] == "hello"
    default = body["model"]
    switched = client.patch(f"/api/conversations/{chat}", json={"model": default})
    assert switched.json()["model"] == default
    assert client.put("/api/me/instructions", json={"text": "\x00"}).status_code == 400
    assert client.put("/api/me/instructions", json={"text": "y" * 9000}).status_code == 400


def test_stop_says_who_ended_the_reply(tmp_path: Path) -> None:
    with (
        echo_upstream(chunk_delay=0.05) as upstream,
        running_app(make_settings(tmp_path), openai_provider(upstream)) as client,
        client.websocket_connect("/ws") as ws,
    ):
        send(ws, {"type": "user_message", "conversation_id": None, "text": "slow " * 60})
        chat = recv(ws)["conversation_id"]
        recv(ws)
        send(ws, {"type": "cancel", "conversation_id": chat})
        done = until_done(ws)[-1]
        assert (done["finish_reason"], done["ended_by"]) == ("other", "user")
        stored = wait_stored(client, chat)["messages"][-1]
        assert (stored["status"], stored["ended_by"]) == ("incomplete", "user")


def test_a_reply_cut_off_by_a_stop_is_closed_at_the_next_start(tmp_path: Path) -> None:
    with echo_upstream() as upstream:
        with running_app(make_settings(tmp_path), openai_provider(upstream)) as client:
            chat, _, reply_id = first_turn(client, "hello")
        db = tmp_path / "data" / "holdback.db"
        with sqlite3.connect(db) as conn:  # as a killed server leaves its placeholder
            conn.execute(
                "UPDATE messages SET status = 'incomplete', finish_reason = NULL WHERE id = ?",
                (reply_id,),
            )
        with running_app(make_settings(tmp_path), openai_provider(upstream)) as client:
            last = wait_stored(client, chat)["messages"][-1]
    assert (last["status"], last["finish_reason"], last["ended_by"]) == (
        "incomplete",
        "other",
        "server",
    )


def test_another_user_can_neither_see_nor_branch(
    tmp_path: Path, accounts: Accounts, upstream: EchoUpstream
) -> None:
    with running_app(make_settings(tmp_path, auth="password"), openai_provider(upstream)) as c:
        with c.websocket_connect("/ws", headers=accounts.bearer("alice")) as ws:
            send(ws, {"type": "user_message", "conversation_id": None, "text": f"hi {EMAIL}"})
            accepted = recv(ws)
            reply_id = until_done(ws)[-1]["message_id"]
        chat = accepted["conversation_id"]
        with c.websocket_connect("/ws", headers=accounts.bearer("bob")) as ws:
            for frame, code in [
                ({"type": "regenerate", "message_id": reply_id}, "message_not_found"),
                ({"type": "edit", "message_id": accepted["message_id"], "text": "x"},
                 "message_not_found"),
                ({"type": "continue", "message_id": reply_id}, "message_not_found"),
                ({"type": "resume", "conversation_id": chat, "message_id": reply_id,
                  "after_seq": 0}, "not_found"),
            ]:  # fmt: skip
                send(ws, frame)
                answer = recv(ws)
                assert (answer["type"], answer["code"]) == ("error", code)
                assert EMAIL not in json.dumps(answer)
        bob = accounts.bearer("bob")
        assert (
            c.patch(f"/api/conversations/{chat}", json={"title": "x"}, headers=bob).status_code
            == 404
        )
        assert c.get("/api/me/instructions", headers=bob).json() == {"text": ""}

    async def count(store: Any) -> int:
        return len(await store.list_messages(chat))

    assert store_op(accounts.data_dir, count) == 2


def test_a_message_carries_its_documents_tokenized(
    tmp_path: Path, client: TestClient, upstream: EchoUpstream
) -> None:
    uploaded = client.post(
        "/api/uploads", files={"file": ("notes.txt", f"Call {PHONE} or {EMAIL}.".encode())}
    )
    assert uploaded.status_code == 201
    upload_id = uploaded.json()["id"]
    with client.websocket_connect("/ws") as ws:
        send(ws, {"type": "user_message", "conversation_id": None, "text": "",
                  "attachments": [upload_id]})  # fmt: skip
        accepted = recv(ws)
        until_done(ws)
        send(ws, {"type": "user_message", "conversation_id": None, "text": "again",
                  "attachments": [upload_id]})  # fmt: skip
        again = recv(ws)
        send(ws, {"type": "user_message", "conversation_id": None, "text": " "})
        blank = recv(ws)
    assert accepted["type"] == "message_accepted"
    assert (again["type"], again["code"]) == ("error", "unknown_attachment")  # used once
    assert (blank["type"], blank["code"]) == ("error", "bad_frame")
    sent = sent_messages(upstream)[-1]["content"]
    assert "<PHONE_1>" in sent
    assert "<EMAIL_1>" in sent
    assert "notes.txt" in sent
    assert PHONE not in upstream.bodies()
    assert EMAIL not in upstream.bodies()
    body = wait_stored(client, accepted["conversation_id"])
    user = body["messages"][0]
    assert [a["id"] for a in user["attachments"]] == [upload_id]
    assert PHONE in user["text"]  # the owner reads the document back restored
    assert PHONE.encode() not in db_bytes(tmp_path)
