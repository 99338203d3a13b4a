"""`StreamingTransport` over real loopback sockets: every framing and split, keep-alive reuse
(streams abandoned at their last event included), stale connections, cuts, resets, stalls,
early answers, limits, flow control, closing, address fallback and TLS, each mapped to the
httpx exception `providers/http.py` expects; and the providers' capture replays through it."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import hashlib
import ipaddress
import os
import random
import socket
import ssl
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from holdback.providers.anthropic import AnthropicProvider
from holdback.providers.connection import connect_timeout_error
from holdback.providers.http import StreamSettings
from holdback.providers.openai_chat import OpenAIChatProvider
from holdback.providers.transport import StreamingTransport, proxies_configured, upstream_client
from tests.providers import test_anthropic, test_openai_chat
from tests.providers.fakeserver import FakeUpstream, Framing, Reply, rechunk, unused_port
from tests.providers.rawserver import RawServer, ServerRequest, replying, reset, response
from tests.providers.streams import capture, collect

pytestmark = pytest.mark.anyio

EVENT = b'data: {"choices":[{"index":0,"delta":{"content":"Hello"}}]}\n\n'
DONE = b"data: [DONE]\n\n"
CHUNKED_HEAD = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"


def client(**options: object) -> httpx.AsyncClient:
    timeout = options.pop("timeout", 5.0)
    return httpx.AsyncClient(
        transport=StreamingTransport(**options),  # type: ignore[arg-type]
        timeout=timeout,  # type: ignore[arg-type]
    )


async def body_of(http: httpx.AsyncClient, url: str, method: str = "GET") -> bytes:
    async with http.stream(method, url) as reply:
        return b"".join([chunk async for chunk in reply.aiter_bytes()])


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(data), data)


@contextlib.contextmanager
def hanging_address() -> Iterator[tuple[str, int]]:
    """A loopback address where connection handshakes go unanswered (its backlog is full)."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)  # never accepted: once the backlog is full, handshakes go unanswered
    fillers: list[socket.socket] = []
    try:
        for _ in range(8):
            filler = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            filler.setblocking(False)
            fillers.append(filler)
            filler.connect_ex(listener.getsockname())
        yield listener.getsockname()
    finally:
        for filler in fillers:
            filler.close()
        listener.close()


def resolve_as(
    monkeypatch: pytest.MonkeyPatch, addresses: list[tuple[str, int]], delay: float = 0.0
) -> None:
    """The running loop's resolver answers every name with `addresses`, after `delay` s."""

    async def getaddrinfo(host: object, port: object, **_: object) -> list[object]:
        await asyncio.sleep(delay)
        return [(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", a) for a in addresses]

    monkeypatch.setattr(asyncio.get_running_loop(), "getaddrinfo", getaddrinfo)


# Framing, over the shared fake upstream.


@pytest.mark.parametrize("framing", ["chunked", "length", "close"])
async def test_each_framing_streams_the_whole_body(
    upstream: FakeUpstream, framing: Framing
) -> None:
    chunks = [EVENT] * 5
    upstream.enqueue(Reply(chunks=chunks, framing=framing, chunk_delay=0.01))
    async with client() as http, http.stream("GET", upstream.url + "/s?x=1") as reply:
        assert reply.status_code == 200
        assert reply.headers["content-type"] == "text/event-stream; charset=utf-8"
        assert reply.reason_phrase == "OK"
        assert reply.http_version == "HTTP/1.1"
        received = [chunk async for chunk in reply.aiter_bytes()]
    assert b"".join(received) == EVENT * 5
    assert len(received) >= 2  # handed out as it arrived, not at the end
    [sent] = upstream.requests
    assert (sent.method, sent.path) == ("GET", "/s?x=1")
    assert sent.headers["host"] == f"127.0.0.1:{upstream.port}"


async def test_request_body_and_headers_arrive_once(upstream: FakeUpstream) -> None:
    upstream.enqueue(Reply(chunks=[b"ok"], framing="length"))
    async with client() as http:
        reply = await http.post(upstream.url + "/p", content=b'{"a": 1}', headers={"X-Key": "v"})
    assert reply.content == b"ok"
    [sent] = upstream.requests
    assert sent.body == b'{"a": 1}'
    assert sent.headers["x-key"] == "v"
    assert sent.headers["content-length"] == "8"


async def test_a_streamed_request_body_is_sent_chunked() -> None:
    async def parts() -> AsyncIterator[bytes]:
        for part in (b"one ", b"", b"two ", b"three"):
            yield part

    async with RawServer(replying(response(b"ok"))) as server, client() as http:
        reply = await http.post(server.url, content=parts())
        assert reply.content == b"ok"
    assert server.requests[0].body == b"one two three"
    assert server.requests[0].headers["transfer-encoding"] == "chunked"


@pytest.mark.parametrize("framing", ["chunked", "length"])
async def test_a_response_split_at_every_byte_boundary(framing: str) -> None:
    whole = response(EVENT * 2, framing=framing, headers=("content-type: text/event-stream",))
    if framing == "chunked":
        whole = whole.replace(b"0\r\n\r\n", b"0\r\nx-trailer: 1\r\n\r\n")
    cut = 0

    async def answer(request: ServerRequest, writer: asyncio.StreamWriter) -> bool:
        writer.write(whole[:cut])
        await writer.drain()
        await asyncio.sleep(0.002)  # a separate TCP segment
        writer.write(whole[cut:])
        await writer.drain()
        return True

    async with RawServer(answer) as server, client() as http:
        for cut in range(1, len(whole)):
            assert await body_of(http, server.url) == EVENT * 2, cut
    assert server.accepts == 1  # and every response left the connection reusable


# Keep-alive.


async def test_keep_alive_reuses_one_connection() -> None:
    async with RawServer(replying(response(b"a"), response(b"bb", framing="chunked"))) as server:
        async with client() as http:
            assert await body_of(http, server.url + "/1") == b"a"
            assert await body_of(http, server.url + "/2") == b"bb"
        assert server.accepts == 1
        assert [(r.connection, r.number, r.target) for r in server.requests] == [
            (1, 1, "/1"),
            (1, 2, "/2"),
        ]


async def test_no_reuse_when_either_side_says_close() -> None:
    closing = response(b"a", headers=("connection: close",))
    async with RawServer(replying(closing, response(b"b"), response(b"c"))) as server:
        async with client() as http:
            await body_of(http, server.url)
            await body_of(http, server.url)
            await http.get(server.url, headers={"connection": "close"})
            await asyncio.sleep(0.05)
        assert server.accepts == 2
        assert server.closed_connections == 2  # the client closed the second one itself


async def test_a_pooled_connection_the_peer_closed_is_not_used() -> None:
    async with RawServer(replying(response(b"a"), keep_alive=False)) as server:
        async with client() as http:
            await body_of(http, server.url)
            await asyncio.sleep(0.05)  # the close reaches the idle connection
            server.answer = replying(response(b"b"))
            assert await body_of(http, server.url) == b"b"
        assert server.accepts == 2
        assert len(server.requests) == 2  # no wasted attempt on the closed connection


async def test_a_stale_pooled_connection_is_retried_once_on_a_fresh_one() -> None:
    async def answer(request: ServerRequest, writer: asyncio.StreamWriter) -> bool:
        if request.connection == 1 and request.number == 2:
            return False  # read the request, then close without a byte: a keep-alive race
        writer.write(response(b"fine"))
        await writer.drain()
        return True

    async with RawServer(answer) as server, client() as http:
        await body_of(http, server.url)
        reply = await http.post(server.url, content=b"again")
        assert reply.content == b"fine"
        assert server.accepts == 2
        assert [r.body for r in server.requests] == [b"", b"again", b"again"]


async def test_a_stale_connection_is_not_retried_with_a_streamed_body() -> None:
    async def answer(request: ServerRequest, writer: asyncio.StreamWriter) -> bool:
        if request.number == 2:
            return False
        writer.write(response(b"fine"))
        await writer.drain()
        return True

    async def parts() -> AsyncIterator[bytes]:
        yield b"once"

    async with RawServer(answer) as server, client() as http:
        await body_of(http, server.url)
        with pytest.raises(httpx.RemoteProtocolError):
            await http.post(server.url, content=parts())
        assert server.accepts == 1


async def test_bytes_on_an_idle_connection_discard_it() -> None:
    async def answer(request: ServerRequest, writer: asyncio.StreamWriter) -> bool:
        writer.write(response(b"a") + (b"HTTP/1.1 200 OK\r\n" if request.connection == 1 else b""))
        await writer.drain()
        return True

    async with RawServer(answer) as server, client() as http:
        assert await body_of(http, server.url) == b"a"
        await asyncio.sleep(0.02)
        assert await body_of(http, server.url) == b"a"
        assert server.accepts == 2


async def test_idle_connections_expire_and_are_capped() -> None:
    async with RawServer(replying(*[response(b"x")] * 6)) as server:
        async with client(keepalive_expiry=0.05) as http:
            await body_of(http, server.url)
            await asyncio.sleep(0.1)
            await body_of(http, server.url)
        assert server.accepts == 2
        server.accepts = 0
        async with client(max_keepalive=1) as http:
            async with http.stream("GET", server.url) as a, http.stream("GET", server.url) as b:
                await a.aread()
                await b.aread()
            await asyncio.sleep(0.02)
            assert server.closed_connections == 3  # the first client's two, one over the cap
            await body_of(http, server.url)
            await body_of(http, server.url)
        assert server.accepts == 2


async def test_a_response_closed_early_mid_chunk_does_not_lend_its_connection() -> None:
    stalled = asyncio.Event()

    async def answer(request: ServerRequest, writer: asyncio.StreamWriter) -> bool:
        if request.connection == 1:
            writer.write(response(EVENT * 3, framing="chunked")[:-30])
            await writer.drain()
            await stalled.wait()
        writer.write(response(b"second"))
        await writer.drain()
        return True

    async with RawServer(answer) as server, client() as http:
        async with http.stream("GET", server.url) as reply:
            async for _ in reply.aiter_bytes():
                break
        assert await body_of(http, server.url) == b"second"
        assert server.accepts == 2


async def test_a_response_closed_once_its_end_arrived_keeps_its_connection() -> None:
    async with RawServer(replying(response(EVENT, framing="chunked"), response(b"b"))) as server:
        async with client() as http:
            async with http.stream("GET", server.url) as reply:
                assert reply.status_code == 200
                await asyncio.sleep(0.02)  # the whole body is in, none of it read
            assert await body_of(http, server.url) == b"b"
        assert server.accepts == 1


async def read_until_done(http: httpx.AsyncClient, url: str) -> bytes:
    """Read as `providers/http.py` does: stop at the last event, before the body's end."""
    received = b""
    async with http.stream("GET", url) as reply:
        async for part in reply.aiter_bytes():
            received += part
            if received.endswith(DONE):
                break
    return received


async def test_a_stream_closed_at_its_last_event_keeps_its_connection() -> None:
    async def answer(request: ServerRequest, writer: asyncio.StreamWriter) -> bool:
        writer.write(CHUNKED_HEAD + chunk(EVENT) + chunk(DONE))
        await writer.drain()
        await asyncio.sleep(0.05)  # the terminator comes after the client stopped reading
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        return True

    async with RawServer(answer) as server, client() as http:
        for _ in range(3):
            assert await read_until_done(http, server.url) == EVENT + DONE
            await asyncio.sleep(0.15)
        assert server.accepts == 1
        assert [r.number for r in server.requests] == [1, 2, 3]


@pytest.mark.parametrize("rest", ["never", "too-much", "past-the-end", "malformed"])
async def test_a_stream_closed_early_whose_end_does_not_come_soon_is_not_reused(
    rest: str,
) -> None:
    async def answer(request: ServerRequest, writer: asyncio.StreamWriter) -> bool:
        writer.write(CHUNKED_HEAD + chunk(EVENT) + chunk(DONE))
        await writer.drain()
        if request.connection == 1:
            await asyncio.sleep(0.05)
            if rest == "too-much":  # over the 64 KiB the transport reads to keep a connection
                writer.write(chunk(b"x" * 70_000) + b"0\r\n\r\n")
            elif rest == "past-the-end":
                writer.write(b"0\r\n\r\nHTTP/1.1 200 OK\r\n")
            elif rest == "malformed":
                writer.write(b"zz\r\n")
            await writer.drain()
        else:
            writer.write(b"0\r\n\r\n")
        return True

    async with RawServer(answer) as server, client(discard_grace=0.4) as http:
        assert await read_until_done(http, server.url) == EVENT + DONE
        await asyncio.sleep(0.2)
        assert server.closed_connections == (rest != "never")  # a quiet server gets its grace
        await asyncio.sleep(0.4)
        assert server.closed_connections == 1
        assert await read_until_done(http, server.url) == EVENT + DONE
        assert server.accepts == 2


async def test_a_read_cancelled_mid_body_closes_the_connection_at_once() -> None:
    async with RawServer(replying(CHUNKED_HEAD + chunk(EVENT))) as server, client() as http:
        reply = await http.send(http.build_request("GET", server.url), stream=True)
        parts = reply.aiter_bytes()
        reader = asyncio.ensure_future(anext(parts))
        assert await reader == EVENT
        reader = asyncio.ensure_future(anext(parts))
        await asyncio.sleep(0.05)  # waiting for the next chunk
        reader.cancel()
        with pytest.raises(asyncio.CancelledError):
            await reader
        await asyncio.sleep(0.05)
        assert server.closed_connections == 1  # though the response was never closed
        await reply.aclose()


async def test_closing_the_client_closes_pooled_connections() -> None:
    async with RawServer(replying(response(b"a"))) as server:
        async with client() as http:
            await body_of(http, server.url)
            assert server.closed_connections == 0
        await asyncio.sleep(0.02)
        assert server.closed_connections == 1


async def test_head_204_and_304_have_no_body_and_keep_the_connection() -> None:
    head = b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n"
    empty = b"HTTP/1.1 204 No Content\r\n\r\n"
    same = b"HTTP/1.1 304 Not Modified\r\ncontent-length: 7\r\n\r\n"
    async with RawServer(replying(head, empty, same, response(b"end"))) as server:
        async with client() as http:
            assert (await http.head(server.url)).content == b""
            assert (await http.get(server.url)).status_code == 204
            assert (await http.get(server.url)).status_code == 304
            assert (await http.get(server.url)).content == b"end"
        assert server.accepts == 1


# Faults, each the exception providers/http.py maps.


async def test_refused_port_is_a_connect_error() -> None:
    async with client() as http:
        with pytest.raises(httpx.ConnectError):
            await http.get(f"http://127.0.0.1:{unused_port()}/")


async def test_an_unresolvable_host_is_a_connect_error() -> None:
    # A resolver that cannot be reached at all makes this a connect timeout instead.
    async with client(timeout=httpx.Timeout(5.0, connect=3.0)) as http:
        with pytest.raises((httpx.ConnectError, httpx.ConnectTimeout)):
            await http.get("http://no-such-host.invalid/")


async def test_a_connect_that_hangs_is_a_connect_timeout() -> None:
    with hanging_address() as (host, port):
        async with client(timeout=httpx.Timeout(5.0, connect=0.2)) as http:
            began = time.monotonic()
            with pytest.raises(httpx.ConnectTimeout):
                await http.get(f"http://{host}:{port}/")
            assert time.monotonic() - began < 1.5


async def test_an_address_that_hangs_does_not_hold_up_the_next(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # As a dual-stack name whose IPv6 route is broken: the next address is tried meanwhile.
    with hanging_address() as dead:
        async with RawServer(replying(response(b"alive"))) as server:
            resolve_as(monkeypatch, [dead, ("127.0.0.1", server.port)])
            async with client(timeout=httpx.Timeout(5.0, connect=2.0)) as http:
                began = time.monotonic()
                assert await body_of(http, f"http://dual.test:{server.port}/") == b"alive"
                assert time.monotonic() - began < 1.0


async def test_a_connect_timeout_without_a_limit_of_ours_is_still_described() -> None:
    # With connect=None only the OS's own limit (ETIMEDOUT) can end a connect.
    request = httpx.Request("GET", "http://upstream.test/")
    error = connect_timeout_error(None, request)
    assert isinstance(error, httpx.ConnectTimeout)
    assert error.request is request
    assert str(error) == "could not connect within the OS limit"
    assert str(connect_timeout_error(2.5, request)) == "could not connect within 2.5 s"


@pytest.mark.parametrize(
    "sent",
    [
        b"",
        b"HTTP/1.1 200 OK\r\ncontent-",
        response(EVENT, framing="chunked")[:-20],  # mid-chunk
        response(EVENT, framing="chunked")[:-5],  # before the last chunk
        response(EVENT)[:-10],  # short of its Content-Length
    ],
    ids=["before-head", "mid-head", "mid-chunk", "before-last-chunk", "short-length"],
)
async def test_peer_closing_early_is_a_remote_protocol_error(sent: bytes) -> None:
    async def answer(request: ServerRequest, writer: asyncio.StreamWriter) -> bool:
        writer.write(sent)
        await writer.drain()
        return False

    async with RawServer(answer) as server, client() as http:
        with pytest.raises(httpx.RemoteProtocolError):
            await body_of(http, server.url)


@pytest.mark.parametrize(
    "sent",
    [response(EVENT * 2, framing="chunked")[:-40], response(EVENT * 2, framing="close")],
    ids=["chunked", "until-close"],  # a reset never ends a body framed by the close
)
async def test_a_reset_mid_body_is_a_read_error(sent: bytes) -> None:
    async def answer(request: ServerRequest, writer: asyncio.StreamWriter) -> bool:
        writer.write(sent)
        await writer.drain()
        await asyncio.sleep(0.05)
        reset(writer)
        return False

    async with RawServer(answer) as server, client() as http:
        with pytest.raises(httpx.ReadError):
            await body_of(http, server.url)


@pytest.mark.parametrize(
    "sent",
    [
        b"HTTP/1.1 200 OK\r\nx-big: " + b"a" * (65 * 1024) + b"\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nx-endless: " + b"a" * (300 * 1024),
        b"SSH-2.0-OpenSSH_9.6\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nnope\r\n",
    ],
    ids=["head-too-big", "head-never-ends", "not-http", "bad-chunk"],
)
async def test_a_malformed_or_oversized_response_is_a_remote_protocol_error(sent: bytes) -> None:
    async def answer(request: ServerRequest, writer: asyncio.StreamWriter) -> bool:
        writer.write(sent)
        await writer.drain()
        await asyncio.sleep(1)
        return False

    async with RawServer(answer) as server, client() as http:
        with pytest.raises(httpx.RemoteProtocolError):
            await body_of(http, server.url)


@pytest.mark.parametrize("stall_after_head", [False, True])
async def test_a_stalled_server_is_a_read_timeout(stall_after_head: bool) -> None:
    async def answer(request: ServerRequest, writer: asyncio.StreamWriter) -> bool:
        if stall_after_head:
            writer.write(response(EVENT * 2, framing="chunked")[:-30])
            await writer.drain()
        await asyncio.sleep(5)
        return False

    async with RawServer(answer) as server, client(timeout=httpx.Timeout(5.0, read=0.2)) as http:
        began = time.monotonic()
        with pytest.raises(httpx.ReadTimeout):
            await body_of(http, server.url)
        assert 0.2 <= time.monotonic() - began < 0.6


async def test_a_steady_stream_slower_in_total_than_the_read_timeout_is_not_cut() -> None:
    async def answer(request: ServerRequest, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
        for _ in range(8):
            await asyncio.sleep(0.06)
            writer.write(b"%x\r\n%b\r\n" % (len(EVENT), EVENT))
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        return True

    async with RawServer(answer) as server, client(timeout=httpx.Timeout(5.0, read=0.1)) as http:
        assert await body_of(http, server.url) == EVENT * 8
        assert await body_of(http, server.url) == EVENT * 8  # the same timer, reused


async def test_a_server_that_never_reads_is_a_write_timeout() -> None:
    limits = httpx.Timeout(5.0, write=0.2)
    async with RawServer(replying(), deaf=True) as server, client(timeout=limits) as http:
        began = time.monotonic()
        with pytest.raises(httpx.WriteTimeout):
            await http.post(server.url, content=b"x" * (64 * 1024 * 1024))
        assert time.monotonic() - began < 1.5


async def test_an_answer_before_the_request_body_was_sent_is_the_outcome() -> None:
    async def answer(request: ServerRequest, writer: asyncio.StreamWriter) -> bool:
        writer.write(response(b"too big", status="413 Content Too Large"))
        await writer.drain()
        await asyncio.sleep(0.05)
        return False  # then close with the body unread: the client's writes fail

    async def parts() -> AsyncIterator[bytes]:
        block = b"x" * 65536
        for _ in range(1024):  # 64 MiB: more than the socket buffers hold
            yield block

    async with RawServer(answer, heads_only=True) as server, client() as http:
        reply = await http.post(server.url, content=parts())
        assert (reply.status_code, reply.content) == (413, b"too big")
        assert server.accepts == 1


async def test_a_large_request_body_respects_back_pressure() -> None:
    body = os.urandom(1024) * 8 * 1024  # 8 MiB

    async def answer(request: ServerRequest, writer: asyncio.StreamWriter) -> bool:
        writer.write(response(hashlib.sha256(request.body).hexdigest().encode()))
        await writer.drain()
        return True

    async with RawServer(answer) as server, client() as http:
        reply = await http.post(server.url, content=body)
        assert reply.text == hashlib.sha256(body).hexdigest()


async def test_unread_body_bytes_are_bounded() -> None:
    size = 32 * 1024 * 1024
    block = os.urandom(64 * 1024)
    finished = asyncio.Event()

    async def answer(request: ServerRequest, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % size)
        for _ in range(size // len(block)):
            writer.write(block)
            await writer.drain()
        finished.set()
        return True

    async with RawServer(answer) as server, client(max_buffer=64 * 1024) as http:
        async with http.stream("GET", server.url) as reply:
            await asyncio.sleep(0.3)  # not reading: the sender must be held back
            assert not finished.is_set()
            total = 0
            async for chunk in reply.aiter_bytes():
                total += len(chunk)
                assert len(chunk) <= (64 + 256) * 1024  # the bound plus one socket read
        assert total == size
        assert finished.is_set()


@pytest.mark.parametrize("part", ["head", "body"])
async def test_a_small_read_buffer_never_stalls_a_response(part: str) -> None:
    # Over max_buffer unread bytes the socket stops being read; bytes still awaited must come.
    head = b"HTTP/1.1 200 OK\r\nx-pad: " + b"a" * 2500 + b"\r\ntransfer-encoding: chunked\r\n\r\n"
    body = chunk(b"hello") + b"1;ext=" + b"e" * 2000 + b"\r\na\r\n0\r\n\r\n"
    whole = head + body
    cut = 2000 if part == "head" else len(head) + body.index(b"\r\na\r\n")

    async def answer(request: ServerRequest, writer: asyncio.StreamWriter) -> bool:
        for piece in (whole[:cut], whole[cut:]):
            writer.write(piece)
            await writer.drain()
            await asyncio.sleep(0.05)
        return True

    limits = httpx.Timeout(5.0, read=1.0)
    async with RawServer(answer) as server, client(max_buffer=1024, timeout=limits) as http:
        assert await body_of(http, server.url) == b"helloa"
        assert await body_of(http, server.url) == b"helloa"
        assert server.accepts == 1


async def test_the_connection_limit_queues_requests_and_times_out() -> None:
    release = asyncio.Event()

    async def answer(request: ServerRequest, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
        await writer.drain()
        await release.wait()
        writer.write(b"1\r\na\r\n0\r\n\r\n")
        await writer.drain()
        return True

    async with RawServer(answer) as server:
        limited = client(max_connections=1, timeout=httpx.Timeout(5.0, pool=0.1))
        async with limited as http:
            async with http.stream("GET", server.url) as first:
                with pytest.raises(httpx.PoolTimeout):
                    await http.get(server.url)
                waiting = asyncio.ensure_future(http.get(server.url, timeout=5.0))
                await asyncio.sleep(0.05)
                assert not waiting.done()
                release.set()
                assert await first.aread() == b"a"
            assert (await waiting).content == b"a"
        assert server.accepts == 1


async def test_a_slot_wake_up_its_waiter_cannot_use_passes_to_the_next() -> None:
    async with RawServer(replying(*[response(b"a", framing="chunked")] * 3)) as server:
        limited = client(max_connections=1, timeout=httpx.Timeout(5.0, pool=1.0))
        async with limited as http:
            async with http.stream("GET", server.url) as first:
                await asyncio.sleep(0.05)  # the whole response is in
                gone = asyncio.ensure_future(http.get(server.url))
                waiting = asyncio.ensure_future(http.get(server.url))
                await asyncio.sleep(0.05)  # both wait for the one connection
                assert await first.aread() == b"a"  # its release wakes the first waiter…
                gone.cancel()  # …which is cancelled before it could run
            assert (await waiting).content == b"a"
            with pytest.raises(asyncio.CancelledError):
                await gone
        assert server.accepts == 1


async def test_a_stale_retry_after_the_transport_closed_opens_nothing() -> None:
    second_sent = asyncio.Event()

    async def answer(request: ServerRequest, writer: asyncio.StreamWriter) -> bool:
        if request.number == 2:
            second_sent.set()
            await asyncio.sleep(5)  # the second request waits on the pooled connection
        writer.write(response(b"ok"))
        await writer.drain()
        return True

    async with RawServer(answer) as server:
        http = client()
        try:
            assert await body_of(http, server.url) == b"ok"
            second = asyncio.ensure_future(http.get(server.url))
            await second_sent.wait()
            await http.aclose()  # closes the pooled connection before a byte of the answer
            with pytest.raises(httpx.ConnectError, match="transport closed"):
                await second
        finally:
            await http.aclose()
        assert server.accepts == 1


async def test_a_connection_made_after_the_transport_closed_is_closed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with RawServer(replying(response(b"late"))) as server:
        resolve_as(monkeypatch, [("127.0.0.1", server.port)], delay=0.1)
        http = client()
        try:
            request = asyncio.ensure_future(http.get(f"http://upstream.test:{server.port}/"))
            await asyncio.sleep(0.02)  # resolving the name
            await http.aclose()
            with pytest.raises(httpx.ConnectError, match="transport closed"):
                await request
        finally:
            await http.aclose()
        await asyncio.sleep(0.05)
        assert server.closed_connections == server.accepts == 1


async def test_a_ipv6_literal_host() -> None:
    if not socket.has_ipv6:
        pytest.skip("no IPv6")
    try:
        probe = socket.socket(socket.AF_INET6)
        probe.bind(("::1", 0))
        probe.close()
    except OSError:
        pytest.skip("no IPv6 loopback")
    async with RawServer(replying(response(b"six")), host="::1") as server, client() as http:
        assert await body_of(http, server.url) == b"six"
        assert server.requests[0].headers["host"] == f"[::1]:{server.port}"


# TLS against a certificate made for the test.


def _certificates(tmp: Path) -> tuple[Path, Path, Path]:
    """A CA (written to ca.pem) and a server certificate it signed for localhost and 127.0.0.1."""
    now = datetime.datetime.now(datetime.UTC)

    def build(
        subject: str,
        key: ec.EllipticCurvePrivateKey,
        issuer: x509.Name,
        signer: ec.EllipticCurvePrivateKey,
        ca: bool,
    ) -> x509.Certificate:
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
            .issuer_name(issuer)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if ca:
            builder = builder.add_extension(
                x509.KeyUsage(False, False, False, False, False, True, True, False, False),
                critical=True,
            )
        else:
            builder = builder.add_extension(
                x509.SubjectAlternativeName(
                    [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
                ),
                critical=False,
            )
        return builder.sign(signer, hashes.SHA256())

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "holdback test CA")])
    ca_cert = build("holdback test CA", ca_key, ca_name, ca_key, True)
    key = ec.generate_private_key(ec.SECP256R1())
    cert = build("localhost", key, ca_name, ca_key, False)
    (tmp / "ca.pem").write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    (tmp / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (tmp / "key.pem").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return tmp / "ca.pem", tmp / "cert.pem", tmp / "key.pem"


@pytest.fixture
def tls_server_context(tmp_path: Path) -> tuple[ssl.SSLContext, Path, list[str | None]]:
    ca, cert, key = _certificates(tmp_path)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    names: list[str | None] = []
    context.sni_callback = lambda sock, name, ctx: names.append(name)  # type: ignore[assignment,misc]
    return context, ca, names


async def test_tls_with_sni_and_keep_alive(
    tls_server_context: tuple[ssl.SSLContext, Path, list[str | None]],
) -> None:
    context, ca, names = tls_server_context
    answer = replying(response(b"secure"), response(b"again", framing="chunked"))
    async with RawServer(answer, tls=context) as server, client(verify=str(ca)) as http:
        url = f"https://localhost:{server.port}/"
        assert await body_of(http, url) == b"secure"
        assert await body_of(http, url) == b"again"
        assert names == ["localhost"]
        assert server.accepts == 1


async def test_tls_to_an_ip_literal_with_a_context(
    tls_server_context: tuple[ssl.SSLContext, Path, list[str | None]],
) -> None:
    context, ca, names = tls_server_context
    verify = ssl.create_default_context(cafile=ca)
    async with RawServer(replying(response(b"ip")), tls=context) as server:
        async with client(verify=verify) as http:
            assert await body_of(http, server.url) == b"ip"
        assert names == [None]  # no SNI for an address


async def test_tls_with_an_unknown_certificate_is_a_connect_error(
    tls_server_context: tuple[ssl.SSLContext, Path, list[str | None]],
) -> None:
    context, _, _ = tls_server_context
    async with RawServer(replying(response(b"no")), tls=context) as server, client() as http:
        with pytest.raises(httpx.ConnectError):
            await http.get(f"https://localhost:{server.port}/")
        assert server.requests == []


# Choosing the transport.


@pytest.mark.parametrize(
    ("variable", "proxied"),
    [
        (None, False),
        ("HTTPS_PROXY", True),
        ("http_proxy", True),
        ("all_proxy", True),
        ("NO_PROXY", False),
    ],
)
async def test_proxies_keep_httpx_own_transport(
    monkeypatch: pytest.MonkeyPatch, variable: str | None, proxied: bool
) -> None:
    for name in list(os.environ):
        if name.lower().endswith("_proxy"):
            monkeypatch.delenv(name)
    if variable is not None:
        monkeypatch.setenv(variable, "http://proxy.invalid:3128")
    assert proxies_configured() is proxied
    async with upstream_client() as http:
        transport = http._transport
        assert isinstance(transport, StreamingTransport) is not proxied


# The providers' capture replays, through this transport.


def streaming_provider(
    kind: str, url: str, settings: StreamSettings, http: httpx.AsyncClient
) -> OpenAIChatProvider | AnthropicProvider:
    if kind == "openai":
        return OpenAIChatProvider(
            "gpt-4o", base_url=url + "/v1", api_key="sk-test", settings=settings, client=http
        )
    return AnthropicProvider(
        "claude-sonnet-4-5", base_url=url, api_key="sk-ant-test", settings=settings, client=http
    )


@pytest.mark.parametrize("seed", [None, 1, 2])
@pytest.mark.parametrize(
    ("kind", "name"),
    [("openai", name) for name in test_openai_chat.CAPTURES]
    + [("anthropic", name) for name in test_anthropic.EXPECTED],
)
async def test_capture_replay_through_streaming_transport(
    upstream: FakeUpstream, fast: StreamSettings, kind: str, name: str, seed: int | None
) -> None:
    folder = "openai_chat" if kind == "openai" else "anthropic"
    body = capture(f"{folder}/{name}")
    upstream.enqueue(Reply(chunks=[body] if seed is None else rechunk(body, random.Random(seed))))
    async with client() as http:
        events = await collect(
            streaming_provider(kind, upstream.url, fast, http), test_openai_chat.REQUEST
        )
    if kind == "openai":
        test_openai_chat.expect(name, events)
    else:
        assert events == test_anthropic.EXPECTED[name]


async def test_providers_reuse_connections_through_streaming_transport(
    fast: StreamSettings,
) -> None:
    body = capture("openai_chat/openai_python_content_logprobs.sse")
    async with RawServer(replying(*[response(body, framing="chunked")] * 3)) as server:
        async with client() as http:
            for _ in range(3):
                provider = streaming_provider("openai", server.url, fast, http)
                events = await collect(provider, test_openai_chat.REQUEST)
                test_openai_chat.expect("openai_python_content_logprobs.sse", events)
        assert server.accepts == 1
