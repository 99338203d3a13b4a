"""The watchers workload: one reply watched by K viewers under three distinct reveal policies.

The rule it keeps: each round is one new conversation, and the server's CPU is read at the
round's edges only (just before the owner sends its message, just after every connection got
`assistant_done`), so what a round costs is what its reply cost, restored for the owner and
for K viewers. Connections are opened before the first edge and closed after the last. Every
viewer's frames are checked here, with plain substring and pattern checks that use nothing of
holdback's code: no viewer may be sent a value of the owner's message unless its policy shows
that kind plain, and every viewer must get the whole reply.

The team (`setup`), made in the store before the server starts:
- an owner and `--viewers` viewers, each with an API token (`Authorization: Bearer`);
- three groups with three distinct policies for the kinds of the bench message (`GROUPS`):
  viewer i is a member of group `i % 3`, so viewers 0, 1, 2 bring a new policy each and every
  later viewer one that is already used;
- the organisation's default level is `label` for both kinds.

A round (`one_round`): the owner and K viewers connect; the owner sends one message in a new
conversation; on `message_accepted` the rig shares the conversation with the groups of this
round's viewers (through the store, from this process), and the K viewers send `watch` for it.
Configurations are measured in turns within each round of `--rounds` (K = 0, the owner alone,
and K = 3, one viewer per policy, are always among them: they are the baselines), after one
warm-up round that is not counted.

Run: `python -m server.watchers setup --data-dir D --viewers 20 --out TOKENS` (before the
server), then `python -m server.watchers run --url ws://127.0.0.1:P/ws --server-pid PID
--data-dir D --tokens TOKENS --ks 1,5,20 --rounds 5 --out F`. `figures(data, streams)` checks
a run against the upstream's log.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import orjson
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake
from websockets.typing import Origin

from . import procs, script

KINDS: Final = ("email", "phone")
# Group name -> its levels; a kind a group does not name falls to the organisation default.
GROUPS: Final[Mapping[str, Mapping[str, str]]] = {
    "watch-a": {"email": "masked", "phone": "plain"},
    "watch-b": {"email": "label", "phone": "masked"},
    "watch-c": {},
}
DEFAULT_LEVELS: Final[Mapping[str, str]] = {"email": "label", "phone": "label"}
POLICIES: Final = len(GROUPS)
MAX_VIEWERS: Final = 40  # holdback bounds the watchers of one conversation at 64
RUN_BASE: Final = 600  # run tags of stream keys (the burst workload's start at 400)
WARM_UP_TAG: Final = 599


def group_of(viewer: int) -> str:
    return list(GROUPS)[viewer % POLICIES]


def level_of(viewer: int | None, kind: str) -> str:
    """How viewer `viewer` is shown values of `kind`; None is the owner (plain)."""
    if viewer is None:
        return "plain"
    return GROUPS[group_of(viewer)].get(kind, DEFAULT_LEVELS[kind])


def configs(ks: Sequence[int]) -> list[int]:
    """The viewer counts measured: the requested ones and the baselines 0 and 3 (or the
    largest K, if smaller)."""
    return sorted({0, min(POLICIES, max(ks, default=0)), *ks})


def token_kind(token: str) -> str:
    """`<EMAIL_1>` -> `email`: the kind a token's name says."""
    return token.strip("<>").rsplit("_", 1)[0].lower()


# The team.


async def setup(data_dir: Path, viewers: int) -> dict[str, Any]:
    """Create the store in `data_dir` with the owner, the viewers, the groups and the levels;
    returns the owner's id and everyone's API token."""
    from holdback.store.crypto import load_vault_key
    from holdback.store.locations import ensure_data_dir, resolve_database_url
    from holdback.store.repository import Store

    env = dict(os.environ)
    ensure_data_dir(data_dir)
    url = resolve_database_url(None, env, data_dir)
    store = await Store.open(url, vault_key=load_vault_key(data_dir, env))
    try:
        owner = await store.create_user("owner", None)
        tokens = {"owner_id": owner.id, "owner": await store.create_api_token(owner.id, "bench")}
        for group in GROUPS:
            await store.create_group(group)
        for kind, level in DEFAULT_LEVELS.items():
            await store.set_level(None, kind, level)
        for group, levels in GROUPS.items():
            for kind, level in levels.items():
                await store.set_level(group, kind, level)
        viewer_tokens = []
        for i in range(viewers):
            user = await store.create_user(f"viewer{i:02d}", None)
            await store.add_member(group_of(i), user.name)
            viewer_tokens.append(await store.create_api_token(user.id, "bench"))
        tokens["viewers"] = viewer_tokens
        return tokens
    finally:
        await store.close()


# CPU, from the kernel's clocks.


def cpu_seconds(pid: int) -> float:
    """CPU time of a process tree, in seconds, to the nanosecond: each process's CPU-time
    clock (`clock_gettime` on the clock Linux names for a pid: every thread's time, those
    that exited too), where `/proc/<pid>/stat` counts in clock ticks (10 ms)."""
    total = 0
    for p in procs.tree(pid):
        with contextlib.suppress(OSError):
            total += time.clock_gettime_ns(_cpu_clock(p))
    return total / 1e9


def _cpu_clock(pid: int) -> int:
    """The clock id of a process's CPU time (`MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED)`)."""
    return (~pid << 3) | 2


# The rig.


class Rig:
    def __init__(self, args: argparse.Namespace, tokens: dict[str, Any], store: Any) -> None:
        self.args = args
        self.tokens = tokens
        self.store = store
        self.url = args.url
        self.origin = args.origin or args.url.replace("ws://", "http://").rsplit("/", 1)[0]

    async def open(self, token: str) -> ClientConnection:
        return await connect(
            self.url,
            origin=Origin(self.origin),
            additional_headers={"Authorization": f"Bearer {token}"},
            compression=None,
            max_size=2**22,
            open_timeout=30,
            ping_interval=None,
        )

    def cpu(self) -> dict[str, float]:
        """The CPU clocks read at a round's edges, by name; `server` is what a round costs."""
        return {"server": cpu_seconds(self.args.server_pid)}

    async def one_round(self, k: int, tag: int, number: int) -> dict[str, Any]:
        """One conversation watched by viewers 0..k-1; its CPU and every connection's record."""
        key = script.stream_key(tag, number, 0)
        text = script.user_message(number, key)
        result: dict[str, Any] = {"k": k, "key": key, "round": number}
        sockets: list[ClientConnection] = []
        try:
            owner = await self.open(self.tokens["owner"])
            sockets.append(owner)
            opened = await asyncio.gather(
                *(self.open(self.tokens["viewers"][i]) for i in range(k)),
                return_exceptions=True,
            )
            viewers = [ws for ws in opened if isinstance(ws, ClientConnection)]
            sockets.extend(viewers)  # closed below, even if another one failed to open
            for failed in opened:
                if isinstance(failed, BaseException):
                    raise failed
            await asyncio.sleep(self.args.settle)
            before = self.cpu()
            t0 = time.monotonic_ns()
            accepted: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
            owner_task = asyncio.create_task(self.owner(owner, text, accepted))
            await asyncio.wait(
                {accepted, owner_task},
                timeout=self.args.reply_timeout,
                return_when=asyncio.FIRST_COMPLETED,
            )
            head = accepted.result() if accepted.done() else {}
            records: list[dict[str, Any]]
            if "conversation_id" in head:
                cid = head["conversation_id"]
                result["conversation_id"] = cid
                result["values"] = head["values"]
                for group in sorted({group_of(i) for i in range(k)}):
                    await self.store.share(cid, self.tokens["owner_id"], group=group, access="read")
                watched = await asyncio.gather(
                    *(self.viewer(v, i, cid, head["values"]) for i, v in enumerate(viewers))
                )
                records = [await owner_task, *watched]
            else:
                owner_task.cancel()
                await asyncio.gather(owner_task, return_exceptions=True)
                records = [{"role": "owner", "outcome": head.get("outcome", "no_accept")}]
            after = self.cpu()
            result["cpu"] = {name: after[name] - before[name] for name in before}
            result["cpu_s"] = result["cpu"]["server"]
            result["seconds"] = (time.monotonic_ns() - t0) / 1e9
            result["records"] = records
        except (OSError, InvalidHandshake, TimeoutError, ConnectionClosed) as exc:
            result["failure"] = "connection:" + type(exc).__name__
        finally:
            await asyncio.gather(*(s.close() for s in sockets), return_exceptions=True)
        return result

    async def owner(
        self, ws: ClientConnection, text: str, accepted: asyncio.Future[dict[str, Any]]
    ) -> dict[str, Any]:
        record: dict[str, Any] = {"role": "owner"}
        values: dict[str, str] = {}

        def on_frame(frame: dict[str, Any], raw: str | bytes) -> None:
            if frame.get("type") == "message_accepted" and not accepted.done():
                values.update(
                    {m["token"]: text[m["start"] : m["end"]] for m in frame.get("masked", ())}
                )
                accepted.set_result(
                    {"conversation_id": frame.get("conversation_id"), "values": dict(values)}
                )
            elif frame.get("type") == "error" and not accepted.done():
                accepted.set_result({"outcome": "error:" + str(frame.get("code"))})

        message = {"type": "user_message", "conversation_id": None, "text": text}
        await ws.send(orjson.dumps(message).decode())
        await self.receive(ws, record, values, on_frame)
        return record

    async def viewer(
        self, ws: ClientConnection, viewer: int, cid: str, values: dict[str, str]
    ) -> dict[str, Any]:
        record: dict[str, Any] = {"role": "viewer", "viewer": viewer, "group": group_of(viewer)}
        await ws.send(orjson.dumps({"type": "watch", "conversation_id": cid}).decode())
        await self.receive(ws, record, values, None)
        return record

    async def receive(
        self,
        ws: ClientConnection,
        record: dict[str, Any],
        values: dict[str, str],
        on_frame: Any,
    ) -> None:
        """Frames until the reply's `assistant_done` (or an error before any reply): delta
        count and text, and which kinds' plain values appeared anywhere in any frame."""
        parts: list[str] = []
        seen: set[str] = set()
        types: dict[str, int] = {}
        record["outcome"] = "timeout"
        message_id = None
        try:
            async with asyncio.timeout(self.args.reply_timeout):
                while True:
                    raw = await ws.recv()
                    frame = orjson.loads(raw)
                    kind = frame.get("type")
                    types[str(kind)] = types.get(str(kind), 0) + 1
                    if on_frame is not None:
                        on_frame(frame, raw)
                    text = raw if isinstance(raw, str) else raw.decode("utf-8", "replace")
                    for token, value in values.items():
                        if value and value in text:
                            seen.add(token_kind(token))
                    if kind == "assistant_start" and message_id is None:
                        message_id = frame.get("message_id")
                    elif kind == "assistant_delta" and frame.get("channel") == "content":
                        if frame.get("message_id") in (None, message_id):
                            parts.append(frame["text"])
                    elif kind == "assistant_done" and frame.get("message_id") in (
                        None,
                        message_id,
                    ):
                        record["outcome"] = "done:" + str(frame.get("status"))
                        break
                    elif kind == "error" and message_id is None:
                        record["outcome"] = "error:" + str(frame.get("code"))
                        break
        except TimeoutError:
            pass
        except ConnectionClosed:
            record["outcome"] = "connection_closed"
        record["frames"] = len(parts)
        record["text"] = "".join(parts)
        record["seen"] = sorted(seen)
        record["types"] = types

    async def run(self) -> dict[str, Any]:
        measured = configs(self.args.ks)
        warm = await self.one_round(max(measured), WARM_UP_TAG, 0)
        rounds: list[dict[str, Any]] = []
        for r in range(self.args.rounds):
            turn = measured[r % len(measured) :] + measured[: r % len(measured)]
            for k in turn:
                await asyncio.sleep(self.args.pause)
                rounds.append(await self.one_round(k, RUN_BASE + measured.index(k), r))
        return {"configs": measured, "warm_up": _brief(warm), "rounds": rounds}


def _brief(result: dict[str, Any]) -> dict[str, Any]:
    """A warm-up round without its texts."""
    out = {k: v for k, v in result.items() if k != "records"}
    out["outcomes"] = [r.get("outcome") for r in result.get("records", ())]
    return out


async def _run(
    args: argparse.Namespace, tokens: dict[str, Any], rig: type[Rig] = Rig
) -> dict[str, Any]:
    from holdback.store.crypto import load_vault_key
    from holdback.store.locations import resolve_database_url
    from holdback.store.repository import Store

    env = dict(os.environ)
    url = resolve_database_url(None, env, args.data_dir)
    store = await Store.open(
        url, vault_key=load_vault_key(args.data_dir, env, create=False), migrate=False
    )
    try:
        return await rig(args, tokens, store).run()
    finally:
        await store.close()


# Checks, against the upstream's log (no holdback code).


def expected_pattern(
    model_text: str, values: Mapping[str, str], viewer: int | None
) -> re.Pattern[str]:
    """What the viewer must be shown for the model's text: its words exactly, and each token
    as one text, the same at every mention: the value where the viewer's level for its kind
    is plain, else anything that is not empty (the form is holdback's to choose)."""
    parts: list[str] = []
    groups: dict[str, str] = {}
    at = 0
    for m in script.TOKEN_RE.finditer(model_text):
        token = m.group(0)
        if token not in values:
            continue
        parts.append(re.escape(model_text[at : m.start()]))
        if token in groups:
            parts.append(f"(?P={groups[token]})")
        else:
            groups[token] = f"t{len(groups)}"
            plain = level_of(viewer, token_kind(token)) == "plain"
            body = re.escape(values[token]) if plain else ".+?"
            parts.append(f"(?P<{groups[token]}>{body})")
        at = m.end()
    parts.append(re.escape(model_text[at:]))
    return re.compile("".join(parts), re.DOTALL)


def check_record(
    record: Mapping[str, Any], model_text: str | None, values: Mapping[str, str]
) -> dict[str, Any]:
    """One connection's verdicts: whole reply, values it may not see, raw tokens."""
    viewer = record.get("viewer")
    text = record.get("text", "")
    hidden = sorted(k for k in record.get("seen", ()) if level_of(viewer, k) != "plain")
    whole = (
        record.get("outcome") == "done:complete"
        and model_text is not None
        and expected_pattern(model_text, values, viewer).fullmatch(text) is not None
    )
    if whole and viewer is not None:
        # A hidden form holds no value it hides (the pattern's `.+?` says nothing of that).
        hidden += [
            token_kind(t)
            for t, v in values.items()
            if level_of(viewer, token_kind(t)) != "plain" and v in text
        ]
    return {
        "whole": whole,
        "hidden_seen": sorted(set(hidden)),
        "raw_tokens": len(script.TOKEN_RE.findall(text)),
    }


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def _stderr(values: Sequence[float]) -> float:
    n = len(values)
    if n < 2:
        return float("nan")
    m = _mean(values)
    return float((sum((v - m) ** 2 for v in values) / (n - 1) / n) ** 0.5)


def figures(data: Mapping[str, Any], streams: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Per K: CPU per round and per delivered chunk, the checks; and the extra CPU per viewer
    as a fraction of one reply (K = 0), for new policies (K <= 3, against K = 0) and for
    already-used ones (K > 3, against K = 3), with its standard error over rounds."""
    texts = {s["key"]: s.get("text") for s in streams}
    by_k: dict[int, list[dict[str, Any]]] = {k: [] for k in data["configs"]}
    failures: dict[str, int] = {}
    for rnd in data["rounds"]:
        if "failure" in rnd:
            failures[rnd["failure"]] = failures.get(rnd["failure"], 0) + 1
            continue
        by_k[rnd["k"]].append(rnd)
    rows: list[dict[str, Any]] = []
    for k, rounds in by_k.items():
        records = [(rnd, rec) for rnd in rounds for rec in rnd["records"]]
        checks = [
            check_record(rec, texts.get(rnd["key"]), rnd.get("values", {})) for rnd, rec in records
        ]
        cpu = [rnd["cpu_s"] for rnd in rounds]
        frames = sum(rec.get("frames", 0) for _, rec in records)
        viewer_frames = sum(rec.get("frames", 0) for _, rec in records if rec["role"] == "viewer")
        rows.append(
            {
                "k": k,
                "policies": len({group_of(i) for i in range(k)}),
                "rounds": len(rounds),
                "connections": 1 + k,
                "cpu_ms": _mean(cpu) * 1e3,
                "cpu_min_ms": min(cpu, default=float("nan")) * 1e3,
                "cpu_max_ms": max(cpu, default=float("nan")) * 1e3,
                "cpu_by_round": {rnd["round"]: rnd["cpu_s"] for rnd in rounds},
                "seconds": _mean([rnd["seconds"] for rnd in rounds]),
                "frames_per_round": frames / len(rounds) if rounds else float("nan"),
                "viewer_frames_per_round": viewer_frames / len(rounds) if rounds else float("nan"),
                "cpu_per_chunk_ms": sum(cpu) / frames * 1e3 if frames else float("nan"),
                "records": len(records),
                "whole": sum(c["whole"] for c in checks),
                "hidden_seen": sum(bool(c["hidden_seen"]) for c in checks),
                "raw_tokens": sum(c["raw_tokens"] for c in checks),
                "outcomes": _count(rec.get("outcome", "?") for _, rec in records),
            }
        )
    _derive(rows)
    return {
        "configs": list(data["configs"]),
        "rows": rows,
        "failures": failures,
        "groups": {g: {k: GROUPS[g].get(k, DEFAULT_LEVELS[k]) for k in KINDS} for g in GROUPS},
    }


def _count(items: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for item in items:
        out[item] = out.get(item, 0) + 1
    return out


def _derive(rows: list[dict[str, Any]]) -> None:
    """Add each row's per-chunk ratio to K = 1 and its extra CPU per viewer over one reply."""
    by_k = {r["k"]: r for r in rows}
    one = by_k.get(1)
    reply = by_k.get(0)
    reply_ms = reply["cpu_ms"] if reply else float("nan")
    for row in rows:
        k = row["k"]
        row["chunk_vs_one"] = (
            row["cpu_per_chunk_ms"] / one["cpu_per_chunk_ms"]
            if one and one["cpu_per_chunk_ms"]
            else float("nan")
        )
        base_k = 0 if k <= POLICIES else POLICIES
        base = by_k.get(base_k)
        row["extra_kind"] = "none" if k == 0 else ("new" if k <= POLICIES else "used")
        row["extra_against"] = base_k
        if k == 0 or base is None or not reply_ms:
            row["extra_per_viewer"] = float("nan")
            row["extra_stderr"] = float("nan")
            continue
        # Paired by round: configurations of one round ran one after the other.
        pairs = [
            (row["cpu_by_round"][r] - base["cpu_by_round"][r]) * 1e3
            for r in row["cpu_by_round"]
            if r in base["cpu_by_round"]
        ]
        n = k - base_k
        row["extra_per_viewer"] = _mean(pairs) / n / reply_ms
        row["extra_stderr"] = _stderr(pairs) / n / reply_ms


# Command line.


def _ks(text: str) -> tuple[int, ...]:
    values = tuple(int(x) for x in text.split(",") if x.strip())
    if not values or any(not 0 <= v <= MAX_VIEWERS for v in values):
        raise argparse.ArgumentTypeError(f"each K must be between 0 and {MAX_VIEWERS}")
    return values


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="one reply watched by K viewers")
    commands = parser.add_subparsers(dest="command", required=True)
    made = commands.add_parser("setup", help="create the team's store (before the server)")
    made.add_argument("--data-dir", type=Path, required=True)
    made.add_argument("--viewers", type=int, required=True)
    made.add_argument("--out", type=Path, required=True, help="the tokens file (mode 0600)")
    run = commands.add_parser("run", help="measure")
    run.add_argument("--url", required=True)
    run.add_argument("--origin", default=None)
    run.add_argument("--server-pid", type=int, required=True)
    run.add_argument("--data-dir", type=Path, required=True)
    run.add_argument("--tokens", type=Path, required=True)
    run.add_argument("--ks", type=_ks, default=(1, 5, 20))
    run.add_argument("--rounds", type=int, default=5)
    run.add_argument("--settle", type=float, default=0.3, help="seconds after connecting")
    run.add_argument("--pause", type=float, default=0.3, help="seconds between rounds")
    run.add_argument("--reply-timeout", type=float, default=60.0)
    run.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.command == "setup":
        if not 0 <= args.viewers <= MAX_VIEWERS:
            parser.error(f"--viewers must be 0..{MAX_VIEWERS}")
        tokens = asyncio.run(setup(args.data_dir, args.viewers))
        fd = os.open(args.out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(orjson.dumps(tokens))
        return 0
    if not 1 <= args.rounds <= 30:
        parser.error("--rounds must be 1..30")
    tokens = json.loads(args.tokens.read_text())
    if max(args.ks) > len(tokens["viewers"]):
        parser.error("more viewers asked for than the team has")
    data: dict[str, Any] = {}
    with contextlib.suppress(KeyboardInterrupt):
        data = asyncio.run(_run(args, tokens))
    args.out.write_bytes(orjson.dumps(data))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
