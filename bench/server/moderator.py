"""The fake moderator: holdback's `http:<url>` webhook contract on loopback, answering `allow`
after a fixed latency, and counting what it was asked.

The rule it keeps: every request is answered `{"action": "allow"}` exactly `--latency-ms`
after it was read, never sooner, and each one is logged, on the system-wide monotonic clock,
with the time it arrived and the time it was answered, so the analysis can tell the
moderator's own latency from what the server adds around it. A request that does not keep
the contract (`POST /check`, a JSON object of exactly `text`, `channel` and
`conversation_id`, strings, the channel one of three) is answered 400 and counted as bad:
holdback then fails the reply closed, and the run shows it. Requests are served
concurrently: a slow answer never delays another one.

`GET /log` hands over (and forgets) everything logged since the last call, window texts
included (they are the bench's own canaries, tokenized); `GET /healthz` says it is up.

Run: `python -m server.moderator --port P --latency-ms 50`.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any, Final

import orjson
from aiohttp import web

CHANNELS: Final = frozenset({"content", "reasoning", "tool_call"})
KEYS: Final = frozenset({"text", "channel", "conversation_id"})
MAX_BODY: Final = 64 * 1024
ALLOW: Final = orjson.dumps({"action": "allow"})


def contract_error(body: Any) -> str | None:
    """Why a request body does not keep the webhook contract, or None if it does."""
    if not isinstance(body, dict) or set(body) != KEYS:
        return "the body is an object of text, channel and conversation_id"
    if not all(isinstance(body[k], str) for k in KEYS):
        return "text, channel and conversation_id are strings"
    if body["channel"] not in CHANNELS:
        return "the channel is content, reasoning or tool_call"
    return None


class Moderator:
    def __init__(self, latency_ms: float) -> None:
        self.latency_s = latency_ms / 1e3
        self.log: list[dict[str, Any]] = []
        self.counts = {"requests": 0, "bad_requests": 0}

    async def check(self, request: web.Request) -> web.Response:
        received = time.monotonic_ns()
        self.counts["requests"] += 1
        raw = await request.read()
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            body = None
        error = contract_error(body)
        if request.content_type != "application/json":
            error = error or "the content type is application/json"
        if error is not None:
            self.counts["bad_requests"] += 1
            return web.json_response({"error": error}, status=400)
        due = received + int(self.latency_s * 1e9)
        for _ in range(2):  # a second sleep, should the loop's timer wake a hair early
            left = (due - time.monotonic_ns()) / 1e9
            if left > 0:
                await asyncio.sleep(left)
        self.log.append(
            {
                "received_ns": received,
                "answered_ns": time.monotonic_ns(),
                "conversation_id": body["conversation_id"],
                "channel": body["channel"],
                "text": body["text"],
            }
        )
        return web.Response(body=ALLOW, content_type="application/json")

    async def take_log(self, request: web.Request) -> web.Response:
        body = {"requests": self.log, "counts": self.counts, "latency_ms": self.latency_s * 1e3}
        self.log = []
        self.counts = dict.fromkeys(self.counts, 0)
        return web.Response(body=orjson.dumps(body), content_type="application/json")

    async def healthz(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})


def app(moderator: Moderator) -> web.Application:
    application = web.Application(client_max_size=MAX_BODY)
    application.router.add_post("/check", moderator.check)
    application.router.add_get("/log", moderator.take_log)
    application.router.add_get("/healthz", moderator.healthz)
    return application


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="fake webhook moderator, always allow")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--latency-ms", type=float, required=True)
    args = parser.parse_args(argv)
    if args.host != "127.0.0.1":
        parser.error("the fake moderator listens on 127.0.0.1 only")
    if not 0 <= args.latency_ms <= 10_000:
        parser.error("--latency-ms must be between 0 and 10000")
    web.run_app(
        app(Moderator(args.latency_ms)),
        host=args.host,
        port=args.port,
        print=None,
        access_log=None,
        handle_signals=True,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
