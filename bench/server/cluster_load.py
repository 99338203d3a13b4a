"""The cluster workload's load: rounds of N new one-turn conversations over P processes.

The rule it keeps: a round opens N conversations at the same instant, conversation i on
process i mod P (round-robin, as a load balancer without sticky sessions would), each with one
message (`burst.conversation`: timed from the start of its connect); the next round starts
after the last one closed and a pause. Every CPU clock named (`--cpu NAME=PID`: each server,
PostgreSQL, the upstream) is read here, just before a round's first connect and just after
its last close, so a round's CPU is what its N replies cost, and nothing of the pauses. This
process's own CPU and the machine's busy time are read at the same edges.

Run: `python -m server.cluster_load --url ws://127.0.0.1:P1/ws --url ws://127.0.0.1:P2/ws
--n 200 --rounds 5 --cpu a=PID --cpu postgres=PID --out F`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import time
from typing import Any

import orjson

from . import burst, pg, procs, watchers

# Stream keys of cluster rounds use run tags from here on (two letters: at most 675).
RUN_BASE = 620
# A round is quiet when the machine was busy beside the processes measured (other work, the
# kernel's own) for at most this share of one core; the figures use quiet rounds.
QUIET = 15.0


def _clock(name: str, pid: int) -> float:
    return pg.cpu_seconds(pid) if name == "postgres" else watchers.cpu_seconds(pid)


def clocks(pids: dict[str, int]) -> dict[str, float]:
    """Every named process's CPU seconds, this process's, and the machine's busy seconds."""
    out = {name: _clock(name, pid) for name, pid in pids.items()}
    out["clients"] = watchers.cpu_seconds(os.getpid())
    out["machine"] = procs.machine_busy_seconds()
    return out


def beside(cpu: dict[str, float], seconds: float) -> float:
    """A round's machine busy time beside every clock it read, % of one core."""
    if "machine" not in cpu or not seconds:
        return float("nan")
    measured = sum(v for name, v in cpu.items() if name != "machine")
    return (cpu["machine"] - measured) / seconds * 100


def _target(url: str, timeout: float) -> argparse.Namespace:
    """What `burst.conversation` needs to talk to one process."""
    origin = url.replace("ws://", "http://").rsplit("/", 1)[0]
    return argparse.Namespace(url=url, origin=origin, reply_timeout=timeout)


async def one_round(
    targets: list[argparse.Namespace], n: int, tag: int, pids: dict[str, int]
) -> dict[str, Any]:
    before = clocks(pids)
    t0 = time.monotonic_ns()
    batch = await asyncio.gather(
        *(burst.conversation(targets[c % len(targets)], tag, c) for c in range(n))
    )
    t1 = time.monotonic_ns()
    after = clocks(pids)
    for c, record in enumerate(batch):
        record["process"] = c % len(targets)
    return {
        "tag": tag,
        "start_ns": t0,
        "end_ns": t1,
        "seconds": (t1 - t0) / 1e9,
        "cpu": {name: after[name] - before[name] for name in before},
        "records": batch,
    }


async def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    targets = [_target(url, args.reply_timeout) for url in args.url]
    pids = dict(args.cpu)
    rounds: list[dict[str, Any]] = []
    for r in range(args.rounds):
        if r:
            await asyncio.sleep(args.pause)
        found = await one_round(targets, args.n, args.run + r, pids)
        found["round"] = r
        rounds.append(found)
    return rounds


def _named_pid(text: str) -> tuple[str, int]:
    name, _, pid = text.partition("=")
    if not name or not pid.isdigit():
        raise argparse.ArgumentTypeError(f"expected NAME=PID, not {text!r}")
    return name, int(pid)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="rounds of new conversations over processes")
    parser.add_argument("--url", action="append", required=True, help="one per process")
    parser.add_argument("--n", type=int, required=True, help="conversations per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--pause", type=float, default=1.0, help="seconds between rounds")
    parser.add_argument("--run", type=int, default=RUN_BASE, help="the first round's run tag")
    parser.add_argument("--cpu", type=_named_pid, action="append", default=[])
    parser.add_argument("--reply-timeout", type=float, default=120.0)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    if not 1 <= args.n <= 2000 or not 1 <= args.rounds <= 20 or len(args.url) > 8:
        parser.error("--n must be 1..2000, --rounds 1..20, and at most 8 --url")
    if args.run < 0 or args.run + args.rounds > 676:
        parser.error("run tags are two letters: --run + --rounds must stay under 676")
    rounds: list[dict[str, Any]] = []
    with contextlib.suppress(KeyboardInterrupt):
        rounds = asyncio.run(run(args))
    with open(args.out, "wb") as fh:
        fh.write(orjson.dumps({"rounds": rounds}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
