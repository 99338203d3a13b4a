"""Several server processes share one PostgreSQL database, and any of them serves any
conversation (issue 5).

Two `holdback serve` subprocesses run on different ports with the same `--database-url` and
the same `HOLDBACK_VAULT_KEY`, each with a data directory of its own. A conversation begun on
one is continued on the other: both show the same history, restored, and the same vault
tokens; a value already in the vault keeps its token whichever process sees it again.
PostgreSQL-only bad input (a NUL character, which its text type cannot hold) is checked too.
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from websockets.asyncio.client import ClientConnection, connect

from holdback.providers.demo import DemoProvider
from tests.app.support import (
    CARD,
    EMAIL,
    PHONE,
    USER_CANARIES,
    Frame,
    ServerProcess,
    content_of,
    leaks,
    make_settings,
    process_env,
    recv,
    run_holdback,
    running_app,
    send,
    until_done,
)
from tests.app.support import chat as sync_chat

pytestmark = [pytest.mark.postgres]


async def chat(ws: ClientConnection, text: str, conversation_id: str | None = None) -> list[Frame]:
    await ws.send(
        json.dumps({"type": "user_message", "conversation_id": conversation_id, "text": text})
    )
    frames: list[Frame] = []
    with anyio.fail_after(20):
        while not frames or frames[-1]["type"] != "assistant_done":
            frames.append(json.loads(await ws.recv()))
    return frames


async def get(server: ServerProcess, path: str, headers: dict[str, str]) -> Any:
    async with httpx.AsyncClient(base_url=server.base, headers=headers) as http:
        response = await http.get(path)
        assert response.status_code == 200, response.text
        return response.json()


@pytest.mark.server
@pytest.mark.anyio
async def test_two_servers_share_conversations(tmp_path: Path, postgres_url: str) -> None:
    shared = {
        "HOLDBACK_DATABASE_URL": postgres_url,
        "HOLDBACK_VAULT_KEY": secrets.token_urlsafe(32),
    }

    def env(name: str) -> dict[str, str]:
        return process_env(
            tmp_path / name,
            {
                **shared,
                "HOLDBACK_DATA_DIR": str(tmp_path / name / "data"),
                "HOLDBACK_AUTH": "password",
            },
        )

    # The commands reach the same database through --database-url.
    added = run_holdback(
        ["user", "add", "alice", "--database-url", postgres_url],
        env("cli"),
        stdin="alice's password\n",
    )
    assert added.returncode == 0, added.stderr
    made = run_holdback(["token", "create", "alice", "--database-url", postgres_url], env("cli"))
    assert made.returncode == 0, made.stderr
    bearer = {"Authorization": f"Bearer {made.stdout.strip()}"}

    with (
        ServerProcess(tmp_path / "a.log", env("a")) as a,
        ServerProcess(tmp_path / "b.log", env("b")) as b,
    ):
        assert a.port != b.port
        first_text = f"Please email {EMAIL} about card {CARD}."
        async with connect(a.ws_url, additional_headers=bearer) as ws:
            first = await chat(ws, first_text)
        conversation_id = first[0]["conversation_id"]
        assert first[-1]["status"] == "complete"
        assert [m["token"] for m in first[0]["masked"]] == ["<EMAIL_1>", "<CREDIT_CARD_1>"]

        # B sees A's conversation: listed, restored for the owner, tokenized for the model.
        listed = await get(b, "/api/conversations", bearer)
        assert [c["id"] for c in listed["conversations"]] == [conversation_id]
        assert listed["conversations"][0]["title"] == first_text
        on_b = await get(b, f"/api/conversations/{conversation_id}", bearer)
        on_a = await get(a, f"/api/conversations/{conversation_id}", bearer)
        assert on_b["messages"] == on_a["messages"]
        assert on_b["messages"][0]["text"] == first_text
        assert on_b["messages"][1]["text"] == content_of(first)

        # Continued on B: the email keeps its token from A's vault, the phone gets a new one.
        second_text = f"Also call {PHONE}, and write to {EMAIL} again."
        async with connect(b.ws_url, additional_headers=bearer) as ws:
            second = await chat(ws, second_text, conversation_id)
        assert second[-1]["status"] == "complete"
        assert [m["token"] for m in second[0]["masked"]] == ["<PHONE_1>", "<EMAIL_1>"]
        reply = content_of(second)
        assert "This is message 2 of our conversation." in reply  # B's model saw A's history
        assert f"Earlier you also mentioned {CARD}." in reply  # restored from the shared vault

        # Both show the same four messages and the same tokens.
        model_a = await get(a, f"/api/conversations/{conversation_id}?view=model", bearer)
        model_b = await get(b, f"/api/conversations/{conversation_id}?view=model", bearer)
        assert model_a["messages"] == model_b["messages"]
        assert [m["role"] for m in model_a["messages"]] == ["user", "assistant"] * 2
        assert (
            model_a["messages"][2]["text"] == "Also call <PHONE_1>, and write to <EMAIL_1> again."
        )
        assert leaks(json.dumps(model_a), USER_CANARIES) == []
        owner_a = await get(a, f"/api/conversations/{conversation_id}", bearer)
        assert owner_a["messages"][2]["text"] == second_text
        assert owner_a["messages"][3]["text"] == reply

        # And A carries on after B, on the same history.
        async with connect(a.ws_url, additional_headers=bearer) as ws:
            third = await chat(ws, "Summarize please.", conversation_id)
        assert "This is message 3 of our conversation." in content_of(third)

    for log in (a, b):
        assert leaks(log.output(), USER_CANARIES) == []


def nul_message(tmp_path: Path, postgres_url: str) -> tuple[Frame, list[dict[str, Any]]]:
    """Send a message with a NUL on PostgreSQL between two good ones; returns the answer to it
    and the stored messages."""
    settings = make_settings(
        tmp_path, database_url=postgres_url, env={"HOLDBACK_VAULT_KEY": secrets.token_urlsafe(32)}
    )
    with running_app(settings, DemoProvider(chunk_delay=0)) as client:
        with client.websocket_connect("/ws") as ws:
            conversation_id = sync_chat(ws, "hello")[0]["conversation_id"]
            send(
                ws,
                {
                    "type": "user_message",
                    "conversation_id": conversation_id,
                    "text": f"nul \x00 {EMAIL}",
                },
            )
            answer = recv(ws)
            if answer["type"] != "error":
                until_done(ws)
            assert sync_chat(ws, "still there?", conversation_id)[-1]["status"] == "complete"
        body = client.get(f"/api/conversations/{conversation_id}").json()
    assert EMAIL not in json.dumps(answer)
    return answer, body["messages"]


def test_nul_characters_never_crash_or_lose_messages(tmp_path: Path, postgres_url: str) -> None:
    answer, messages = nul_message(tmp_path, postgres_url)
    texts = [m["text"] for m in messages if m["role"] == "user"]
    assert texts[0] == "hello"
    assert texts[-1] == "still there?"
    if answer["type"] == "error":
        assert answer["code"] in ("bad_frame", "storage_failed")


def test_nul_characters_are_refused_as_bad_input(tmp_path: Path, postgres_url: str) -> None:
    answer, _ = nul_message(tmp_path, postgres_url)
    assert answer["code"] == "bad_frame"
