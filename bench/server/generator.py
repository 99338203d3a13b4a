"""The load generator: N concurrent WebSocket conversations, each sending message after message.

The rule it keeps: it records, and does nothing else while it measures. For every frame it
takes the system-wide monotonic clock and the cumulative count of reply characters; matching
those against the upstream's send log happens afterwards, in another process (`analysis`).
Its own event-loop lag is sampled all along, so a report can show the generator was never
the bottleneck. Every loop is bounded by the run's deadline and a turn limit.

With `--fault-seed`, some replies are disturbed on purpose as `script.plan_for` says: the
client cancels after `at` delta frames, or drops the connection (and opens a new one).

Run: `python -m server.generator --url ws://127.0.0.1:P/ws --n 50 --start-ns T ... --out F`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import time
from typing import Any

import orjson
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake
from websockets.typing import Origin

from . import script

MAX_TURNS = 100_000
LAG_TICK_S = 0.01
BUSY_BACKOFF_S = 0.2


class Generator:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.rounds: list[dict[str, Any]] = []
        self.lags_us: list[int] = []
        self.failures: dict[str, int] = {}
        self.connects = 0

    def fail(self, what: str) -> None:
        self.failures[what] = self.failures.get(what, 0) + 1

    async def run(self) -> None:
        a = self.args
        lag = asyncio.create_task(self.watch_lag())
        try:
            async with asyncio.timeout(max(0.0, (a.deadline_ns - time.monotonic_ns()) / 1e9)):
                await asyncio.gather(*(self.client(conn) for conn in range(a.n)))
        except TimeoutError:
            self.fail("deadline")
        finally:
            lag.cancel()

    async def watch_lag(self) -> None:
        while True:
            before = time.monotonic_ns()
            await asyncio.sleep(LAG_TICK_S)
            self.lags_us.append((time.monotonic_ns() - before) // 1000 - int(LAG_TICK_S * 1e6))

    async def client(self, conn: int) -> None:
        a = self.args
        await _sleep_until(a.start_ns + int(conn * a.ramp * 1e9 / max(a.n, 1)))
        turn = 0
        while time.monotonic_ns() < a.stop_ns and turn < MAX_TURNS:
            try:
                async with connect(
                    a.url,
                    origin=Origin(a.origin) if a.origin else None,
                    compression="deflate" if a.deflate else None,
                    max_size=2**22,
                    open_timeout=30,
                    ping_interval=None,
                ) as ws:
                    self.connects += 1
                    turn = await self.conversation(ws, conn, turn)
            except (OSError, InvalidHandshake, TimeoutError) as exc:
                self.fail("connect:" + type(exc).__name__)
                await asyncio.sleep(0.5)
            except ConnectionClosed:
                self.fail("connection_closed")

    async def conversation(self, ws: ClientConnection, conn: int, turn: int) -> int:
        """Send turns on one connection until told to stop; returns the next turn number."""
        a = self.args
        conversation_id: str | None = None
        in_conversation = 0
        while time.monotonic_ns() < a.stop_ns and turn < MAX_TURNS:
            key = script.stream_key(a.run, conn, turn)
            turn += 1
            plan = script.plan_for(a.fault_seed, key)
            text = script.user_message(conn, key)
            record: dict[str, Any] = {"key": key, "conn": conn, "plan": plan.kind}
            self.rounds.append(record)
            record["sent_ns"] = time.monotonic_ns()
            await ws.send(
                orjson.dumps(
                    {"type": "user_message", "conversation_id": conversation_id, "text": text}
                ).decode()
            )
            await self.receive(ws, text, plan, record)
            if record["outcome"] == "disconnected":
                return turn
            if record["outcome"] == "error:busy":
                # The previous reply is not over server-side yet: wait, as a person would.
                await asyncio.sleep(BUSY_BACKOFF_S)
            conversation_id = record.get("conversation_id")
            in_conversation += 1
            if in_conversation >= a.turns_per_conversation:
                conversation_id, in_conversation = None, 0
        return turn

    async def receive(
        self, ws: ClientConnection, text: str, plan: script.Plan, record: dict[str, Any]
    ) -> None:
        """Read one reply. Frames of an earlier reply (by `message_id`) are counted, not used.

        An `error` frame ends the round unless it belongs to a reply that started: holdback
        then still sends that reply's `assistant_done`, which is awaited (and recorded).
        """
        frames_ns: list[int] = []
        frames_cum: list[int] = []
        parts: list[str] = []
        cum = 0
        record["outcome"] = "timeout"
        record["stray"] = 0
        try:
            async with asyncio.timeout(self.args.reply_timeout):
                while True:
                    raw = await ws.recv()
                    now = time.monotonic_ns()
                    frame = orjson.loads(raw)
                    kind = frame.get("type")
                    mine = frame.get("message_id") in (None, record.get("message_id"))
                    if kind == "assistant_delta":
                        if not mine or "message_id" not in record:
                            record["stray"] += 1
                            continue
                        if frame.get("channel") != "content":
                            continue
                        piece = frame["text"]
                        parts.append(piece)
                        cum += len(piece)
                        frames_ns.append(now)
                        frames_cum.append(cum)
                        if len(frames_ns) == plan.at and plan.kind == "client_cancel":
                            await ws.send(
                                orjson.dumps(
                                    {
                                        "type": "cancel",
                                        "conversation_id": record.get("conversation_id"),
                                    }
                                ).decode()
                            )
                        elif len(frames_ns) == plan.at and plan.kind == "client_disconnect":
                            record["outcome"] = "disconnected"
                            await ws.close()
                            return
                    elif kind == "message_accepted":
                        record["conversation_id"] = frame.get("conversation_id")
                        record["user_message_id"] = frame.get("message_id")
                        record["values"] = {
                            m["token"]: text[m["start"] : m["end"]] for m in frame.get("masked", ())
                        }
                    elif kind == "assistant_start":
                        record["message_id"] = frame.get("message_id")
                    elif kind == "assistant_done":
                        if not mine or "message_id" not in record:
                            record["stray"] += 1
                            continue
                        done = "done:" + str(frame.get("status"))
                        if record["outcome"].startswith("error:"):
                            record["then"] = done
                        else:
                            record["outcome"] = done
                        return
                    elif kind == "error":
                        if not mine:
                            record["stray"] += 1
                            continue
                        record["outcome"] = "error:" + str(frame.get("code"))
                        if record.get("conversation_id") is None:
                            record["conversation_id"] = frame.get("conversation_id")
                        if "message_id" not in record:
                            return
        except TimeoutError:
            self.fail("reply_timeout")
        finally:
            record["text"] = "".join(parts)
            if not self.args.no_frames:
                record["frames_ns"] = frames_ns
                record["frames_cum"] = frames_cum


async def _sleep_until(when_ns: int) -> None:
    delay = (when_ns - time.monotonic_ns()) / 1e9
    if delay > 0:
        await asyncio.sleep(delay)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="WebSocket load generator")
    parser.add_argument("--url", required=True)
    parser.add_argument("--origin", default=None)
    parser.add_argument("--n", type=int, required=True)
    parser.add_argument("--run", type=int, default=0, help="run tag in stream keys (0..675)")
    parser.add_argument("--start-ns", type=int, required=True)
    parser.add_argument("--ramp", type=float, default=2.0)
    parser.add_argument("--stop-ns", type=int, required=True, help="no new message after this")
    parser.add_argument("--deadline-ns", type=int, required=True, help="hard end of the run")
    parser.add_argument("--reply-timeout", type=float, default=60.0)
    parser.add_argument("--turns-per-conversation", type=int, default=10)
    parser.add_argument("--fault-seed", type=int, default=None)
    parser.add_argument("--deflate", action="store_true", help="negotiate permessage-deflate")
    parser.add_argument("--no-frames", action="store_true", help="do not keep per-frame times")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    gen = Generator(args)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(gen.run())
    lags = sorted(gen.lags_us)
    summary = {
        "rounds": gen.rounds,
        "failures": gen.failures,
        "connects": gen.connects,
        "lag_us": {
            "p50": lags[len(lags) // 2] if lags else 0,
            "p99": lags[int(len(lags) * 0.99)] if lags else 0,
            "max": lags[-1] if lags else 0,
        },
    }
    with open(args.out, "wb") as fh:
        fh.write(orjson.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
