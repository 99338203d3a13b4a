"""The upstream HTTP client: aiohttp's, with its C parser, configured for long, slow streams.

The rules it keeps:

- one aiohttp session and connection pool per `UpstreamClient`, made lazily on the running
  loop; idle connections close after `keepalive_expiry` seconds. HTTP/1.1 framing, the pool,
  TLS, Happy Eyeballs (250 ms) and proxies are aiohttp's; holdback owns no framing code;
- proxies: `HTTP_PROXY`, `HTTPS_PROXY` (or `ALL_PROXY`) and `NO_PROXY`, in either case, are
  read from the environment for every request, and proxied and direct requests go through the
  same session and the same code. Proxy credentials go in `Proxy-Authorization`, never in a
  URL that could be logged;
- redirects are never followed, cookies are never kept, `.netrc` is never read;
- no compressed body is asked for (`Accept-Encoding: identity`). A body compressed anyway
  (gzip or deflate) is inflated here, in steps of at most `INFLATE_STEP` bytes, and refused
  once it passes `max_inflated_bytes`; any other content coding, or a transfer coding other
  than chunked, is refused;
- every failure is one named `holdback.errors.UpstreamError`, chosen by aiohttp's exception
  type (and, for its one generic parse error, the kind of fault it reports), never carrying
  aiohttp's message: those quote the bytes the peer sent and the headers;
- time: `connect` bounds making a connection; `read` bounds every wait for bytes (the stall:
  aiohttp's per-read timeout until the head, then one timer per response that looks
  `STALL_CHECKS` times per `read` whether bytes came); `head` bounds the whole wait for the
  final response head, however many interim `1xx` heads come (aiohttp reads those itself);
  `expire_at()` sets a response's deadline, one timer per response;
- a request whose pooled connection turns out closed before a single response byte is sent
  once more at once: the keep-alive race. A response closed before its end keeps its
  connection only if the rest arrives within `discard_grace` seconds and `DISCARD_CAP` bytes
  (streams are routinely left at their last event, just before the chunked terminator).

The sans-I/O halves (SSE decoding, provider parsers) and the retry rules are `http.py`'s.
"""

from __future__ import annotations

import asyncio
import io
import os
import ssl
import urllib.request
import weakref
import zlib
from collections.abc import Mapping
from types import SimpleNamespace, TracebackType
from typing import Any
from urllib.parse import unquote, urlsplit

import aiohttp
from aiohttp import http_exceptions
from aiohttp.client_proto import ResponseHandler

from holdback.errors import (
    BadChunkError,
    BadContentEncodingError,
    MalformedHeaderError,
    MalformedStatusLineError,
    UnsupportedFramingError,
    UpstreamClientClosedError,
    UpstreamConnectTimeoutError,
    UpstreamDisconnectedError,
    UpstreamError,
    UpstreamFramingError,
    UpstreamHeadTimeoutError,
    UpstreamHeadTooLargeError,
    UpstreamInflatedTooLargeError,
    UpstreamReplyTimeoutError,
    UpstreamTimeoutError,
    UpstreamTruncatedBodyError,
    UpstreamUnreachableError,
)
from holdback.providers.limits import UpstreamLimits
from holdback.providers.logmask import install_url_masking

DISCARD_CAP = 64 * 1024
LARGE_BODY = 1024 * 1024  # above this aiohttp sends a body from a file-like object, in parts
INFLATE_STEP = 64 * 1024
STALL_CHECKS = 4  # looks per stall timeout: silence is noticed within 1.25 times it
_DEFAULT_LIMITS = UpstreamLimits()
_SCHEMES = ("http", "https")


def seconds(timeout: float | None) -> str:
    """A timeout, for a message. None (no limit of ours) means the OS's own limit ran out."""
    return "the OS limit" if timeout is None else f"{timeout:g} s"


def bypasses_proxy(host: str, port: int | None, no_proxy: str) -> bool:
    """Whether `NO_PROXY` exempts a host: `*`, the host itself, or a domain it is under
    (`example.com` and `.example.com` both cover `api.example.com`), optionally `:port`."""
    host = host.lower().strip("[]").rstrip(".")
    for entry in no_proxy.lower().replace(" ", "").split(","):
        if not entry:
            continue
        if entry == "*":
            return True
        name, _, entry_port = entry.rpartition(":") if entry.count(":") == 1 else (entry, "", "")
        if entry_port and (not entry_port.isdigit() or int(entry_port) != port):
            continue
        name = name.strip("[]").lstrip(".").rstrip(".")
        if name and (host == name or host.endswith("." + name)):
            return True
    return False


def proxy_for(url: str) -> tuple[str, str | None] | None:
    """The proxy (URL without credentials, `Proxy-Authorization` value) the environment names
    for `url`, or None: `NO_PROXY` applies, or no proxy variable is set for its scheme."""
    parts = urlsplit(url)
    proxies = urllib.request.getproxies_environment()
    proxy = proxies.get(parts.scheme) or proxies.get("all")
    if not proxy:
        return None
    port = parts.port or (443 if parts.scheme == "https" else 80)
    if bypasses_proxy(parts.hostname or "", port, proxies.get("no", "")):
        return None
    if "://" not in proxy:
        proxy = "http://" + proxy
    target = urlsplit(proxy)
    authorization = None
    if target.username is not None or target.password is not None:
        authorization = aiohttp.encode_basic_auth(
            unquote(target.username or ""), unquote(target.password or "")
        )
    netloc = target.hostname or ""
    if ":" in netloc:
        netloc = f"[{netloc}]"
    if target.port is not None:
        netloc += f":{target.port}"
    return f"{target.scheme}://{netloc}", authorization


def proxies_configured() -> bool:
    """Whether HTTP_PROXY, HTTPS_PROXY or ALL_PROXY (any case) is set."""
    proxies = urllib.request.getproxies_environment()
    return any(proxies.get(scheme) for scheme in ("http", "https", "all"))


def tls_context(verify: ssl.SSLContext | str | os.PathLike[str] | bool = True) -> ssl.SSLContext:
    """The TLS context for `verify`: True (the system's CAs, `SSL_CERT_FILE`/`SSL_CERT_DIR`,
    certifi's bundle when the system has none), False (no verification), a CA file or
    directory, or a context of the caller's."""
    if isinstance(verify, ssl.SSLContext):
        return verify
    if verify is False:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    elif verify is True:
        context = ssl.create_default_context()
        if not context.get_ca_certs() and not context.cert_store_stats().get("x509_ca"):
            try:
                import certifi
            except ImportError:  # pragma: no cover - certifi comes with httpx today
                pass
            else:
                context.load_verify_locations(certifi.where())
    elif os.path.isdir(verify):
        context = ssl.create_default_context(capath=verify)
    else:
        context = ssl.create_default_context(cafile=verify)
    context.set_alpn_protocols(["http/1.1"])
    return context


# aiohttp's exceptions, by what they mean.


def _cause(exc: BaseException) -> BaseException | None:
    """The innermost `HttpProcessingError` behind an aiohttp exception, if any."""
    found = None
    seen = 0
    current: BaseException | None = exc
    while current is not None and seen < 8:
        if isinstance(current, http_exceptions.HttpProcessingError):
            found = current
        current = current.__cause__ or current.__context__
        seen += 1
    return found


def framing_error(cause: BaseException | None) -> UpstreamError:
    """The named error for one of aiohttp's parse errors."""
    if isinstance(cause, http_exceptions.LineTooLong):
        return UpstreamHeadTooLargeError("a response head line exceeds the header size limit")
    if isinstance(cause, http_exceptions.BadStatusLine):
        return MalformedStatusLineError("the upstream sent a malformed status line")
    if isinstance(cause, http_exceptions.InvalidHeader):
        return MalformedHeaderError("the upstream sent a malformed header line")
    if isinstance(
        cause, (http_exceptions.TransferEncodingError, http_exceptions.ContentLengthError)
    ):
        return UpstreamTruncatedBodyError("the connection closed before the body's end")
    # aiohttp reports most faults as a plain BadHttpMessage; its words tell them apart. They
    # are read here to choose our own sentence, and never passed on.
    what = str(getattr(cause, "message", "")).lower()
    if "chunk" in what:
        return BadChunkError("the upstream sent a malformed chunk")
    if "too many headers" in what:
        return UpstreamHeadTooLargeError("the response head has more headers than the limit")
    if "content-length" in what or "transfer-encoding" in what:
        return MalformedHeaderError("the upstream sent ambiguous or invalid framing headers")
    if "header" in what or "trailer" in what:
        return MalformedHeaderError("the upstream sent a malformed header line")
    return UpstreamFramingError("the upstream's response is not valid HTTP/1.1")


def translate(exc: BaseException, *, connect: float | None, read: float | None) -> UpstreamError:
    """The named error for an exception aiohttp raised."""
    if isinstance(exc, UpstreamError):
        return exc
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return UpstreamConnectTimeoutError(f"connection timed out within {seconds(connect)}")
    if isinstance(exc, aiohttp.ServerTimeoutError):
        return UpstreamTimeoutError(f"no data from the upstream for {seconds(read)}")
    if isinstance(exc, aiohttp.ClientConnectorCertificateError | aiohttp.ClientSSLError):
        return UpstreamUnreachableError("TLS handshake failed")
    if isinstance(exc, aiohttp.ClientHttpProxyError):
        return UpstreamUnreachableError(f"the proxy refused the tunnel ({exc.status})")
    if isinstance(exc, aiohttp.ClientProxyConnectionError):
        return UpstreamUnreachableError("could not connect to the proxy")
    if isinstance(exc, aiohttp.ClientConnectorDNSError):
        return UpstreamUnreachableError("the host name does not resolve")
    if isinstance(exc, aiohttp.ClientConnectorError):
        if isinstance(exc.os_error, ConnectionRefusedError):
            return UpstreamUnreachableError("connection refused")
        return UpstreamUnreachableError(f"connection failed ({type(exc.os_error).__name__})")
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return UpstreamDisconnectedError("the connection closed before a response head arrived")
    cause = _cause(exc)
    if cause is not None:
        return framing_error(cause)
    if isinstance(exc, aiohttp.ClientPayloadError):
        return UpstreamTruncatedBodyError("the connection closed before the body's end")
    if isinstance(exc, aiohttp.ClientOSError | aiohttp.ClientConnectionError | OSError):
        return UpstreamDisconnectedError("the connection failed while reading the response")
    if isinstance(exc, aiohttp.InvalidURL):
        return UpstreamUnreachableError("the upstream URL is not valid")
    return UpstreamError(f"HTTP failure talking to upstream ({type(exc).__name__})")


class _Inflater:
    """A gzip or deflate body, inflated in bounded steps and capped in total."""

    __slots__ = ("_cap", "_coding", "_inflated", "_obj", "_started", "_tail")

    def __init__(self, coding: str, cap: int) -> None:
        self._coding = coding
        self._obj: Any = zlib.decompressobj(wbits=31 if coding == "gzip" else 15)
        self._cap = cap
        self._inflated = 0
        self._started = False
        self._tail = b""  # compressed input a step left for the next

    @property
    def pending(self) -> bool:
        return bool(self._tail)

    @property
    def ended(self) -> bool:
        """Whether the compressed stream ended (or none began: an empty body)."""
        return bool(self._obj.eof) or (self._inflated == 0 and not self._started)

    def step(self, data: bytes) -> bytes:
        self._started = True
        data = self._tail + data if self._tail else data
        try:
            out = self._obj.decompress(data, INFLATE_STEP)
        except zlib.error:
            if self._coding != "deflate" or self._inflated:
                raise BadContentEncodingError("a compressed body does not decode") from None
            # RFC 9110's deflate is zlib-wrapped; some servers send it raw.
            self._coding = "raw deflate"
            self._obj = zlib.decompressobj(wbits=-15)
            try:
                out = self._obj.decompress(data, INFLATE_STEP)
            except zlib.error:
                raise BadContentEncodingError("a compressed body does not decode") from None
        self._tail = self._obj.unconsumed_tail
        self._inflated += len(out)
        if self._inflated > self._cap:
            raise UpstreamInflatedTooLargeError(
                f"a compressed body inflates past {self._cap} bytes"
            )
        return bytes(out)


class UpstreamResponse:
    """One response: its status and headers, then its body piece by piece (`read()`)."""

    def __init__(
        self,
        client: UpstreamClient,
        response: aiohttp.ClientResponse,
        *,
        read: float | None,
        inflate_cap: int,
    ) -> None:
        self._client = client
        self._response = response
        self._content = response.content
        self._read_timeout = read
        self.status = response.status
        self.reason = response.reason or ""
        self.headers: Mapping[str, str] = response.headers
        self._deadline: asyncio.TimerHandle | None = None
        self._closed = False
        self._inflater: _Inflater | None = None
        coding = response.headers.get("content-encoding", "identity").strip().lower()
        if coding in ("gzip", "x-gzip", "deflate"):
            self._inflater = _Inflater("gzip" if coding != "deflate" else "deflate", inflate_cap)
        elif coding not in ("identity", ""):
            response.close()
            raise BadContentEncodingError("the upstream sent a content coding that is not read")
        codings = response.headers.get("transfer-encoding", "").replace(" ", "").lower()
        if codings not in ("", "chunked"):
            response.close()
            raise UnsupportedFramingError("the upstream sent a transfer coding other than chunked")
        if self.status == 101:
            response.close()
            raise UnsupportedFramingError("101 Switching Protocols without an upgrade request")
        if self.status < 100:
            response.close()
            raise MalformedStatusLineError("the upstream sent a status code below 100")
        # aiohttp's C parser leaves the body waiting forever when a parse error ends the
        # connection mid-body; watching the connection's close ends that wait, named.
        connection = response.connection
        protocol = connection.protocol if connection is not None else None
        closed = getattr(protocol, "closed", None)
        self._watch: asyncio.Future[None] | None = None
        if isinstance(closed, asyncio.Future) and not closed.done():
            self._watch = closed
            closed.add_done_callback(self._on_connection_closed)
            client.retrieve_when_closed(protocol, closed)
        self._protocol = protocol
        # Silence past `read` is watched by one timer per response, not by aiohttp's per-read
        # timeout (a timer cancelled and made again for every piece the body brings).
        self._stall: asyncio.TimerHandle | None = None
        if read is not None and read > 0 and isinstance(protocol, ResponseHandler):
            protocol.read_timeout = None
            loop = asyncio.get_running_loop()
            self._seen = self._content.total_bytes
            self._quiet_since = loop.time()
            self._stall = loop.call_at(self._quiet_since + read / STALL_CHECKS, self._check_stall)

    def _check_stall(self) -> None:
        """Every `read / STALL_CHECKS` seconds: new bytes, or how long there have been none."""
        self._stall = None
        content = self._content
        if self._closed or content.is_eof() or content.exception() is not None:
            return
        read = self._read_timeout
        assert read is not None
        loop = asyncio.get_running_loop()
        now = loop.time()
        if content.total_bytes != self._seen:
            self._seen, self._quiet_since = content.total_bytes, now
        elif now - self._quiet_since >= read:
            content.set_exception(
                UpstreamTimeoutError(f"no data from the upstream for {seconds(read)}")
            )
            return
        self._stall = loop.call_at(now + read / STALL_CHECKS, self._check_stall)

    def _on_connection_closed(self, _: object) -> None:
        content = self._content
        if self._closed or content.is_eof() or content.exception() is not None:
            return
        protocol = self._protocol
        failure = protocol.exception() if protocol is not None else None
        if failure is not None:
            content.set_exception(framing_error(_cause(failure)))
        else:
            content.set_exception(
                UpstreamTruncatedBodyError("the connection closed before the body's end")
            )

    def expire_at(self, when: float) -> None:
        """End the response at loop time `when`: a read then raises `UpstreamReplyTimeoutError`."""
        if self._deadline is not None:
            self._deadline.cancel()
        loop = asyncio.get_running_loop()
        self._deadline = loop.call_at(when, self._expire)

    def _expire(self) -> None:
        self._deadline = None
        if not self._closed and self._content.exception() is None:
            self._content.set_exception(
                UpstreamReplyTimeoutError("the reply ran past its time limit")
            )

    async def _read_raw(self) -> bytes:
        """The next piece of the body as it came off the wire; every failure is named."""
        try:
            return await self._content.readany()
        except UpstreamError:
            raise
        except asyncio.CancelledError:
            self._abandon()
            raise
        except Exception as exc:
            raise translate(exc, connect=None, read=self._read_timeout) from None

    async def read(self) -> bytes:
        """The next piece of the body as it arrived (inflated if compressed); b"" at its end."""
        inflater = self._inflater
        if inflater is None:
            return await self._read_raw()
        while True:  # a compressed piece may inflate to nothing yet (a header, a block start)
            if inflater.pending:
                out = inflater.step(b"")
            else:
                data = await self._read_raw()
                if not data:
                    if not inflater.ended:
                        raise BadContentEncodingError("a compressed body ends before its end")
                    return b""
                out = inflater.step(data)
            if out:
                return out

    def _abandon(self) -> None:
        # Cancelled mid-wait: where the body stands is unknown to the caller, who may never
        # close the response; its connection must not wait for that.
        self._response.close()

    async def read_limited(self, limit: int) -> bytes:
        """At most `limit` bytes of the body (for error bodies)."""
        body = bytearray()
        while len(body) < limit:
            data = await self.read()
            if not data:
                break
            body += data
        return bytes(body[:limit])

    async def aclose(self) -> None:
        """Done with the response: its connection goes back to the pool if it ended cleanly."""
        if self._closed:
            return
        self._closed = True
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        if self._stall is not None:
            self._stall.cancel()
            self._stall = None
        if self._watch is not None:
            self._watch.remove_done_callback(self._on_connection_closed)
            self._watch = None
        response = self._response
        content = self._content
        if content.is_eof() and content.exception() is None:
            response.release()
        elif content.exception() is not None or self._client.closed:
            response.close()
        else:
            self._client.discard_rest(response)


def _retrieve(closed: asyncio.Future[None]) -> None:
    if not closed.cancelled():
        closed.exception()


class _Trace:
    """Per-request trace context: whether aiohttp handed out a pooled connection."""

    reused = False


async def _on_reuse(
    session: aiohttp.ClientSession, context: SimpleNamespace, params: object
) -> None:
    trace = context.trace_request_ctx
    if isinstance(trace, _Trace):
        trace.reused = True


class UpstreamClient:
    """The process's client for upstream calls. Use `request()`; close with `aclose()`.

    `verify`: see `tls_context`. `keepalive_expiry`: seconds an idle connection is kept.
    `discard_grace`: seconds a body closed early may take to end and keep its connection.
    `read_buffer`: body bytes buffered before the socket stops being read.
    """

    def __init__(
        self,
        *,
        verify: ssl.SSLContext | str | os.PathLike[str] | bool = True,
        keepalive_expiry: float = 5.0,
        discard_grace: float = 1.0,
        read_buffer: int = 64 * 1024,
    ) -> None:
        self._verify = verify
        self._keepalive_expiry = keepalive_expiry
        self._discard_grace = discard_grace
        self._read_buffer = read_buffer
        self._session: aiohttp.ClientSession | None = None
        self._discarding: dict[asyncio.Task[None], aiohttp.ClientResponse] = {}
        self._watched: weakref.WeakSet[object] = weakref.WeakSet()
        self.closed = False
        install_url_masking()

    def _open_session(self) -> aiohttp.ClientSession:
        trace = aiohttp.TraceConfig(trace_config_ctx_factory=SimpleNamespace)
        trace.on_connection_reuseconn.append(_on_reuse)
        connector = aiohttp.TCPConnector(
            limit=0,
            limit_per_host=0,
            keepalive_timeout=self._keepalive_expiry,
            ssl=tls_context(self._verify),
            happy_eyeballs_delay=0.25,
        )
        self._session = aiohttp.ClientSession(
            connector=connector,
            cookie_jar=aiohttp.DummyCookieJar(),
            auto_decompress=False,
            trust_env=False,  # proxies are read per request (`proxy_for`); .netrc never
            timeout=aiohttp.ClientTimeout(total=None),
            read_bufsize=self._read_buffer,
            skip_auto_headers=("User-Agent",),
            trace_configs=[trace],
        )
        return self._session

    async def request(
        self,
        method: str,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        body: bytes | None = None,
        connect: float | None = 10.0,
        read: float | None = 60.0,
        head: float | None = 60.0,
        limits: UpstreamLimits = _DEFAULT_LIMITS,
    ) -> UpstreamResponse:
        """Send one request; the response once its final head arrived. Raises only
        `UpstreamError`s (and `CancelledError`)."""
        if self.closed:
            raise UpstreamClientClosedError("the upstream client is closed")
        if urlsplit(url).scheme not in _SCHEMES:
            raise UpstreamUnreachableError("the upstream URL must be http or https")
        session = self._session or self._open_session()
        sent = {"accept-encoding": "identity", **(headers or {})}
        proxy = proxy_for(url)
        proxy_url, proxy_headers = None, None
        if proxy is not None:
            proxy_url = proxy[0]
            if proxy[1] is not None:
                # A plain-HTTP request goes to the proxy itself; an HTTPS one through a tunnel.
                if urlsplit(url).scheme == "http":
                    sent["Proxy-Authorization"] = proxy[1]
                else:
                    proxy_headers = {"Proxy-Authorization": proxy[1]}
        timeout = aiohttp.ClientTimeout(
            total=None, connect=connect, sock_connect=connect, sock_read=read
        )
        for attempt in (1, 2):
            trace = _Trace()
            try:
                async with asyncio.timeout(head):
                    response = await session.request(
                        method,
                        url,
                        headers=sent,
                        data=io.BytesIO(body) if body and len(body) > LARGE_BODY else body,
                        allow_redirects=False,
                        timeout=timeout,
                        proxy=proxy_url,
                        proxy_headers=proxy_headers,
                        max_line_size=limits.max_header_bytes,
                        max_field_size=limits.max_header_bytes,
                        max_headers=limits.max_headers,
                        trace_request_ctx=trace,
                    )
            except TimeoutError as exc:
                if isinstance(exc, aiohttp.ServerTimeoutError):
                    raise translate(exc, connect=connect, read=read) from None
                raise UpstreamHeadTimeoutError(
                    f"no final response head within {seconds(head)}"
                ) from None
            except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
                if (
                    trace.reused
                    and attempt == 1
                    and not isinstance(exc, aiohttp.ClientConnectorError)
                ):
                    continue  # a pooled connection the peer had closed: send it again
                raise translate(exc, connect=connect, read=read) from None
            except Exception as exc:
                if self.closed:
                    raise UpstreamClientClosedError("the upstream client is closed") from None
                raise translate(exc, connect=connect, read=read) from None
            if self.closed:
                response.close()
                raise UpstreamClientClosedError("the upstream client is closed")
            return UpstreamResponse(
                self, response, read=read, inflate_cap=limits.max_inflated_bytes
            )
        raise AssertionError("unreachable")  # pragma: no cover

    def retrieve_when_closed(self, protocol: object, closed: asyncio.Future[None]) -> None:
        """Mark a connection's close as seen once it comes, so an error it ends with is never
        reported as unretrieved (one callback per connection, however many responses)."""
        if protocol not in self._watched:
            self._watched.add(protocol)
            closed.add_done_callback(_retrieve)

    def discard_rest(self, response: aiohttp.ClientResponse) -> None:
        """Read and drop the rest of a response closed early, then pool its connection; close
        it if the rest does not end within the grace period and the cap."""
        task = asyncio.get_running_loop().create_task(self._discard(response))
        self._discarding[task] = response
        task.add_done_callback(self._discarded)

    def _discarded(self, task: asyncio.Task[None]) -> None:
        self._discarding.pop(task, None)

    async def _discard(self, response: aiohttp.ClientResponse) -> None:
        content = response.content
        budget = DISCARD_CAP
        try:
            async with asyncio.timeout(self._discard_grace):
                while budget >= 0:
                    data = await content.readany()
                    if not data:
                        break
                    budget -= len(data)
        except (Exception, asyncio.CancelledError):
            response.close()
            return
        if budget >= 0 and content.is_eof() and content.exception() is None:
            response.release()
        else:
            response.close()

    async def aclose(self) -> None:
        self.closed = True
        for task, response in list(self._discarding.items()):
            task.cancel()
            response.close()  # a task cancelled before it ran never closes its response
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    async def __aenter__(self) -> UpstreamClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


def upstream_client(*, max_keepalive: int | None = None) -> UpstreamClient:
    """The process's one client for upstream calls.

    `max_keepalive` is accepted for callers of the pool this client replaced; aiohttp bounds
    idle connections by time (`keepalive_expiry`), not by count, so it has no effect.
    """
    del max_keepalive
    return UpstreamClient()
