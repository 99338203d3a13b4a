"""SIGTERM: a graceful shutdown. Replies in flight get `HOLDBACK_SHUTDOWN_GRACE` seconds to
finish; the rest are stored as `incomplete` (finish reason `cancelled`) with what was sent.

A real `holdback serve` subprocess streams from a slow loopback upstream; the test signals it
mid-reply, waits for it to exit, starts a new server on the same data directory and reads the
conversation back over HTTP.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from tests.app.support import (
    EMAIL,
    USER_CANARIES,
    Frame,
    ServerProcess,
    content_of,
    echo_upstream,
    leaks,
    process_env,
)

pytestmark = [pytest.mark.server, pytest.mark.anyio]


def server_env(tmp_path: Path, upstream_url: str, grace: str) -> dict[str, str]:
    return process_env(
        tmp_path,
        {
            "HOLDBACK_DATA_DIR": str(tmp_path / "data"),
            "HOLDBACK_MODEL": "openai:test",
            "OPENAI_BASE_URL": upstream_url + "/v1",
            "OPENAI_API_KEY": "x",
            "HOLDBACK_SHUTDOWN_GRACE": grace,
        },
    )


async def start_reply_then_terminate(server: ServerProcess, text: str) -> tuple[str, list[Frame]]:
    """Send a message, read until text flows, SIGTERM the server, read until it closes."""
    frames: list[Frame] = []
    async with connect(server.ws_url) as ws:
        await ws.send(json.dumps({"type": "user_message", "conversation_id": None, "text": text}))
        with anyio.fail_after(15):
            while not content_of(frames):
                frames.append(json.loads(await ws.recv()))
        server.signal(signal.SIGTERM)
        with anyio.fail_after(30):
            try:
                async for raw in ws:
                    frames.append(json.loads(raw))
            except ConnectionClosed:
                pass
    return frames[0]["conversation_id"], frames


def read_back(tmp_path: Path, env: dict[str, str], conversation_id: str) -> dict[str, Any]:
    with (
        ServerProcess(tmp_path / "restart.log", env) as again,
        httpx.Client(base_url=again.base) as http,
    ):
        body: dict[str, Any] = http.get(f"/api/conversations/{conversation_id}").json()
        return body


async def test_sigterm_stores_an_unfinished_reply_as_incomplete(tmp_path: Path) -> None:
    text = f"Tell {EMAIL} that the quarterly numbers look fine. " * 12
    with echo_upstream(chunk_delay=0.03) as upstream:  # ~10 s of reply
        env = server_env(tmp_path, upstream.url, grace="0.3")
        server = ServerProcess(tmp_path / "server.log", env).start()
        try:
            conversation_id, frames = await start_reply_then_terminate(server, text)
            status = server.wait(timeout=20)
        finally:
            server.stop()
    assert status in (0, -signal.SIGTERM)
    output = server.output()
    assert "Application shutdown complete" in output
    assert leaks(output, USER_CANARIES) == []
    stored = read_back(tmp_path, env, conversation_id)
    user, reply = stored["messages"]
    assert user["text"] == text
    assert reply["status"] == "incomplete"
    assert reply["finish_reason"] == "other"
    # A token the stop cut in half never goes out: it ends the reply as a redaction instead.
    cut = "[redacted token]"
    stored_text = reply["text"].removesuffix(cut)
    assert stored_text
    assert text.startswith(stored_text)
    assert len(stored_text) < len(text)
    assert cut not in stored_text
    assert text.startswith(content_of(frames).removesuffix(cut))


async def test_sigterm_lets_a_reply_within_the_grace_period_finish(tmp_path: Path) -> None:
    text = f"Please confirm with {EMAIL} by Friday. " * 4
    with echo_upstream(chunk_delay=0.01) as upstream:  # ~0.5 s of reply
        env = server_env(tmp_path, upstream.url, grace="10")
        server = ServerProcess(tmp_path / "server.log", env).start()
        try:
            conversation_id, _ = await start_reply_then_terminate(server, text)
            status = server.wait(timeout=20)
        finally:
            server.stop()
    assert status in (0, -signal.SIGTERM)
    stored = read_back(tmp_path, env, conversation_id)
    reply = stored["messages"][1]
    assert reply["status"] == "complete"
    assert reply["text"] == text
    assert leaks(server.output(), USER_CANARIES) == []
