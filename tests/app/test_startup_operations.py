"""Operations (#18, item 9): how `holdback serve` starts, or says why it cannot, on real processes.

The rules: every start-up error (an address in use, a bad database URL, a missing term file,
an unknown model, a bad setting) is one line on stderr and a non-zero exit, with no traceback
unless `--debug` / `HOLDBACK_DEBUG=1`, and an address in use never logs "holdback is ready"
first; a model whose API key is missing is one warning at start that names the variable and
never a value; the banner says the models, where the data lives (a database URL's password
masked) and how users sign in; several `--model` flags and `HOLDBACK_MODELS` reach
`/api/models`. (The failures of the store itself are in tests/store/test_startup.py.)
"""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from holdback.app.settings import resolve
from holdback.app.startup import banner
from tests.app.support import ServerProcess, process_env, run_holdback

pytestmark = pytest.mark.server

KEY_CANARY = "sk-canary-startup-51c9"
PASSWORD_CANARY = "pw-canary-startup-51c9"


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A port some other process listens on."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def serve(
    tmp_path: Path, args: list[str], extra: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    env = process_env(tmp_path, {"HOLDBACK_DATA_DIR": str(tmp_path / "data"), **(extra or {})})
    return run_holdback(["serve", *args], env, timeout=60)


def assert_one_line(done: subprocess.CompletedProcess[str], *fragments: str) -> str:
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode != 0, done.stderr
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("holdback: ")
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    assert "Traceback" not in done.stderr + done.stdout
    assert "holdback is ready" not in done.stderr + done.stdout
    assert "holdback is serving" not in done.stdout
    return lines[0]


def test_a_port_in_use_is_one_line_and_never_ready_first(tmp_path: Path, taken_port: int) -> None:
    done = serve(tmp_path, ["--port", str(taken_port)])
    line = assert_one_line(done, f"127.0.0.1:{taken_port}", "already in use", "--port")
    assert line.startswith("holdback: error: ")
    assert done.returncode == 1
    assert done.stdout == ""  # not even uvicorn's "Started server process"


def missing_term_file(tmp_path: Path) -> tuple[list[str], dict[str, str], tuple[str, ...]]:
    path = tmp_path / "nowhere" / "clients.txt"
    return ["--sensitive-terms", str(path)], {}, ("cannot read term file", str(path))


def bad_database_url(tmp_path: Path) -> tuple[list[str], dict[str, str], tuple[str, ...]]:
    url = f"mysql://root:{PASSWORD_CANARY}@127.0.0.1/hb"
    return ["--database-url", url], {}, ("does not support 'mysql' databases",)


def unparsable_database_url(tmp_path: Path) -> tuple[list[str], dict[str, str], tuple[str, ...]]:
    return [], {"HOLDBACK_DATABASE_URL": "::not a url::"}, ("database URL",)


def unknown_model(tmp_path: Path) -> tuple[list[str], dict[str, str], tuple[str, ...]]:
    return ["--model", "demo", "--model", "gemini:pro"], {}, ("--model", "unknown provider")


def unknown_model_in_the_list(tmp_path: Path) -> tuple[list[str], dict[str, str], tuple[str, ...]]:
    return [], {"HOLDBACK_MODELS": "demo,gemini:pro"}, ("HOLDBACK_MODELS", "unknown provider")


def bad_setting(tmp_path: Path) -> tuple[list[str], dict[str, str], tuple[str, ...]]:
    return [], {"HOLDBACK_RATE_LIMIT": "lots"}, ("HOLDBACK_RATE_LIMIT", "whole number")


def bad_port_flag(tmp_path: Path) -> tuple[list[str], dict[str, str], tuple[str, ...]]:
    return ["--port", "eighty"], {}, ("--port / HOLDBACK_PORT",)


def bad_base_url(tmp_path: Path) -> tuple[list[str], dict[str, str], tuple[str, ...]]:
    return ["--model", "openai:x"], {"OPENAI_BASE_URL": "ftp://x"}, ("OPENAI_BASE_URL",)


CASES: dict[str, Callable[[Path], tuple[list[str], dict[str, str], tuple[str, ...]]]] = {
    "missing term file": missing_term_file,
    "bad database URL": bad_database_url,
    "unparsable database URL": unparsable_database_url,
    "unknown model": unknown_model,
    "unknown model in HOLDBACK_MODELS": unknown_model_in_the_list,
    "bad setting": bad_setting,
    "bad --port": bad_port_flag,
    "bad provider base URL": bad_base_url,
}


@pytest.mark.parametrize("case", list(CASES))
def test_every_start_up_error_is_one_line(tmp_path: Path, case: str) -> None:
    args, extra, fragments = CASES[case](tmp_path)
    done = serve(tmp_path, ["--port", "0", *args], extra)
    assert_one_line(done, *fragments)
    assert PASSWORD_CANARY not in done.stderr + done.stdout


def test_debug_shows_the_traceback(tmp_path: Path, taken_port: int) -> None:
    for args, extra in (
        (["--port", str(taken_port), "--debug"], {}),
        (["--port", "0", "--sensitive-terms", str(tmp_path / "none.txt")], {"HOLDBACK_DEBUG": "1"}),
    ):
        done = serve(tmp_path, args, extra)
        assert done.returncode == 1
        assert "Traceback" in done.stderr
        assert done.stderr.splitlines()[-1].startswith("holdback: error: ")


def test_a_missing_api_key_is_one_warning_at_start(tmp_path: Path) -> None:
    env = process_env(
        tmp_path,
        {
            "HOLDBACK_DATA_DIR": str(tmp_path / "data"),
            "HOLDBACK_MODELS": "openai:gpt-4o-mini,anthropic:claude-x,demo",
            "ANTHROPIC_API_KEY": KEY_CANARY,
        },
    )
    with ServerProcess(tmp_path / "server.log", env) as server:
        server.stop()
        log = server.output()
    warnings = [line for line in log.splitlines() if "API_KEY" in line]
    assert len(warnings) == 1, log
    assert warnings[0].startswith("holdback: warning: OPENAI_API_KEY is not set")
    assert "openai:gpt-4o-mini" in warnings[0]
    assert "ANTHROPIC_API_KEY" not in log  # it is set: nothing to say
    assert KEY_CANARY not in log
    # Said at start, before the server says where it listens.
    assert log.index("OPENAI_API_KEY") < log.index("holdback is serving on")


def test_the_banner_says_models_data_and_auth(tmp_path: Path) -> None:
    data = tmp_path / "data"
    env = process_env(tmp_path, {"HOLDBACK_DATA_DIR": str(data), "OPENAI_API_KEY": KEY_CANARY})
    args = ["--model", "openai:gpt-4o-mini", "--model", "demo"]
    with ServerProcess(tmp_path / "server.log", env, args) as server:
        with httpx.Client(base_url=server.base) as http:
            body = http.get("/api/models").json()
        server.stop()
        log = server.output()
    assert body == {
        "models": [
            {"id": "openai:gpt-4o-mini", "label": "gpt-4o-mini (OpenAI)"},
            {"id": "demo", "label": "Offline demo"},
        ],
        "default": "openai:gpt-4o-mini",
    }
    lines = log.splitlines()
    serving = next(n for n, line in enumerate(lines) if "holdback is serving on" in line)
    head = "\n".join(lines[serving - 3 : serving])
    assert "models: openai:gpt-4o-mini (the default), demo (offline, no LLM)" in head
    assert f"data:   {data} (database: the SQLite file {data / 'holdback.db'})" in head
    assert "auth:   none" in head
    assert "OPENAI_API_KEY" not in log
    assert KEY_CANARY not in log
    assert "holdback is ready (models openai:gpt-4o-mini, demo, auth none)" in log


def test_holdback_models_reaches_the_api(tmp_path: Path) -> None:
    env = process_env(
        tmp_path,
        {
            "HOLDBACK_DATA_DIR": str(tmp_path / "data"),
            "HOLDBACK_MODELS": "demo, anthropic:claude-x",
        },
    )
    with ServerProcess(tmp_path / "server.log", env) as server:
        with httpx.Client(base_url=server.base) as http:
            body = http.get("/api/models").json()
        server.stop()
        log = server.output()
    assert [m["id"] for m in body["models"]] == ["demo", "anthropic:claude-x"]
    assert body["default"] == "demo"
    assert "models: demo (offline, no LLM; the default), anthropic:claude-x" in log


def test_the_banner_masks_a_database_password(tmp_path: Path) -> None:
    url = f"postgresql+asyncpg://holdback:{PASSWORD_CANARY}@db.internal:5432/hb?sslpassword={KEY_CANARY}"
    settings = resolve(env={"HOME": str(tmp_path), "HOLDBACK_DATABASE_URL": url}, auth="password")
    text = banner(settings, "http://127.0.0.1:8000")
    assert "postgresql+asyncpg://holdback:***@db.internal:5432/hb?***" in text
    assert PASSWORD_CANARY not in text
    assert KEY_CANARY not in text
    assert "auth:   password" in text
    assert "model:  demo (offline, no LLM)" in text
    assert text.splitlines()[-1] == "holdback is serving on http://127.0.0.1:8000/"
