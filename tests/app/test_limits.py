"""The inbound bounds in process (docs/limits.md): request bodies, frames per second, idle and
ended sessions on the WebSocket, titles without NUL, the security headers on every route, and
logged URLs without their credentials.

Each bound is tried at its limit and just past it. What only a real server shows (heads that
trickle in, bodies larger than memory, floods) is in test_abuse.py.
"""

from __future__ import annotations

import logging
import re
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.websockets import WebSocketDisconnect

from holdback.app.auth import SESSION_COOKIE
from holdback.app.limits import FrameRate
from holdback.providers.demo import DemoProvider
from holdback.providers.logmask import install_url_masking, mask_text
from holdback.store.locations import DATABASE_FILE_NAME
from tests.app.conftest import PASSWORDS, Accounts
from tests.app.support import (
    EMAIL,
    TestClient,
    WebSocketTestSession,
    chat,
    make_settings,
    recv,
    running_app,
    send,
    until_done,
)

WEB = Path(__file__).resolve().parents[2] / "web"
SECRET_URL = "http://user-canary:pw-canary@127.0.0.1:9/v1/chat/completions?key=key-canary"


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    env = {"HOLDBACK_MAX_BODY_BYTES": "1024", "HOLDBACK_MAX_LOGIN_BODY_BYTES": "512"}
    with running_app(make_settings(tmp_path, env), DemoProvider(chunk_delay=0)) as c:
        yield c


def closed_with(ws: WebSocketTestSession) -> int:
    with pytest.raises(WebSocketDisconnect) as closed:
        recv(ws)
    return closed.value.code


# -- request bodies ---------------------------------------------------------------------------


def json_of_size(size: int, key: str = "title") -> bytes:
    """A JSON object of exactly `size` bytes."""
    skeleton = f'{{"{key}": ""}}'
    return f'{{"{key}": "{"x" * (size - len(skeleton))}"}}'.encode()


def test_a_body_at_the_limit_is_read(client: TestClient) -> None:
    body = json_of_size(1024)
    assert len(body) == 1024
    response = client.post(
        "/api/conversations", content=body, headers={"content-type": "application/json"}
    )
    assert response.status_code == 201


def test_a_body_past_the_limit_is_refused_with_413(client: TestClient) -> None:
    response = client.post(
        "/api/conversations",
        content=json_of_size(1025),
        headers={"content-type": "application/json"},
    )
    assert response.status_code == 413
    assert response.json()["code"] == "body_too_large"
    assert response.json()["limit"] == 1024
    assert response.headers["connection"] == "close"
    assert client.get("/api/conversations").json()["conversations"] == []  # nothing was made


def test_a_streamed_body_past_the_limit_is_refused_with_413(client: TestClient) -> None:
    # No Content-Length: the bound holds while the body arrives.
    def pieces() -> Iterator[bytes]:
        yield b'{"title": "'
        for _ in range(40):
            yield b"x" * 100
        yield b'"}'

    response = client.post("/api/conversations", content=pieces())
    assert response.status_code == 413
    assert response.json()["code"] == "body_too_large"


def test_the_login_route_has_its_own_limit(tmp_path: Path) -> None:
    env = {"HOLDBACK_MAX_LOGIN_BODY_BYTES": "512"}
    with running_app(make_settings(tmp_path, env, auth="password"), DemoProvider()) as client:
        at_limit = json_of_size(512, "username")
        assert client.post("/api/login", content=at_limit).json()["code"] == "bad_request"
        past = json_of_size(513, "username")
        response = client.post("/api/login", content=past)
        assert response.status_code == 413
        assert response.json()["limit"] == 512


# -- titles -----------------------------------------------------------------------------------


def test_titles_refuse_nul_like_messages(client: TestClient) -> None:
    created = client.post("/api/conversations", json={"title": "a\x00b"})
    assert created.status_code == 400
    assert created.json()["code"] == "bad_request"
    assert client.get("/api/conversations").json()["conversations"] == []
    conversation_id = client.post("/api/conversations", json={"title": "fine"}).json()["id"]
    renamed = client.patch(f"/api/conversations/{conversation_id}", json={"title": "x\x00"})
    assert renamed.status_code == 400
    assert client.get(f"/api/conversations/{conversation_id}").json()["title"] == "fine"


# -- headers ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/"),
        ("GET", "/index.html"),
        ("GET", "/app.js"),
        ("GET", "/style.css"),
        ("GET", "/demo"),
        ("GET", "/demo/scenarios"),
        ("GET", "/healthz"),
        ("GET", "/api/session"),
        ("GET", "/api/conversations"),
        ("GET", "/api/conversations/nope"),
        ("GET", "/no-such-file"),
        ("POST", "/api/login"),
    ],
)
def test_every_route_carries_the_security_headers(
    client: TestClient, method: str, path: str
) -> None:
    headers = client.request(method, path).headers
    policy = headers["content-security-policy"]
    directives = dict(d.strip().split(" ", 1) for d in policy.split(";"))
    assert directives["default-src"] == "'self'"
    assert directives["script-src"] == "'self'"
    assert directives["frame-ancestors"] == "'none'"
    assert directives["img-src"] == "'self'"
    assert "unsafe-inline" not in policy
    assert "unsafe-eval" not in policy
    assert headers["x-content-type-options"] == "nosniff"
    assert headers["referrer-policy"] == "no-referrer"


def test_refusals_carry_the_headers_too(client: TestClient) -> None:
    response = client.post("/api/conversations", content=json_of_size(2000))
    assert response.status_code == 413
    assert response.headers["x-content-type-options"] == "nosniff"


@pytest.mark.parametrize("page", sorted(p.name for p in WEB.glob("*.html")))
def test_pages_need_no_inline_script_or_style(page: str) -> None:
    """The strict policy holds the UI to files: no inline script, handler or style."""
    html = (WEB / page).read_text(encoding="utf-8")
    assert re.findall(r"<script(?![^>]*\bsrc=)[^>]*>", html) == []
    assert re.findall(r"<style\b", html) == []
    assert re.findall(r"\son[a-z]+\s*=", html) == []
    assert re.findall(r"\sstyle\s*=", html) == []
    assert "javascript:" not in html


# -- frames per second ------------------------------------------------------------------------


def test_frame_rate_window() -> None:
    now = [100.0]
    rate = FrameRate(3, clock=lambda: now[0])
    assert [rate.allow() for _ in range(3)] == [True, True, True]
    assert rate.allow() is False  # a fourth within the same second
    now[0] += 0.999
    assert rate.allow() is False
    now[0] += 0.002  # one second after the first three: they have left the window
    assert [rate.allow() for _ in range(3)] == [True, True, True]
    assert rate.allow() is False


def test_frames_at_the_rate_limit_are_served(tmp_path: Path) -> None:
    env = {"HOLDBACK_WS_FRAME_RATE": "5"}
    with (
        running_app(make_settings(tmp_path, env), DemoProvider(chunk_delay=0)) as client,
        client.websocket_connect("/ws") as ws,
    ):
        for _ in range(5):
            ws.send_text("{oops")
        assert [recv(ws)["code"] for _ in range(5)] == ["bad_frame"] * 5
        time.sleep(1.05)  # the bound is a one-second window: let it pass
        assert chat(ws, "still here")[-1]["status"] == "complete"


def test_a_frame_past_the_rate_limit_closes_1008(tmp_path: Path) -> None:
    env = {"HOLDBACK_WS_FRAME_RATE": "5"}
    with (
        running_app(make_settings(tmp_path, env), DemoProvider(chunk_delay=0)) as client,
        client.websocket_connect("/ws") as ws,
    ):
        for _ in range(6):
            ws.send_text("{oops")
        assert [recv(ws)["code"] for _ in range(5)] == ["bad_frame"] * 5
        error = recv(ws)
        assert error["code"] == "too_many_frames"
        assert error["message"]
        assert closed_with(ws) == 1008


# -- idle sockets -----------------------------------------------------------------------------


def test_a_silent_socket_is_closed_after_the_idle_time(tmp_path: Path) -> None:
    env = {"HOLDBACK_WS_IDLE_TIMEOUT": "0.3"}
    with running_app(make_settings(tmp_path, env), DemoProvider(chunk_delay=0)) as client:
        with client.websocket_connect("/ws") as ws:
            started = time.monotonic()
            assert closed_with(ws) == 1000
            assert 0.25 < time.monotonic() - started < 10
        with client.websocket_connect("/demo/ws/holdback") as ws:
            assert closed_with(ws) == 1000


def test_frames_and_replies_keep_a_socket_from_idling(tmp_path: Path) -> None:
    env = {"HOLDBACK_WS_IDLE_TIMEOUT": "1.5"}
    # A reply that streams for longer than the idle time (about 60 chunks, 50 ms apart).
    with (
        running_app(make_settings(tmp_path, env), DemoProvider(chunk_delay=0.05)) as client,
        client.websocket_connect("/ws") as ws,
    ):
        started = time.monotonic()
        frames = chat(ws, "Tell me something long.")
        assert frames[-1]["status"] == "complete"
        assert time.monotonic() - started > 1.5  # it streamed past the idle time, unclosed
        for _ in range(4):
            time.sleep(0.4)  # each frame is sent well before the idle time has passed
            ws.send_text("{oops")
            assert recv(ws)["code"] == "bad_frame"
        assert closed_with(ws) == 1000


# -- ended sessions ---------------------------------------------------------------------------


@pytest.fixture
def password_app(tmp_path: Path, accounts: Accounts) -> Iterator[TestClient]:
    env = {"HOLDBACK_WS_RECHECK": "3600"}  # only a frame, or a logout, checks again
    settings = make_settings(tmp_path, env, auth="password")
    with running_app(settings, DemoProvider(chunk_delay=0)) as client:
        yield client


def sql(accounts: Accounts, statement: str) -> None:
    """Change the database behind the server's back, as another process would."""
    with sqlite3.connect(accounts.data_dir / DATABASE_FILE_NAME) as db:
        db.execute("PRAGMA foreign_keys = ON")
        db.execute(statement)


def test_logout_closes_the_sessions_open_sockets(password_app: TestClient) -> None:
    login = password_app.post(
        "/api/login", json={"username": "alice", "password": PASSWORDS["alice"]}
    )
    assert login.status_code == 200
    with password_app.websocket_connect("/ws") as ws:
        assert chat(ws, f"Mail {EMAIL}")[-1]["status"] == "complete"
        assert password_app.post("/api/logout").status_code == 200
        error = recv(ws)  # unasked: the logout ends the socket
        assert error["code"] == "session_ended"
        assert closed_with(ws) == 1008


def test_a_socket_opened_before_logout_stops_working(
    password_app: TestClient, accounts: Accounts
) -> None:
    login = password_app.post(
        "/api/login", json={"username": "alice", "password": PASSWORDS["alice"]}
    )
    secret = login.cookies[SESSION_COOKIE]
    with password_app.websocket_connect("/ws") as ws:
        # Another server, or another process, deletes the session: the next frame finds out.
        sql(accounts, "DELETE FROM auth_sessions")
        send(ws, {"type": "user_message", "conversation_id": None, "text": "after logout"})
        assert recv(ws)["code"] == "session_ended"
        assert closed_with(ws) == 1008
    password_app.cookies.set(SESSION_COOKIE, secret)
    assert password_app.get("/api/conversations").status_code == 401


@pytest.mark.parametrize(
    "statement", ["DELETE FROM api_tokens", "DELETE FROM users WHERE name = 'alice'"]
)
def test_a_revoked_token_or_removed_user_ends_the_socket(
    password_app: TestClient, accounts: Accounts, statement: str
) -> None:
    with password_app.websocket_connect("/ws", headers=accounts.bearer("alice")) as ws:
        assert chat(ws, "hello")[-1]["status"] == "complete"
        sql(accounts, statement)
        ws.send_text("{oops")
        assert recv(ws)["code"] == "session_ended"
        assert closed_with(ws) == 1008


def test_a_silent_socket_is_rechecked(tmp_path: Path, accounts: Accounts) -> None:
    env = {"HOLDBACK_WS_RECHECK": "0.2"}
    settings = make_settings(tmp_path, env, auth="password")
    with (
        running_app(settings, DemoProvider(chunk_delay=0)) as client,
        client.websocket_connect("/ws", headers=accounts.bearer("bob")) as ws,
    ):
        assert chat(ws, "hello")[-1]["status"] == "complete"
        sql(accounts, "DELETE FROM api_tokens")
        assert recv(ws)["code"] == "session_ended"  # no frame sent: the recheck found it
        assert closed_with(ws) == 1008


def test_other_sessions_keep_their_sockets(password_app: TestClient, accounts: Accounts) -> None:
    login = password_app.post(
        "/api/login", json={"username": "alice", "password": PASSWORDS["alice"]}
    )
    assert login.status_code == 200
    with password_app.websocket_connect("/ws", headers=accounts.bearer("alice")) as ws:
        assert password_app.post("/api/logout").status_code == 200
        send(ws, {"type": "user_message", "conversation_id": None, "text": "token still good"})
        frames = until_done(ws)
        assert frames[-1]["status"] == "complete"


# -- logs -------------------------------------------------------------------------------------


class _Url:
    """A URL object as a library passes one to a log call (httpx's `URL`)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __str__(self) -> str:
        return self.text


@pytest.mark.parametrize(
    ("msg", "args"),
    [
        ('HTTP Request: %s %s "%s %d %s"', ("POST", _Url(SECRET_URL), "HTTP/1.1", 200, "OK")),
        ("connecting to " + SECRET_URL, ()),
        ("%s", (SECRET_URL,)),
    ],
)
def test_logged_urls_lose_their_credentials_and_query(msg: str, args: tuple[object, ...]) -> None:
    install_url_masking()  # as the command line does first thing
    record = logging.getLogRecordFactory()("httpx", logging.INFO, __file__, 1, msg, args, None)
    line = record.getMessage()
    assert "user-canary" not in line
    assert "pw-canary" not in line
    assert "key-canary" not in line
    assert "http://***@127.0.0.1:9/v1/chat/completions?***" in line


def test_urls_without_secrets_are_logged_as_they_are() -> None:
    text = "GET https://api.openai.com/v1/models and http://h/p@x"
    assert mask_text(text) == text
