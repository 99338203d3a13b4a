"""Issue #15, item 5, on a real server: `kill -9` mid-reply loses at most one checkpoint.

On SQLite and on PostgreSQL, a real `holdback serve` streams a slow echo from a loopback
upstream to a `websockets` client that records every delta and when it came. The server is
killed with SIGKILL by its PID in the middle of the reply, restarted on the same database,
and the conversation is read back. Before the fix the reply was stored as `''` whatever the user had seen; now it is
`incomplete` and holds what the user saw, up to the last checkpoint (every second, or every
2 KiB of text, whichever comes first). The database files as the kill left them (SQLite's
main file, WAL and shared memory; the PostgreSQL cluster's files) hold the reply tokenized,
never a value in clear.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from tests.app.support import (
    EMAIL,
    PHONE,
    USER_CANARIES,
    ServerProcess,
    echo_upstream,
    leaks,
    process_env,
)
from tests.support.postgres import PostgresServer

pytestmark = [pytest.mark.server, pytest.mark.anyio, pytest.mark.slow]

INTERVAL = 1.0  # the store's default checkpoint interval
SIZE = 2048  # and size, in bytes of released text

STORY = (
    f"Dear team, the contract goes to {EMAIL} and the hotline is {PHONE}. "
    "The long road wound through hills and valleys, past rivers and old stone bridges. "
)


def scan(files: list[Path], needles: list[str]) -> dict[str, list[str]]:
    """Which needles each file holds, as UTF-8 or UTF-16 bytes (a leak oracle of its own)."""
    found: dict[str, list[str]] = {}
    for path in files:
        try:
            data = path.read_bytes()
        except FileNotFoundError:  # PostgreSQL rewrites some files (relcache init) at any time
            continue
        found[str(path)] = [
            n for n in needles if n.encode() in data or n.encode("utf-16-le") in data
        ]
    return found


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[dict[str, str], Any]:
    """The server's database settings, and a function listing the files that hold it."""
    if request.param == "sqlite":
        return {}, lambda: sorted((tmp_path / "data").glob("holdback.db*"))
    server: PostgresServer = request.getfixturevalue("postgres_server")
    if server.workdir is None:
        pytest.skip("an external PostgreSQL server: its files are not readable here")
    url: str = request.getfixturevalue("postgres_url")
    workdir = server.workdir

    def files() -> list[Path]:
        server.execute("CHECKPOINT")
        return [p for p in workdir.rglob("*") if p.is_file()]

    return {"HOLDBACK_DATABASE_URL": url}, files


class Seen:
    """What the client received of the reply, and when."""

    def __init__(self) -> None:
        self.deltas: list[tuple[float, str]] = []

    @property
    def text(self) -> str:
        return "".join(text for _, text in self.deltas)

    def before(self, moment: float) -> str:
        return "".join(text for at, text in self.deltas if at <= moment)

    def bytes_after(self, moment: float) -> int:
        return sum(len(text.encode()) for at, text in self.deltas if at > moment)

    def first_lost(self, stored: str) -> float | None:
        """When the first delta not (wholly) in `stored` arrived."""
        end = 0
        for at, text in self.deltas:
            end += len(text)
            if end > len(stored):
                return at
        return None


async def get_json(base: str, path: str) -> Any:
    async with httpx.AsyncClient(base_url=base) as http:
        response = await http.get(path)
        assert response.status_code == 200
        return response.json()


@pytest.mark.parametrize(
    ("pace", "chunks", "kill_when"),
    [
        # ~80 characters a second: the one-second rule saves first.
        pytest.param(0.05, (3, 6), {"seconds": 3.5}, id="slow-stream"),
        # ~6 KB a second: the 2 KiB rule saves first.
        pytest.param(0.005, (20, 40), {"bytes": 12_000}, id="fast-stream"),
    ],
)
async def test_kill_9_mid_reply_keeps_what_the_user_saw(
    tmp_path: Path,
    database: tuple[dict[str, str], Any],
    pace: float,
    chunks: tuple[int, int],
    kill_when: dict[str, float],
) -> None:
    settings, database_files = database
    data_dir = tmp_path / "data"
    low, high = chunks
    with echo_upstream(chunk_delay=pace, low=low, high=high, repeat=4) as upstream:
        env = process_env(
            tmp_path,
            {
                "HOLDBACK_DATA_DIR": str(data_dir),
                "HOLDBACK_MODEL": "openai:test",
                "OPENAI_BASE_URL": upstream.url + "/v1",
                "OPENAI_API_KEY": "x",
                **settings,
            },
        )
        seen = Seen()
        first = ServerProcess(tmp_path / "first.log", env).start()
        try:
            async with connect(first.ws_url, max_size=None) as ws:
                text = STORY * 60  # about 9,000 characters, echoed four times
                await ws.send(
                    json.dumps({"type": "user_message", "conversation_id": None, "text": text})
                )
                conversation_id = ""
                with anyio.fail_after(60):
                    while True:
                        frame = json.loads(await ws.recv())
                        conversation_id = frame.get("conversation_id") or conversation_id
                        if frame["type"] == "assistant_done":
                            pytest.fail("the reply ended before the kill")
                        if frame["type"] == "assistant_delta":
                            seen.deltas.append((time.monotonic(), frame["text"]))
                            streamed = seen.deltas[-1][0] - seen.deltas[0][0]
                            if streamed >= kill_when.get("seconds", float("inf")):
                                break
                            if len(seen.text.encode()) >= kill_when.get("bytes", float("inf")):
                                break
                assert first.proc is not None
                os.kill(first.proc.pid, signal.SIGKILL)
                killed_at = time.monotonic()
                assert first.wait() == -signal.SIGKILL
                # Frames the server sent before it died were seen too.
                with anyio.fail_after(10):
                    try:
                        while True:
                            frame = json.loads(await ws.recv())
                            if frame["type"] == "assistant_delta":
                                seen.deltas.append((killed_at, frame["text"]))
                    except ConnectionClosed:
                        pass
        finally:
            first.stop()

        # The files as the kill left them (SQLite: main file, WAL, shared memory): the reply
        # is there, tokenized; no value in clear.
        files = database_files()
        if not settings:
            assert {p.name for p in files} >= {"holdback.db", "holdback.db-wal"}
        found = scan(files, [*USER_CANARIES, "<EMAIL_1>"])
        assert [p for p, names in found.items() if set(names) & set(USER_CANARIES)] == []
        assert any("<EMAIL_1>" in names for names in found.values())

        with ServerProcess(tmp_path / "second.log", env) as second:
            body = await get_json(second.base, f"/api/conversations/{conversation_id}")
            model = await get_json(second.base, f"/api/conversations/{conversation_id}?view=model")
            assert body["streaming"] is False
            _, reply = body["messages"]
            assert reply["role"] == "assistant"
            assert reply["status"] == "incomplete"
            stored = reply["text"]
            lost = len(seen.text.encode()) - len(stored.encode())
            first_lost = seen.first_lost(stored)
            print(
                f"\n{(settings and 'postgres') or 'sqlite'} {kill_when}: seen {len(seen.text.encode())} bytes in "
                f"{seen.deltas[-1][0] - seen.deltas[0][0]:.2f} s, stored "
                f"{len(stored.encode())}: lost {lost} bytes, seen in the last "
                f"{killed_at - first_lost if first_lost is not None else 0:.3f} s before the kill"
            )
            # What is stored is what the user saw, up to one checkpoint.
            assert seen.text.startswith(stored)
            assert len(stored) > 0
            assert stored.startswith(seen.before(killed_at - INTERVAL - 1.0))
            assert lost <= 2 * SIZE + seen.bytes_after(killed_at - 0.5)
            # Tokenized as stored, restored for its owner.
            tokenized = model["messages"][1]["text"]
            assert "<EMAIL_1>" in tokenized
            assert leaks(tokenized, USER_CANARIES) == []
            assert EMAIL in stored

            # The conversation goes on, and the model reads the saved reply as history.
            async with connect(second.ws_url, max_size=None) as ws:
                await ws.send(
                    json.dumps(
                        {
                            "type": "user_message",
                            "conversation_id": conversation_id,
                            "text": "go on",
                        }
                    )
                )
                with anyio.fail_after(60):
                    while (frame := json.loads(await ws.recv()))["type"] != "assistant_done":
                        pass
                assert frame["status"] == "complete"
            history = [m for m in upstream.requests[-1].json()["messages"] if m["role"] != "system"]
            assert [m["role"] for m in history] == ["user", "assistant", "user"]
            assert history[1]["content"] == tokenized
            assert leaks(upstream.bodies(), USER_CANARIES) == []
        for log in ("first.log", "second.log"):
            assert leaks((tmp_path / log).read_text(errors="replace"), USER_CANARIES) == []
