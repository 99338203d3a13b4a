"""Taking a credential away (#15, item 3): `holdback user disable` / `enable` and `holdback
token list` / `revoke`, run as an operator runs them, against a server that is running.

The rules: a disabled user is refused at sign-in exactly as a wrong password is (the same
answer, as slowly: no enumeration), and none of their sessions or tokens works; a revoked
token stops working for good. Their open WebSockets end with `session_ended` (1008) at their
next frame, or at the periodic re-check of a silent socket. No command prints a token's text
except `token create`, once.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.websockets import WebSocketDisconnect

from holdback.app.auth import SESSION_COOKIE
from holdback.providers.demo import DemoProvider
from tests.app.conftest import PASSWORDS, Accounts
from tests.app.support import (
    TestClient,
    WebSocketTestSession,
    chat,
    make_settings,
    recv,
    run_cli,
    running_app,
    send,
    until_done,
)

NO_THROTTLE = {"HOLDBACK_LOGIN_BACKOFF_AFTER": "1000000", "HOLDBACK_LOGIN_LOCK_AFTER": "1000000"}


def cli(accounts: Accounts, *argv: str) -> tuple[int, str, str]:
    return run_cli([*argv, "--data-dir", str(accounts.data_dir)])


def closed_with(ws: WebSocketTestSession) -> int:
    with pytest.raises(WebSocketDisconnect) as closed:
        recv(ws)
    return closed.value.code


def assert_ended(ws: WebSocketTestSession) -> None:
    frame = recv(ws)
    assert frame["type"] == "error"
    assert frame["code"] == "session_ended"
    assert closed_with(ws) == 1008


def login(client: TestClient, name: str, password: str) -> tuple[int, dict[str, object]]:
    response = client.post("/api/login", json={"username": name, "password": password})
    return response.status_code, response.json()


def token_ids(accounts: Accounts, *argv: str) -> dict[str, str]:
    """`holdback token list`: token id -> status, read from its output."""
    status, out, err = cli(accounts, "token", "list", *argv)
    assert status == 0, err
    header, *rows = out.splitlines()
    assert header.split() == ["ID", "USER", "NAME", "CREATED", "STATUS"]
    return {row.split()[0]: row.split(maxsplit=6)[-1] for row in rows}


@pytest.fixture
def app(tmp_path: Path, accounts: Accounts) -> Iterator[TestClient]:
    env = {"HOLDBACK_WS_RECHECK": "3600", **NO_THROTTLE}  # only a frame checks again
    with running_app(
        make_settings(tmp_path, env, auth="password"), DemoProvider(chunk_delay=0)
    ) as client:
        yield client


# -- disabled users -----------------------------------------------------------------------


def test_a_disabled_user_is_refused_like_a_wrong_password(
    app: TestClient, accounts: Accounts
) -> None:
    assert cli(accounts, "user", "disable", "alice")[0] == 0
    disabled = login(app, "alice", PASSWORDS["alice"])
    wrong = login(app, "bob", "not bob's password")
    unknown = login(app, "nobody", "whatever it is")
    assert disabled == wrong == unknown == (401, disabled[1])
    assert disabled[1]["code"] == "bad_credentials"
    assert login(app, "bob", PASSWORDS["bob"])[0] == 200  # bob is not touched


def test_a_disabled_user_takes_as_long_as_a_wrong_password(
    app: TestClient, accounts: Accounts
) -> None:
    assert cli(accounts, "user", "disable", "alice")[0] == 0
    timings: dict[str, list[float]] = {"alice": [], "bob": []}
    for _ in range(5):
        for name, times in timings.items():
            password = PASSWORDS["alice"] if name == "alice" else "wrong"  # alice's is right
            started = time.perf_counter()
            assert login(app, name, password)[0] == 401
            times.append(time.perf_counter() - started)
    ratio = statistics.median(timings["alice"]) / statistics.median(timings["bob"])
    assert 1 / 3 < ratio < 3, timings


def test_disabling_a_user_ends_their_open_sockets(app: TestClient, accounts: Accounts) -> None:
    assert login(app, "alice", PASSWORDS["alice"])[0] == 200
    with (
        app.websocket_connect("/ws") as by_session,
        app.websocket_connect("/ws", headers=accounts.bearer("alice")) as by_token,
        app.websocket_connect("/ws", headers=accounts.bearer("bob")) as bobs,
    ):
        assert chat(by_session, "hello")[-1]["status"] == "complete"
        assert chat(by_token, "hello")[-1]["status"] == "complete"
        status, out, err = cli(accounts, "user", "disable", "alice")
        assert (status, out) == (0, "")
        assert "user alice disabled" in err
        for ws in (by_session, by_token):
            send(ws, {"type": "user_message", "conversation_id": None, "text": "still here?"})
            assert_ended(ws)
        assert chat(bobs, "bob goes on")[-1]["status"] == "complete"
    assert app.get("/api/conversations").status_code == 401  # the session cookie
    assert app.get("/api/conversations", headers=accounts.bearer("alice")).status_code == 401
    with (  # a new handshake is refused too
        pytest.raises(WebSocketDisconnect),
        app.websocket_connect("/ws", headers=accounts.bearer("alice")) as ws,
    ):
        recv(ws)


def test_a_silent_socket_of_a_disabled_user_ends_at_the_recheck(
    tmp_path: Path, accounts: Accounts
) -> None:
    settings = make_settings(tmp_path, {"HOLDBACK_WS_RECHECK": "0.2"}, auth="password")
    with (
        running_app(settings, DemoProvider(chunk_delay=0)) as client,
        client.websocket_connect("/ws", headers=accounts.bearer("bob")) as ws,
    ):
        assert chat(ws, "hello")[-1]["status"] == "complete"
        assert cli(accounts, "user", "disable", "bob")[0] == 0
        assert_ended(ws)  # no frame sent: the re-check found it


def test_enabling_restores_sign_in_and_unrevoked_tokens(
    app: TestClient, accounts: Accounts
) -> None:
    status, _ = login(app, "alice", PASSWORDS["alice"])
    assert status == 200
    old_session = app.cookies[SESSION_COOKIE]
    assert cli(accounts, "user", "disable", "alice")[0] == 0
    assert cli(accounts, "user", "disable", "alice")[2].startswith("user alice was already")
    status, out, err = cli(accounts, "user", "enable", "alice")
    assert (status, out) == (0, "")
    assert "user alice enabled" in err
    assert app.get("/api/conversations", headers=accounts.bearer("alice")).status_code == 200
    app.cookies.set(SESSION_COOKIE, old_session)
    assert app.get("/api/conversations").status_code == 401  # sessions ended for good
    assert login(app, "alice", PASSWORDS["alice"])[0] == 200
    assert cli(accounts, "user", "enable", "alice")[2].startswith("user alice was not disabled")


def test_unknown_users_cannot_be_disabled_or_enabled(accounts: Accounts) -> None:
    for command in ("disable", "enable"):
        status, out, err = cli(accounts, "user", command, "nobody")
        assert (status, out) == (2, "")
        assert err.startswith("holdback: no user named 'nobody'")


def test_a_disabled_user_gets_no_new_token(accounts: Accounts) -> None:
    assert cli(accounts, "user", "disable", "bob")[0] == 0
    status, out, err = cli(accounts, "token", "create", "bob")
    assert (status, out) == (2, "")
    assert "bob is disabled" in err
    assert len(token_ids(accounts, "--user", "bob")) == 1  # the fixture's token only


# -- revoked tokens -----------------------------------------------------------------------


def test_tokens_are_listed_without_their_text(accounts: Accounts) -> None:
    status, new_token, err = cli(accounts, "token", "create", "alice")
    assert status == 0, err
    new_token = new_token.strip()
    listing = run_cli(["token", "list", "--data-dir", str(accounts.data_dir)])
    for token in (*accounts.tokens.values(), new_token):
        assert token not in listing[1] + listing[2]
        assert token.removeprefix("hb_") not in listing[1] + listing[2]
    everyone = token_ids(accounts)
    alices = token_ids(accounts, "--user", "alice")
    assert len(everyone) == 3
    assert len(alices) == 2
    assert set(alices) < set(everyone)
    assert set(everyone.values()) == {"active"}
    new_id = err.split()[2]  # "API token <id> created for alice; ..."
    assert new_id in alices
    assert cli(accounts, "user", "disable", "alice")[0] == 0
    assert set(token_ids(accounts, "--user", "alice").values()) == {"user disabled"}
    status, out, err = cli(accounts, "token", "list", "--user", "nobody")
    assert (status, out) == (2, "")
    assert "no user named 'nobody'" in err


def test_a_revoked_token_is_refused_and_its_socket_ends(
    app: TestClient, accounts: Accounts
) -> None:
    status, spare, err = cli(accounts, "token", "create", "alice")
    assert status == 0, err
    spare_bearer = {"Authorization": f"Bearer {spare.strip()}"}
    (old_id,) = set(token_ids(accounts, "--user", "alice")) - {err.split()[2]}
    with (
        app.websocket_connect("/ws", headers=accounts.bearer("alice")) as revoked_ws,
        app.websocket_connect("/ws", headers=spare_bearer) as spare_ws,
    ):
        assert chat(revoked_ws, "hello")[-1]["status"] == "complete"
        status, out, err = cli(accounts, "token", "revoke", old_id)
        assert (status, out) == (0, "")
        assert f"API token {old_id} of alice revoked" in err
        send(revoked_ws, {"type": "user_message", "conversation_id": None, "text": "hi?"})
        assert_ended(revoked_ws)
        send(spare_ws, {"type": "user_message", "conversation_id": None, "text": "still good"})
        assert until_done(spare_ws)[-1]["status"] == "complete"  # alice's other token
    assert app.get("/api/conversations", headers=accounts.bearer("alice")).status_code == 401
    assert app.get("/api/conversations", headers=spare_bearer).status_code == 200
    assert token_ids(accounts, "--user", "alice")[old_id].startswith("revoked 2")
    status, _, err = cli(accounts, "token", "revoke", old_id)
    assert status == 0
    assert "was already revoked" in err
    # Enabling a user again does not bring a revoked token back.
    assert cli(accounts, "user", "disable", "alice")[0] == 0
    assert cli(accounts, "user", "enable", "alice")[0] == 0
    assert app.get("/api/conversations", headers=accounts.bearer("alice")).status_code == 401


def test_a_silent_socket_of_a_revoked_token_ends_at_the_recheck(
    tmp_path: Path, accounts: Accounts
) -> None:
    settings = make_settings(tmp_path, {"HOLDBACK_WS_RECHECK": "0.2"}, auth="password")
    (token_id,) = token_ids(accounts, "--user", "bob")
    with (
        running_app(settings, DemoProvider(chunk_delay=0)) as client,
        client.websocket_connect("/ws", headers=accounts.bearer("bob")) as ws,
    ):
        assert chat(ws, "hello")[-1]["status"] == "complete"
        assert cli(accounts, "token", "revoke", token_id)[0] == 0
        assert_ended(ws)


def test_revoking_an_unknown_id_does_not_echo_it(accounts: Accounts) -> None:
    token = accounts.tokens["bob"]  # the token's text, pasted where its id belongs
    status, out, err = cli(accounts, "token", "revoke", token)
    assert (status, out) == (2, "")
    assert err.startswith("holdback: no API token has that id")
    assert token not in err
    assert set(token_ids(accounts, "--user", "bob").values()) == {"active"}
