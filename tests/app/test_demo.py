"""The leak demonstration: the same scripted reply through a naive replacer and through the
real filter chain. The naive side must show the leak it exists to show (split tokens reach the
wire, made-up values go out unscreened); the holdback side must show none of it.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from holdback.app.demo import FORBIDDEN, REPLY, VAULT, script_chunks
from holdback.providers.demo import DemoProvider
from tests.app.conftest import Accounts
from tests.app.support import TestClient, content_of, make_settings, recv, running_app, send

MADE_UP = "bob.smith@evil.example"


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    with running_app(make_settings(tmp_path), DemoProvider(chunk_delay=0)) as c:
        yield c


def replay(client: TestClient, path: str) -> list[dict[str, object]]:
    with client.websocket_connect(path) as ws:
        send(ws, {"type": "start"})
        frames = [recv(ws)]
        while frames[-1]["type"] != "assistant_done":
            frames.append(recv(ws))
        send(ws, {"type": "nonsense"})
        assert recv(ws)["code"] == "unknown_type"
    return frames


def test_script_splits_tokens() -> None:
    chunks = script_chunks()
    assert "".join(chunks) == REPLY
    boundaries = set(itertools.accumulate(len(c) for c in chunks))
    split = [
        m.group(0)
        for m in re.finditer(r"<[A-Z_]+_\d+>", REPLY)
        if any(m.start() < b < m.end() for b in boundaries)
    ]
    assert split, "the script must split at least one token across chunks"


def test_naive_pipeline_leaks_and_holdback_does_not(client: TestClient) -> None:
    naive = content_of(replay(client, "/demo/ws/naive"))
    safe = content_of(replay(client, "/demo/ws/holdback"))
    assert re.search(r"<[A-Z]", naive)  # fragments of split tokens reach the wire
    assert MADE_UP in naive
    assert FORBIDDEN[0] in naive
    for token, value in VAULT.items():
        assert value in safe
        assert token.strip("<>") not in safe
    assert "<" not in safe
    assert MADE_UP not in safe
    assert FORBIDDEN[0] not in safe
    assert "[redacted email]" in safe
    assert "[redacted]" in safe


def test_demo_script_and_page(client: TestClient) -> None:
    assert client.get("/demo/script").json() == {
        "tokens": list(VAULT),
        "values": list(VAULT.values()),
    }
    assert client.get("/demo").status_code == 200


def test_demo_socket_refuses_foreign_origins(client: TestClient) -> None:
    from starlette.websockets import WebSocketDisconnect

    with (
        pytest.raises(WebSocketDisconnect),
        client.websocket_connect("/demo/ws/holdback", headers={"Origin": "http://evil.example"}),
    ):
        pass


def test_demo_socket_refuses_foreign_host_names(client: TestClient) -> None:
    """DNS rebinding: without logins, only this machine's own names are answered (as /ws)."""
    from starlette.websockets import WebSocketDisconnect

    with (
        pytest.raises(WebSocketDisconnect),
        client.websocket_connect("/demo/ws/naive", headers={"Host": "rebound.example"}),
    ):
        pass
    assert client.get("/demo/script", headers={"Host": "rebound.example"}).status_code == 403


def test_demo_sockets_need_a_login_when_the_server_has_logins(
    tmp_path: Path, accounts: Accounts
) -> None:
    from starlette.websockets import WebSocketDisconnect

    settings = make_settings(tmp_path, auth="password")
    with running_app(settings, DemoProvider(chunk_delay=0)) as client:
        for path in ("/demo/ws/naive", "/demo/ws/holdback"):
            with pytest.raises(WebSocketDisconnect), client.websocket_connect(path):
                pass
        with client.websocket_connect("/demo/ws/holdback", headers=accounts.bearer("bob")) as ws:
            send(ws, {"type": "start"})
            assert recv(ws)["type"] == "assistant_delta"


def test_the_demo_page_and_script_need_a_login_when_the_server_has_logins(
    tmp_path: Path, accounts: Accounts
) -> None:
    settings = make_settings(tmp_path, auth="password")
    with running_app(settings, DemoProvider(chunk_delay=0)) as client:
        page = client.get("/demo", follow_redirects=False)
        assert page.status_code == 303
        assert page.headers["location"] == "/"
        assert client.get("/demo/script").status_code == 401
        bob = accounts.bearer("bob")
        assert client.get("/demo", headers=bob).status_code == 200
        assert client.get("/demo/script", headers=bob).json()["tokens"]
