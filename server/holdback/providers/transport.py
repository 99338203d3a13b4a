"""`StreamingTransport`: a lean HTTP/1.1 transport for httpx, for many long, slow event streams.

The rules it keeps:

- every failure is an httpx exception carrying the request, mapped as httpx's own transport
  maps it, because `providers/http.py` decides retries by its type: refused, unreachable,
  unresolvable or a failed TLS handshake → `ConnectError`; too slow to connect →
  `ConnectTimeout`; the peer closing before the head or inside a framed body, or a malformed
  response → `RemoteProtocolError`; an OS error while reading → `ReadError`; nothing for `read`
  seconds while a head or body byte is awaited → `ReadTimeout`; writing → `WriteError` /
  `WriteTimeout`;
- a connection goes back to the pool only when its response was read to the end and both sides
  keep it alive; a response closed early closes its connection. A request whose pooled
  connection turns out stale (it closed before a single response byte) is sent once more on a
  fresh connection, if its body can be sent again;
- no proxies: the caller picks httpx's own transport when one is configured
  (`proxies_configured()`).

One connection, its read path and its body stream are `connection.py`.

Error messages name what failed, never a header, a body byte or a key.
"""

from __future__ import annotations

import asyncio
import os
import ssl
import urllib.request
from collections import OrderedDict, deque
from collections.abc import Mapping

import httpx

from holdback.providers.connection import (
    Connection,
    Key,
    ResponseStream,
    StaleConnectionError,
    read_failure,
    read_timeout_error,
)
from holdback.providers.http11 import (
    MAX_HEAD,
    InvalidRequestBodyError,
    InvalidRequestHeadError,
    RequestBodyFramer,
    ResponseCutShortError,
    ResponseParser,
    ResponseViolationError,
    request_head,
)

_DEFAULT_PORTS = {"http": 80, "https": 443}


def proxies_configured() -> bool:
    """Whether HTTP_PROXY, HTTPS_PROXY or ALL_PROXY (any case) is set, as httpx would see it."""
    proxies = urllib.request.getproxies()
    return any(proxies.get(scheme) for scheme in ("http", "https", "all"))


def upstream_client(*, max_keepalive: int = 256) -> httpx.AsyncClient:
    """The process's one client for upstream calls, with no limit on connections.

    It streams through `StreamingTransport`, unless a proxy variable applies: then through
    httpx's own transport, which honours it.
    """
    if proxies_configured():
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=max_keepalive)
        return httpx.AsyncClient(limits=limits)
    return httpx.AsyncClient(transport=StreamingTransport(max_keepalive=max_keepalive))


class StreamingTransport(httpx.AsyncBaseTransport):
    """HTTP/1.1 over asyncio protocols, with a keep-alive pool per (scheme, host, port).

    `verify`: True (httpx's default context: `SSL_CERT_FILE`/`SSL_CERT_DIR` when `trust_env`,
    else certifi), False, a CA file or directory path, or an `ssl.SSLContext`.
    `max_connections`: None for no limit, else requests wait up to the pool timeout for one.
    `max_keepalive`: idle connections kept; `keepalive_expiry`: seconds one may stay idle.
    `max_buffer`: unread body bytes before the socket stops being read. `max_head`: the limit on
    a response's status line and headers.
    """

    def __init__(
        self,
        *,
        verify: ssl.SSLContext | str | os.PathLike[str] | bool = True,
        trust_env: bool = True,
        max_connections: int | None = None,
        max_keepalive: int = 256,
        keepalive_expiry: float | None = 5.0,
        max_buffer: int = 256 * 1024,
        max_head: int = MAX_HEAD,
    ) -> None:
        self.max_buffer = max_buffer
        self._verify = verify
        self._trust_env = trust_env
        self._tls_context: ssl.SSLContext | None = None
        self._max_connections = max_connections
        self._max_keepalive = max_keepalive
        self._keepalive_expiry = keepalive_expiry
        self._max_head = max_head
        self._idle: dict[Key, list[Connection]] = {}
        self._idle_order: OrderedDict[Connection, None] = OrderedDict()  # oldest first
        self._live: set[Connection] = set()
        self._slots_used = 0
        self._slot_waiters: deque[asyncio.Future[None]] = deque()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        port = _DEFAULT_PORTS.get(url.scheme)
        if port is None:
            raise httpx.UnsupportedProtocol("StreamingTransport speaks http and https only")
        host = url.raw_host.decode("ascii")
        if not host:
            raise httpx.UnsupportedProtocol("the request URL has no host")
        key = (url.scheme, host, url.port or port)
        timeouts: Mapping[str, float | None] = request.extensions.get("timeout") or {}
        try:
            head = request_head(request.method.encode("ascii"), url.raw_path, request.headers.raw)
        except (InvalidRequestHeadError, UnicodeEncodeError) as exc:
            raise httpx.LocalProtocolError(str(exc), request=request) from None
        conn = self._take(key) or await self._open(key, timeouts, request)
        try:
            return await self._exchange(conn, request, head, timeouts)
        except StaleConnectionError as stale:
            if not isinstance(request.stream, httpx.ByteStream):
                raise stale.error from None  # a streamed body cannot be sent twice
        conn = await self._open(key, timeouts, request, fresh=True)
        return await self._exchange(conn, request, head, timeouts)  # fresh: never stale

    async def aclose(self) -> None:
        connections = list(self._live)
        self._idle.clear()
        self._idle_order.clear()
        for conn in connections:
            conn.abort()
        pending = [conn.closed for conn in connections if not conn.closed.done()]
        if pending:
            await asyncio.wait(pending, timeout=1.0)

    # One request on one connection.

    async def _exchange(
        self,
        conn: Connection,
        request: httpx.Request,
        head: bytes,
        timeouts: Mapping[str, float | None],
    ) -> httpx.Response:
        parser = ResponseParser(head_request=request.method == "HEAD", max_head=self._max_head)
        conn.parser = parser
        conn.keep_alive = "close" not in request.headers.get("connection", "").lower()
        read_timeout = timeouts.get("read")
        try:
            await self._send(conn, request, head, timeouts.get("write"))
            while (response_head := parser.head()) is None:
                if not await conn.arm(read_timeout):
                    raise read_timeout_error(read_timeout, request)
        except ResponseViolationError as exc:
            conn.abort()
            error = read_failure(conn, exc, request)
            if conn.reused and not parser.received_any and isinstance(exc, ResponseCutShortError):
                raise StaleConnectionError(error) from None
            raise error from None
        except httpx.WriteError as exc:
            conn.abort()
            if conn.reused and not parser.received_any:
                raise StaleConnectionError(exc) from None
            raise
        except BaseException:
            conn.abort()
            raise
        return httpx.Response(
            response_head.status,
            headers=response_head.headers,
            stream=ResponseStream(self, conn, request, read_timeout),
            extensions={
                "http_version": response_head.http_version,
                "reason_phrase": response_head.reason,
            },
        )

    async def _send(
        self, conn: Connection, request: httpx.Request, head: bytes, within: float | None
    ) -> None:
        stream = request.stream
        if not isinstance(stream, httpx.AsyncByteStream):
            raise TypeError("StreamingTransport needs an async request body")
        try:
            body = RequestBodyFramer(request.headers.raw)
            pending = head  # the head goes out with the first body part, in one write
            async for part in stream:
                if part:
                    data = body.frame(part)
                    if pending:
                        data, pending = pending + data, b""
                    await self._write(conn, data, within, request)
            pending += body.end()
        except InvalidRequestBodyError as exc:
            raise httpx.LocalProtocolError(str(exc), request=request) from None
        if pending:
            await self._write(conn, pending, within, request)

    @staticmethod
    async def _write(
        conn: Connection, data: bytes, within: float | None, request: httpx.Request
    ) -> None:
        transport = conn.transport
        assert transport is not None
        if conn.lost or transport.is_closing():
            raise httpx.WriteError("connection closed before the request was sent", request=request)
        transport.write(data)
        if conn.writing_paused:
            try:
                await conn.drain(within)
            except TimeoutError:
                raise httpx.WriteTimeout(
                    f"could not send the request within {within:g} s", request=request
                ) from None
            if conn.lost:
                raise httpx.WriteError(
                    "connection closed while the request was sent", request=request
                )

    # Connections.

    async def _open(
        self,
        key: Key,
        timeouts: Mapping[str, float | None],
        request: httpx.Request,
        *,
        fresh: bool = False,
    ) -> Connection:
        """A new connection; or, while waiting for the connection limit, one that fell idle."""
        scheme, host, port = key
        tls = self._tls() if scheme == "https" else None
        connect_timeout = timeouts.get("connect")
        loop = asyncio.get_running_loop()
        if self._max_connections is not None:
            idle = await self._acquire_slot(None if fresh else key, timeouts.get("pool"), request)
            if idle is not None:
                return idle
        try:
            async with asyncio.timeout(connect_timeout):
                _, conn = await loop.create_connection(
                    lambda: Connection(self, key, loop),
                    host,
                    port,
                    ssl=tls,
                    server_hostname=host if tls is not None else None,
                    ssl_handshake_timeout=connect_timeout if tls is not None else None,
                )
        except TimeoutError:  # before OSError: a TimeoutError is one
            self._slot_failed()
            raise httpx.ConnectTimeout(
                f"could not connect within {connect_timeout:g} s", request=request
            ) from None
        except OSError as exc:
            self._slot_failed()
            raise httpx.ConnectError(
                f"could not connect ({type(exc).__name__})", request=request
            ) from exc
        except BaseException:
            self._slot_failed()
            raise
        conn.slot = self._max_connections is not None
        self._live.add(conn)
        return conn

    def _tls(self) -> ssl.SSLContext:
        if self._tls_context is None:
            verify = self._verify
            if isinstance(verify, ssl.SSLContext):
                self._tls_context = verify
                return verify
            if isinstance(verify, bool):
                context = httpx.create_ssl_context(verify=verify, trust_env=self._trust_env)
            elif os.path.isdir(verify):
                context = ssl.create_default_context(capath=verify)
            else:
                context = ssl.create_default_context(cafile=verify)
            context.set_alpn_protocols(["http/1.1"])
            self._tls_context = context
        return self._tls_context

    def _take(self, key: Key) -> Connection | None:
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
            not (parser.reusable and conn.keep_alive)
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

    async def _acquire_slot(
        self, key: Key | None, within: float | None, request: httpx.Request
    ) -> Connection | None:
        assert self._max_connections is not None
        try:
            async with asyncio.timeout(within):
                while self._slots_used >= self._max_connections:
                    idle = self._take(key) if key is not None else None
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
                    finally:
                        if waiter in self._slot_waiters:
                            self._slot_waiters.remove(waiter)
        except TimeoutError:
            raise httpx.PoolTimeout(
                f"no connection became free within {within:g} s", request=request
            ) from None
        self._slots_used += 1
        return None

    def _slot_failed(self) -> None:
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
