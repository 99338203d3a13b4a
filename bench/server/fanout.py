"""The cluster workload's fan-out: one reply run on process A, watched by K connections on B.

The rule it keeps: the cost of a watching connection is read from the clock of the process
that serves it, paired by round against the same round's reply watched by nobody. A round is
the watchers workload's (`watchers.Rig.one_round`: a new conversation whose owner is on A, K
viewers under three policies sending `watch` once it is accepted and shared), with the
viewers on B (`remote`) or on A itself (`local`, for comparison); the CPU of A, of B and of
PostgreSQL is read at the round's edges. The configurations (K = 0 once, then every K at
each placement) take turns within each of `--rounds` rounds, after a warm-up round at each
placement that is not counted. The viewers send `watch` at once (or, with `--stagger S`, viewer
i after i x S seconds). Every viewer's text is checked as in the watchers workload
(whole reply, no value its policy hides), with no holdback code.

*Extra CPU per watching connection*, for K viewers on process W (B when remote, A when
local): (W(K) - W(0)) / K, paired by round; *per frame*: (W(K) - W(0)) over the delta frames
those K viewers were delivered; *past the policies*: (W(K) - W(3)) / (K - 3), connections
whose policy W already renders.

Run: `python -m server.fanout --url ws://A/ws --viewer-url ws://B/ws --a-pid PA --b-pid PB
--pg-pid PG --data-dir D --tokens T --ks 1,5,20 --rounds 5 --out F` (the team made by
`python -m server.watchers setup` with `HOLDBACK_DATABASE_URL` set).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import orjson
from websockets.asyncio.client import ClientConnection, connect
from websockets.typing import Origin

from . import cluster_load, pg, procs, watchers

PLACES: Final = ("remote", "local")
BASELINE: Final = (0, "remote")  # the owner alone on A: nobody watches, B idles


class FanOutRig(watchers.Rig):
    where = "remote"

    async def open(self, token: str) -> ClientConnection:
        remote = token != self.tokens["owner"] and self.where == "remote"
        url = self.args.viewer_url if remote else self.args.url
        return await connect(
            url,
            origin=Origin(url.replace("ws://", "http://").rsplit("/", 1)[0]),
            additional_headers={"Authorization": f"Bearer {token}"},
            compression=None,
            max_size=2**22,
            open_timeout=30,
            ping_interval=None,
        )

    async def viewer(
        self, ws: ClientConnection, viewer: int, cid: str, values: dict[str, str]
    ) -> dict[str, Any]:
        """Viewer i sends `watch` i x `--stagger` seconds after the reply was shared (at once
        by default: a team opening a shared conversation together)."""
        if self.args.stagger:
            await asyncio.sleep(viewer * self.args.stagger)
        return await super().viewer(ws, viewer, cid, values)

    def cpu(self) -> dict[str, float]:
        a = watchers.cpu_seconds(self.args.a_pid)
        b = watchers.cpu_seconds(self.args.b_pid)
        return {
            "server": a + b,
            "a": a,
            "b": b,
            "postgres": pg.cpu_seconds(self.args.pg_pid),
            "rig": watchers.cpu_seconds(os.getpid()),
            "machine": procs.machine_busy_seconds(),
        }

    async def placed(self, k: int, where: str, tag: int, number: int) -> dict[str, Any]:
        self.where = where
        result = await self.one_round(k, tag, number)
        result["where"] = where
        return result

    async def run(self) -> dict[str, Any]:
        ks = [k for k in watchers.configs(self.args.ks) if k]
        turn = [BASELINE] + [(k, w) for w in self.args.where for k in ks]
        top = max(ks, default=0)
        warm = [await self.placed(top, w, watchers.WARM_UP_TAG, i) for i, w in enumerate(PLACES)]
        rounds: list[dict[str, Any]] = []
        for r in range(self.args.rounds):
            for k, where in turn[r % len(turn) :] + turn[: r % len(turn)]:
                await asyncio.sleep(self.args.pause)
                tag = watchers.RUN_BASE + turn.index((k, where))
                rounds.append(await self.placed(k, where, tag, r))
        return {
            "configs": [list(c) for c in turn],
            "warm_up": [{"where": w.get("where"), "failure": w.get("failure")} for w in warm],
            "rounds": rounds,
        }


# Figures, against the upstream's log.


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def _stderr(values: Sequence[float]) -> float:
    n = len(values)
    if n < 2:
        return float("nan")
    m = _mean(values)
    return float((sum((v - m) ** 2 for v in values) / (n - 1) / n) ** 0.5)


def _paired(
    rows: Mapping[int, Mapping[str, Any]], base: Mapping[int, Mapping[str, Any]], clock: str
) -> list[tuple[float, Mapping[str, Any]]]:
    """(clock's CPU in this round less the base round's, ms; this round) for each round
    number both have."""
    return [
        ((rnd["cpu"][clock] - base[r]["cpu"][clock]) * 1e3, rnd)
        for r, rnd in rows.items()
        if r in base
    ]


def _other(rnd: Mapping[str, Any]) -> float:
    """The machine's busy time beside A, B, PostgreSQL and the rig, % of one core."""
    cpu = rnd["cpu"]
    if "machine" not in cpu or not rnd["seconds"]:
        return float("nan")
    measured = cpu["a"] + cpu["b"] + cpu["postgres"] + cpu.get("rig", 0.0)
    return float((cpu["machine"] - measured) / rnd["seconds"] * 100)


def _viewer_frames(rnd: Mapping[str, Any]) -> int:
    return sum(rec.get("frames", 0) for rec in rnd["records"] if rec["role"] == "viewer")


def figures(data: Mapping[str, Any], streams: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One row per configuration (K, placement): CPU per round of A, B and PostgreSQL, the
    extra per watching connection and per frame on the watchers' process, the checks."""
    texts = {s["key"]: s.get("text") for s in streams}
    by: dict[tuple[int, str], dict[int, dict[str, Any]]] = {}
    failures: dict[str, int] = {}
    done = [rnd for rnd in data["rounds"] if "failure" not in rnd]
    for rnd in data["rounds"]:
        if "failure" in rnd:
            failures[rnd["failure"]] = failures.get(rnd["failure"], 0) + 1
    # Rounds with work beside them are left out, unless that leaves fewer than half.
    quiet = [rnd for rnd in done if not _other(rnd) > cluster_load.QUIET]
    used = quiet if len(quiet) * 2 >= len(done) else done
    for rnd in used:
        by.setdefault((rnd["k"], rnd["where"]), {})[rnd["round"]] = rnd
    base = by.get(BASELINE, {})
    reply_ms = _mean([rnd["cpu"]["a"] * 1e3 for rnd in base.values()])
    rows: list[dict[str, Any]] = []
    order = sorted(by.items(), key=lambda item: (PLACES.index(item[0][1]), item[0][0]))
    for (k, where), rounds in order:
        clock = "b" if where == "remote" else "a"
        records = [(rnd, rec) for rnd in rounds.values() for rec in rnd["records"]]
        checks = [
            watchers.check_record(rec, texts.get(rnd["key"]), rnd.get("values", {}))
            for rnd, rec in records
        ]
        row: dict[str, Any] = {
            "k": k,
            "where": where,
            "watched_on": "B" if where == "remote" else "A",
            "policies": len({watchers.group_of(i) for i in range(k)}),
            "rounds": len(rounds),
            "viewer_frames": _mean([_viewer_frames(rnd) for rnd in rounds.values()]),
            "whole": sum(c["whole"] for c in checks),
            "records": len(records),
            "hidden_seen": sum(bool(c["hidden_seen"]) for c in checks),
            "raw_tokens": sum(c["raw_tokens"] for c in checks),
            "outcomes": watchers._count(rec.get("outcome", "?") for _, rec in records),
            "seconds": _mean([rnd["seconds"] for rnd in rounds.values()]),
        }
        for name in ("a", "b", "postgres"):
            row[f"{name}_ms"] = _mean([rnd["cpu"][name] * 1e3 for rnd in rounds.values()])
        row["other_pct"] = _mean([_other(rnd) for rnd in rounds.values()])
        nan = float("nan")
        row.update(extra_ms=nan, extra_err=nan, per_frame_ms=nan, past_ms=nan, past_err=nan)
        row["a_extra_ms"] = nan
        if k:
            pairs = _paired(rounds, base, clock)
            per_conn = [ms / k for ms, _ in pairs]
            row["extra_ms"], row["extra_err"] = _mean(per_conn), _stderr(per_conn)
            row["extra_of_reply"] = row["extra_ms"] / reply_ms if reply_ms else nan
            frames = [ms / _viewer_frames(rnd) for ms, rnd in pairs if _viewer_frames(rnd)]
            row["per_frame_ms"] = _mean(frames)
            row["a_extra_ms"] = _mean([ms for ms, _ in _paired(rounds, base, "a")])
            three = by.get((min(watchers.POLICIES, k), where), {})
            if k > watchers.POLICIES and three:
                past = [ms / (k - watchers.POLICIES) for ms, _ in _paired(rounds, three, clock)]
                row["past_ms"], row["past_err"] = _mean(past), _stderr(past)
        rows.append(row)
    return {
        "rows": rows,
        "reply_ms": reply_ms,
        "failures": failures,
        "quiet": used is quiet,
        "left_out": [
            {"k": r["k"], "where": r["where"], "round": r["round"], "other_pct": _other(r)}
            for r in done
            if used is quiet and r not in quiet
        ],
    }


# Command line.


def _places(text: str) -> tuple[str, ...]:
    values = tuple(x.strip() for x in text.split(",") if x.strip())
    if not values or any(v not in PLACES for v in values) or len(set(values)) < len(values):
        raise argparse.ArgumentTypeError(f"each of {', '.join(PLACES)} at most once")
    return values


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="one reply on A watched by K viewers on B")
    parser.add_argument("--url", required=True, help="process A, where the owner is")
    parser.add_argument("--viewer-url", required=True, help="process B")
    parser.add_argument("--a-pid", type=int, required=True)
    parser.add_argument("--b-pid", type=int, required=True)
    parser.add_argument("--pg-pid", type=int, required=True)
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--tokens", type=Path, required=True)
    parser.add_argument("--ks", type=watchers._ks, default=(1, 5, 20))
    parser.add_argument("--where", type=_places, default=PLACES)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--stagger", type=float, default=0.0, help="seconds between watches")
    parser.add_argument("--settle", type=float, default=0.3, help="seconds after connecting")
    parser.add_argument("--pause", type=float, default=0.3, help="seconds between rounds")
    parser.add_argument("--reply-timeout", type=float, default=60.0)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    args.origin = None
    if not 1 <= args.rounds <= 30 or not 0 <= args.stagger <= 0.5:
        parser.error("--rounds must be 1..30 and --stagger 0..0.5")
    tokens = json.loads(args.tokens.read_text())
    if max(args.ks) > len(tokens["viewers"]):
        parser.error("more viewers asked for than the team has")
    data: dict[str, Any] = {}
    with contextlib.suppress(KeyboardInterrupt):
        data = asyncio.run(watchers._run(args, tokens, FanOutRig))
    args.out.write_bytes(orjson.dumps(data))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
