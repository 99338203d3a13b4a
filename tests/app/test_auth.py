"""Who may ask, and for what: `--auth none` only on loopback, password logins with a strict
session cookie, API tokens over HTTP and the WebSocket handshake, origin checks (cross-site
WebSocket hijacking), and conversations that belong to their owner alone.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from http.cookies import SimpleCookie
from pathlib import Path

import pytest
from starlette.websockets import WebSocketDisconnect

from holdback.app.auth import SESSION_COOKIE, hash_password, verify_password
from holdback.app.settings import resolve
from holdback.errors import ConfigurationError
from holdback.providers.demo import DemoProvider
from holdback.store.crypto import load_vault_key
from holdback.store.locations import default_database_url
from holdback.store.repository import Store
from tests.app.conftest import PASSWORDS, Accounts
from tests.app.support import (
    EMAIL,
    TestClient,
    chat,
    make_settings,
    recv,
    running_app,
    send,
)

PASSWORD = PASSWORDS["alice"]


@pytest.fixture
def data_dir(accounts: Accounts) -> Path:
    return accounts.data_dir


@pytest.fixture
def client(tmp_path: Path, data_dir: Path) -> Iterator[TestClient]:
    settings = make_settings(tmp_path, auth="password")
    with running_app(settings, DemoProvider(chunk_delay=0)) as c:
        yield c


def login(client: TestClient, name: str = "alice", password: str = PASSWORD) -> str:
    response = client.post("/api/login", json={"username": name, "password": password})
    assert response.status_code == 200, response.text
    secret = response.cookies.get(SESSION_COOKIE)
    assert secret
    return secret


def set_cookie_header(response_headers: list[tuple[str, str]]) -> SimpleCookie:
    cookie: SimpleCookie = SimpleCookie()
    for name, value in response_headers:
        if name.lower() == "set-cookie":
            cookie.load(value)
    return cookie


# -- --auth none ------------------------------------------------------------------------------


@pytest.mark.parametrize("host", ["127.0.0.1", "::1", "localhost", "127.0.0.5"])
def test_auth_none_is_the_default_on_loopback(host: str) -> None:
    assert resolve(host=host, env={}).auth == "none"


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.10", "::", "example.com"])
def test_auth_none_is_refused_off_loopback(host: str) -> None:
    assert resolve(host=host, env={}).auth == "password"
    with pytest.raises(ConfigurationError, match="refusing --auth none"):
        resolve(host=host, auth="none", env={})
    with pytest.raises(ConfigurationError, match="refusing --auth none"):
        resolve(env={"HOLDBACK_HOST": host, "HOLDBACK_AUTH": "none"})


def test_auth_none_needs_no_login(tmp_path: Path) -> None:
    with running_app(make_settings(tmp_path), DemoProvider(chunk_delay=0)) as client:
        session = client.get("/api/session").json()
        assert session["auth"] == "none"
        assert session["user"]["name"]
        assert client.get("/api/conversations").status_code == 200
        login = client.post("/api/login", json={"username": "x", "password": "y"})
        assert login.status_code == 400
        assert login.json()["code"] == "no_login"
        with client.websocket_connect("/ws") as ws:
            assert chat(ws, "hello")[-1]["status"] == "complete"


# -- passwords and sessions -------------------------------------------------------------------


def test_user_add_stores_an_argon2id_hash_only(tmp_path: Path, data_dir: Path) -> None:
    async def read() -> str | None:
        store = await Store.open(
            default_database_url(data_dir), vault_key=load_vault_key(data_dir, {})
        )
        try:
            user = await store.get_user_by_name("alice")
            assert user is not None
            return user.password_hash
        finally:
            await store.close()

    stored = asyncio.run(read())
    assert stored is not None
    assert stored.startswith("$argon2id$")
    assert PASSWORD not in stored
    assert verify_password(stored, PASSWORD)
    assert not verify_password(stored, PASSWORD + "!")
    assert not verify_password(None, PASSWORD)
    assert not verify_password("not a hash", PASSWORD)
    assert hash_password(PASSWORD) != stored  # salted


def test_signed_out_requests_are_refused(client: TestClient) -> None:
    assert client.get("/api/session").json() == {"auth": "password", "user": None}
    assert client.get("/api/conversations").status_code == 401
    assert client.post("/api/conversations", json={}).status_code == 401
    assert client.get("/api/conversations/whatever").status_code == 401
    with pytest.raises(WebSocketDisconnect) as refused, client.websocket_connect("/ws"):
        pass
    assert refused.value.code == 1008


def test_login_sets_a_strict_httponly_cookie(client: TestClient) -> None:
    response = client.post("/api/login", json={"username": "alice", "password": PASSWORD})
    assert response.status_code == 200
    assert response.json()["user"]["name"] == "alice"
    cookie = set_cookie_header(response.headers.multi_items())[SESSION_COOKIE]
    assert cookie["httponly"] is True
    assert cookie["samesite"] == "strict"
    assert cookie["path"] == "/"
    assert not cookie["secure"]  # plain http
    assert int(cookie["max-age"]) == 14 * 86400
    session = client.get("/api/session").json()
    assert session["user"]["name"] == "alice"
    with client.websocket_connect("/ws") as ws:
        assert chat(ws, "signed in")[-1]["status"] == "complete"


def test_cookie_is_secure_over_https(tmp_path: Path, data_dir: Path) -> None:
    settings = make_settings(tmp_path, auth="password")
    with running_app(settings, DemoProvider(chunk_delay=0), base_url="https://testserver") as c:
        response = c.post("/api/login", json={"username": "alice", "password": PASSWORD})
        cookie = set_cookie_header(response.headers.multi_items())[SESSION_COOKIE]
        assert cookie["secure"] is True
    with running_app(settings, DemoProvider(chunk_delay=0)) as c:
        response = c.post(
            "/api/login",
            json={"username": "alice", "password": PASSWORD},
            headers={"X-Forwarded-Proto": "https"},
        )
        cookie = set_cookie_header(response.headers.multi_items())[SESSION_COOKIE]
        assert cookie["secure"] is True


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"username": "alice", "password": "wrong password"}, 401, "bad_credentials"),
        ({"username": "nobody", "password": PASSWORD}, 401, "bad_credentials"),
        ({"username": "alice"}, 400, "bad_request"),
        ({"username": 5, "password": PASSWORD}, 400, "bad_request"),
        ("not json", 400, "bad_request"),
        ([1, 2], 400, "bad_request"),
    ],
)
def test_bad_logins(client: TestClient, body: object, status: int, code: str) -> None:
    if isinstance(body, str):
        response = client.post("/api/login", content=body)
    else:
        response = client.post("/api/login", json=body)
    assert response.status_code == status
    assert response.json()["code"] == code
    assert SESSION_COOKIE not in response.cookies
    assert PASSWORD not in response.text


def test_logout_ends_the_session(client: TestClient) -> None:
    secret = login(client)
    response = client.post("/api/logout")
    assert response.status_code == 200
    assert client.get("/api/session").json()["user"] is None
    # The old secret is dead on the server, not only forgotten by the browser.
    client.cookies.set(SESSION_COOKIE, secret)
    assert client.get("/api/conversations").status_code == 401
    with pytest.raises(WebSocketDisconnect), client.websocket_connect("/ws"):
        pass


def test_made_up_session_cookie_is_refused(client: TestClient) -> None:
    client.cookies.set(SESSION_COOKIE, "forged-session-secret")
    assert client.get("/api/conversations").status_code == 401


# -- API tokens -------------------------------------------------------------------------------


def test_api_token_on_http_and_websocket(client: TestClient, accounts: Accounts) -> None:
    token = accounts.tokens["alice"]
    bearer = {"Authorization": f"Bearer {token}"}
    assert client.get("/api/session", headers=bearer).json()["user"]["name"] == "alice"
    created = client.post("/api/conversations", json={"title": "via token"}, headers=bearer)
    assert created.status_code == 201
    with client.websocket_connect("/ws", headers=bearer) as ws:
        frames = chat(ws, "over a token", created.json()["id"])
    assert frames[-1]["status"] == "complete"
    assert client.get("/api/conversations").status_code == 401  # no token, no cookie


def test_bad_api_tokens_are_refused(client: TestClient, accounts: Accounts) -> None:
    token = accounts.tokens["alice"]
    for header in (f"Bearer {token}x", "Bearer ", f"Basic {token}", token):
        assert (
            client.get("/api/conversations", headers={"Authorization": header}).status_code == 401
        )
    with (
        pytest.raises(WebSocketDisconnect),
        client.websocket_connect("/ws", headers={"Authorization": f"Bearer {token[:-1]}"}),
    ):
        pass


# -- origins ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "origin", ["http://evil.example", "null", "http://testserver.evil.example", "https://evil"]
)
def test_cross_site_websocket_is_refused(
    client: TestClient, accounts: Accounts, origin: str
) -> None:
    token = accounts.tokens["alice"]
    headers = {"Authorization": f"Bearer {token}", "Origin": origin}
    with (
        pytest.raises(WebSocketDisconnect) as refused,
        client.websocket_connect("/ws", headers=headers),
    ):
        pass
    assert refused.value.code == 1008
    login(client)
    with (
        pytest.raises(WebSocketDisconnect),
        client.websocket_connect("/ws", headers={"Origin": origin}),
    ):
        pass


def test_same_origin_websocket_is_accepted(client: TestClient) -> None:
    login(client)
    with client.websocket_connect("/ws", headers={"Origin": "http://testserver"}) as ws:
        assert chat(ws, "same origin")[-1]["status"] == "complete"


def test_cross_site_state_changes_are_refused(client: TestClient) -> None:
    evil = {"Origin": "http://evil.example"}
    refused = client.post(
        "/api/login", json={"username": "alice", "password": PASSWORD}, headers=evil
    )
    assert refused.status_code == 403
    assert refused.json()["code"] == "forbidden_origin"
    login(client)
    conversation = client.post("/api/conversations", json={}).json()
    for method, path in (
        ("POST", "/api/conversations"),
        ("PATCH", f"/api/conversations/{conversation['id']}"),
        ("DELETE", f"/api/conversations/{conversation['id']}"),
        ("POST", "/api/logout"),
    ):
        response = client.request(method, path, json={"title": "pwned"}, headers=evil)
        assert response.status_code == 403, (method, path)
    # Nothing changed, and the session still works.
    assert client.get(f"/api/conversations/{conversation['id']}").json()["title"] == "New chat"
    assert client.get("/api/session").json()["user"]["name"] == "alice"


def test_allow_listed_origin_is_accepted(tmp_path: Path, accounts: Accounts) -> None:
    settings = make_settings(
        tmp_path, auth="password", env={"HOLDBACK_ALLOWED_ORIGINS": "http://localhost:5173"}
    )
    token = accounts.tokens["alice"]
    with running_app(settings, DemoProvider(chunk_delay=0)) as client:
        headers = {"Authorization": f"Bearer {token}", "Origin": "http://localhost:5173"}
        with client.websocket_connect("/ws", headers=headers) as ws:
            assert chat(ws, "from the dev server")[-1]["status"] == "complete"


def test_allowed_origins_keep_their_scheme_and_port() -> None:
    settings = resolve(
        env={"HOLDBACK_ALLOWED_ORIGINS": "https://app.example.com, http://localhost:5173"}
    )
    assert settings.allowed_origins == ("https://app.example.com", "http://localhost:5173")


def test_auth_none_refuses_foreign_host_names(tmp_path: Path) -> None:
    rebound = "http://rebind.evil.example:8000"
    with running_app(make_settings(tmp_path), DemoProvider(chunk_delay=0), base_url=rebound) as c:
        response = c.get("/api/conversations", headers={"Origin": rebound})
        assert response.status_code in (400, 403, 421)


# -- ownership --------------------------------------------------------------------------------


def test_conversations_belong_to_their_owner(client: TestClient, accounts: Accounts) -> None:
    alice = accounts.bearer("alice")
    bob = accounts.bearer("bob")
    with client.websocket_connect("/ws", headers=alice) as ws:
        conversation_id = chat(ws, f"Write to {EMAIL}")[0]["conversation_id"]
    path = f"/api/conversations/{conversation_id}"
    before = client.get(path, headers=alice).json()
    for method in ("GET", "PATCH", "DELETE"):
        response = client.request(method, path, json={"title": "bob's now"}, headers=bob)
        assert response.status_code == 404, method
        assert response.json()["code"] == "not_found"
        assert EMAIL not in response.text
    assert client.get(path + "?view=model", headers=bob).status_code == 404
    assert client.get("/api/conversations", headers=bob).json()["conversations"] == []
    with client.websocket_connect("/ws", headers=bob) as ws:
        send(ws, {"type": "user_message", "conversation_id": conversation_id, "text": "hi"})
        error = recv(ws)
        assert error["code"] == "not_found"
    assert json.dumps(client.get(path, headers=alice).json()) == json.dumps(before)
