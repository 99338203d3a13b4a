"""The upstream client (`providers/transport.py`, aiohttp) over real loopback sockets: every
framing and split, keep-alive reuse (streams left at their last event included), stale
connections, cuts, resets, stalls, early answers, flow control, closing, address fallback and
TLS, each ending in the named `holdback.errors` error `providers/http.py` maps; and the
providers' capture replays through it."""

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
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from holdback.errors import (
    UpstreamConnectTimeoutError,
    UpstreamDisconnectedError,
    UpstreamError,
    UpstreamFramingError,
    UpstreamHeadTimeoutError,
    UpstreamHeadTooLargeError,
    UpstreamTimeoutError,
    UpstreamTruncatedBodyError,
    UpstreamUnreachableError,
)
from holdback.providers.anthropic import AnthropicProvider
from holdback.providers.http import StreamSettings
from holdback.providers.openai_chat import OpenAIChatProvider
from holdback.providers.transport import UpstreamClient, upstream_client
from tests.providers import test_anthropic, test_openai_chat
from tests.providers.fakeserver import FakeUpstream, Framing, Reply, rechunk, unused_port
from tests.providers.rawserver import RawServer, ServerRequest, replying, reset, response
from tests.providers.streams import capture, collect

pytestmark = pytest.mark.anyio

EVENT = b'data: {"choices":[{"index":0,"delta":{"content":"Hello"}}]}\n\n'
DONE = b"data: [DONE]\n\n"
CHUNKED_HEAD = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"


def client(**options: object) -> UpstreamClient:
    return UpstreamClient(**options)  # type: ignore[arg-type]


async def body_of(
    http: UpstreamClient,
    url: str,
    method: str = "GET",
    body: bytes | None = None,
    *,
    read: float | None = 5.0,
    head: float | None = 5.0,
    connect: float | None = 5.0,
) -> bytes:
    reply = await http.request(method, url, body=body, read=read, head=head, connect=connect)
    try:
        received = b""
        while data := await reply.read():
            received += data
        return received
    finally:
        await reply.aclose()


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
    upstream.enqueue(Reply(chunks=[EVENT] * 5, framing=framing, chunk_delay=0.01))
    async with client() as http:
        reply = await http.request("GET", upstream.url + "/s?x=1", read=5.0, head=5.0)
        assert reply.status == 200
        assert reply.headers["content-type"] == "text/event-stream; charset=utf-8"
        assert reply.reason == "OK"
        received = []
        while data := await reply.read():
            received.append(data)
        await reply.aclose()
    assert b"".join(received) == EVENT * 5
    assert len(received) >= 2  # handed out as it arrived, not at the end
    [sent] = upstream.requests
    assert (sent.method, sent.path) == ("GET", "/s?x=1")
    assert sent.headers["host"] == f"127.0.0.1:{upstream.port}"
    assert sent.headers["accept-encoding"] == "identity"  # no compressed body is asked for


async def test_request_body_and_headers_arrive_once(upstream: FakeUpstream) -> None:
    upstream.enqueue(Reply(chunks=[b"ok"], framing="length"))
    async with client() as http:
        reply = await http.request(
            "POST", upstream.url + "/p", body=b'{"a": 1}', headers={"X-Key": "v"}
        )
        assert await reply.read_limited(100) == b"ok"
        await reply.aclose()
    [sent] = upstream.requests
    assert sent.body == b'{"a": 1}'
    assert sent.headers["x-key"] == "v"
    assert sent.headers["content-length"] == "8"
    assert "cookie" not in sent.headers


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


async def test_no_reuse_when_the_server_says_close() -> None:
    closing = response(b"a", headers=("connection: close",))
    async with RawServer(replying(closing, response(b"b"))) as server:
        async with client() as http:
            await body_of(http, server.url)
            await body_of(http, server.url)
        assert server.accepts == 2


async def test_a_pooled_connection_the_peer_closed_is_not_used() -> None:
    async with RawServer(replying(response(b"a"), keep_alive=False)) as server:
        async with client() as http:
            await body_of(http, server.url)
            await asyncio.sleep(0.05)  # the close reaches the idle connection
            server.answer = replying(response(b"b"))
            assert await body_of(http, server.url, "POST", b"x") == b"b"
        assert server.accepts == 2


async def test_a_stale_pooled_connection_is_sent_again_once_at_once() -> None:
    async def answer(request: ServerRequest, writer: asyncio.StreamWriter) -> bool:
        if request.connection == 1 and request.number == 2:
            return False  # read the request, then close without a byte: a keep-alive race
        writer.write(response(b"fine"))
        await writer.drain()
        return True

    async with RawServer(answer) as server, client() as http:
        await body_of(http, server.url)
        began = time.monotonic()
        assert await body_of(http, server.url, "POST", b"again") == b"fine"
        assert time.monotonic() - began < 0.5  # no backoff: the pump's retry is not needed
        assert server.accepts == 2
        assert [r.body for r in server.requests] == [b"", b"again", b"again"]


async def test_a_fresh_connection_closed_before_the_head_is_a_disconnect() -> None:
    async def answer(request: ServerRequest, writer: asyncio.StreamWriter) -> bool:
        return False

    async with RawServer(answer) as server, client() as http:
        with pytest.raises(UpstreamDisconnectedError, match="before a response head"):
            await body_of(http, server.url, "POST", b"once")
        assert len(server.requests) == 1  # not sent twice: the connection was new


async def test_bytes_on_an_idle_connection_do_not_spoil_the_next_response() -> None:
    async def answer(request: ServerRequest, writer: asyncio.StreamWriter) -> bool:
        writer.write(response(b"a") + (b"HTTP/1.1 200 OK\r\n" if request.connection == 1 else b""))
        await writer.drain()
        return True

    async with RawServer(answer) as server, client() as http:
        assert await body_of(http, server.url) == b"a"
        await asyncio.sleep(0.02)
        assert await body_of(http, server.url) == b"a"


async def test_idle_connections_expire() -> None:
    async with RawServer(replying(*[response(b"x")] * 3)) as server:
        async with client(keepalive_expiry=0.05) as http:
            await body_of(http, server.url)
            await asyncio.sleep(1.2)  # aiohttp sweeps idle connections about once a second
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

    async with RawServer(answer) as server, client(discard_grace=0.1) as http:
        reply = await http.request("GET", server.url)
        assert await reply.read()
        await reply.aclose()
        assert await body_of(http, server.url) == b"second"
        assert server.accepts == 2


async def test_a_response_closed_once_its_end_arrived_keeps_its_connection() -> None:
    async with RawServer(replying(response(EVENT, framing="chunked"), response(b"b"))) as server:
        async with client() as http:
            reply = await http.request("GET", server.url)
            assert reply.status == 200
            await asyncio.sleep(0.02)  # the whole body is in, none of it read
            await reply.aclose()
            assert await body_of(http, server.url) == b"b"
        assert server.accepts == 1


async def read_until_done(http: UpstreamClient, url: str) -> bytes:
    """Read as `providers/http.py` does: stop at the last event, before the body's end."""
    received = b""
    reply = await http.request("GET", url)
    try:
        while part := await reply.read():
            received += part
            if received.endswith(DONE):
                break
    finally:
        await reply.aclose()
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


@pytest.mark.parametrize("rest", ["never", "too-much", "malformed"])
async def test_a_stream_closed_early_whose_end_does_not_come_soon_is_not_reused(
    rest: str,
) -> None:
    async def answer(request: ServerRequest, writer: asyncio.StreamWriter) -> bool:
        writer.write(CHUNKED_HEAD + chunk(EVENT) + chunk(DONE))
        await writer.drain()
        if request.connection == 1:
            await asyncio.sleep(0.05)
            if rest == "too-much":  # over the 64 KiB the client reads to keep a connection
                writer.write(chunk(b"x" * 70_000))
            elif rest == "malformed":
                writer.write(b"zz\r\n")
            await writer.drain()
        else:
            writer.write(b"0\r\n\r\n")
        return True

    async with RawServer(answer) as server, client(discard_grace=0.4) as http:
        assert await read_until_done(http, server.url) == EVENT + DONE
        await asyncio.sleep(0.6)
        assert server.closed_connections == 1
        assert await read_until_done(http, server.url) == EVENT + DONE
        assert server.accepts == 2


async def test_a_read_cancelled_mid_body_closes_the_connection() -> None:
    async with RawServer(replying(CHUNKED_HEAD + chunk(EVENT))) as server, client() as http:
        reply = await http.request("GET", server.url)
        assert await reply.read() == EVENT
        reader = asyncio.ensure_future(reply.read())
        await asyncio.sleep(0.05)  # waiting for the next chunk
        reader.cancel()
        with pytest.raises(asyncio.CancelledError):
            await reader
        await reply.aclose()
        await asyncio.sleep(0.05)
        assert server.closed_connections == 1


async def test_closing_the_client_closes_pooled_connections() -> None:
    async with RawServer(replying(response(b"a"))) as server:
        async with client() as http:
            await body_of(http, server.url)
            assert server.closed_connections == 0
        await asyncio.sleep(0.05)
        assert server.closed_connections == 1


async def test_a_request_after_closing_is_refused() -> None:
    http = client()
    await http.aclose()
    with pytest.raises(UpstreamUnreachableError, match="closed"):
        await http.request("GET", "http://127.0.0.1:9/")


async def test_204_and_304_have_no_body_and_keep_the_connection() -> None:
    empty = b"HTTP/1.1 204 No Content\r\n\r\n"
    same = b"HTTP/1.1 304 Not Modified\r\ncontent-length: 7\r\n\r\n"
    async with RawServer(replying(empty, same, response(b"end"))) as server:
        async with client() as http:
            assert await body_of(http, server.url) == b""
            assert await body_of(http, server.url) == b""
            assert await body_of(http, server.url) == b"end"
        assert server.accepts == 1


# Faults, each a named error.


async def test_refused_port_is_unreachable() -> None:
    async with client() as http:
        with pytest.raises(UpstreamUnreachableError, match="connection refused"):
            await http.request("GET", f"http://127.0.0.1:{unused_port()}/")


async def test_an_unresolvable_host_is_unreachable() -> None:
    # A resolver that cannot be reached at all makes this a connect timeout instead.
    async with client() as http:
        with pytest.raises(UpstreamUnreachableError):
            await http.request("GET", "http://no-such-host.invalid/", connect=3.0)


async def test_a_connect_that_hangs_is_a_connect_timeout() -> None:
    with hanging_address() as (host, port):
        async with client() as http:
            began = time.monotonic()
            with pytest.raises(UpstreamConnectTimeoutError):
                await http.request("GET", f"http://{host}:{port}/", connect=0.2)
            assert time.monotonic() - began < 1.5


async def test_an_address_that_hangs_does_not_hold_up_the_next(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # As a dual-stack name whose IPv6 route is broken: the next address is tried meanwhile.
    with hanging_address() as dead:
        async with RawServer(replying(response(b"alive"))) as server:
            resolve_as(monkeypatch, [dead, ("127.0.0.1", server.port)])
            async with client() as http:
                began = time.monotonic()
                url = f"http://dual.test:{server.port}/"
                assert await body_of(http, url, connect=2.0) == b"alive"
                assert time.monotonic() - began < 1.0


@pytest.mark.parametrize(
    ("sent", "error"),
    [
        (b"", UpstreamDisconnectedError),
        (b"HTTP/1.1 200 OK\r\ncontent-", UpstreamDisconnectedError),
        (response(EVENT, framing="chunked")[:-20], UpstreamTruncatedBodyError),
        (response(EVENT, framing="chunked")[:-5], UpstreamTruncatedBodyError),
        (response(EVENT)[:-10], UpstreamTruncatedBodyError),
    ],
    ids=["before-head", "mid-head", "mid-chunk", "before-last-chunk", "short-length"],
)
async def test_peer_closing_early_is_a_disconnect(sent: bytes, error: type[UpstreamError]) -> None:
    async def answer(request: ServerRequest, writer: asyncio.StreamWriter) -> bool:
        writer.write(sent)
        await writer.drain()
        return False

    async with RawServer(answer) as server, client() as http:
        with pytest.raises(error):
            await body_of(http, server.url)


async def test_a_reset_mid_body_is_a_disconnect() -> None:
    # A reset ending a body framed by the close reads as its end in aiohttp; the event
    # stream above it then reports the missing terminal event.
    async def answer(request: ServerRequest, writer: asyncio.StreamWriter) -> bool:
        writer.write(response(EVENT * 2, framing="chunked")[:-40])
        await writer.drain()
        await asyncio.sleep(0.05)
        reset(writer)
        return False

    async with RawServer(answer) as server, client() as http:
        with pytest.raises(UpstreamDisconnectedError):
            await body_of(http, server.url)


@pytest.mark.parametrize(
    ("sent", "error"),
    [
        (
            b"HTTP/1.1 200 OK\r\nx-big: " + b"a" * (65 * 1024) + b"\r\n\r\n",
            UpstreamHeadTooLargeError,
        ),
        (b"HTTP/1.1 200 OK\r\nx-endless: " + b"a" * (300 * 1024), UpstreamHeadTooLargeError),
        (b"SSH-2.0-OpenSSH_9.6\r\n\r\n", UpstreamFramingError),
        (b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nnope\r\n", UpstreamFramingError),
    ],
    ids=["head-too-big", "head-never-ends", "not-http", "bad-chunk"],
)
async def test_a_malformed_or_oversized_response_is_a_named_error(
    sent: bytes, error: type[UpstreamError]
) -> None:
    async def answer(request: ServerRequest, writer: asyncio.StreamWriter) -> bool:
        writer.write(sent)
        await writer.drain()
        await asyncio.sleep(1)
        return False

    async with RawServer(answer) as server, client() as http:
        with pytest.raises(error):
            await body_of(http, server.url)


@pytest.mark.parametrize("stall_after_head", [False, True])
async def test_a_stalled_server_is_a_stall_timeout(stall_after_head: bool) -> None:
    async def answer(request: ServerRequest, writer: asyncio.StreamWriter) -> bool:
        if stall_after_head:
            writer.write(response(EVENT * 2, framing="chunked")[:-30])
            await writer.drain()
        await asyncio.sleep(5)
        return False

    async with RawServer(answer) as server, client() as http:
        began = time.monotonic()
        with pytest.raises(UpstreamTimeoutError):
            await body_of(http, server.url, read=0.2)
        assert 0.2 <= time.monotonic() - began < 0.8


async def test_a_steady_stream_slower_in_total_than_the_read_timeout_is_not_cut() -> None:
    async def answer(request: ServerRequest, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
        for _ in range(8):
            await asyncio.sleep(0.06)
            writer.write(b"%x\r\n%b\r\n" % (len(EVENT), EVENT))
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        return True

    async with RawServer(answer) as server, client() as http:
        assert await body_of(http, server.url, read=0.15) == EVENT * 8
        assert await body_of(http, server.url, read=0.15) == EVENT * 8


async def test_a_server_that_never_reads_is_a_head_timeout() -> None:
    async with RawServer(replying(), deaf=True) as server, client() as http:
        began = time.monotonic()
        with pytest.raises(UpstreamHeadTimeoutError):
            await http.request("POST", server.url, body=b"x" * (64 * 1024 * 1024), head=0.3)
        assert time.monotonic() - began < 1.5


async def test_an_answer_before_the_request_body_was_sent_is_the_outcome() -> None:
    async def answer(request: ServerRequest, writer: asyncio.StreamWriter) -> bool:
        writer.write(response(b"too big", status="413 Content Too Large"))
        await writer.drain()
        await asyncio.sleep(0.05)
        return False  # then close with the body unread: the client's writes fail

    async with RawServer(answer, heads_only=True) as server, client() as http:
        reply = await http.request("POST", server.url, body=b"x" * (16 * 1024 * 1024))
        assert reply.status == 413
        assert await reply.read_limited(100) == b"too big"
        await reply.aclose()
        assert server.accepts == 1


async def test_a_large_request_body_respects_back_pressure() -> None:
    body = os.urandom(1024) * 8 * 1024  # 8 MiB

    async def answer(request: ServerRequest, writer: asyncio.StreamWriter) -> bool:
        writer.write(response(hashlib.sha256(request.body).hexdigest().encode()))
        await writer.drain()
        return True

    async with RawServer(answer) as server, client() as http:
        assert (
            await body_of(http, server.url, "POST", body)
            == hashlib.sha256(body).hexdigest().encode()
        )


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

    async with RawServer(answer) as server, client(read_buffer=64 * 1024) as http:
        reply = await http.request("GET", server.url)
        await asyncio.sleep(0.3)  # not reading: the sender must be held back
        assert not finished.is_set()
        total = 0
        while data := await reply.read():
            total += len(data)
            assert len(data) <= 4 * 64 * 1024 + 256 * 1024  # the bound plus socket reads
        await reply.aclose()
        assert total == size
        assert finished.is_set()


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


async def test_tls_with_an_unknown_certificate_is_unreachable(
    tls_server_context: tuple[ssl.SSLContext, Path, list[str | None]],
) -> None:
    context, _, _ = tls_server_context
    async with RawServer(replying(response(b"no")), tls=context) as server, client() as http:
        with pytest.raises(UpstreamUnreachableError, match="TLS"):
            await http.request("GET", f"https://localhost:{server.port}/")
        assert server.requests == []


async def test_the_app_factory_keeps_its_signature() -> None:
    async with upstream_client(max_keepalive=256) as http:
        assert isinstance(http, UpstreamClient)


# The providers' capture replays, through this client.


def streaming_provider(
    kind: str, url: str, settings: StreamSettings, http: UpstreamClient
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
async def test_capture_replay_through_the_shared_client(
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


async def test_providers_reuse_connections_through_the_shared_client(
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
