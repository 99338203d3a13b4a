"""The moderation workload's client: the same replies against holdback with moderation off and
with a webhook moderator at each latency, rounds interleaved.

The rule it keeps: every mode is served by its own holdback process (moderation is chosen at
start-up), all running at once, and each round sends the same C conversations (the same
stream keys, so the same user messages, the same replies, the same chunks at the same
cadence) to one mode after the other, in an order that turns each round. So a sentence of one
reply can be set against itself across modes, and slow drift of the machine falls on every
mode alike. Nothing but recording happens while a round runs:

- connections are opened before the round's first edge and closed after its last;
- the measured server's CPU is read from its own CPU-time clock at the round's edges (just
  before the first message is sent, just after every connection got `assistant_done`);
- for every conversation: the system-wide monotonic time just before its message was sent,
  of `message_accepted`, of the first content delta, of `assistant_done`, and for every
  content delta its arrival time and the cumulative count of reply characters;
- conversation c of a round starts c × `--stagger` seconds after the first, so the streams'
  chunks do not all arrive in the same instant.

One warm-up round per mode comes first and is not counted (the first call to the moderator
opens its connection). Matching the records against the upstream's and the moderators' logs
is `moderation_figures.figures`.

Run: `python -m server.moderation --target off=PORT:PID --target http-50ms=PORT:PID
--conversations 4 --rounds 5 --out F`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import time
from typing import Any, Final

import orjson
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake
from websockets.typing import Origin

from . import script, watchers

RUN_BASE: Final = 650  # run tags of stream keys (watchers use 599-6xx, a key holds < 676)
WARM_UP_TAG: Final = 649
MAX_ROUNDS: Final = 20
MAX_CONVERSATIONS: Final = 16


def key_of(number: int, conn: int) -> str:
    """The stream key of conversation `conn` of round `number` (-1: the warm-up), the same
    in every mode."""
    return script.stream_key(WARM_UP_TAG if number < 0 else RUN_BASE + number, conn, 0)


def order(modes: list[str], number: int) -> list[str]:
    """The modes of round `number`, turned by one each round."""
    at = number % len(modes)
    return modes[at:] + modes[:at]


class Rig:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.targets: dict[str, tuple[int, int]] = dict(args.target)

    async def open(self, port: int) -> ClientConnection:
        return await connect(
            f"ws://127.0.0.1:{port}/ws",
            origin=Origin(f"http://127.0.0.1:{port}"),
            compression=None,
            max_size=2**22,
            open_timeout=30,
            ping_interval=None,
        )

    async def one_round(self, mode: str, number: int) -> dict[str, Any]:
        port, pid = self.targets[mode]
        n = self.args.conversations
        result: dict[str, Any] = {"mode": mode, "round": number}
        sockets: list[ClientConnection] = []
        try:
            opened = await asyncio.gather(
                *(self.open(port) for _ in range(n)), return_exceptions=True
            )
            sockets = [ws for ws in opened if isinstance(ws, ClientConnection)]
            for failed in opened:
                if isinstance(failed, BaseException):
                    raise failed
            await asyncio.sleep(self.args.settle)
            before = watchers.cpu_seconds(pid)
            result["start_ns"] = time.monotonic_ns()
            records = await asyncio.gather(
                *(self.conversation(ws, number, c) for c, ws in enumerate(sockets))
            )
            result["cpu_s"] = watchers.cpu_seconds(pid) - before
            result["end_ns"] = time.monotonic_ns()
            result["records"] = records
        except (OSError, InvalidHandshake, TimeoutError, ConnectionClosed) as exc:
            result["failure"] = "connection:" + type(exc).__name__
        finally:
            await asyncio.gather(*(s.close() for s in sockets), return_exceptions=True)
        return result

    async def conversation(self, ws: ClientConnection, number: int, conn: int) -> dict[str, Any]:
        """One new conversation with one message; its times and the text it was shown."""
        await asyncio.sleep(conn * self.args.stagger)
        key = key_of(number, conn)
        text = script.user_message(conn, key)
        record: dict[str, Any] = {"key": key, "conn": conn, "outcome": "timeout"}
        frames_ns: list[int] = []
        frames_cum: list[int] = []
        parts: list[str] = []
        total = 0
        message = orjson.dumps({"type": "user_message", "conversation_id": None, "text": text})
        record["sent_ns"] = time.monotonic_ns()
        try:
            await ws.send(message.decode())
            async with asyncio.timeout(self.args.reply_timeout):
                while True:
                    frame = orjson.loads(await ws.recv())
                    now = time.monotonic_ns()
                    kind = frame.get("type")
                    if kind == "message_accepted":
                        record["accepted_ns"] = now
                        record["conversation_id"] = frame.get("conversation_id")
                        record["values"] = {
                            m["token"]: text[m["start"] : m["end"]] for m in frame.get("masked", ())
                        }
                    elif kind == "assistant_delta" and frame.get("channel") == "content":
                        record.setdefault("first_ns", now)
                        parts.append(frame["text"])
                        total += len(frame["text"])
                        frames_ns.append(now)
                        frames_cum.append(total)
                    elif kind == "assistant_done":
                        record["done_ns"] = now
                        record["outcome"] = "done:" + str(frame.get("status"))
                        break
                    elif kind == "assistant_start":
                        record["started"] = True
                    elif kind == "error":
                        record["error"] = str(frame.get("code"))
                        if not record.get("started"):
                            record["outcome"] = "error:" + record["error"]
                            break  # no reply: no end follows
        except TimeoutError:
            pass
        except ConnectionClosed:
            record["outcome"] = "connection_closed"
        record["text"] = "".join(parts)
        record["frames_ns"] = frames_ns
        record["frames_cum"] = frames_cum
        return record

    async def run(self) -> dict[str, Any]:
        modes = list(self.targets)
        warm = [await self.one_round(mode, -1) for mode in modes]
        rounds: list[dict[str, Any]] = []
        for number in range(self.args.rounds):
            for mode in order(modes, number):
                await asyncio.sleep(self.args.pause)
                rounds.append(await self.one_round(mode, number))
        return {
            "modes": modes,
            "conversations": self.args.conversations,
            "warm_up": [
                {"mode": w["mode"], "outcomes": [r["outcome"] for r in w.get("records", ())]}
                | ({"failure": w["failure"]} if "failure" in w else {})
                for w in warm
            ],
            "rounds": rounds,
        }


def _target(text: str) -> tuple[str, tuple[int, int]]:
    mode, _, rest = text.partition("=")
    port, _, pid = rest.partition(":")
    if not mode or not port.isdigit() or not pid.isdigit():
        raise argparse.ArgumentTypeError(f"expected MODE=PORT:PID, not {text!r}")
    return mode, (int(port), int(pid))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="the same replies with and without moderation")
    parser.add_argument(
        "--target",
        type=_target,
        action="append",
        required=True,
        help="MODE=PORT:PID, one per mode, off first",
    )
    parser.add_argument("--conversations", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--stagger", type=float, default=0.012, help="seconds between starts")
    parser.add_argument("--settle", type=float, default=0.3, help="seconds after connecting")
    parser.add_argument("--pause", type=float, default=0.5, help="seconds between rounds")
    parser.add_argument("--reply-timeout", type=float, default=90.0)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    if not 1 <= args.rounds <= MAX_ROUNDS or not 1 <= args.conversations <= MAX_CONVERSATIONS:
        parser.error(f"--rounds must be 1..{MAX_ROUNDS}, --conversations 1..{MAX_CONVERSATIONS}")
    if len({mode for mode, _ in args.target}) != len(args.target):
        parser.error("each mode once")
    data: dict[str, Any] = {}
    with contextlib.suppress(KeyboardInterrupt):
        data = asyncio.run(Rig(args).run())
    with open(args.out, "wb") as fh:
        fh.write(orjson.dumps(data))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
