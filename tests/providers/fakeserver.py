"""A real loopback HTTP/1.1 server that plays scripted upstream replies, for provider tests.

The rule it keeps: tests talk to upstreams over real sockets on 127.0.0.1, never to a mocked
client. Each request takes the next scripted `Reply` (or a 500 when none is left) and is
recorded whole, so tests can check what was sent. A reply can be streamed in given chunks,
framed with chunked encoding, a Content-Length or a closing connection, slowed, cut off
(the connection drops after some chunks) or stalled (the connection stays open and silent).

The server runs its own event loop in a daemon thread, so sync and async tests can use it.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import threading
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any, Literal

import orjson

Framing = Literal["chunked", "length", "close"]
SSE_HEADERS: Mapping[str, str] = {"content-type": "text/event-stream; charset=utf-8"}


@dataclass(frozen=True)
class Reply:
    """One scripted response."""

    status: int = 200
    chunks: Sequence[bytes] = ()
    headers: Mapping[str, str] = field(default_factory=lambda: dict(SSE_HEADERS))
    framing: Framing = "chunked"
    chunk_delay: float = 0.0
    cut_after: int | None = None  # drop the connection after this many chunks
    stall_after: int | None = None  # go silent (connection open) after this many chunks

    @classmethod
    def sse(cls, body: bytes, **kwargs: Any) -> Reply:
        return cls(chunks=[body], **kwargs)

    @classmethod
    def json(cls, status: int, payload: object, **kwargs: Any) -> Reply:
        headers = {"content-type": "application/json", **kwargs.pop("headers", {})}
        return cls(status=status, chunks=[orjson.dumps(payload)], headers=headers, **kwargs)


@dataclass(frozen=True)
class RecordedRequest:
    """A request as the server received it."""

    method: str
    path: str
    headers: Mapping[str, str]  # lower-cased names
    body: bytes

    def json(self) -> Any:
        return orjson.loads(self.body)


def rechunk(data: bytes, rng: random.Random, max_piece: int = 17) -> list[bytes]:
    """`data` cut at random byte boundaries (inside UTF-8 sequences and CRLFs too)."""
    pieces: list[bytes] = []
    i = 0
    while i < len(data):
        n = rng.randint(1, max_piece)
        pieces.append(data[i : i + n])
        i += n
    return pieces


def unused_port() -> int:
    """A loopback port nobody listens on (connections to it are refused)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def split_random(text: str, rng: random.Random, low: int = 1, high: int = 5) -> list[str]:
    """`text` cut into pieces of `low` to `high` characters, as a model might stream it."""
    pieces: list[str] = []
    i = 0
    while i < len(text):
        n = rng.randint(low, high)
        pieces.append(text[i : i + n])
        i += n
    return pieces


class FakeUpstream:
    """The loopback server. Use as a context manager, or call `start()` and `stop()`."""

    def __init__(self) -> None:
        self.requests: list[RecordedRequest] = []
        self._replies: deque[Reply] = deque()
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._release: asyncio.Event | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> FakeUpstream:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(timeout=10)
        return self

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    def __enter__(self) -> FakeUpstream:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def enqueue(self, *replies: Reply) -> None:
        """Script the next replies, served in order."""
        with self._lock:
            self._replies.extend(replies)

    def reply_for(self, request: RecordedRequest) -> Reply:
        """The reply to one request: the next one scripted. Subclasses compute theirs."""
        with self._lock:
            reply = self._replies.popleft() if self._replies else None
        return reply or Reply(status=500, chunks=[b"no reply scripted"], headers={})

    async def _start(self) -> None:
        self._release = asyncio.Event()
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _stop(self) -> None:
        assert self._server is not None
        assert self._release is not None
        self._release.set()
        self._server.close()
        for writer in list(self._writers):
            writer.close()
        await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            request = await self._read_request(reader)
            if request is None:
                return
            with self._lock:
                self.requests.append(request)
            await self._send(self.reply_for(request), writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self._writers.discard(writer)
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    @staticmethod
    async def _read_request(reader: asyncio.StreamReader) -> RecordedRequest | None:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        method, path, _ = lines[0].split(" ", 2)
        headers: dict[str, str] = {}
        for line in lines[1:]:
            if line:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
        length = int(headers.get("content-length", "0"))
        body = await reader.readexactly(length) if length else b""
        return RecordedRequest(method, path, headers, body)

    async def _send(self, reply: Reply, writer: asyncio.StreamWriter) -> None:
        reason = (
            HTTPStatus(reply.status).phrase if reply.status in HTTPStatus._value2member_map_ else ""
        )
        head = [f"HTTP/1.1 {reply.status} {reason}", "connection: close"]
        head += [f"{k}: {v}" for k, v in reply.headers.items()]
        if reply.framing == "chunked":
            head.append("transfer-encoding: chunked")
        elif reply.framing == "length":
            head.append(f"content-length: {sum(len(c) for c in reply.chunks)}")
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1"))
        await writer.drain()
        for i, chunk in enumerate(reply.chunks):
            if reply.cut_after is not None and i >= reply.cut_after:
                writer.transport.abort()
                return
            if reply.stall_after is not None and i >= reply.stall_after:
                assert self._release is not None
                await self._release.wait()
                return
            if reply.chunk_delay and i:
                await asyncio.sleep(reply.chunk_delay)
            if reply.framing == "chunked":
                writer.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
            else:
                writer.write(chunk)
            await writer.drain()
        if reply.cut_after is not None:
            writer.transport.abort()
            return
        if reply.stall_after is not None:
            assert self._release is not None
            await self._release.wait()
            return
        if reply.framing == "chunked":
            writer.write(b"0\r\n\r\n")
            await writer.drain()


@contextlib.contextmanager
def running() -> Iterator[FakeUpstream]:
    """A started server, stopped on exit."""
    server = FakeUpstream().start()
    try:
        yield server
    finally:
        server.stop()
