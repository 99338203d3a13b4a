"""The new-conversation workload: N people open a conversation at once, with one question each.

The rule it keeps: every conversation is timed from the moment its client starts connecting,
on the system-wide monotonic clock, so the handshake, the user message's acceptance, the reply
start (first delta) and the reply end (`assistant_done`) are measured the way a person waits
for them. A round opens all N connections at the same instant; rounds follow each other after
a pause, each with new conversations. Nothing else is done while a round runs; matching the
replies against the upstream's log happens afterwards (`driver.measure_burst`).

Run: `python -m server.burst --url ws://127.0.0.1:P/ws --n 100 --rounds 5 --out F`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import time
from typing import Any

import orjson
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake
from websockets.typing import Origin

from . import script

# Stream keys of burst rounds use run tags from here on, apart from the 10-turn workload's.
RUN_BASE = 400


async def conversation(args: argparse.Namespace, run: int, conn: int) -> dict[str, Any]:
    """One new conversation with one user message; its timings and the text it showed."""
    key = script.stream_key(run, conn, 0)
    text = script.user_message(conn, key)
    record: dict[str, Any] = {"key": key, "conn": conn, "outcome": "timeout"}
    parts: list[str] = []
    record["connect_ns"] = time.monotonic_ns()
    try:
        async with (
            asyncio.timeout(args.reply_timeout),
            connect(
                args.url,
                origin=Origin(args.origin) if args.origin else None,
                compression=None,  # as the 10-turn workload's generator, unless --deflate
                max_size=2**22,
                open_timeout=args.reply_timeout,
                ping_interval=None,
            ) as ws,
        ):
            record["open_ns"] = time.monotonic_ns()
            await ws.send(
                orjson.dumps(
                    {"type": "user_message", "conversation_id": None, "text": text}
                ).decode()
            )
            record["sent_ns"] = time.monotonic_ns()
            while True:
                frame = orjson.loads(await ws.recv())
                now = time.monotonic_ns()
                kind = frame.get("type")
                if kind == "message_accepted":
                    record["accepted_ns"] = now
                    record["values"] = {
                        m["token"]: text[m["start"] : m["end"]] for m in frame.get("masked", ())
                    }
                elif kind == "assistant_delta" and frame.get("channel") == "content":
                    record.setdefault("first_ns", now)
                    parts.append(frame["text"])
                elif kind == "assistant_done":
                    record["done_ns"] = now
                    record["outcome"] = "done:" + str(frame.get("status"))
                    break
                elif kind == "error":
                    record["outcome"] = "error:" + str(frame.get("code"))
                    break
    except TimeoutError:
        pass
    except (OSError, InvalidHandshake) as exc:
        record["outcome"] = "connect:" + type(exc).__name__
    except ConnectionClosed:
        record["outcome"] = "connection_closed"
    record["closed_ns"] = time.monotonic_ns()
    record["text"] = "".join(parts)
    return record


async def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    for r in range(args.rounds):
        if r:
            await asyncio.sleep(args.pause)
        tag = RUN_BASE + args.run * args.rounds + r
        batch = await asyncio.gather(*(conversation(args, tag, c) for c in range(args.n)))
        for record in batch:
            record["round"] = r
        records.extend(batch)
    return records


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="burst of new one-turn conversations")
    parser.add_argument("--url", required=True)
    parser.add_argument("--origin", default=None)
    parser.add_argument("--n", type=int, required=True)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--pause", type=float, default=1.0, help="seconds between rounds")
    parser.add_argument("--run", type=int, default=0, help="run number (keys stay distinct)")
    parser.add_argument("--reply-timeout", type=float, default=60.0)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    if not 1 <= args.n <= 5000 or not 1 <= args.rounds <= 50:
        parser.error("--n must be 1..5000 and --rounds 1..50")
    records: list[dict[str, Any]] = []
    with contextlib.suppress(KeyboardInterrupt):
        records = asyncio.run(run(args))
    with open(args.out, "wb") as fh:
        fh.write(orjson.dumps({"records": records}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
