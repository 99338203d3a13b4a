"""Every bound on an upstream reply, against a raw-socket fake upstream on loopback: a gzip
bomb, an endless line, an endless event, an endless stream, a stream past its time, floods of
interim heads, and malformed framing. Each bound is tested at its limit and just past it; each
fault ends the reply with one named `StreamError`, and malformed framing is never retried as
a dropped connection."""

from __future__ import annotations

import asyncio
import base64
import logging
import time
import zlib
from collections.abc import Awaitable, Callable

import orjson
import pytest

from holdback.errors import UpstreamUnreachableError
from holdback.providers.events import End, Event, StreamError, TextDelta
from holdback.providers.http import RetryPolicy, StreamSettings
from holdback.providers.limits import InvalidUpstreamLimitError, UpstreamLimits
from holdback.providers.openai_chat import OpenAIChatProvider
from holdback.providers.transport import UpstreamClient
from tests.providers.fakeserver import unused_port
from tests.providers.rawserver import RawServer, ServerRequest
from tests.providers.streams import collect, text_of
from tests.providers.test_upstream_faults import REQUEST

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
STOP = b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n'


def delta(text: str) -> bytes:
    payload = orjson.dumps({"choices": [{"index": 0, "delta": {"content": text}}]})
    return b"data: " + payload + b"\n\n"


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(data), data)


def whole(body: bytes, head: bytes = HEAD) -> bytes:
    return head + (chunk(body) if body else b"") + b"0\r\n\r\n"


def provider(
    url: str, limits: UpstreamLimits | None = None, *, attempts: int = 3, stall: float = 2.0
) -> OpenAIChatProvider:
    settings = StreamSettings(
        connect_timeout=2.0,
        stall_timeout=stall,
        retry=RetryPolicy(attempts=attempts, base_delay=0.01, max_delay=0.05),
        limits=limits or UpstreamLimits(),
    )
    return OpenAIChatProvider("gpt-4o", base_url=url + "/v1", api_key="sk-test", settings=settings)


def sends(*payloads: bytes) -> Callable[[ServerRequest, asyncio.StreamWriter], Awaitable[bool]]:
    """An answer that writes the next payload to each request, then closes."""
    queue = list(payloads)

    async def answer(request: ServerRequest, writer: asyncio.StreamWriter) -> bool:
        writer.write(queue.pop(0) if queue else b"HTTP/1.1 500 Oops\r\ncontent-length: 0\r\n\r\n")
        await writer.drain()
        await asyncio.sleep(0.05)
        return False

    return answer


def endless(head: bytes, piece: bytes, first: bytes = b"", pause: float = 0.0):  # type: ignore[no-untyped-def]
    """An answer that writes `head`, then `first`, then `piece` as chunks until the client
    goes away; `stopped` is set then."""
    stopped = asyncio.Event()

    async def answer(request: ServerRequest, writer: asyncio.StreamWriter) -> bool:
        writer.write(head + (chunk(first) if first else b""))
        try:
            while not writer.transport.is_closing():
                writer.write(chunk(piece) if b"chunked" in head else piece)
                await writer.drain()
                await asyncio.sleep(pause)
        except ConnectionError:
            pass
        finally:
            stopped.set()
        return False

    answer.stopped = stopped  # type: ignore[attr-defined]
    return answer


async def run(
    answer: Callable[..., Awaitable[bool]], limits: UpstreamLimits | None = None, **kw: object
) -> tuple[list[Event], RawServer]:
    async with RawServer(answer) as server:
        events = await collect(provider(server.url, limits, **kw), REQUEST)  # type: ignore[arg-type]
        return events, server


def too_large(message: str) -> StreamError:
    return StreamError("upstream_too_large", f"openai: {message}", False)


def test_limits_are_validated() -> None:
    with pytest.raises(InvalidUpstreamLimitError, match="max_line_chars"):
        UpstreamLimits(max_line_chars=0)
    with pytest.raises(InvalidUpstreamLimitError, match="reply_timeout"):
        UpstreamLimits(reply_timeout=0)
    with pytest.raises(InvalidUpstreamLimitError, match="max_headers"):
        UpstreamLimits(max_headers=True)


# A line.


async def test_a_line_at_the_limit_is_read() -> None:
    line = b":" + b"x" * 999 + b"\n"  # a comment of exactly 1000 characters
    events, _ = await run(
        sends(whole(line + delta("Hi") + STOP)), UpstreamLimits(max_line_chars=1000)
    )
    assert events[0] == TextDelta("content", "Hi")
    assert isinstance(events[-1], End)


async def test_a_line_past_the_limit_ends_the_reply() -> None:
    line = b":" + b"x" * 1000 + b"\n"
    events, server = await run(
        sends(whole(delta("Hi") + line + STOP)), UpstreamLimits(max_line_chars=1000)
    )
    assert events == [
        TextDelta("content", "Hi"),
        too_large("an event-stream line exceeds 1000 characters"),
    ]
    assert len(server.requests) == 1


async def test_an_endless_line_is_cut_at_the_limit() -> None:
    answer = endless(HEAD, b"x" * 8192, first=b"data: ")
    began = time.monotonic()
    events, _ = await run(answer, UpstreamLimits(max_line_chars=100_000))
    assert events == [too_large("an event-stream line exceeds 100000 characters")]
    assert time.monotonic() - began < 5
    await asyncio.wait_for(answer.stopped.wait(), 5)  # the connection was closed


# An event.


def event_of(size: int) -> bytes:
    """A chat event whose data, in two lines joined by LF, is exactly `size` characters."""
    rest = orjson.dumps({"choices": [{"index": 0, "delta": {"content": "Hi"}}], "pad": ""})[1:]
    rest = rest[:-2] + b"x" * (size - len(rest) - 2) + b'"}'
    assert len(b"{") + 1 + len(rest) == size
    return b"data: {\ndata: " + rest + b"\n\n"


async def test_an_event_at_the_limit_is_read() -> None:
    events, _ = await run(sends(whole(event_of(500) + STOP)), UpstreamLimits(max_event_chars=500))
    assert events[0] == TextDelta("content", "Hi")
    assert isinstance(events[-1], End)


async def test_an_event_past_the_limit_ends_the_reply() -> None:
    events, _ = await run(sends(whole(event_of(501) + STOP)), UpstreamLimits(max_event_chars=500))
    assert events == [too_large("an event-stream event exceeds 500 characters")]


async def test_an_endless_event_is_cut_at_the_limit() -> None:
    answer = endless(HEAD, b"data: x\n" * 512)
    events, _ = await run(answer, UpstreamLimits(max_event_chars=100_000))
    assert events == [too_large("an event-stream event exceeds 100000 characters")]
    await asyncio.wait_for(answer.stopped.wait(), 5)


# A whole reply.


async def test_a_reply_at_the_limit_completes() -> None:
    body = b"".join(delta("0123456789") for _ in range(10)) + STOP
    events, _ = await run(sends(whole(body)), UpstreamLimits(max_reply_chars=100))
    assert text_of(events) == "0123456789" * 10
    assert isinstance(events[-1], End)


async def test_a_reply_past_the_limit_ends_after_what_fitted() -> None:
    body = b"".join(delta("0123456789") for _ in range(10)) + delta("!") + STOP
    events, _ = await run(sends(whole(body)), UpstreamLimits(max_reply_chars=100))
    assert text_of(events) == "0123456789" * 10
    assert events[-1] == too_large("the reply exceeds 100 characters")


async def test_an_endless_stream_is_cut_at_the_reply_limit() -> None:
    answer = endless(HEAD, delta("word ") * 20)
    events, _ = await run(answer, UpstreamLimits(max_reply_chars=10_000))
    assert len(text_of(events)) == 10_000
    assert events[-1] == too_large("the reply exceeds 10000 characters")
    await asyncio.wait_for(answer.stopped.wait(), 5)


async def test_a_steady_stream_past_the_reply_time_is_cut() -> None:
    answer = endless(HEAD, delta("tick "), pause=0.05)
    began = time.monotonic()
    events, _ = await run(answer, UpstreamLimits(reply_timeout=0.6), stall=2.0)
    elapsed = time.monotonic() - began
    assert text_of(events).startswith("tick ")
    assert events[-1] == StreamError(
        "upstream_timeout", "openai: the reply ran past its 0.6 s time limit", True
    )
    assert 0.6 <= elapsed < 2.5
    await asyncio.wait_for(answer.stopped.wait(), 5)


async def test_a_reply_within_its_time_completes() -> None:
    body = [delta("a"), delta("b"), STOP]

    async def answer(request: ServerRequest, writer: asyncio.StreamWriter) -> bool:
        writer.write(HEAD)
        for piece in body:
            await asyncio.sleep(0.1)
            writer.write(chunk(piece))
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        return False

    events, _ = await run(answer, UpstreamLimits(reply_timeout=2.0))
    assert text_of(events) == "ab"
    assert isinstance(events[-1], End)


async def test_the_reply_time_spans_retries() -> None:
    busy = b"HTTP/1.1 503 Busy\r\nretry-after: 0.4\r\ncontent-length: 0\r\n\r\n"
    settings = StreamSettings(
        retry=RetryPolicy(attempts=5, base_delay=0.4, max_delay=1.0),
        limits=UpstreamLimits(reply_timeout=1.0),
    )
    async with RawServer(sends(busy, busy, busy, busy, busy)) as server:
        began = time.monotonic()
        events = await collect(
            OpenAIChatProvider("gpt-4o", base_url=server.url, api_key="k", settings=settings),
            REQUEST,
        )
        assert events == [
            StreamError("upstream_timeout", "openai: the reply ran past its 1 s time limit", True)
        ]
        assert time.monotonic() - began < 1.5
        assert len(server.requests) < 5


# Interim (1xx) heads.


async def test_a_few_interim_heads_then_the_reply() -> None:
    interim = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nlink: </x>\r\n\r\n" * 100
    events, _ = await run(
        sends(interim + whole(delta("Hi") + STOP)), UpstreamLimits(head_timeout=2.0)
    )
    assert events[0] == TextDelta("content", "Hi")
    assert isinstance(events[-1], End)


async def test_endless_interim_heads_end_at_the_head_timeout() -> None:
    answer = endless(b"", b"HTTP/1.1 100 Continue\r\n\r\n", pause=0.005)
    began = time.monotonic()
    events, server = await run(answer, UpstreamLimits(head_timeout=0.5))
    assert events == [
        StreamError(
            "upstream_timeout", "openai: upstream sent no final response head within 0.5 s", True
        )
    ]
    assert 0.5 <= time.monotonic() - began < 2
    assert len(server.requests) == 1  # a timeout is not retried
    await asyncio.wait_for(answer.stopped.wait(), 5)


# Compressed bodies, though none is asked for.


def gzip(data: bytes) -> bytes:
    packer = zlib.compressobj(wbits=31)
    return packer.compress(data) + packer.flush()


GZIP_HEAD = HEAD.replace(b"\r\n\r\n", b"\r\ncontent-encoding: gzip\r\n\r\n")
SMALL = delta("Hi") + STOP


async def test_a_gzip_body_at_the_inflation_limit_is_read() -> None:
    limits = UpstreamLimits(max_inflated_bytes=len(SMALL))
    async with RawServer(sends(whole(gzip(SMALL), GZIP_HEAD))) as server:
        events = await collect(provider(server.url, limits), REQUEST)
        assert server.requests[0].headers["accept-encoding"] == "identity"
    assert text_of(events) == "Hi"
    assert isinstance(events[-1], End)


async def test_a_gzip_body_past_the_inflation_limit_is_refused() -> None:
    limits = UpstreamLimits(max_inflated_bytes=len(SMALL) - 1)
    events, _ = await run(sends(whole(gzip(SMALL), GZIP_HEAD)), limits)
    assert events[-1] == too_large(f"a compressed body inflates past {len(SMALL) - 1} bytes")


@pytest.mark.parametrize("wbits", [15, -15], ids=["zlib", "raw"])
async def test_a_deflate_body_is_read_either_way(wbits: int) -> None:
    packer = zlib.compressobj(wbits=wbits)
    body = packer.compress(SMALL) + packer.flush()
    head = HEAD.replace(b"\r\n\r\n", b"\r\ncontent-encoding: deflate\r\n\r\n")
    events, _ = await run(sends(whole(body, head)))
    assert text_of(events) == "Hi"


async def test_a_gzip_body_cut_short_is_refused() -> None:
    body = gzip(SMALL)
    events, _ = await run(sends(whole(body[: len(body) // 2], GZIP_HEAD)))
    assert events[-1] == StreamError(
        "upstream_protocol", "openai: a compressed body ends before its end", False
    )


async def test_a_gzip_bomb_is_stopped_by_the_line_limit() -> None:
    # 64 MiB of one line, compressed to some 64 KB: the default limits stop it at 2 M characters.
    packer = zlib.compressobj(wbits=31)
    bomb = (
        packer.compress(b"data: ")
        + b"".join(packer.compress(b"a" * (1024 * 1024)) for _ in range(64))
        + packer.flush()
    )
    assert len(bomb) < 200_000
    began = time.monotonic()
    events, _ = await run(sends(whole(bomb, GZIP_HEAD)))
    assert events == [too_large("an event-stream line exceeds 2000000 characters")]
    assert time.monotonic() - began < 10


async def test_a_gzip_bomb_of_many_lines_is_stopped_by_the_inflation_limit() -> None:
    packer = zlib.compressobj(wbits=31)
    bomb = b"".join(packer.compress(b":\n" * (512 * 1024)) for _ in range(128)) + packer.flush()
    events, _ = await run(
        sends(whole(bomb, GZIP_HEAD)), UpstreamLimits(max_inflated_bytes=4 * 1024 * 1024)
    )
    assert events == [too_large(f"a compressed body inflates past {4 * 1024 * 1024} bytes")]


async def test_an_unknown_content_coding_is_refused() -> None:
    head = HEAD.replace(b"\r\n\r\n", b"\r\ncontent-encoding: br\r\n\r\n")
    events, server = await run(sends(whole(b"\x0b\x02\x80", head)))
    assert events == [
        StreamError(
            "upstream_protocol",
            "openai: the upstream sent a content coding that is not read",
            False,
        )
    ]
    assert len(server.requests) == 1


# Framing errors: named, final, never "closed before the stream began".

OK_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"


@pytest.mark.parametrize(
    ("sent", "code", "message"),
    [
        (b"SSH-2.0-OpenSSH_9.6\r\n\r\n", "upstream_protocol", "the upstream sent a malformed status line"),
        (b"HTTP/2 200 OK\r\n\r\n", "upstream_protocol", "the upstream sent a malformed status line"),
        (b"HTTP/1.1 099 Odd\r\ncontent-length: 0\r\n\r\n", "upstream_protocol", "the upstream sent a status code below 100"),
        (OK_HEAD + b"no colon here\r\n\r\n", "upstream_protocol", "the upstream sent a malformed header line"),
        (OK_HEAD + b"content-length: 3\r\ncontent-length: 4\r\n\r\nabc", "upstream_protocol", "the upstream sent ambiguous or invalid framing headers"),
        (OK_HEAD + b"content-length: -1\r\n\r\n", "upstream_protocol", "the upstream sent ambiguous or invalid framing headers"),
        (OK_HEAD + b"transfer-encoding: gzip, chunked\r\n\r\n0\r\n\r\n", "upstream_protocol", "the upstream sent a transfer coding other than chunked"),
        (b"HTTP/1.1 101 Switching Protocols\r\n\r\n", "upstream_protocol", "101 Switching Protocols without an upgrade request"),
        (OK_HEAD + b"transfer-encoding: chunked\r\n\r\nnope\r\n", "upstream_protocol", "the upstream sent a malformed chunk"),
        (OK_HEAD + b"transfer-encoding: chunked\r\n\r\n3\r\n: pingpong\r\n", "upstream_protocol", "the upstream sent a malformed chunk"),
        (OK_HEAD + b"x-big: " + b"a" * 9000 + b"\r\n\r\n", "upstream_too_large", "a response head line exceeds the header size limit"),
    ],
    ids=[
        "not-http", "http2", "status-99", "bad-header", "two-lengths", "bad-length",
        "transfer-coding", "101", "bad-chunk-size", "chunk-overrun", "head-line-too-long",
    ],
)  # fmt: skip
async def test_a_framing_error_is_named_and_not_retried(
    sent: bytes, code: str, message: str
) -> None:
    events, server = await run(sends(sent, sent, sent))
    assert events == [StreamError(code, f"openai: {message}", False)]  # type: ignore[arg-type]
    assert len(server.requests) == 1


async def test_a_bad_chunk_after_the_head_is_named_and_not_retried() -> None:
    async def answer(request: ServerRequest, writer: asyncio.StreamWriter) -> bool:
        writer.write(HEAD + chunk(b": ping\n\n"))
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.write(b"zz\r\n")
        await writer.drain()
        await asyncio.sleep(1)
        return False

    began = time.monotonic()
    events, server = await run(answer)
    assert events == [
        StreamError("upstream_protocol", "openai: the upstream sent a malformed chunk", False)
    ]
    assert len(server.requests) == 1
    assert time.monotonic() - began < 1.5  # not left waiting for the stall timeout


async def test_a_bad_chunk_mid_stream_is_named() -> None:
    async def answer(request: ServerRequest, writer: asyncio.StreamWriter) -> bool:
        writer.write(HEAD + chunk(delta("Hi")))
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.write(b"3\r\nabcdef\r\n")
        await writer.drain()
        await asyncio.sleep(1)
        return False

    events, _ = await run(answer)
    assert events == [
        TextDelta("content", "Hi"),
        StreamError("upstream_protocol", "openai: the upstream sent a malformed chunk", False),
    ]


@pytest.mark.parametrize(("count", "ok"), [(10, True), (11, False)])
async def test_headers_at_and_past_the_header_limit(count: int, ok: bool) -> None:
    # Two framing headers and the rest padding: `count` header lines in all.
    padding = b"".join(b"x-%d: 1\r\n" % i for i in range(count - 2))
    head = OK_HEAD + padding + b"transfer-encoding: chunked\r\n\r\n"
    events, _ = await run(sends(whole(delta("Hi") + STOP, head)), UpstreamLimits(max_headers=10))
    if ok:
        assert isinstance(events[-1], End)
    else:
        assert events == [too_large("the response head has more headers than the limit")]


@pytest.mark.parametrize(("size", "ok"), [(1000, True), (2000, False)])
async def test_a_header_at_and_past_the_header_size_limit(size: int, ok: bool) -> None:
    # aiohttp applies its field limit to a header's name and value, give or take a few bytes
    # it counts from the rest of the head; a header twice the limit is always refused.
    line = b"x-pad: " + b"a" * (size - 5)  # the name and the value: `size` bytes
    head = OK_HEAD + line + b"\r\ntransfer-encoding: chunked\r\n\r\n"
    limits = UpstreamLimits(max_header_bytes=1000)
    events, _ = await run(sends(whole(delta("Hi") + STOP, head)), limits)
    if ok:
        assert isinstance(events[-1], End)
    else:
        assert events == [too_large("a response head line exceeds the header size limit")]


# Cut connections are losses, not framing errors: retried only before the first event.


async def test_a_body_cut_before_the_first_event_is_retried() -> None:
    cut = HEAD + chunk(b": ping\n\n") + b"20\r\ndata: {"  # the peer closes inside a chunk
    events, server = await run(sends(cut, whole(delta("Hi") + STOP)))
    assert text_of(events) == "Hi"
    assert len(server.requests) == 2


async def test_a_body_cut_after_the_first_event_is_a_mid_stream_close() -> None:
    cut = HEAD + chunk(delta("Hi")) + b"20\r\ndata: {"
    events, server = await run(sends(cut, whole(delta("Hi") + STOP)))
    assert events == [
        TextDelta("content", "Hi"),
        StreamError("upstream_protocol", "openai: upstream closed the connection mid-stream", True),
    ]
    assert len(server.requests) == 1


# Redirects and proxies.


async def test_a_redirect_is_not_followed() -> None:
    moved = b"HTTP/1.1 307 Temporary Redirect\r\nlocation: http://127.0.0.1:9/v1\r\ncontent-length: 0\r\n\r\n"
    events, server = await run(sends(moved))
    assert events == [
        StreamError(
            "upstream_error", "openai: upstream returned 307 (redirects are not followed)", False
        )
    ]
    assert len(server.requests) == 1


@pytest.fixture
def no_proxy_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    import os

    for name in list(os.environ):
        if name.lower() in ("http_proxy", "https_proxy", "all_proxy", "no_proxy"):
            monkeypatch.delenv(name)
    return monkeypatch


async def test_http_proxy_carries_the_request(no_proxy_env: pytest.MonkeyPatch) -> None:
    async with RawServer(sends(whole(delta("via proxy") + STOP))) as proxy:
        no_proxy_env.setenv("HTTP_PROXY", f"http://pxuser:px%40pass@127.0.0.1:{proxy.port}")
        no_proxy_env.setenv("NO_PROXY", "localhost,.internal.test")
        target = f"http://upstream.test:{unused_port()}"  # resolvable only by the proxy
        events = await collect(provider(target, attempts=1), REQUEST)
        assert text_of(events) == "via proxy"
        [sent] = proxy.requests
        assert sent.target == target + "/v1/chat/completions"  # absolute form, to a proxy
        expected = base64.b64encode(b"pxuser:px@pass").decode()
        assert sent.headers["proxy-authorization"] == f"Basic {expected}"


async def test_no_proxy_bypasses_the_proxy(no_proxy_env: pytest.MonkeyPatch) -> None:
    async with (
        RawServer(sends()) as proxy,
        RawServer(sends(whole(delta("direct") + STOP))) as direct,
    ):
        no_proxy_env.setenv("http_proxy", f"http://127.0.0.1:{proxy.port}")
        no_proxy_env.setenv("no_proxy", "example.org, 127.0.0.1")
        events = await collect(provider(direct.url, attempts=1), REQUEST)
        assert text_of(events) == "direct"
        assert proxy.requests == []
        assert len(direct.requests) == 1


async def test_https_proxy_is_asked_for_a_tunnel(no_proxy_env: pytest.MonkeyPatch) -> None:
    refused = b"HTTP/1.1 407 Proxy Authentication Required\r\ncontent-length: 0\r\n\r\n"
    async with RawServer(sends(refused)) as proxy:
        no_proxy_env.setenv("HTTPS_PROXY", f"http://127.0.0.1:{proxy.port}")
        events = await collect(provider("https://api.upstream.test", attempts=1), REQUEST)
        [sent] = proxy.requests
        assert (sent.method, sent.target) == ("CONNECT", "api.upstream.test:443")
    assert events == [
        StreamError(
            "upstream_unreachable",
            "openai: cannot connect to api.upstream.test:443 "
            "(the proxy refused the tunnel (407) after 1 attempts)",
            True,
        )
    ]


# Logs never carry credentials.

CANARY_USER = "canaryuser7d1"
CANARY_PASS = "canarypass9f2"
CANARY_KEY = "canarykey3b8e"


async def test_no_log_line_carries_a_url_credential_or_query(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    async with RawServer(sends(whole(delta("Hi") + STOP))) as server:
        base = f"http://{CANARY_USER}:{CANARY_PASS}@127.0.0.1:{server.port}/v1?api-key={CANARY_KEY}"
        async with UpstreamClient() as http:
            reply = await http.request("POST", base, body=b"{}")
            await reply.aclose()
            with pytest.raises(UpstreamUnreachableError) as failure:
                await http.request("POST", base.replace(str(server.port), str(unused_port())))
        # What third-party libraries log about requests, in their words.
        logging.getLogger("httpx").info('HTTP Request: POST %s "HTTP/1.1 200 OK"', base)
        logging.getLogger("aiohttp.client").warning("request to <%s> failed", base)
        logging.getLogger("holdback.upstream").error("failed: %s", base, exc_info=ValueError(base))
        logging.getLogger("asyncio").error("Unclosed response %r", {"url": base})
    assert server.requests[0].headers["authorization"].startswith("Basic ")
    text = caplog.text + "\n".join(r.getMessage() for r in caplog.records)
    for canary in (CANARY_USER, CANARY_PASS, CANARY_KEY):
        assert canary not in text
        assert canary not in str(failure.value)
    assert text.count("http://***@127.0.0.1:") >= 4  # masked, not dropped
    assert "?***" in text
