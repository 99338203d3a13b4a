"""`StreamingTransport`: a lean HTTP/1.1 transport for httpx, for many long, slow event streams.

The rules it keeps:

- every failure is an httpx exception carrying the request, mapped as httpx's own transport
  maps it, because `providers/http.py` decides retries by its type: refused, unreachable,
  unresolvable or a failed TLS handshake → `ConnectError`; too slow to connect →
  `ConnectTimeout`; the peer closing before the head or inside a framed body, or a malformed
  response → `RemoteProtocolError`; an OS error while reading → `ReadError`; nothing for `read`
  seconds while a head or body byte is awaited → `ReadTimeout`; writing → `WriteError` /
  `WriteTimeout`; a request made after `aclose()` → `ConnectError`;
- a server may answer before it has read the whole request (a 413 or a 401, then a close): when
  the write fails after a whole response head arrived, that response is the outcome;
- a request whose pooled connection turns out stale (it closed before a single response byte)
  is sent once more on a fresh connection, if its body can be sent again;
- connecting tries a host's addresses as httpx's own transport does, Happy Eyeballs style: the
  next address 250 ms after the last attempt began, alternating address families, so a broken
  IPv6 route costs a quarter second, not the connect timeout;
- no proxies: the caller picks httpx's own transport when one is configured
  (`proxies_configured()`).

When connections are pooled is `pool.py`; one connection, its read path and its body stream
are `connection.py`.

Error messages name what failed, never a header, a body byte or a key.
"""

from __future__ import annotations

import asyncio
import os
import ssl
import urllib.request
from collections.abc import Mapping

import httpx

from holdback.providers.connection import (
    Connection,
    Key,
    ResponseStream,
    StaleConnectionError,
    connect_timeout_error,
    read_failure,
    read_timeout_error,
    seconds,
)
from holdback.providers.http11 import (
    MAX_HEAD,
    ResponseCutShortError,
    ResponseHead,
    ResponseParser,
    ResponseViolationError,
)
from holdback.providers.http11_request import (
    InvalidRequestBodyError,
    InvalidRequestHeadError,
    RequestBodyFramer,
    request_head,
)
from holdback.providers.pool import Pool, closed_error

_DEFAULT_PORTS = {"http": 80, "https": 443}
HAPPY_EYEBALLS_DELAY = 0.25  # RFC 8305's recommended connection attempt delay, as httpcore's


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
    a response's status line and headers. `discard_grace`: seconds a body closed early may take
    to end so that its connection is kept (`connection.py`).
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
        discard_grace: float = 1.0,
    ) -> None:
        self._verify = verify
        self._trust_env = trust_env
        self._tls_context: ssl.SSLContext | None = None
        self._max_head = max_head
        self._pool = Pool(
            max_connections=max_connections,
            max_keepalive=max_keepalive,
            keepalive_expiry=keepalive_expiry,
            max_buffer=max_buffer,
            discard_grace=discard_grace,
        )

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
        conn = self._pool.take(key) or await self._open(key, timeouts, request)
        try:
            return await self._exchange(conn, request, head, timeouts)
        except StaleConnectionError as stale:
            if not isinstance(request.stream, httpx.ByteStream):
                raise stale.error from None  # a streamed body cannot be sent twice
        conn = await self._open(key, timeouts, request, fresh=True)
        return await self._exchange(conn, request, head, timeouts)  # fresh: never stale

    async def aclose(self) -> None:
        await self._pool.close()

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
            response_head: ResponseHead | None = None
            try:
                await self._send(conn, request, head, timeouts.get("write"))
            except httpx.WriteError:
                response_head = _early_head(parser)
                if response_head is None:
                    raise
                conn.keep_alive = False  # the request was not sent whole
            while response_head is None:
                response_head = parser.head()
                if response_head is None and not await conn.arm(read_timeout):
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
            stream=ResponseStream(self._pool, conn, request, read_timeout),
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
                    f"could not send the request within {seconds(within)}", request=request
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
        pool = self._pool
        if pool.closed:
            raise closed_error(request)
        scheme, host, port = key
        tls = self._tls() if scheme == "https" else None
        connect_timeout = timeouts.get("connect")
        loop = asyncio.get_running_loop()
        if pool.limited:
            idle = await pool.acquire_slot(None if fresh else key, timeouts.get("pool"), request)
            if idle is not None:
                return idle
        try:
            async with asyncio.timeout(connect_timeout):
                _, conn = await loop.create_connection(
                    lambda: Connection(pool, key, loop),
                    host,
                    port,
                    ssl=tls,
                    server_hostname=host if tls is not None else None,
                    ssl_handshake_timeout=connect_timeout if tls is not None else None,
                    happy_eyeballs_delay=HAPPY_EYEBALLS_DELAY,
                )
        except TimeoutError:  # before OSError: a TimeoutError is one
            pool.slot_failed()
            raise connect_timeout_error(connect_timeout, request) from None
        except OSError as exc:
            pool.slot_failed()
            raise httpx.ConnectError(
                f"could not connect ({type(exc).__name__})", request=request
            ) from exc
        except BaseException:
            pool.slot_failed()
            raise
        if not pool.add(conn):
            raise closed_error(request)
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


def _early_head(parser: ResponseParser) -> ResponseHead | None:
    """The head of a response that arrived before the request could be sent whole, if any."""
    try:
        return parser.head()
    except ResponseViolationError:
        return None
