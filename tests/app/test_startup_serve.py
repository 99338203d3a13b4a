"""`holdback serve` as it starts and logs, on real processes (#15, items 6 and 7).

The rules: a server that starts logs what it always logged (what it noticed while it checked
that it could start included, e.g. a database file it made private), and a URL's userinfo and
query never reach its output, whoever logs the URL (holdback, uvicorn's access log, a
library). The failures (one line, exit 1) are in tests/store/test_startup.py.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest
from websockets.asyncio.client import connect

from tests.app.support import EMAIL, ServerProcess, echo_upstream, process_env
from tests.store.test_startup import make_database

pytestmark = pytest.mark.server

USER = "user-canary-9f"
PASSWORD = "pw-canary-9f"
KEY = "key-canary-9f"
CANARIES = (USER, PASSWORD, KEY)


def test_a_url_with_credentials_never_reaches_the_log(tmp_path: Path) -> None:
    with echo_upstream() as upstream:
        port = upstream.url.rsplit(":", 1)[1]
        env = process_env(
            tmp_path,
            {
                "HOLDBACK_DATA_DIR": str(tmp_path / "data"),
                "HOLDBACK_MODEL": "openai:test",
                # The upstream's base URL carries credentials in its userinfo.
                "OPENAI_BASE_URL": f"http://{USER}:{PASSWORD}@127.0.0.1:{port}/v1",
                "OPENAI_API_KEY": "x",
            },
        )
        with ServerProcess(tmp_path / "server.log", env) as server:

            async def talk() -> str:
                frames: list[dict[str, object]] = []
                async with connect(server.ws_url) as ws:
                    await ws.send(
                        json.dumps({"type": "user_message", "conversation_id": None, "text": EMAIL})
                    )
                    while not frames or frames[-1]["type"] != "assistant_done":
                        frames.append(json.loads(await ws.recv()))
                    return str(frames[-1]["status"])

            # Whatever becomes of the reply (aiohttp refuses a URL's userinfo next to an
            # Authorization header), it is over, and so is everything it logged.
            assert asyncio.run(talk()) in ("complete", "incomplete")
            # uvicorn's access log writes the request target: a URL in its query is masked.
            target = f"/healthz?next=http://{USER}:{PASSWORD}@example.org/p?api-key={KEY}"
            with httpx.Client(base_url=server.base) as http:
                assert http.get(target).status_code == 200
            with httpx.Client(base_url=server.base) as http:  # a second line, to wait for
                assert http.get("/healthz?flush").status_code == 200
            server.stop()
            log = server.output()
    assert "/healthz?flush" in log
    assert "http://***@example.org/p?***" in log
    for canary in CANARIES:
        assert canary not in log, log
    assert "Logging error" not in log
    assert "Traceback" not in log


def test_what_the_start_up_check_logs_is_kept(tmp_path: Path) -> None:
    data = tmp_path / "data"
    make_database(data)
    (data / "holdback.db").chmod(0o644)  # as older holdbacks made it
    env = process_env(tmp_path, {"HOLDBACK_DATA_DIR": str(data)})
    with ServerProcess(tmp_path / "server.log", env) as server:
        server.stop()
        log = server.output()
    lines = log.splitlines()
    made_private = [n for n, line in enumerate(lines) if "made " in line and "private" in line]
    assert len(made_private) == 1, log
    assert " WARNING holdback.store.files: " in lines[made_private[0]]  # formatted, in order
    serving = next(n for n, line in enumerate(lines) if "holdback is serving on" in line)
    assert made_private[0] < serving
    assert (data / "holdback.db").stat().st_mode & 0o077 == 0
