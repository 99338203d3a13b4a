"""Client CPU per streamed upstream event: the upstream client against the ones it replaced.

Contenders: `UpstreamClient` (aiohttp with its C parser, as `providers/http.py` reads it),
aiohttp's bare session, holdback's former `StreamingTransport` under httpx (while it exists
in the tree), and httpx's default transport.

The rule it keeps: only the client's own CPU is measured (`time.process_time`, the upstream
runs in another process), every contender reads the same streams from the same server, rounds
interleave the contenders and each keeps its best round, so load on a shared machine hits all
of them alike.

The upstream streams, to M concurrent POSTs, N chunked SSE events each (~150 bytes, one event
per chunk) at R events a second, with the streams' phases spread so arrivals are not batched.
Connections are warmed first, as a long-running server's pool would be.

    .venv/bin/python bench/transport_bench.py [--streams 200] [--events 60] [--rate 20]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable

import aiohttp
import httpx

from holdback.providers.transport import UpstreamClient

try:  # the transport UpstreamClient replaced, measured while it is still in the tree
    from holdback.providers.transport import (  # type: ignore[attr-defined,unused-ignore]
        StreamingTransport,
    )
except ImportError:
    StreamingTransport = None

TICK = 0.005  # the upstream's scheduling step; stream i writes on the ticks of its phase
BODY = b'{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"hi"}]}'


def sse_event(i: int) -> bytes:
    payload = (
        b'{"id":"chatcmpl-AbCdEfGh0123456789","object":"chat.completion.chunk",'
        b'"created":1731000000,"model":"gpt-4o-mini-2024-07-18","choices":[{"index":0,'
        b'"delta":{"content":" word%03d"},"finish_reason":null}]}' % (i % 1000)
    )
    data = b"data: " + payload + b"\n\n"
    return b"%x\r\n%b\r\n" % (len(data), data)


# The upstream (its own process).


async def serve(events: int, rate: float) -> None:
    period_ticks = max(1, round(1 / rate / TICK))
    chunks = [sse_event(i) for i in range(events)]
    streams: dict[int, list[tuple[asyncio.Transport, int]]] = {}
    head = (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    )
    counter = 0

    class Upstream(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            assert isinstance(transport, asyncio.Transport)
            self.transport = transport
            self.buffer = b""

        def data_received(self, data: bytes) -> None:
            nonlocal counter
            self.buffer += data
            while b"\r\n\r\n" in self.buffer:
                request, _, rest = self.buffer.partition(b"\r\n\r\n")
                length = 0
                for line in request.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                if len(rest) < length:
                    return
                self.buffer = rest[length:]
                self.transport.write(head)
                counter += 1
                streams.setdefault(counter % period_ticks, []).append((self.transport, 0))

    loop = asyncio.get_running_loop()
    server = await loop.create_server(Upstream, "127.0.0.1", 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    tick = 0
    next_at = loop.time()
    while True:
        phase = tick % period_ticks
        due = streams.pop(phase, [])
        keep: list[tuple[asyncio.Transport, int]] = []
        for transport, sent in due:
            if transport.is_closing():
                continue
            if sent < events:
                transport.write(chunks[sent])
                keep.append((transport, sent + 1))
            else:
                transport.write(b"0\r\n\r\n")
        if keep:
            streams.setdefault(phase, []).extend(keep)
        tick += 1
        next_at += TICK
        await asyncio.sleep(max(0.0, next_at - loop.time()))


# The client (this process).

Round = Callable[[str, int], Awaitable[int]]


async def read_bytes(response: httpx.Response) -> int:
    n = 0
    async for _ in response.aiter_bytes():
        n += 1
    return n


async def read_lines(response: httpx.Response) -> int:
    n = 0
    async for _ in response.aiter_lines():
        n += 1
    return n


def httpx_round(http: httpx.AsyncClient, read: Callable[[httpx.Response], Awaitable[int]]) -> Round:
    async def one(url: str) -> int:
        async with http.stream("POST", url, content=BODY) as response:
            response.raise_for_status()
            return await read(response)

    async def run(url: str, streams: int) -> int:
        return sum(await asyncio.gather(*(one(url) for _ in range(streams))))

    return run


def upstream_round(http: UpstreamClient) -> Round:
    """As `providers/http.py` reads a stream: `read()` until the body ends."""

    async def one(url: str) -> int:
        response = await http.request("POST", url, body=BODY, read=60.0, head=60.0)
        try:
            n = 0
            while await response.read():
                n += 1
            return n
        finally:
            await response.aclose()

    async def run(url: str, streams: int) -> int:
        return sum(await asyncio.gather(*(one(url) for _ in range(streams))))

    return run


def aiohttp_round(session: aiohttp.ClientSession) -> Round:
    async def one(url: str) -> int:
        async with session.post(url, data=BODY) as response:
            n = 0
            while await response.content.readany():
                n += 1
            return n

    async def run(url: str, streams: int) -> int:
        return sum(await asyncio.gather(*(one(url) for _ in range(streams))))

    return run


async def measure(url: str, streams: int, events: int, rounds: int) -> dict[str, float]:
    timeout = httpx.Timeout(connect=10.0, read=60.0, write=60.0, pool=10.0)
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=max(256, streams))
    default = httpx.AsyncClient(limits=limits, timeout=timeout)
    upstream = UpstreamClient()
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), auto_decompress=False)
    closers: list[Callable[[], Awaitable[None]]] = [default.aclose, upstream.aclose, session.close]
    contenders: dict[str, Round] = {
        "UpstreamClient (aiohttp), read()": upstream_round(upstream),
        "aiohttp session, readany()": aiohttp_round(session),
    }
    if StreamingTransport is not None:
        streaming = httpx.AsyncClient(transport=StreamingTransport(), timeout=timeout)
        closers.append(streaming.aclose)
        contenders["StreamingTransport, aiter_bytes"] = httpx_round(streaming, read_bytes)
    contenders["httpx default transport, aiter_bytes"] = httpx_round(default, read_bytes)
    contenders["httpx default transport, aiter_lines"] = httpx_round(default, read_lines)
    best = dict.fromkeys(contenders, float("inf"))
    try:
        for run in contenders.values():  # warm the pools
            await run(url, streams)
        for r in range(rounds):
            for name, run in contenders.items():
                gc.collect()
                cpu, wall = time.process_time(), time.perf_counter()
                pieces = await run(url, streams)
                cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
                per_event = cpu / (streams * events)
                best[name] = min(best[name], per_event)
                print(
                    f"round {r + 1} {name}: {per_event * 1e6:.1f} µs/event, "
                    f"{pieces} pieces, {cpu / wall:.0%} of a core over {wall:.2f} s",
                    file=sys.stderr,
                )
    finally:
        for close in closers:
            await close()
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=200)
    parser.add_argument("--events", type=int, default=60)
    parser.add_argument("--rate", type=float, default=20.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        asyncio.run(serve(args.events, args.rate))
        return
    upstream = subprocess.Popen(
        [
            sys.executable,
            __file__,
            "--serve",
            "--events",
            str(args.events),
            "--rate",
            str(args.rate),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert upstream.stdout is not None
        port = int(upstream.stdout.readline())
        url = f"http://127.0.0.1:{port}/v1/chat/completions"
        best = asyncio.run(measure(url, args.streams, args.events, args.rounds))
    finally:
        upstream.terminate()
        upstream.wait(timeout=10)
    base_name = (
        "StreamingTransport, aiter_bytes"
        if "StreamingTransport, aiter_bytes" in best
        else "aiohttp session, readany()"
    )
    base = best[base_name]
    print(
        f"\n{args.streams} streams × {args.events} events at {args.rate:g}/s, "
        f"client CPU per event, best of {args.rounds} interleaved rounds\n"
    )
    print(f"| reader | µs CPU / event | vs {base_name} |")
    print("|---|---:|---:|")
    for name, cost in best.items():
        print(f"| {name} | {cost * 1e6:.1f} | {cost / base:.2f}× |")


if __name__ == "__main__":
    main()
