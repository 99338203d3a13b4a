"""The HTTP API: health, session, and the conversation routes.

What the owner reads is restored; `?view=model` is the tokenized text the model saw; titles are
pseudonymized like any other stored text; bad bodies get a 400 with a code and change nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from holdback.providers.demo import DemoProvider
from tests.app.support import (
    CARD,
    EMAIL,
    PHONE,
    TestClient,
    chat,
    content_of,
    echo_upstream,
    make_settings,
    openai_provider,
    recv,
    running_app,
    send,
    wait_stored,
)


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    with running_app(make_settings(tmp_path), DemoProvider(chunk_delay=0)) as c:
        yield c


def test_healthz_and_session(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    session = client.get("/api/session").json()
    assert session["auth"] == "none"
    assert set(session["user"]) == {"id", "name"}


def test_static_ui_is_served(client: TestClient) -> None:
    page = client.get("/")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert client.get("/app.js").status_code == 200
    assert client.get("/no-such-file.js").status_code == 404


def test_create_list_rename_delete(client: TestClient) -> None:
    empty = client.post("/api/conversations")
    assert empty.status_code == 201
    assert empty.json()["title"] == "New chat"
    titled = client.post("/api/conversations", json={"title": f"  Call {PHONE} re card {CARD} "})
    assert titled.status_code == 201
    body = titled.json()
    assert body["title"] == f"Call {PHONE} re card {CARD}"
    assert set(body) == {"id", "title", "created_at", "updated_at"}
    # Stored tokenized: the model's view of the conversation shows tokens, not values.
    model = client.get(f"/api/conversations/{body['id']}?view=model").json()
    assert model["title"] == "Call <PHONE_1> re card <CREDIT_CARD_1>"
    assert model["view"] == "model"
    listed = client.get("/api/conversations").json()["conversations"]
    assert [c["id"] for c in listed] == [body["id"], empty.json()["id"]]  # newest first
    assert listed[0]["title"] == body["title"]

    renamed = client.patch(f"/api/conversations/{body['id']}", json={"title": f"Mail {EMAIL}"})
    assert renamed.status_code == 200
    assert renamed.json()["title"] == f"Mail {EMAIL}"
    model = client.get(f"/api/conversations/{body['id']}?view=model").json()
    assert model["title"] == "Mail <EMAIL_1>"
    # The phone's token survives in the vault: a rename with it again reuses <PHONE_1>.
    client.patch(f"/api/conversations/{body['id']}", json={"title": f"{PHONE} and {EMAIL}"})
    model = client.get(f"/api/conversations/{body['id']}?view=model").json()
    assert model["title"] == "<PHONE_1> and <EMAIL_1>"

    assert client.delete(f"/api/conversations/{body['id']}").status_code == 204
    assert client.get(f"/api/conversations/{body['id']}").status_code == 404
    assert client.delete(f"/api/conversations/{body['id']}").status_code == 404
    assert [c["id"] for c in client.get("/api/conversations").json()["conversations"]] == [
        empty.json()["id"]
    ]


@pytest.mark.parametrize(
    "body", [None, "not json", {}, {"title": ""}, {"title": "   "}, {"title": 7}]
)
def test_bad_rename_changes_nothing(client: TestClient, body: object) -> None:
    created = client.post("/api/conversations", json={"title": "Keep me"}).json()
    path = f"/api/conversations/{created['id']}"
    if body is None:
        response = client.patch(path)
    elif isinstance(body, str):
        response = client.patch(path, content=body)
    else:
        response = client.patch(path, json=body)
    assert response.status_code == 400
    assert response.json()["code"] == "bad_request"
    assert client.get(path).json()["title"] == "Keep me"


def test_unknown_conversation_is_404(client: TestClient) -> None:
    for method in ("GET", "PATCH", "DELETE"):
        response = client.request(method, "/api/conversations/nope", json={"title": "x"})
        assert response.status_code == 404
        assert response.json() == {"code": "not_found", "message": "no such conversation"}


def test_owner_view_and_model_view(client: TestClient) -> None:
    text = f"Please send a mail to {EMAIL} about {CARD}."
    with client.websocket_connect("/ws") as ws:
        frames = chat(ws, text)
    conversation_id = frames[0]["conversation_id"]
    owner = client.get(f"/api/conversations/{conversation_id}").json()
    model = client.get(f"/api/conversations/{conversation_id}?view=model").json()
    assert owner["view"] == "owner"
    assert owner["streaming"] is False
    assert owner["title"] == text
    user, assistant = owner["messages"]
    assert set(user) == {
        "id",
        "role",
        "text",
        "reasoning",
        "tool_calls",
        "masked",
        "status",
        "finish_reason",
        "created_at",
        "parent_id",
        "model",
        "ended_by",
        "attachments",
        "moderation_category",
    }
    assert (user["parent_id"], assistant["parent_id"]) == (None, user["id"])
    assert owner["current_path"] == [user["id"], assistant["id"]]
    assert assistant["model"] == owner["model"]
    assert user["text"] == text
    assert user["masked"] == frames[0]["masked"]
    assert assistant["text"] == content_of(frames)
    assert assistant["reasoning"] == content_of(frames, "reasoning")
    assert assistant["status"] == "complete"
    assert assistant["tool_calls"][0]["name"] == "send_email"
    assert assistant["tool_calls"][0]["arguments"] == content_of(frames, "tool_call")
    # The model saw tokens everywhere, and nothing else.
    m_user, m_assistant = model["messages"]
    assert m_user["text"] == "Please send a mail to <EMAIL_1> about <CREDIT_CARD_1>."
    assert model["title"] == m_user["text"]
    assert EMAIL not in str(model)
    assert CARD not in str(model)
    assert "<EMAIL_1>" in m_assistant["text"]
    assert '"<EMAIL_1>"' in m_assistant["tool_calls"][0]["arguments"]


def test_streaming_flag_and_delete_while_streaming(tmp_path: Path) -> None:
    with (
        echo_upstream(chunk_delay=0.02) as upstream,
        running_app(make_settings(tmp_path), openai_provider(upstream)) as client,
    ):
        with client.websocket_connect("/ws") as ws:
            send(ws, {"type": "user_message", "conversation_id": None, "text": "slow " * 80})
            conversation_id = recv(ws)["conversation_id"]
            assert recv(ws)["type"] == "assistant_start"
            body = client.get(f"/api/conversations/{conversation_id}").json()
            assert body["streaming"] is True
            assert body["messages"][1]["status"] == "streaming"
            assert client.delete(f"/api/conversations/{conversation_id}").status_code == 204
            frames = [recv(ws)]
            while frames[-1]["type"] != "assistant_done":
                frames.append(recv(ws))
            assert frames[-1]["status"] == "incomplete"
        assert client.get(f"/api/conversations/{conversation_id}").status_code == 404
        assert client.get("/api/conversations").json()["conversations"] == []


def test_reply_is_stored_when_done(tmp_path: Path) -> None:
    with (
        echo_upstream() as upstream,
        running_app(make_settings(tmp_path), openai_provider(upstream)) as client,
    ):
        with client.websocket_connect("/ws") as ws:
            conversation_id = chat(ws, f"Echo {EMAIL}")[0]["conversation_id"]
        stored = wait_stored(client, conversation_id)
    assert [m["text"] for m in stored["messages"]] == [f"Echo {EMAIL}"] * 2
    assert stored["messages"][1]["finish_reason"] == "stop"
