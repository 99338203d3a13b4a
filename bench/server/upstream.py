"""The fake upstream: an OpenAI-compatible streaming server, paced, cheap, and honest about it.

The rule it keeps: every content chunk is written on a fixed cadence (default 20 a second per
stream) and its send time is logged before the write, on the system-wide monotonic clock, so
the analysis can measure what the server under test adds; so is the time of the stream's end
(one interval after the last chunk). It is cheap by construction: replies are encoded in full
when the request arrives, and one timer loop writes every due chunk of every stream, so the
cost per chunk is one `transport.write`. How late that loop ran (schedule lag) is logged too,
to show the upstream was never the bottleneck.

`GET /log` hands over (and forgets) everything logged since the last call; `GET /healthz` says
it is up. With `--fault-seed`, streams are disturbed as `script.plan_for` says: a 500 before
the first chunk (on every retry of that stream), or a connection cut after `at` chunks. With
`--style prose`, replies are `script.prose_text` (sentences of a real reply's length, for the
moderation workload) instead of `script.reply_text`.

Run: `python -m server.upstream --port P [--rate 20] [--chars 400] [--fault-seed S]
[--style prose]`.
"""

from __future__ import annotations

import argparse
import asyncio
import heapq
import itertools
import time
from dataclasses import dataclass, field
from typing import Any

import orjson

from . import script, wire

_MAX_SLEEP = 0.005  # the timer loop wakes at least this often, so a new stream is never late


@dataclass(slots=True)
class Stream:
    key: str
    conn: Connection
    events: list[bytes]  # chunked-encoded content events
    closing: bytes
    cut_at: int | None
    record: dict[str, Any]
    index: int = 0
    sent_ns: list[int] = field(default_factory=list)


class Upstream:
    def __init__(
        self, rate: float, chars: int, fault_seed: int | None, style: str = "script"
    ) -> None:
        self.interval_ns = int(1e9 / rate)
        self.chars = chars
        self.text = script.prose_text if style == "prose" else script.reply_text
        self.fault_seed = fault_seed
        self.heap: list[tuple[int, int, Stream]] = []
        self.seq = itertools.count()
        self.log: list[dict[str, Any]] = []
        self.lags_us: list[int] = []
        self.counts = {"requests": 0, "chunks": 0, "client_gone": 0, "bad_requests": 0}

    def handle(self, conn: Connection, request: wire.Request) -> None:
        if request.method == "GET" and request.path == "/healthz":
            conn.write(wire.response(200, "OK", b'{"status":"ok"}'))
        elif request.method == "GET" and request.path == "/log":
            conn.write(wire.response(200, "OK", self.take_log()))
        elif request.method == "POST" and request.path == "/v1/chat/completions":
            self.counts["requests"] += 1
            self.start_stream(conn, request.body)
        else:
            conn.write(wire.response(404, "Not Found", wire.error_body("no such route")))

    def take_log(self) -> bytes:
        lags = sorted(self.lags_us)
        body = {
            "streams": self.log,
            "counts": self.counts,
            "lag_us": {
                "p50": lags[len(lags) // 2] if lags else 0,
                "p99": lags[int(len(lags) * 0.99)] if lags else 0,
                "max": lags[-1] if lags else 0,
            },
        }
        self.log, self.lags_us = [], []
        self.counts = dict.fromkeys(self.counts, 0)
        return orjson.dumps(body)

    def start_stream(self, conn: Connection, body: bytes) -> None:
        user_text = wire.last_user_text(body)
        key = script.find_key(user_text) or f"anon{self.counts['requests']}"
        tokens = script.find_tokens(user_text) or script.DEFAULT_TOKENS
        plan = script.plan_for(self.fault_seed, key)
        record: dict[str, Any] = {"key": key, "plan": plan.kind, "start_ns": time.monotonic_ns()}
        self.log.append(record)
        if plan.kind == "upstream_500":
            conn.write(wire.response(500, "Internal Server Error", wire.error_body("bench fault")))
            return
        text = self.text(key, tokens, self.chars)
        pieces = script.split(text, script.chunk_sizes(key, len(text)))
        stream_id = "chatcmpl-" + key
        created = int(time.time())
        record.update(text=text, sizes=[len(p) for p in pieces])
        stream = Stream(
            key=key,
            conn=conn,
            events=[wire.chunked(wire.content_event(stream_id, created, p)) for p in pieces],
            closing=wire.chunked(
                wire.closing_events(stream_id, created, len(body) // 4, len(pieces))
            )
            + wire.STREAM_END,
            cut_at=plan.at if plan.kind == "upstream_cut" else None,
            record=record,
        )
        record["sent_ns"] = stream.sent_ns
        conn.stream = stream
        conn.write(wire.STREAM_HEAD + wire.chunked(wire.role_event(stream_id, created)))
        self.schedule(time.monotonic_ns() + self.interval_ns, stream)

    def schedule(self, due: int, stream: Stream) -> None:
        heapq.heappush(self.heap, (due, next(self.seq), stream))

    async def pump(self) -> None:
        """Write every due chunk; sleep until the next one is due."""
        heap = self.heap
        while True:
            now = time.monotonic_ns()
            while heap and heap[0][0] <= now:
                due, _, stream = heapq.heappop(heap)
                self.step(stream, due)
                now = time.monotonic_ns()
            wait = (heap[0][0] - now) / 1e9 if heap else _MAX_SLEEP
            await asyncio.sleep(min(max(wait, 0.0), _MAX_SLEEP))

    def step(self, stream: Stream, due: int) -> None:
        conn = stream.conn
        if conn.closed or conn.stream is not stream:
            return
        if stream.index == len(stream.events):
            stream.record["end_ns"] = time.monotonic_ns()
            conn.write(stream.closing)
            stream.record["done"] = True
            conn.stream = None
            return
        if stream.cut_at is not None and stream.index >= stream.cut_at:
            stream.record["cut"] = True
            conn.stream = None
            conn.close()
            return
        sent = time.monotonic_ns()
        conn.write(stream.events[stream.index])
        stream.sent_ns.append(sent)
        stream.index += 1
        self.counts["chunks"] += 1
        self.lags_us.append((sent - due) // 1000)
        self.schedule(due + self.interval_ns, stream)


class Connection(asyncio.Protocol):
    def __init__(self, app: Upstream) -> None:
        self.app = app
        self.parser = wire.RequestParser()
        self.transport: asyncio.Transport | None = None
        self.stream: Stream | None = None
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        try:
            for request in self.parser.feed(data):
                self.app.handle(self, request)
        except wire.BadRequestError as exc:
            self.app.counts["bad_requests"] += 1
            body = wire.error_body(str(exc), "bad_request")
            self.write(wire.response(400, "Bad Request", body, closing=True))
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.stream is not None:
            self.stream.record["client_gone"] = True
            self.app.counts["client_gone"] += 1
            self.stream = None

    def write(self, data: bytes) -> None:
        if self.transport is not None and not self.closed:
            self.transport.write(data)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


async def serve(host: str, port: int, app: Upstream) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: Connection(app), host, port, backlog=4096)
    async with server:
        await app.pump()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="paced fake OpenAI-compatible upstream")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--rate", type=float, default=20.0, help="chunks per second per stream")
    parser.add_argument("--chars", type=int, default=400, help="characters per reply")
    parser.add_argument("--fault-seed", type=int, default=None)
    parser.add_argument("--style", choices=("script", "prose"), default="script")
    args = parser.parse_args(argv)
    if args.host != "127.0.0.1":
        parser.error("the fake upstream listens on 127.0.0.1 only")
    app = Upstream(args.rate, args.chars, args.fault_seed, args.style)
    try:
        asyncio.run(serve(args.host, args.port, app))
    except KeyboardInterrupt:
        return 0
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
