"""The connections a `StreamingTransport` keeps: idle ones per (scheme, host, port), live ones,
and the optional limit on how many may be open at once.

The rules it keeps:

- a connection is pooled only when its response was read to the end, both sides keep it alive,
  nothing arrived past the response, and the pool is open. The most recently used is handed out
  first; one idle for `keepalive_expiry` seconds, or beyond `max_keepalive`, is closed;
- once closed, the pool closes every connection it has and every one handed back or made later;
- with `max_connections`, a connection holds a slot from before it connects until it closes.
  A request waits for a slot up to the pool timeout, in arrival order; it takes over an idle
  connection to its own host, or closes the oldest idle one. A wake-up whose waiter left
  (cancelled or timed out) before using it passes to the next waiter, so none is lost.

One connection is `connection.py`.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict, deque

import httpx

from holdback.providers.connection import Connection, Key, seconds


def closed_error(request: httpx.Request) -> httpx.ConnectError:
    return httpx.ConnectError("transport closed", request=request)


class Pool:
    """Idle and live connections, and the slots of the connection limit."""

    def __init__(
        self,
        *,
        max_connections: int | None,
        max_keepalive: int,
        keepalive_expiry: float | None,
        max_buffer: int,
        discard_grace: float,
    ) -> None:
        self.max_buffer = max_buffer
        self.discard_grace = discard_grace
        self.closed = False
        self._max_connections = max_connections
        self._max_keepalive = max_keepalive
        self._keepalive_expiry = keepalive_expiry
        self._idle: dict[Key, list[Connection]] = {}
        self._idle_order: OrderedDict[Connection, None] = OrderedDict()  # oldest first
        self._live: set[Connection] = set()
        self._slots_used = 0
        self._slot_waiters: deque[asyncio.Future[None]] = deque()

    @property
    def limited(self) -> bool:
        return self._max_connections is not None

    def add(self, conn: Connection) -> bool:
        """Count a connection just made; False (and the connection closed) if the pool closed
        while it was being made."""
        conn.slot = self.limited
        if self.closed:
            conn.abort()
            return False
        self._live.add(conn)
        return True

    async def close(self) -> None:
        self.closed = True
        connections = list(self._live)
        self._idle.clear()
        self._idle_order.clear()
        for conn in connections:
            conn.abort()
        while self._slot_waiters:  # each finds the pool closed
            waiter = self._slot_waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
        pending = [conn.closed for conn in connections if not conn.closed.done()]
        if pending:
            await asyncio.wait(pending, timeout=1.0)

    def take(self, key: Key) -> Connection | None:
        """The most recently used idle connection to `key` still fit for a request, if any."""
        idle = self._idle.get(key)
        if not idle:
            return None
        now = asyncio.get_running_loop().time()
        expiry = self._keepalive_expiry
        conn: Connection | None = None
        while idle:
            candidate = idle.pop()  # the most recently used: the least likely to be stale
            del self._idle_order[candidate]
            assert candidate.transport is not None
            if candidate.transport.is_closing() or (
                expiry is not None and now - candidate.idle_since >= expiry
            ):
                candidate.abort()
                continue
            conn = candidate
            break
        if not idle:
            del self._idle[key]
        return conn

    def release(self, conn: Connection) -> None:
        """A response was read to its end: pool the connection if both sides keep it alive."""
        parser = conn.parser
        conn.parser = None
        transport = conn.transport
        assert parser is not None
        assert transport is not None
        if (
            self.closed
            or not (parser.reusable and conn.keep_alive)
            or conn.lost
            or transport.is_closing()
            or self._max_keepalive <= 0
        ):
            conn.abort()
            return
        if conn.timer is not None:
            conn.timer.cancel()
            conn.timer = None
        conn.waiter = None
        if conn.reading_paused:
            conn.resume_reading()
        now = conn.loop.time()
        conn.reused = True
        conn.idle_since = now
        self._idle.setdefault(conn.key, []).append(conn)
        self._idle_order[conn] = None
        order = self._idle_order
        expiry = self._keepalive_expiry
        while order:
            oldest = next(iter(order))
            if len(order) <= self._max_keepalive and (
                expiry is None or now - oldest.idle_since < expiry
            ):
                break
            self._unidle(oldest)
            oldest.abort()
        if self._slot_waiters and self._idle_order:
            self._wake_slot_waiter()  # a waiter for another host may take an idle slot over

    def _unidle(self, conn: Connection) -> None:
        if conn in self._idle_order:
            del self._idle_order[conn]
            idle = self._idle[conn.key]
            idle.remove(conn)
            if not idle:
                del self._idle[conn.key]

    def forget(self, conn: Connection) -> None:
        """The connection is gone (called from `connection_lost`)."""
        self._unidle(conn)
        self.free_slot(conn)
        self._live.discard(conn)

    # The optional connection limit: a slot is held from connecting until the connection goes.

    async def acquire_slot(
        self, key: Key | None, within: float | None, request: httpx.Request
    ) -> Connection | None:
        """A slot for a new connection (None), or an idle connection to `key` found meanwhile."""
        assert self._max_connections is not None
        try:
            async with asyncio.timeout(within):
                while self._slots_used >= self._max_connections and not self.closed:
                    idle = self.take(key) if key is not None else None
                    if idle is not None:
                        return idle
                    if self._idle_order:
                        oldest = next(iter(self._idle_order))
                        self._unidle(oldest)
                        oldest.abort()
                        continue
                    waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
                    self._slot_waiters.append(waiter)
                    try:
                        await waiter
                    except BaseException:
                        if waiter.done() and not waiter.cancelled():
                            self._wake_slot_waiter()  # woken, but leaving without the slot
                        raise
                    finally:
                        if waiter in self._slot_waiters:
                            self._slot_waiters.remove(waiter)
        except TimeoutError:
            raise httpx.PoolTimeout(
                f"no connection became free within {seconds(within)}", request=request
            ) from None
        if self.closed:
            raise closed_error(request)
        self._slots_used += 1
        return None

    def slot_failed(self) -> None:
        """Give back the slot of a connection that could not be made."""
        if self._max_connections is not None:
            self._slots_used -= 1
            self._wake_slot_waiter()

    def free_slot(self, conn: Connection) -> None:
        if conn.slot:
            conn.slot = False
            self._slots_used -= 1
            self._wake_slot_waiter()

    def _wake_slot_waiter(self) -> None:
        while self._slot_waiters:
            waiter = self._slot_waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
