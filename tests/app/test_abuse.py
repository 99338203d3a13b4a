"""A real `holdback serve` against raw-socket clients that behave as attackers do (issue 15).

What is tried: bodies declared or streamed past their route's limit, bodies and heads that
trickle in (slowloris), oversized heads, too many connections, frame floods, login and body
floods while another user chats, and a base URL whose credentials must never reach the log.
Each bound is tried at its limit and just past it. Timings are asserted with generous margins;
every client is bounded in count and time, and talks to 127.0.0.1 only.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import statistics
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from tests.app.conftest import Accounts
from tests.app.support import EchoUpstream, ServerProcess, echo_upstream, process_env

pytestmark = [pytest.mark.server, pytest.mark.anyio]

HEADER_TIMEOUT = 2.0
BODY_TIMEOUT = 2.0
MAX_BODY = 4096
MAX_LOGIN_BODY = 1024
MAX_HEAD = 4096


@pytest.fixture(scope="module")
def upstream() -> Iterator[EchoUpstream]:
    with echo_upstream(chunk_delay=0.02) as server:
        yield server


def start_server(
    tmp: Path, accounts: Accounts, upstream: EchoUpstream, **extra: str
) -> ServerProcess:
    data = tmp / "data"
    if not data.exists():
        shutil.copytree(accounts.data_dir, data)
    env = process_env(
        tmp,
        {
            "HOLDBACK_DATA_DIR": str(data),
            "HOLDBACK_AUTH": "password",
            "HOLDBACK_MODEL": "openai:test",
            "OPENAI_BASE_URL": upstream.url + "/v1",
            "OPENAI_API_KEY": "x",
            "HOLDBACK_RATE_LIMIT": "1000",
            **extra,
        },
    )
    return ServerProcess(tmp / "server.log", env).start()


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory,
    accounts_template: Accounts,
    upstream: EchoUpstream,
) -> Iterator[ServerProcess]:
    running = start_server(
        tmp_path_factory.mktemp("abuse"),
        accounts_template,
        upstream,
        HOLDBACK_HEADER_TIMEOUT=str(HEADER_TIMEOUT),
        HOLDBACK_BODY_TIMEOUT=str(BODY_TIMEOUT),
        HOLDBACK_MAX_BODY_BYTES=str(MAX_BODY),
        HOLDBACK_MAX_LOGIN_BODY_BYTES=str(MAX_LOGIN_BODY),
        HOLDBACK_MAX_HEADER_BYTES=str(MAX_HEAD),
    )
    try:
        yield running
    finally:
        running.stop()


# -- a raw HTTP/1.1 client --------------------------------------------------------------------


class Raw:
    """One TCP connection to the server, spoken to byte by byte."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def response(self, within: float = 15.0) -> tuple[int, dict[str, str], bytes]:
        """The next response: status, headers (lower-cased names), body."""
        with anyio.fail_after(within):
            head = await self.reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            status = int(lines[0].split(" ")[1])
            headers = {}
            for line in lines[1:]:
                if ":" in line:
                    name, value = line.split(":", 1)
                    headers[name.strip().lower()] = value.strip()
            body = await self.reader.readexactly(int(headers.get("content-length", "0")))
        return status, headers, body

    async def closed_after(self, within: float = 15.0) -> tuple[float, bytes]:
        """Seconds until the server closes the connection, and what it sent before."""
        started = time.monotonic()
        received = b""
        with anyio.fail_after(within):
            while True:
                try:
                    chunk = await self.reader.read(65536)
                except ConnectionResetError:
                    chunk = b""
                if not chunk:
                    return time.monotonic() - started, received
                received += chunk

    def close(self) -> None:
        self.writer.close()


async def raw(server: ServerProcess) -> Raw:
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    return Raw(reader, writer)


def request_head(method: str, path: str, *headers: str) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", *headers, "", ""]
    return "\r\n".join(lines).encode()


def json_body(size: int) -> bytes:
    """A JSON object of exactly `size` bytes."""
    skeleton = b'{"username": "", "password": "p"}'
    return b'{"username": "' + b"x" * (size - len(skeleton)) + b'", "password": "p"}'


# -- request bodies ---------------------------------------------------------------------------


async def test_a_declared_body_past_the_limit_is_refused_before_it_is_sent(
    server: ServerProcess,
) -> None:
    conn = await raw(server)
    await conn.send(request_head("POST", "/api/login", f"Content-Length: {256 << 20}"))
    status, headers, body = await conn.response()
    assert status == 413
    assert json.loads(body)["code"] == "body_too_large"
    assert headers["connection"] == "close"
    await conn.closed_after()
    conn.close()


@pytest.mark.parametrize(
    ("path", "limit"), [("/api/login", MAX_LOGIN_BODY), ("/api/conversations", MAX_BODY)]
)
async def test_a_body_at_the_limit_is_read_and_one_past_is_not(
    server: ServerProcess, accounts_template: Accounts, path: str, limit: int
) -> None:
    auth = "Authorization: Bearer " + accounts_template.tokens["alice"]
    for size, refused in ((limit, False), (limit + 1, True)):
        body = json_body(size)
        assert len(body) == size
        conn = await raw(server)
        await conn.send(request_head("POST", path, f"Content-Length: {size}", auth) + body)
        status, _, _ = await conn.response()
        assert (status == 413) is refused, (size, status)
        conn.close()


async def test_a_streamed_body_is_refused_as_it_passes_the_limit(server: ServerProcess) -> None:
    # Chunked, so no length is declared, and never finished: the answer cannot wait for the
    # end of the body, it comes once the bytes received pass the bound.
    conn = await raw(server)
    await conn.send(request_head("POST", "/api/login", "Transfer-Encoding: chunked"))
    piece = b"x" * 256
    for _ in range(MAX_LOGIN_BODY // len(piece) + 1):
        await conn.send(b"%x\r\n%s\r\n" % (len(piece), piece))
    status, headers, body = await conn.response()
    assert status == 413
    assert json.loads(body)["code"] == "body_too_large"
    assert headers["connection"] == "close"
    conn.close()


async def test_a_body_that_trickles_in_gets_408(server: ServerProcess) -> None:
    conn = await raw(server)
    await conn.send(request_head("POST", "/api/login", "Content-Length: 100") + b'{"user')
    started = time.monotonic()
    status, _, body = await conn.response()
    assert status == 408
    assert json.loads(body)["code"] == "body_timeout"
    assert BODY_TIMEOUT * 0.9 < time.monotonic() - started < BODY_TIMEOUT + 8
    conn.close()


async def test_a_body_in_time_is_read(server: ServerProcess) -> None:
    body = json.dumps({"username": "nobody", "password": "no"}).encode()
    conn = await raw(server)
    await conn.send(request_head("POST", "/api/login", f"Content-Length: {len(body)}") + body[:5])
    await asyncio.sleep(BODY_TIMEOUT * 0.3)  # slow, but within the bound
    await conn.send(body[5:])
    status, _, _ = await conn.response()
    assert status in (401, 429)
    conn.close()


# -- heads ------------------------------------------------------------------------------------


async def test_a_head_that_trickles_in_is_cut_off_with_408(server: ServerProcess) -> None:
    """Slowloris: one header line at a time, each well within any per-read timeout."""
    conn = await raw(server)
    await conn.send(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
    started = time.monotonic()
    closing = asyncio.ensure_future(conn.closed_after())
    with anyio.fail_after(HEADER_TIMEOUT + 10):
        while not closing.done():
            try:
                await conn.send(b"X-Slow: yes\r\n")
            except ConnectionError:
                break
            await asyncio.sleep(0.2)
        _, received = await closing
    assert HEADER_TIMEOUT * 0.9 < time.monotonic() - started < HEADER_TIMEOUT + 8
    assert received.startswith(b"HTTP/1.1 408 ")
    conn.close()


async def test_a_silent_connection_is_closed(server: ServerProcess) -> None:
    conn = await raw(server)
    took, received = await conn.closed_after()
    assert HEADER_TIMEOUT * 0.9 < took < HEADER_TIMEOUT + 8
    assert received == b""  # nothing was asked, nothing is answered
    conn.close()


async def test_a_kept_alive_connection_has_the_same_deadline(server: ServerProcess) -> None:
    conn = await raw(server)
    await conn.send(request_head("GET", "/healthz"))
    assert (await conn.response())[0] == 200
    started = time.monotonic()
    await conn.send(b"GET /healthz HTTP/1.1\r\n")
    closing = asyncio.ensure_future(conn.closed_after())
    with anyio.fail_after(HEADER_TIMEOUT + 10):
        while not closing.done():
            try:
                await conn.send(b"X: y\r\n")
            except ConnectionError:
                break
            await asyncio.sleep(0.2)
        await closing
    assert time.monotonic() - started < HEADER_TIMEOUT + 8
    conn.close()


async def test_a_head_in_time_is_served(server: ServerProcess) -> None:
    conn = await raw(server)
    head = request_head("GET", "/healthz", "X-Slow: but in time")
    for start in range(0, len(head), len(head) // 3 + 1):
        await conn.send(head[start : start + len(head) // 3 + 1])
        await asyncio.sleep(HEADER_TIMEOUT * 0.15)
    status, _, body = await conn.response()
    assert status == 200
    assert json.loads(body) == {"status": "ok"}
    conn.close()


async def test_a_head_at_the_size_limit_is_served_and_one_past_is_not(
    server: ServerProcess,
) -> None:
    start = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: "
    conn = await raw(server)
    await conn.send(start + b"a" * (MAX_HEAD - len(start)))  # incomplete, at the limit
    await asyncio.sleep(0.2)  # read by the server while still incomplete
    await conn.send(b"\r\n\r\n")
    assert (await conn.response())[0] == 200
    conn.close()
    conn = await raw(server)
    await conn.send(start + b"a" * (MAX_HEAD + 1 - len(start)))  # incomplete, one past it
    status, _, _ = await conn.response()
    assert status == 400
    conn.close()


async def test_connections_past_the_limit_get_503(
    tmp_path: Path, accounts_template: Accounts, upstream: EchoUpstream
) -> None:
    running = start_server(tmp_path, accounts_template, upstream, HOLDBACK_MAX_CONNECTIONS="4")
    try:
        held = [await raw(running) for _ in range(2)]
        try:
            third = await raw(running)  # three open, under the four allowed: served
            held.append(third)
            await third.send(request_head("GET", "/healthz"))
            assert (await third.response())[0] == 200
            fourth = await raw(running)  # four open: one too many
            held.append(fourth)
            await fourth.send(request_head("GET", "/healthz"))
            assert (await fourth.response())[0] == 503
        finally:
            for conn in held:
                conn.close()
    finally:
        running.stop()


# -- logins from many addresses ---------------------------------------------------------------


async def test_logins_are_throttled_per_address_and_per_account(server: ServerProcess) -> None:
    """Through uvicorn, which takes the client address from a trusted proxy's header."""

    async def attempt(name: str, address: str) -> tuple[int, str | None]:
        async with httpx.AsyncClient(base_url=server.base, timeout=30) as http:
            response = await http.post(
                "/api/login",
                json={"username": name, "password": "wrong"},
                headers={"X-Forwarded-For": address},
            )
            return response.status_code, response.headers.get("retry-after")

    # One address guessing at many accounts: its fourth failure waits.
    spray = [await attempt(f"user{n}", "192.0.2.10") for n in range(4)]
    assert [s for s, _ in spray] == [401, 401, 401, 429]
    assert spray[-1][1] == "1"
    assert (await attempt("user9", "192.0.2.11"))[0] == 401  # another address does not
    # Many addresses guessing at one account: its fourth failure waits, from anywhere.
    many = [await attempt("carol", f"198.51.100.{n}") for n in range(4)]
    assert [s for s, _ in many] == [401, 401, 401, 429]


# -- WebSocket floods -------------------------------------------------------------------------


async def test_a_frame_flood_is_cut_off_and_others_are_served(
    server: ServerProcess, accounts_template: Accounts
) -> None:
    """The finding: 20,000 frames on one socket took 40 s to drain and slowed other users."""
    alice = accounts_template.bearer("alice")
    started = time.monotonic()
    async with connect(server.ws_url, additional_headers=alice, max_queue=None) as ws:
        answers: list[dict[str, Any]] = []
        code = None
        with anyio.fail_after(20):
            try:
                for _ in range(20_000):
                    await ws.send('{"type": "cancel", "conversation_id": "nope"}')
                while True:
                    answers.append(json.loads(await ws.recv()))
            except ConnectionClosed as closed:
                code = closed.rcvd.code if closed.rcvd is not None else None
    assert code == 1008
    assert answers[-1]["code"] == "too_many_frames"
    assert len(answers) <= 21  # the default: 20 frames in any one second
    assert time.monotonic() - started < 15
    gaps = await delta_gaps(server, accounts_template.bearer("bob"), "Still served? " * 4)
    assert gaps
    assert max(gaps) < 1.0


# -- availability under floods ----------------------------------------------------------------


async def delta_gaps(server: ServerProcess, headers: dict[str, str], text: str) -> list[float]:
    """Seconds between the deltas of one reply, as the client receives them."""
    gaps: list[float] = []
    last = None
    async with connect(server.ws_url, additional_headers=headers) as ws:
        await ws.send(json.dumps({"type": "user_message", "conversation_id": None, "text": text}))
        with anyio.fail_after(60):
            while True:
                frame = json.loads(await ws.recv())
                if frame["type"] == "assistant_delta":
                    now = time.perf_counter()
                    if last is not None:
                        gaps.append(now - last)
                    last = now
                elif frame["type"] == "assistant_done":
                    assert frame["status"] == "complete"
                    return gaps
                elif frame["type"] == "error":
                    raise AssertionError(frame)


async def healthz_latencies(server: ServerProcess, samples: int = 40) -> list[float]:
    latencies = []
    async with httpx.AsyncClient(base_url=server.base, timeout=30) as http:
        for _ in range(samples):
            started = time.perf_counter()
            assert (await http.get("/healthz")).status_code == 200
            latencies.append(time.perf_counter() - started)
            await anyio.sleep(0.03)
    return latencies


async def during(
    flood: Callable[[anyio.Event], Awaitable[None]], *measures: Awaitable[Any]
) -> list[Any]:
    """Run the measures while the flood runs; stop the flood when they are done."""
    stop = anyio.Event()
    results: list[Any] = []
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(flood, stop)
        await anyio.sleep(0.3)  # the flood is under way
        for measure in measures:
            results.append(await measure)
        stop.set()
    return results


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@pytest.fixture
def unthrottled(
    tmp_path: Path, accounts_template: Accounts, upstream: EchoUpstream
) -> Iterator[ServerProcess]:
    # No backoff: every wrong login is hashed, so the flood costs what it can.
    running = start_server(
        tmp_path,
        accounts_template,
        upstream,
        HOLDBACK_LOGIN_BACKOFF_AFTER="1000000",
        HOLDBACK_LOGIN_LOCK_AFTER="1000000",
    )
    try:
        yield running
    finally:
        running.stop()


async def test_health_and_replies_hold_up_during_a_login_flood(
    unthrottled: ServerProcess, accounts_template: Accounts
) -> None:
    """The finding: 8 concurrent wrong logins put /healthz at 1.2 s and stalled another
    user's reply for 6.8 s between deltas."""
    checked = 0

    async def flood(stop: anyio.Event) -> None:
        async def one(n: int) -> None:
            nonlocal checked
            async with httpx.AsyncClient(base_url=unthrottled.base, timeout=60) as http:
                while not stop.is_set():
                    # Known names: their hash ran on the event loop before.
                    body = {"username": ("alice", "bob")[n % 2], "password": f"wrong {n}"}
                    if (await http.post("/api/login", json=body)).status_code == 401:
                        checked += 1

        async with anyio.create_task_group() as tasks:
            for n in range(8):
                tasks.start_soon(one, n)

    text = "All quiet on the western front today. " * 6
    latencies, gaps = await during(
        flood,
        healthz_latencies(unthrottled),
        delta_gaps(unthrottled, accounts_template.bearer("bob"), text),
    )
    assert checked >= 10  # the flood was hashing all along
    assert statistics.median(latencies) < 0.05, latencies
    assert percentile(latencies, 0.9) < 0.25, latencies
    assert max(gaps) < 0.6, gaps


def peak_rss_kib(server: ServerProcess) -> int:
    assert server.proc is not None
    for line in Path(f"/proc/{server.proc.pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


async def test_health_and_memory_hold_up_during_a_body_flood(
    server: ServerProcess, accounts_template: Accounts
) -> None:
    """The finding: four 256 MiB login bodies took the process from 169 MB to 1.9 GB."""
    offered = 64 << 20
    refused: list[int] = []

    async def big_body(chunked: bool) -> None:
        conn = await raw(server)
        framing = "Transfer-Encoding: chunked" if chunked else f"Content-Length: {offered}"
        await conn.send(request_head("POST", "/api/login", framing))
        reading = asyncio.ensure_future(conn.response(within=30))
        piece = b"a" * 65536
        sent = 0
        while not reading.done() and sent < offered:
            try:
                await conn.send(b"10000\r\n%s\r\n" % piece if chunked else piece)
            except ConnectionError:
                break
            sent += len(piece)
        try:
            status, _, _ = await reading
        except (ConnectionError, asyncio.IncompleteReadError):
            status = 0  # reset while the client still sent: the 413 was lost with it
        refused.append(status)
        conn.close()

    async def flood(stop: anyio.Event) -> None:
        while not stop.is_set():
            async with anyio.create_task_group() as tasks:
                for n in range(4):
                    tasks.start_soon(big_body, n % 2 == 1)

    before = peak_rss_kib(server)
    text = "Nothing to see here, just a reply. " * 6
    latencies, gaps = await during(
        flood, healthz_latencies(server), delta_gaps(server, accounts_template.bearer("bob"), text)
    )
    assert 413 in refused
    assert set(refused) <= {413, 0}
    assert peak_rss_kib(server) - before < 48 * 1024  # far less than one body
    assert statistics.median(latencies) < 0.05, latencies
    assert max(gaps) < 0.6, gaps


# -- logs -------------------------------------------------------------------------------------


async def test_a_base_url_with_credentials_is_never_logged_whole(
    tmp_path: Path, accounts_template: Accounts, upstream: EchoUpstream
) -> None:
    """The finding: a URL with credentials or a query key was logged on every request."""
    user_canary, key_canary = "userinfo-canary-7f3a", "query-canary-91c2"
    base = upstream.url.replace("http://", f"http://{user_canary}:pw@") + f"/v1?key={key_canary}"
    running = start_server(tmp_path, accounts_template, upstream, OPENAI_BASE_URL=base)
    try:
        async with connect(
            running.ws_url, additional_headers=accounts_template.bearer("alice")
        ) as ws:
            await ws.send(
                json.dumps({"type": "user_message", "conversation_id": None, "text": "hi"})
            )
            with anyio.fail_after(30):
                while json.loads(await ws.recv())["type"] not in ("assistant_done",):
                    pass
    finally:
        running.stop()
    log = running.output()
    assert user_canary not in log
    assert key_canary not in log
