"""Issue #14, item 8: a large message is pseudonymized off the event loop.

The real server (`holdback serve` in a subprocess) is sent a message of the largest size a
frame may have, built to be as costly to scan as text can be (long runs of digit groups, and
runs of `@`, `.` and brackets); while it is being processed, that is after it was sent and
before its `message_accepted` arrives, `/healthz` must keep answering promptly: another user
is not stalled by it. The test waits on events, never on fixed sleeps, and asks nothing of how
fast the detectors are beyond that.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from holdback.app.pipeline import ChatService, OffLoop
from holdback.detect import DetectorSet
from holdback.providers.demo import DemoProvider
from holdback.store import Store, VaultKey
from tests.app.support import EMAIL, ServerProcess, leaks, process_env

pytestmark = pytest.mark.anyio

MAX_FRAME_BYTES = 64 * 1024  # HOLDBACK_MAX_FRAME_BYTES's default
PROMPT = 0.5  # seconds: "well under a second"
PROBES = 40


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    env = process_env(tmp_path, {"HOLDBACK_DATA_DIR": str(tmp_path / "data")})
    with ServerProcess(tmp_path / "server.log", env) as running:
        yield running
    assert leaks(running.output(), [EMAIL]) == []


def adversarial_frame(limit: int = MAX_FRAME_BYTES) -> str:
    """A user_message frame of exactly `limit` bytes whose text is hard to scan."""
    pieces = [
        "1234 5678 9012 3456 7890 " * 24,
        "@" * 64 + " ",
        "." * 64 + " ",
        "[(<{" * 16 + "}>)]" * 16 + " ",
        "4111 1111 1111 1111 2222 3333 4444 5555 6666 7777 8888 9999 " * 4,
        "a@b.c@d.e@f.g@h." * 8 + " ",
    ]
    body = f"Mail {EMAIL} about this: "
    i = 0
    while len(body) < limit:
        body += pieces[i % len(pieces)]
        i += 1

    def frame(text: str) -> str:
        return json.dumps({"type": "user_message", "conversation_id": None, "text": text})

    overhead = len(frame("").encode("utf-8"))
    text = body[: limit - overhead].rstrip()
    encoded = frame(text)
    assert len(encoded.encode("utf-8")) <= limit
    return encoded


async def read_frames(
    ws: ClientConnection, frames: list[dict[str, Any]], accepted: anyio.Event
) -> None:
    try:
        async for raw in ws:
            frames.append(json.loads(raw))
            if frames[-1]["type"] in ("message_accepted", "error"):
                accepted.set()
    except ConnectionClosed:
        pass
    finally:
        accepted.set()


@pytest.mark.server
async def test_healthz_answers_while_a_maximum_size_message_is_pseudonymized(
    server: ServerProcess,
) -> None:
    frame = adversarial_frame()
    frames: list[dict[str, Any]] = []
    latencies: list[float] = []
    async with (
        httpx.AsyncClient(base_url=server.base) as http,
        connect(server.ws_url, origin=server.origin, max_size=None) as ws,
    ):
        assert (await http.get("/healthz")).json() == {"status": "ok"}  # connection warmed
        accepted = anyio.Event()
        async with anyio.create_task_group() as tg:
            tg.start_soon(read_frames, ws, frames, accepted)
            await ws.send(frame)
            # The message is in; until its message_accepted arrives it is being processed.
            while not accepted.is_set() and len(latencies) < PROBES:
                started = time.monotonic()
                with anyio.fail_after(10):
                    answer = await http.get("/healthz")
                latencies.append(time.monotonic() - started)
                assert answer.status_code == 200
            await ws.close()
    assert latencies, "no probe ran while the message was processed"
    assert max(latencies) < PROMPT, latencies
    assert not [f for f in frames if f["type"] == "error"]


# -- the pieces, in process -----------------------------------------------------------------


async def test_off_loop_work_is_bounded_even_when_its_callers_give_up() -> None:
    off = OffLoop(2)
    loop = asyncio.get_running_loop()
    both = asyncio.Event()
    release = threading.Event()
    running: list[str] = []
    lock = threading.Lock()

    def work(n: int) -> int:
        with lock:
            running.append(threading.current_thread().name)
            if len(running) == 2:
                loop.call_soon_threadsafe(both.set)
        release.wait(10)
        return n

    callers = [asyncio.ensure_future(off.run(lambda n=n: work(n))) for n in range(2)]
    await asyncio.wait_for(both.wait(), 10)
    assert threading.current_thread().name not in running
    for caller in callers:  # both callers give up; their workers go on
        caller.cancel()
    for caller in callers:
        with contextlib.suppress(asyncio.CancelledError):
            await caller
    third = asyncio.ensure_future(off.run(lambda: work(3)))
    for _ in range(20):
        await asyncio.sleep(0)
    assert not third.done()
    assert len(running) == 2  # no slot: the abandoned workers still hold theirs
    release.set()
    assert await asyncio.wait_for(third, 10) == 3
    assert len(running) == 3

    def fails() -> None:
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        await off.run(fails)


async def test_a_large_message_is_masked_off_the_loop_exactly_as_on_it(tmp_path: Path) -> None:
    store = await Store.open(
        f"sqlite+aiosqlite:///{tmp_path / 'chat.db'}", vault_key=VaultKey.generate()
    )
    try:
        user = await store.create_user("alice", None)
        text = f"Mail {EMAIL} or call +1 415 555 2671, EMAIL_1 is not a token. " * 40
        results = []
        for offload_chars in (10**9, 16):
            svc = ChatService(
                store, DemoProvider(chunk_delay=0), DetectorSet.from_config(),
                offload_chars=offload_chars,
            )  # fmt: skip
            threads: list[str] = []
            analyze = svc.pseudonymizer.analyze

            def spy(*args: Any, analyze: Any = analyze, threads: list[str] = threads) -> Any:
                threads.append(threading.current_thread().name)
                return analyze(*args)

            svc.pseudonymizer.analyze = spy  # type: ignore[method-assign]
            frames: list[dict[str, Any]] = []
            reply = await svc.submit(user.id, None, text, frames.append)
            assert reply.task is not None
            await asyncio.wait_for(reply.task, 10)
            messages = await store.list_messages(reply.conversation_id)
            results.append((messages[0].text, frames[0]["masked"], frames[0]["title"]))
            on_loop = threading.current_thread().name
            assert threads
            assert all((name == on_loop) == (offload_chars > len(text)) for name in threads)
        assert results[0] == results[1]
    finally:
        await store.close()
