"""The store's cost per chat turn, this tree against a base revision, side by side in one run.

The rule it keeps: a figure is only ever compared with one from the same run. The base
revision (`--base`, default the store as it was before issue 20's single write path) is
checked out in a git worktree; this tree and the base each run in a subprocess of their own
(their own `holdback` on `PYTHONPATH`, their own database), kept alive for the whole run,
and the rounds interleave, in alternating order, so whatever else the machine does falls on
both alike. The ratio is this tree's over the base's, per round and of the medians (target
≤ 1.3×).

A turn is what the chat pipeline asks of the store for one message: `open_conversation`
(from the second turn of a conversation), `update_vault` with two new values (creating the
conversation on its first turn), `begin_reply`, three checkpoint rounds of the streaming
reply, and `finish_reply` with its audits and two reveals. Conversations have five turns.
Time per turn is the wall clock of that sequence, one turn at a time; CPU per turn is the
whole process's (the event loop and the store's threads) over a round.

    .venv/bin/python bench/store_bench.py                     # SQLite (and PostgreSQL if installed)
    .venv/bin/python bench/store_bench.py --base HEAD --engines sqlite --rounds 15
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
LOCK = Path("/tmp/bench.lock")
# The store before issue 20 item 5 (SQLite statements compiled by hand, run on sqlite3).
DEFAULT_BASE = "8bb2ad38c6c6938782842d54ffac225d41c6d19f"
TURNS_PER_CONVERSATION = 5
CHECKPOINT_ROUNDS = 3
CHECKPOINT_BYTES = 256


# -- the child: one store, turns on request -------------------------------------------------


async def _child(engine: str, url: str) -> None:
    import holdback
    from holdback.store import Store, VaultItem, VaultKey

    store = await Store.open(
        url,
        vault_key=VaultKey.generate(source="bench"),
        checkpoint_interval=60.0,  # rounds come from size alone, CHECKPOINT_ROUNDS a turn
        checkpoint_bytes=CHECKPOINT_BYTES,
    )
    user = await store.ensure_local_user()
    state = {"chat": "", "turn": 0, "value": 0}

    async def turn() -> None:
        first = state["turn"] % TURNS_PER_CONVERSATION == 0
        state["turn"] += 1
        if first:
            state["chat"] = store.new_conversation_id()
        else:
            assert await store.open_conversation(str(state["chat"]), user.id) is not None
        chat = str(state["chat"])
        n = state["value"] = int(state["value"]) + 1
        items = [
            VaultItem("email", f"person{n}@example.org", f"person{n}@example.org"),
            VaultItem("phone", f"+1 415 555 {n % 10000:04d}", f"+1415555{n % 10000:04d}"),
        ]
        update = await store.update_vault(chat, items, create_for=user.id if first else None)
        email, phone = update.tokens
        said = f"Please write to {email} and call {phone} about the contract renewal. " * 3
        spans = [
            {"start": 16, "end": 16 + len(email), "kind": "email", "token": email},
            {"start": 30, "end": 30 + len(phone), "kind": "phone", "token": phone},
        ]
        started = await store.begin_reply(
            chat,
            said,
            meta={"masked": spans},
            title=said[:40] if first else None,
            owner_id=user.id,
            masked={"email": 1, "phone": 1},
            create_for=None,
            model="demo",
            reply_meta={"system": "You are helpful."},
        )
        reply = ""

        def snapshot() -> tuple[str, dict[str, str]]:
            return reply, {}

        saving = store.reply_checkpoints(chat, started.assistant.id, snapshot)
        for _ in range(CHECKPOINT_ROUNDS):
            rounds = store.checkpoint_rounds
            piece = f"I will write to {email} today, and call {phone} tomorrow morning. " * 5
            reply += piece
            saving.released(len(piece.encode()))
            await store.until_checkpoint_rounds(rounds + 1)
        await saving.close()
        await store.finish_reply(
            chat,
            started.assistant.id,
            text=reply,
            parts={},
            status="complete",
            finish_reason="stop",
            redacted={"email": 1},
            checkpointed=saving.tried,
            reveals=[(user.id, email, "email", "plain"), (user.id, phone, "phone", "masked")],
        )

    print(json.dumps({"holdback": holdback.__file__, "engine": engine}), flush=True)
    loop = asyncio.get_running_loop()
    try:
        while True:
            line = await loop.run_in_executor(None, sys.stdin.readline)
            if not line.strip() or line.strip() == "quit":
                break
            count = int(line)
            walls = []
            cpu = time.process_time()
            for _ in range(count):
                start = time.perf_counter()
                await turn()
                walls.append(time.perf_counter() - start)
            cpu = time.process_time() - cpu
            print(json.dumps({"walls": walls, "cpu": cpu / count}), flush=True)
    finally:
        await store.close()


# -- the parent: worktree, children, interleaved rounds --------------------------------------


class Child:
    def __init__(self, name: str, tree: Path, engine: str, url: str, work: Path) -> None:
        self.name = name
        env = {**os.environ, "PYTHONPATH": str(tree / "server")}
        self.log = (work / f"{name}-{engine}.log").open("w")
        self.proc = subprocess.Popen(
            [sys.executable, str(BENCH / "store_bench.py"), "--child", engine, url],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            cwd=work,
            env=env,
        )
        hello = json.loads(self._line())
        if not Path(hello["holdback"]).resolve().is_relative_to(tree.resolve()):
            raise RuntimeError(f"{name}: imported holdback from {hello['holdback']}, not {tree}")

    def _line(self) -> str:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{self.name} stopped; see its log {self.log.name}")
        return line

    def round(self, turns: int) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{turns}\n")
        self.proc.stdin.flush()
        result: dict[str, Any] = json.loads(self._line())
        return result

    def stop(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            assert self.proc.stdin is not None
            self.proc.stdin.write("quit\n")
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def _git(*args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(REPO), *args], capture_output=True, text=True, timeout=120, check=True
    )
    return done.stdout.strip()


@contextlib.contextmanager
def _bench_lock() -> Any:
    """Hold /tmp/bench.lock while measuring (waiting while another run holds it)."""
    while True:
        try:
            fd = os.open(LOCK, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            break
        except FileExistsError:
            time.sleep(10)
    try:
        os.write(fd, f"store_bench {os.getpid()}\n".encode())
        os.close(fd)
        yield
    finally:
        LOCK.unlink(missing_ok=True)


def _postgres() -> Any:
    sys.path.insert(0, str(REPO))
    from tests.support import postgres

    bindir = postgres.find_bindir()
    return None if bindir is None else postgres.start_throwaway_server(bindir)


def _summary(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def measure(args: argparse.Namespace) -> dict[str, Any]:
    base = _git("rev-parse", args.base)
    work = Path(tempfile.mkdtemp(prefix="holdback-store-bench-"))
    tree = work / "base"
    _git("worktree", "add", "--detach", "--force", str(tree), base)
    server = None
    children: list[Child] = []
    results: dict[str, Any] = {
        "base": base,
        "this": _git("rev-parse", "HEAD") + (" + changes" if _git("status", "--short") else ""),
        "load_before": os.getloadavg(),
        "engines": {},
    }
    try:
        engines = args.engines.split(",")
        if "postgres" in engines:
            server = _postgres()
            if server is None:
                engines.remove("postgres")
                results["skipped"] = "PostgreSQL is not installed"
        for engine in engines:
            pair = []
            for name, root in (("this", REPO), ("base", tree)):
                if engine == "sqlite":
                    url = f"sqlite+aiosqlite:///{work / f'{name}.db'}"
                else:
                    url = server.url(server.create_database())
                pair.append(Child(name, root, engine, url, work))
            children += pair
            for child in pair:
                child.round(args.turns)  # warm up: imports, caches, the first pages
            rounds: dict[str, list[dict[str, Any]]] = {"this": [], "base": []}
            with _bench_lock():
                results.setdefault("load_measuring", os.getloadavg())
                for number in range(args.rounds):
                    for child in pair if number % 2 == 0 else pair[::-1]:
                        rounds[child.name].append(child.round(args.turns))
            results["engines"][engine] = _engine_result(rounds)
    finally:
        for child in children:
            child.stop()
        if server is not None:
            server.stop()
        subprocess.run(
            ["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)],
            capture_output=True,
            timeout=120,
            check=False,
        )
        with contextlib.suppress(OSError):
            for path in sorted(work.rglob("*"), reverse=True):
                path.unlink() if path.is_file() else path.rmdir()
            work.rmdir()
    results["load_after"] = os.getloadavg()
    results.update(rounds=args.rounds, turns=args.turns)
    return results


def _engine_result(rounds: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, done in rounds.items():
        out[name] = {
            "wall_ms": _summary([statistics.mean(r["walls"]) * 1000 for r in done]),
            "p90_ms": _summary([statistics.quantiles(r["walls"], n=10)[-1] * 1000 for r in done]),
            "cpu_ms": _summary([r["cpu"] * 1000 for r in done]),
        }
    for measure_ in ("wall_ms", "cpu_ms"):
        key = measure_.removesuffix("_ms")
        paired = [
            statistics.mean(a["walls"]) / statistics.mean(b["walls"])
            if key == "wall"
            else a["cpu"] / b["cpu"]
            for a, b in zip(rounds["this"], rounds["base"], strict=True)
        ]
        out[f"{key}_ratio"] = {
            "of_medians": out["this"][measure_]["median"] / out["base"][measure_]["median"],
            **{f"paired_{k}": v for k, v in _summary(paired).items()},
        }
    return out


def report(r: dict[str, Any]) -> str:
    lines = [
        "### The store's cost per chat turn (this tree against a base)",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}; this tree {r['this'][:12]}"
        f"{' + changes' if 'changes' in r['this'] else ''}, base {r['base'][:12]}; "
        f"{r['rounds']} interleaved rounds of {r['turns']} turns; load average "
        f"{r['load_before'][0]:.2f} before, {r['load_after'][0]:.2f} after.",
        "",
        "| engine | tree | ms/turn (median, min–max) | p90 ms | CPU ms/turn (median, min–max) |",
        "|---|---|---:|---:|---:|",
    ]
    for engine, e in r["engines"].items():
        for name in ("this", "base"):
            w, p, c = e[name]["wall_ms"], e[name]["p90_ms"], e[name]["cpu_ms"]
            lines.append(
                f"| {engine} | {name} | {w['median']:.2f} ({w['min']:.2f}–{w['max']:.2f}) "
                f"| {p['median']:.2f} | {c['median']:.2f} ({c['min']:.2f}–{c['max']:.2f}) |"
            )
    lines.append("")
    for engine, e in r["engines"].items():
        for key in ("wall", "cpu"):
            q = e[f"{key}_ratio"]
            lines.append(
                f"- {engine}, {'time' if key == 'wall' else 'CPU'} per turn, this / base: "
                f"**{q['of_medians']:.2f}×** (per round {q['paired_median']:.2f}×, "
                f"{q['paired_min']:.2f}–{q['paired_max']:.2f}; target ≤ 1.3)"
            )
    if r.get("skipped"):
        lines.append(f"- PostgreSQL skipped: {r['skipped']}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base", default=DEFAULT_BASE, help="the revision to compare with")
    parser.add_argument("--engines", default="sqlite,postgres")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--turns", type=int, default=100, help="turns per round")
    parser.add_argument("--out", default="store_bench", help="bench/results/OUT.md and .json")
    parser.add_argument("--child", nargs=2, metavar=("ENGINE", "URL"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        asyncio.run(_child(*args.child))
        return 0
    results = measure(args)
    text = report(results)
    print(text)
    out = BENCH / "results"
    out.mkdir(exist_ok=True)
    (out / f"{args.out}.md").write_text(text + "\n", encoding="utf-8")
    (out / f"{args.out}.json").write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
