"""A loopback HTTP/1.1 server on the test's own event loop that answers with raw bytes.

The rule it keeps: transport tests talk to a real socket, and each test writes exactly the
bytes (and the pauses, closes and resets) it means to test, keep-alive included. Connections
are counted, requests are recorded whole (chunked request bodies decoded), and `stop()` cancels
whatever the answers were still doing, so nothing outlives the test.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import struct
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class ServerRequest:
    method: str
    target: str
    headers: dict[str, str]  # lower-cased names
    body: bytes
    connection: int  # which accepted connection (1, 2, …) carried it
    number: int  # which request on that connection (1, 2, …)


# An answer writes the response; it returns True to read another request on the connection.
Answer = Callable[[ServerRequest, asyncio.StreamWriter], Awaitable[bool]]


async def read_request(
    reader: asyncio.StreamReader, connection: int, number: int, *, body: bool = True
) -> ServerRequest | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    lines = head.decode("latin-1").split("\r\n")
    method, target, _ = lines[0].split(" ", 2)
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    content = b""
    if not body:
        pass
    elif "chunked" in headers.get("transfer-encoding", ""):
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            content += (await reader.readexactly(size + 2))[:-2]
            if not size:
                break
    elif headers.get("content-length"):
        content = await reader.readexactly(int(headers["content-length"]))
    return ServerRequest(method, target, headers, content, connection, number)


def reset(writer: asyncio.StreamWriter) -> None:
    """Drop the connection with a TCP reset instead of a FIN."""
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


@dataclass
class RawServer:
    answer: Answer
    host: str = "127.0.0.1"
    tls: ssl.SSLContext | None = None
    deaf: bool = False  # accept connections, then never read from them
    heads_only: bool = False  # answer after each request head, leaving its body unread
    accepts: int = 0
    requests: list[ServerRequest] = field(default_factory=list)
    closed_connections: int = 0
    _server: asyncio.Server | None = None
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    @property
    def port(self) -> int:
        assert self._server is not None
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'https' if self.tls else 'http'}://{host}:{self.port}"

    async def __aenter__(self) -> RawServer:
        self._server = await asyncio.start_server(self._handle, self.host, 0, ssl=self.tls)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            await task
        await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self.accepts += 1
        connection = self.accepts
        try:
            if self.deaf:
                await asyncio.Event().wait()
            number = 0
            while True:
                number += 1
                request = await read_request(reader, connection, number, body=not self.heads_only)
                if request is None:
                    break
                self.requests.append(request)
                if not await self.answer(request, writer):
                    break
        except (ConnectionError, ssl.SSLError):
            pass
        except asyncio.CancelledError:
            pass  # stopped by the test's end; asyncio would log a cancelled handler as a failure
        finally:
            self.closed_connections += 1
            self._tasks.discard(task)
            writer.transport.abort()


def response(
    body: bytes = b"",
    *,
    status: str = "200 OK",
    headers: tuple[str, ...] = (),
    framing: str = "length",
) -> bytes:
    """A whole response: `framing` is `length`, `chunked` (one chunk per body) or `close`."""
    head = [f"HTTP/1.1 {status}", *headers]
    if framing == "length":
        head.append(f"content-length: {len(body)}")
    elif framing == "chunked":
        head.append("transfer-encoding: chunked")
        body = (b"%x\r\n%b\r\n" % (len(body), body) if body else b"") + b"0\r\n\r\n"
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body


def replying(*payloads: bytes, keep_alive: bool = True) -> Answer:
    """An answer that writes the next payload for each request, whole."""
    queue = list(payloads)

    async def answer(request: ServerRequest, writer: asyncio.StreamWriter) -> bool:
        writer.write(queue.pop(0) if queue else response(b"none left", status="500 Oops"))
        await writer.drain()
        return keep_alive

    return answer
