"""`holdback user add` and `holdback token create`, as a user runs them.

Passwords come from stdin, never the command line, and are stored as argon2id hashes; a token
is printed once, on stdout alone, and works as `Authorization: Bearer`. Mistakes are one clear
line on stderr with exit status 2, and leave the store as it was.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from tests.app.support import ServerProcess, process_env, run_cli, run_holdback


def test_user_add_and_token_create_in_subprocesses(tmp_path: Path) -> None:
    data = tmp_path / "data"
    env = process_env(tmp_path, {"HOLDBACK_DATA_DIR": str(data)})  # found by the variable
    added = run_holdback(["user", "add", "carol"], env, stdin="a long enough password\n")
    assert added.returncode == 0, added.stderr
    assert added.stdout == ""
    assert "user carol created" in added.stderr
    assert "a long enough password" not in added.stderr
    made = run_holdback(["token", "create", "carol"], env)
    assert made.returncode == 0, made.stderr
    token = made.stdout.strip()
    assert len(token) >= 32
    assert made.stdout == token + "\n"
    again = run_holdback(["token", "create", "carol", "--data-dir", str(data)], env)
    assert again.stdout.strip() != token  # every call makes a new token


@pytest.mark.server
def test_a_created_token_opens_the_api(tmp_path: Path) -> None:
    data = tmp_path / "data"
    status, _, err = run_cli(["user", "add", "dave", "--data-dir", str(data)], "dave's password\n")
    assert status == 0, err
    status, token, err = run_cli(["token", "create", "dave", "--data-dir", str(data)])
    assert status == 0, err
    env = process_env(tmp_path, {"HOLDBACK_DATA_DIR": str(data), "HOLDBACK_AUTH": "password"})
    with ServerProcess(tmp_path / "server.log", env) as server:
        bearer = {"Authorization": f"Bearer {token.strip()}"}
        with httpx.Client(base_url=server.base) as http:
            assert http.get("/api/session", headers=bearer).json()["user"]["name"] == "dave"
            assert http.get("/api/conversations").status_code == 401
            login = http.post(
                "/api/login", json={"username": "dave", "password": "dave's password"}
            )
            assert login.status_code == 200
            assert http.get("/api/conversations").status_code == 200  # the cookie now


@pytest.mark.parametrize(
    ("stdin", "message"),
    [("short\n", "at least 8 characters"), ("\n", "at least 8 characters"), ("", "at least 8")],
)
def test_user_add_refuses_short_passwords(tmp_path: Path, stdin: str, message: str) -> None:
    status, out, err = run_cli(["user", "add", "erin", "--data-dir", str(tmp_path / "d")], stdin)
    assert status == 2
    assert message in err
    assert out == ""
    status, _, err = run_cli(["token", "create", "erin", "--data-dir", str(tmp_path / "d")])
    assert status == 2  # nobody was created, nor any store
    assert "there is no holdback data directory" in err


def test_user_add_twice_is_refused(tmp_path: Path) -> None:
    data = str(tmp_path / "data")
    assert run_cli(["user", "add", "frank", "--data-dir", data], "password-one\n")[0] == 0
    status, _, err = run_cli(["user", "add", "frank", "--data-dir", data], "password-two\n")
    assert status == 2
    assert err.startswith("holdback: ")
    assert "already exists" in err
    assert "password-two" not in err


@pytest.mark.parametrize("name", ["", "   ", "x" * 300, "new\nline"])
def test_user_add_refuses_unusable_names(tmp_path: Path, name: str) -> None:
    status, _, err = run_cli(
        ["user", "add", name, "--data-dir", str(tmp_path / "d")], "good password\n"
    )
    assert status == 2
    assert err.startswith("holdback: ")
    assert "Traceback" not in err


def test_password_is_read_as_one_line(tmp_path: Path) -> None:
    data = str(tmp_path / "data")
    assert run_cli(["user", "add", "gina", "--data-dir", data], "first line pw\r\nsecond\n")[0] == 0
    from holdback.providers.demo import DemoProvider
    from tests.app.support import make_settings, running_app

    settings = make_settings(tmp_path, auth="password")
    with running_app(settings, DemoProvider(chunk_delay=0)) as client:
        ok = client.post("/api/login", json={"username": "gina", "password": "first line pw"})
        assert ok.status_code == 200
        bad = client.post(
            "/api/login", content=json.dumps({"username": "gina", "password": "second"})
        )
        assert bad.status_code == 401


def test_commands_without_a_subcommand_print_help(tmp_path: Path) -> None:
    status, _, err = run_cli([])
    assert status == 2
    assert "usage: holdback" in err
