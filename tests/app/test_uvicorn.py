"""The real thing: `holdback serve` in a subprocess, driven with the `websockets` client.

What only a real server shows: the handshake refused with HTTP 403 (foreign origin, no
credential), uvicorn's own frame-size limit closing with 1009, a client that drops its TCP
connection mid-reply, a client too slow to keep up, and the server's whole output free of
canaries.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from tests.app.conftest import Accounts
from tests.app.support import (
    EMAIL,
    USER_CANARIES,
    EchoUpstream,
    Frame,
    ServerProcess,
    content_of,
    echo_upstream,
    leaks,
    process_env,
)

pytestmark = [pytest.mark.server, pytest.mark.anyio]


@pytest.fixture(scope="module")
def slow_upstream() -> Iterator[EchoUpstream]:
    with echo_upstream(chunk_delay=0.005) as server:
        yield server


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, slow_upstream: EchoUpstream
) -> Iterator[ServerProcess]:
    tmp = tmp_path_factory.mktemp("uvicorn")
    env = process_env(
        tmp,
        {
            "HOLDBACK_DATA_DIR": str(tmp / "data"),
            "HOLDBACK_MODEL": "openai:test",
            "OPENAI_BASE_URL": slow_upstream.url + "/v1",
            "OPENAI_API_KEY": "x",
        },
    )
    with ServerProcess(tmp / "server.log", env) as running:
        yield running
    assert leaks(running.output(), USER_CANARIES) == []


async def send(ws: ClientConnection, frame: Frame) -> None:
    await ws.send(json.dumps(frame))


async def recv(ws: ClientConnection) -> Frame:
    with anyio.fail_after(15):
        frame: Frame = json.loads(await ws.recv())
    return frame


async def read_until_closed(ws: ClientConnection) -> tuple[int, int | None]:
    """Read everything until the server closes; returns (characters read, close code)."""
    received = 0
    with anyio.fail_after(30):
        try:
            while True:
                received += len(await ws.recv())
        except ConnectionClosed as closed:
            return received, closed.rcvd.code if closed.rcvd is not None else None


async def until_done(ws: ClientConnection) -> list[Frame]:
    frames = [await recv(ws)]
    while frames[-1]["type"] != "assistant_done":
        frames.append(await recv(ws))
    return frames


async def chat(ws: ClientConnection, text: str, conversation_id: str | None = None) -> list[Frame]:
    await send(ws, {"type": "user_message", "conversation_id": conversation_id, "text": text})
    return await until_done(ws)


async def wait_stored(base: str, conversation_id: str, **headers: str) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=base, headers=headers) as http:
        with anyio.fail_after(15):
            while True:
                body: dict[str, Any] = (
                    await http.get(f"/api/conversations/{conversation_id}")
                ).json()
                if not body["streaming"]:
                    return body
                await anyio.sleep(0.02)


# -- the handshake ----------------------------------------------------------------------------


@pytest.mark.parametrize("origin", ["http://evil.example", "null", "http://127.0.0.1.evil.example"])
async def test_cross_site_handshake_is_refused_with_403(server: ServerProcess, origin: str) -> None:
    with pytest.raises(InvalidStatus) as refused:
        async with connect(server.ws_url, origin=origin):
            pass
    assert refused.value.response.status_code == 403


async def test_same_origin_and_originless_handshakes_are_accepted(server: ServerProcess) -> None:
    async with connect(server.ws_url, origin=server.origin) as ws:
        assert (await chat(ws, "from the page"))[-1]["status"] == "complete"
    async with connect(server.ws_url) as ws:
        assert (await chat(ws, "from a script"))[-1]["status"] == "complete"


async def test_compression_is_never_negotiated(server: ServerProcess) -> None:
    # A browser always offers permessage-deflate; a context shared by the model's text and
    # restored values would make frame sizes an oracle on the values.
    async with connect(server.ws_url, origin=server.origin, compression="deflate") as ws:
        assert ws.response is not None
        assert "sec-websocket-extensions" not in {k.lower() for k in ws.response.headers}
        assert ws.protocol.extensions == []
        assert (await chat(ws, "compressed?"))[-1]["status"] == "complete"


async def test_password_server_handshake(tmp_path: Path, accounts: Accounts) -> None:
    env = process_env(
        tmp_path, {"HOLDBACK_DATA_DIR": str(accounts.data_dir), "HOLDBACK_AUTH": "password"}
    )
    with ServerProcess(tmp_path / "server.log", env) as running:
        with pytest.raises(InvalidStatus) as refused:
            async with connect(running.ws_url):
                pass
        assert refused.value.response.status_code == 403
        with pytest.raises(InvalidStatus) as refused:
            async with connect(running.ws_url, additional_headers={"Authorization": "Bearer nope"}):
                pass
        assert refused.value.response.status_code == 403
        async with connect(running.ws_url, additional_headers=accounts.bearer("alice")) as ws:
            conversation_id = (await chat(ws, f"Mail {EMAIL}"))[0]["conversation_id"]
        # Token plus a foreign origin: still cross-site, still refused.
        with pytest.raises(InvalidStatus) as refused:
            async with connect(
                running.ws_url,
                origin="http://evil.example",
                additional_headers=accounts.bearer("alice"),
            ):
                pass
        assert refused.value.response.status_code == 403
        # A browser session: the cookie from /api/login opens the socket.
        async with httpx.AsyncClient(base_url=running.base) as http:
            login = await http.post(
                "/api/login", json={"username": "bob", "password": accounts.passwords["bob"]}
            )
            cookie = f"holdback_session={login.cookies['holdback_session']}"
        async with connect(
            running.ws_url,
            origin=running.origin,
            additional_headers={"Cookie": cookie},
        ) as ws:
            await send(
                ws, {"type": "user_message", "conversation_id": conversation_id, "text": "x"}
            )
            assert (await recv(ws))["code"] == "not_found"  # alice's, not bob's
    assert leaks(running.output(), [EMAIL, accounts.tokens["alice"]]) == []


# -- frames -----------------------------------------------------------------------------------


async def test_frame_over_64_kib_closes_with_1009(server: ServerProcess) -> None:
    async with connect(server.ws_url, max_size=None) as ws:
        conversation_id = (await chat(ws, f"Keep {EMAIL}"))[0]["conversation_id"]
        await send(
            ws, {"type": "user_message", "conversation_id": conversation_id, "text": "x" * 70_000}
        )
        _, code = await read_until_closed(ws)
        assert code == 1009
    stored = await wait_stored(server.base, conversation_id)
    assert [m["text"] for m in stored["messages"]] == [f"Keep {EMAIL}"] * 2
    async with connect(server.ws_url) as ws:  # the server is fine
        assert (await chat(ws, "still here", conversation_id))[-1]["status"] == "complete"


async def test_frame_over_the_limit_gets_its_error_frame_first(server: ServerProcess) -> None:
    async with connect(server.ws_url, max_size=None) as ws:
        await send(ws, {"type": "user_message", "conversation_id": None, "text": "x" * 70_000})
        error = await recv(ws)
        assert error["code"] == "frame_too_large"


async def test_binary_and_broken_frames_get_errors(server: ServerProcess) -> None:
    async with connect(server.ws_url) as ws:
        await ws.send(b'{"type": "user_message"}')
        assert (await recv(ws))["code"] == "bad_frame"
        await ws.send("{oops")
        assert (await recv(ws))["code"] == "bad_frame"
        await send(ws, {"type": "shout"})
        assert (await recv(ws))["code"] == "unknown_type"
        assert (await chat(ws, "fine"))[-1]["status"] == "complete"


# -- disconnects and slow clients -------------------------------------------------------------


async def test_reply_survives_a_dropped_connection(server: ServerProcess) -> None:
    text = f"Please forward this to {EMAIL} today. " * 8
    async with connect(server.ws_url) as ws:
        await send(ws, {"type": "user_message", "conversation_id": None, "text": text})
        conversation_id = (await recv(ws))["conversation_id"]
        assert (await recv(ws))["type"] == "assistant_start"
        assert (await recv(ws))["type"] == "assistant_delta"
        ws.transport.abort()  # gone without a closing handshake
    stored = await wait_stored(server.base, conversation_id)
    assert stored["messages"][1]["status"] == "complete"
    assert stored["messages"][1]["text"] == text
    async with connect(server.ws_url) as ws:
        frames = await chat(ws, "and now?", conversation_id)
    assert content_of(frames) == "and now?"


async def test_a_client_too_slow_is_dropped_and_the_reply_is_kept(tmp_path: Path) -> None:
    # A reply of ~1.6 MB to a client that reads nothing: the kernel buffers fill, the sender's
    # queue (capped at 4 KiB here) overflows, and the server closes with 1013 rather than hold
    # the reply in memory for the client. The reply itself completes and is stored.
    with echo_upstream(repeat=400, low=2000, high=4000) as upstream:
        env = process_env(
            tmp_path,
            {
                "HOLDBACK_DATA_DIR": str(tmp_path / "data"),
                "HOLDBACK_MODEL": "openai:test",
                "OPENAI_BASE_URL": upstream.url + "/v1",
                "OPENAI_API_KEY": "x",
                "HOLDBACK_SEND_QUEUE_BYTES": "4096",
            },
        )
        with ServerProcess(tmp_path / "server.log", env) as running:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.connect(("127.0.0.1", running.port))
            line = "All quiet on the western front, nothing new to report today. "
            async with connect(running.ws_url, sock=sock, max_queue=1, max_size=None) as ws:
                await send(ws, {"type": "user_message", "conversation_id": None, "text": line * 10})
                conversation_id = (await recv(ws))["conversation_id"]
                # Not reading while the whole reply streams and is stored.
                stored = await wait_stored(running.base, conversation_id)
                received, code = await read_until_closed(ws)
            assert code == 1013
            assert received < len(line) * 10 * 400
    assert stored["messages"][1]["status"] == "complete"
    assert len(stored["messages"][1]["text"]) == len(line) * 10 * 400


# -- the demo command -------------------------------------------------------------------------


def test_demo_command_serves_the_demo_page(tmp_path: Path) -> None:
    env = process_env(tmp_path, {"HOLDBACK_DATA_DIR": str(tmp_path / "data")})
    with ServerProcess(tmp_path / "server.log", env, command="demo") as running:
        assert "demo  (the leak demonstration)" in running.output()
        with httpx.Client(base_url=running.base) as http:
            page = http.get("/demo")
            assert page.status_code == 200
            assert "text/html" in page.headers["content-type"]
