"""One upstream connection: an asyncio protocol feeding its sans-I/O parser, and a body stream.

The rules it keeps:

- a received chunk costs one protocol callback and at most one future: the socket stays
  registered with the event loop for the connection's whole life, bytes go straight into the
  parser (`http11.py`), and a reader waits only when nothing is buffered;
- the read timeout is one timer per connection, re-armed lazily, never a cancel scope per read;
- unread body bytes are bounded: over `max_buffer` the socket stops being read until the
  consumer catches up, and never while a reader waits for bytes;
- a body read to the end hands its connection back to the owner (the pool). A body closed
  early whose response can still end cleanly (both sides keep the connection alive, the
  framing marks the end, at most `DISCARD_CAP` bytes more) is read and dropped in the
  background, and its connection handed back when the response ends within the owner's
  `discard_grace` seconds; otherwise it is closed. Streams are routinely closed at their last
  event, just before the chunked terminator: this keeps their connections;
- a read that fails or is cancelled while waiting closes its connection at once.

The pool that owns connections is `pool.py`; `transport.py` sends requests on them.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator
from typing import Protocol

import httpx

from holdback.providers.http11 import ResponseCutShortError, ResponseParser, ResponseViolationError

Key = tuple[str, str, int]  # scheme, host, port

DISCARD_CAP = 64 * 1024


class Owner(Protocol):
    """What a connection needs from the pool that made it."""

    max_buffer: int
    discard_grace: float  # seconds an abandoned body may take to end (`discard_rest`)

    def release(self, conn: Connection) -> None:
        """Take back a connection whose response was read to the end."""

    def forget(self, conn: Connection) -> None:
        """Drop a connection that closed."""

    def free_slot(self, conn: Connection) -> None:
        """Give back the connection-limit slot a closed connection held."""


class StaleConnectionError(Exception):
    """Internal: a pooled connection closed before answering; `error` is what to raise if the
    request cannot be sent again."""

    def __init__(self, error: httpx.TransportError) -> None:
        super().__init__()
        self.error = error


class Connection(asyncio.Protocol):
    """One socket: feeds its parser, wakes its reader, keeps its read timer and flow control."""

    def __init__(self, owner: Owner, key: Key, loop: asyncio.AbstractEventLoop) -> None:
        self.owner = owner
        self.key = key
        self.loop = loop
        self.max_buffer = owner.max_buffer
        self.transport: asyncio.Transport | None = None
        self.parser: ResponseParser | None = None  # None while idle in the pool
        self.waiter: asyncio.Future[bool] | None = None
        self.drain_waiter: asyncio.Future[None] | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.discard_timer: asyncio.TimerHandle | None = None  # set while discarding a body
        self.discard_budget = 0
        self.deadline = math.inf
        self.closed: asyncio.Future[None] = loop.create_future()
        self.error: Exception | None = None
        self.lost = False
        self.keep_alive = True
        self.reused = False
        self.reading_paused = False
        self.writing_paused = False
        self.idle_since = 0.0
        self.slot = False

    # asyncio callbacks.

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        parser = self.parser
        if parser is None:
            # Bytes nobody asked for: nothing that follows them on this connection is trusted.
            self.abort()
            return
        parser.feed(data)
        if self.discard_timer is not None:
            self._discard(len(data))
            return
        self._wake()
        if parser.buffered > self.max_buffer and not self.reading_paused:
            self.reading_paused = True
            assert self.transport is not None
            self.transport.pause_reading()

    def eof_received(self) -> bool | None:
        if self.parser is not None:
            self.parser.feed_eof()
        self._wake()
        return None  # half-open connections are of no use: let the transport close

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self.error = exc
        if self.parser is not None:
            self.parser.feed_eof(failed=exc is not None)
        self._wake()
        if self.drain_waiter is not None and not self.drain_waiter.done():
            self.drain_waiter.set_result(None)
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.discard_timer is not None:
            self.discard_timer.cancel()
            self.discard_timer = None
        self.owner.forget(self)
        if not self.closed.done():
            self.closed.set_result(None)

    def pause_writing(self) -> None:
        self.writing_paused = True

    def resume_writing(self) -> None:
        self.writing_paused = False
        if self.drain_waiter is not None and not self.drain_waiter.done():
            self.drain_waiter.set_result(None)

    # Used by the transport and the response stream.

    def _wake(self) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(True)

    def abort(self) -> None:
        self.owner.free_slot(self)
        if self.transport is not None:
            self.transport.abort()

    def resume_reading(self) -> None:
        self.reading_paused = False
        assert self.transport is not None
        self.transport.resume_reading()

    def arm(self, within: float | None) -> asyncio.Future[bool]:
        """A future that becomes True when bytes, the end of the stream or a loss arrive, or
        False when `within` seconds pass first. Awaited directly: no coroutine per wait."""
        if self.reading_paused:
            # The bytes awaited may be exactly the ones not being read: the head's rest, or a
            # chunk line behind a buffer the consumer has not emptied.
            self.resume_reading()
        loop = self.loop
        waiter: asyncio.Future[bool] = loop.create_future()
        self.waiter = waiter
        if within is None:
            self.deadline = math.inf
        else:
            # A timer already set to fire no later than the new deadline is kept: when it fires
            # it re-arms itself for the deadline then current, so a chunk costs no timer work.
            self.deadline = deadline = loop.time() + within
            timer = self.timer
            if timer is None or timer.when() > deadline:
                if timer is not None:
                    timer.cancel()
                self.timer = loop.call_at(deadline, self._on_timer)
        return waiter

    def _on_timer(self) -> None:
        self.timer = None
        waiter = self.waiter
        if waiter is None or waiter.done():
            return  # not waiting now: the next wait arms a timer again
        if self.deadline > self.loop.time():
            if self.deadline != math.inf:
                self.timer = self.loop.call_at(self.deadline, self._on_timer)
            return
        waiter.set_result(False)

    def discard_rest(self) -> None:
        """Read and drop the rest of a response its reader abandoned, then hand the connection
        back to the owner; close it now if the response cannot end cleanly and soon."""
        parser = self.parser
        assert parser is not None
        assert self.transport is not None
        if (
            not (parser.keep_alive and self.keep_alive and parser.framed)
            or parser.length_left > DISCARD_CAP
            or self.lost
            or self.transport.is_closing()
        ):
            self.abort()
            return
        self.waiter = None
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.discard_budget = DISCARD_CAP
        self.discard_timer = self.loop.call_later(self.owner.discard_grace, self._discard_expired)
        if self.reading_paused:
            self.resume_reading()

    def _discard(self, arrived: int) -> None:
        parser = self.parser
        assert parser is not None
        self.discard_budget -= arrived
        try:
            parser.body()
        except ResponseViolationError:
            self.discard_budget = -1
        if self.discard_budget < 0:
            self.abort()
        elif parser.complete:
            assert self.discard_timer is not None
            self.discard_timer.cancel()
            self.discard_timer = None
            self.owner.release(self)  # pools it only if nothing arrived past the end

    def _discard_expired(self) -> None:
        self.discard_timer = None
        self.abort()

    async def drain(self, within: float | None) -> None:
        while self.writing_paused and not self.lost:
            self.drain_waiter = self.loop.create_future()
            try:
                async with asyncio.timeout(within):
                    await self.drain_waiter
            finally:
                self.drain_waiter = None


class ResponseStream(httpx.AsyncByteStream):
    """The body of one response: what has arrived, without waiting for more than one byte."""

    def __init__(
        self,
        owner: Owner,
        conn: Connection,
        request: httpx.Request,
        read: float | None,
    ) -> None:
        self._owner = owner
        self._conn: Connection | None = conn
        self._request = request
        self.read_timeout = read

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self

    async def __anext__(self) -> bytes:
        conn = self._conn
        if conn is None:
            raise StopAsyncIteration
        parser = conn.parser
        assert parser is not None
        while True:
            try:
                data = parser.body()
            except ResponseViolationError as exc:
                self._conn = None
                conn.abort()
                raise read_failure(conn, exc, self._request) from None
            if data:
                if conn.reading_paused and parser.buffered <= conn.max_buffer // 2:
                    conn.resume_reading()
                return data
            if parser.complete:
                self._conn = None
                self._owner.release(conn)
                raise StopAsyncIteration
            try:
                ready = await conn.arm(self.read_timeout)
            except BaseException:
                # Cancelled or failed mid-wait: the response's state is unknown to the caller,
                # who may never close it; the connection must not wait for that.
                self._conn = None
                conn.abort()
                raise
            if not ready:
                self._conn = None
                conn.abort()
                raise read_timeout_error(self.read_timeout, self._request)

    async def aclose(self) -> None:
        conn = self._conn
        if conn is None:
            return
        self._conn = None
        parser = conn.parser
        assert parser is not None
        try:
            parser.body()  # the rest may have arrived already: then the connection is reusable
        except ResponseViolationError:
            conn.abort()
            return
        if parser.complete:
            self._owner.release(conn)
        else:
            conn.discard_rest()


def read_failure(
    conn: Connection, exc: ResponseViolationError, request: httpx.Request
) -> httpx.TransportError:
    if isinstance(exc, ResponseCutShortError) and conn.error is not None:
        return httpx.ReadError(
            f"connection failed while reading the response ({type(conn.error).__name__})",
            request=request,
        )
    return httpx.RemoteProtocolError(str(exc), request=request)


def seconds(timeout: float | None) -> str:
    """A timeout, for a message. None (no limit of ours) means the OS's own limit ran out."""
    return "the OS limit" if timeout is None else f"{timeout:g} s"


def read_timeout_error(timeout: float | None, request: httpx.Request) -> httpx.ReadTimeout:
    return httpx.ReadTimeout(f"no data from the server for {seconds(timeout)}", request=request)


def connect_timeout_error(timeout: float | None, request: httpx.Request) -> httpx.ConnectTimeout:
    return httpx.ConnectTimeout(f"could not connect within {seconds(timeout)}", request=request)
