"""`make bench-server`: holdback against bare relays under load, watchers, moderation, the soak.

The rule it keeps: every holdback figure is printed next to each relay's from the same run
(`relay-aiohttp`, the strongest baseline, and `relay` on httpx), as a ratio, and every process
the run starts is gone when it ends. Four workloads are measured (`--workload`, all four by
default; `both` is the first two), each server one after the other:

- 10-turn conversations: N = 50, 100, 200 and then N grows until every server's p99 added
  latency passes 100 ms (or `--max-n`);
- new conversations (burst): at each `--burst-ns` N, `--burst-rounds` rounds of N one-turn
  conversations opened at once, against an upstream of its own with short replies;
- watchers: one reply watched by K = 1, 5 and 20 viewers (`--watch-ks`) under three distinct
  reveal policies, `--watch-rounds` rounds each, holdback only (a relay cannot watch): the
  CPU per delivered chunk against one viewer, and each extra viewer's CPU over one reply's
  (`server/watchers.py`);
- moderation: the same replies, in sentences, against holdback with moderation off and with a
  fake webhook moderator at each `--mod-latencies` (50 and 200 ms), `--mod-rounds` rounds of
  `--mod-conversations` conversations, modes interleaved, holdback only: time to first
  visible text, per-sentence delay and CPU per chunk, each beside moderation off's
  (`server/moderation.py`).

`--processes 1,2` (or `--workload cluster`, not part of `all`) measures holdback as 1 and 2
processes on one throwaway PostgreSQL (issue 20, `server/cluster.py`): replies per second of
`--cluster-n` new conversations at once, spread round-robin, and CPU per chunk summed over
the processes; one reply on A watched by `--fan-ks` connections on B, the extra CPU on B per
connection and per frame.

`--soak` runs the fault-injecting soak instead. `--profile KIND:N[:burst]` records a py-spy
profile of one server during one window of one workload. Results go to
bench/results/server_load*.md/.json.

    .venv/bin/python bench/server_load.py                  # all four workloads, ~20 minutes
    .venv/bin/python bench/server_load.py --workload burst --burst-ns 100,300
    .venv/bin/python bench/server_load.py --workload watchers --watch-ks 1,5,20 --watch-rounds 5
    .venv/bin/python bench/server_load.py --workload moderation --servers relay-aiohttp --base HEAD
    .venv/bin/python bench/server_load.py --soak --minutes 10
    .venv/bin/python bench/server_load.py --profile holdback:200
    .venv/bin/python bench/server_load.py --base c565ad0   # and holdback as of c565ad0
    .venv/bin/python bench/server_load.py --servers relay-aiohttp,relay --base HEAD --base c565ad0
    .venv/bin/python bench/server_load.py --profile holdback:100:burst
    .venv/bin/python bench/server_load.py --processes 1,2 --servers '' --base HEAD
"""

from __future__ import annotations

import argparse
import datetime
import json
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from server import (  # noqa: E402
    burst_report,
    cluster_cli,
    cluster_report,
    driver,
    moderation,
    moderation_report,
    moderation_run,
    procs,
    profiling,
    report,
    soak,
    watchers,
    watchers_report,
)

BASE_NS = (50, 100, 200)
GROW_NS = (300, 400, 500, 600, 800, 1000, 1200, 1600)


def _ns(text: str, *, empty: bool = False) -> tuple[int, ...]:
    try:
        values = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated numbers, not {text!r}"
        ) from None
    if (not values and not empty) or any(not 1 <= v <= 5000 for v in values):
        raise argparse.ArgumentTypeError("each N must be between 1 and 5000")
    return values


def _grow(text: str) -> tuple[int, ...]:
    """As `_ns`, and an empty value means: do not grow."""
    return _ns(text, empty=True)


def _rounds(text: str) -> int:
    value = int(text)
    if not 1 <= value <= 50:
        raise argparse.ArgumentTypeError("--burst-rounds must be between 1 and 50")
    return value


def _watch_ks(text: str) -> tuple[int, ...]:
    values = _ns(text)
    if any(v > watchers.MAX_VIEWERS for v in values):
        raise argparse.ArgumentTypeError(f"each K must be at most {watchers.MAX_VIEWERS}")
    return values


def _watch_rounds(text: str) -> int:
    value = int(text)
    if not 1 <= value <= 30:
        raise argparse.ArgumentTypeError("--watch-rounds must be between 1 and 30")
    return value


def _watch_chars(text: str) -> int:
    value = int(text)
    if not 20 <= value <= 5000:
        raise argparse.ArgumentTypeError("--watch-chars must be between 20 and 5000")
    return value


def _latencies(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected milliseconds, not {text!r}") from None
    if not values or any(not 0 <= v <= 2000 for v in values) or len(set(values)) < len(values):
        raise argparse.ArgumentTypeError("each latency once, between 0 and 2000 ms")
    return values


WORKLOADS = {
    "turns": ("turns",),
    "burst": ("burst",),
    "watchers": ("watchers",),
    "moderation": ("moderation",),
    "cluster": ("cluster",),
    "both": ("turns", "burst"),
    "all": ("turns", "burst", "watchers", "moderation"),
}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--ns", type=_ns, default=BASE_NS, help="Ns always measured (50,100,200)")
    p.add_argument("--grow", type=_grow, default=GROW_NS, help="Ns tried upward ('' for none)")
    p.add_argument("--max-n", type=int, default=1600)
    p.add_argument("--window", type=float, default=20.0, help="measured seconds per N")
    p.add_argument("--servers", default="relay-aiohttp,relay,holdback")
    p.add_argument(
        "--base",
        action="append",
        default=[],
        metavar="REV",
        help="also measure holdback as of REV, from a git worktree (repeatable); with "
        "--servers relay-aiohttp,relay, every holdback measured is a committed revision",
    )
    p.add_argument(
        "--workload",
        choices=tuple(WORKLOADS),
        default=None,
        help="all (default): turns, burst, watchers and moderation; both: turns and burst; "
        "cluster: 1 and 2 processes on one PostgreSQL (the default with --processes)",
    )
    p.add_argument("--burst-ns", type=_ns, default=(100,), help="Ns of the burst workload")
    p.add_argument("--burst-rounds", type=_rounds, default=5, help="burst rounds per N")
    p.add_argument("--watch-ks", type=_watch_ks, default=(1, 5, 20), help="viewers per reply")
    p.add_argument("--watch-rounds", type=_watch_rounds, default=5, help="rounds per K")
    p.add_argument(
        "--watch-chars",
        type=_watch_chars,
        default=350,
        help="characters per watched reply (~100 chunks)",
    )
    p.add_argument(
        "--mod-latencies",
        type=_latencies,
        default=(50.0, 200.0),
        help="the fake moderators' latencies, ms (50,200)",
    )
    p.add_argument(
        "--mod-rounds",
        type=cluster_cli.bounded("--mod-rounds", 1, moderation.MAX_ROUNDS),
        default=5,
        help="moderation rounds (each mode once per round)",
    )
    p.add_argument(
        "--mod-conversations",
        type=cluster_cli.bounded("--mod-conversations", 1, moderation.MAX_CONVERSATIONS),
        default=4,
        help="concurrent conversations per moderation round",
    )
    p.add_argument(
        "--mod-chars",
        type=cluster_cli.bounded("--mod-chars", 100, 5000),
        default=800,
        help="characters per moderated reply (~7 sentences)",
    )
    cluster_cli.add_arguments(p)
    p.add_argument("--chars", type=int, default=400, help="characters per reply")
    p.add_argument("--rate", type=float, default=20.0, help="upstream chunks/s per stream")
    p.add_argument("--deflate", action="store_true", help="clients negotiate permessage-deflate")
    p.add_argument("--soak", action="store_true")
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument("--soak-n", type=int, default=50)
    p.add_argument("--seed", type=int, default=7, help="fault plan seed for the soak")
    p.add_argument("--soak-server", default="holdback", choices=("holdback", "holdback-fixed"))
    p.add_argument("--profile", default=None, metavar="KIND:N[:burst]")
    p.add_argument("--out", type=Path, default=BENCH / "results")
    p.add_argument("--tag", default="", help="suffix for the output file names")
    p.add_argument("--keep", action="store_true", help="keep the work directory (logs)")
    p.add_argument("--from-json", type=Path, default=None, help="re-render a saved load run")
    return p


def _header(title: str, argv: list[str]) -> str:
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    command = shlex.join(["bench/server_load.py", *argv])
    return f"## {title}\n\n{now}; {driver.machine()}; {_revision()}; command: `{command}`"


def _revision() -> str:
    """The checkout measured: commit, and whether the working tree had local changes."""
    try:
        head = subprocess.run(
            ["git", "-C", str(BENCH), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(BENCH), "status", "--porcelain", "--", "../server"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "commit unknown"
    return f"commit {head}" + (" + local changes under server/" if dirty else "")


def _kinds(args: argparse.Namespace) -> list[str]:
    kinds = [k.strip() for k in args.servers.split(",") if k.strip()]
    kinds.extend(driver.BASE_PREFIX + rev for rev in args.base)
    missing = [k for k in kinds if k in driver.HOLDBACKS]
    if missing and not driver.holdback_available():
        print(f"holdback serve is not available in this checkout: not measuring {missing}")
        kinds = [k for k in kinds if k not in missing]
    return kinds


def turns(kinds: list[str], args: argparse.Namespace, settings: driver.Settings) -> list[Any]:
    """The 10-turn workload: the base Ns for every server, then growing while any sustains."""
    results: list[dict[str, Any]] = []
    active = set(kinds)
    upstream = driver.Upstream(settings)
    run = 0
    try:
        for n in sorted(set(args.ns) | {g for g in args.grow if g <= args.max_n}):
            base = n in args.ns
            for kind in kinds:
                if not base and kind not in active:
                    continue
                run += 1
                r = driver.measure(kind, n, run, upstream, settings)
                results.append(r)
                print(
                    f"N={n:5d} {kind:13s} cpu/chunk {r['cpu_per_chunk_ms']:.3f} ms  "
                    f"added p50 {r['added_p50_ms']:.2f} p99 {r['added_p99_ms']:.2f} ms  "
                    f"visible p99 {r['visible_p99_ms']:.2f} ms  frames/s "
                    f"{r['frames_per_s']:.0f}  rss/conn {r['rss_per_conn_kb']:.0f} KB  "
                    f"leaks {r['leaks']}  server cpu {r['server_cpu_pct']:.0f}%",
                    flush=True,
                )
                if not report.sustains(r):
                    active.discard(kind)
            if not base and not active:
                break
    finally:
        upstream.stop()
    return results


def _burst_line(r: dict[str, Any]) -> str:
    return (
        f"burst N={r['n']:5d} {r['server']:13s} cpu/conversation "
        f"{r['cpu_per_conversation_ms']:.2f} ms  accepted p99 {r['accepted_p99_ms']:.1f}  "
        f"start p99 {r['start_p99_ms']:.1f}  end p50 {r['end_p50_ms']:.1f} "
        f"p99 {r['end_p99_ms']:.1f} ms  complete {r['complete']}/{r['conversations']}  "
        f"mismatches {r['mismatches']}  leaks {r['leaks']}"
    )


def bursts(kinds: list[str], args: argparse.Namespace, settings: driver.Settings) -> list[Any]:
    """The new-conversation workload: every server at every burst N, on its own upstream."""
    results: list[dict[str, Any]] = []
    upstream = driver.Upstream(settings, chars=settings.burst_chars)
    run = 0
    try:
        for n in sorted(set(args.burst_ns)):
            for kind in kinds:
                run += 1
                r = driver.measure_burst(kind, n, run, upstream, settings)
                results.append(r)
                print(_burst_line(r), flush=True)
    finally:
        upstream.stop()
    return results


def _watch_line(r: dict[str, Any]) -> str:
    cells = []
    for row in sorted(r["rows"], key=lambda x: x["k"]):
        extra = row["extra_per_viewer"] * 100
        cells.append(
            f"K={row['k']}: {row['cpu_ms']:.1f} ms/round, {row['cpu_per_chunk_ms']:.3f} ms/chunk"
            + ("" if row["k"] == 0 else f", +{extra:.1f} %/viewer ({row['extra_kind']})")
        )
    return f"watch {r['server']:13s} " + "; ".join(cells)


def watch(kinds: list[str], args: argparse.Namespace, settings: driver.Settings) -> list[Any]:
    """The watchers workload, for each holdback in the run, this checkout's and each `--base`
    (a relay cannot watch a reply). The team is made by the measured revision's own store, so
    a revision from before the team schema (issue 17) fails its setup and is left out, with a
    line."""
    results: list[dict[str, Any]] = []
    measured = [k for k in kinds if k in driver.HOLDBACKS or k.startswith(driver.BASE_PREFIX)]
    if not measured:
        return results
    upstream = driver.Upstream(settings, chars=settings.watch_chars)
    try:
        for run, kind in enumerate(measured, 1):
            try:
                r = driver.measure_watchers(
                    kind, args.watch_ks, args.watch_rounds, run, upstream, settings
                )
            except procs.ProcessFailedError as exc:
                if not kind.startswith(driver.BASE_PREFIX):
                    raise
                print(f"watch {kind}: left out, it cannot serve this team: {exc}", flush=True)
                continue
            results.append(r)
            print(_watch_line(r), flush=True)
    finally:
        upstream.stop()
    return results


def _mod_line(r: dict[str, Any]) -> str:
    cells = []
    for row in r["rows"]:
        cell = (
            f"{row['mode']}: first text p50 {row['ttft_p50_ms']:.0f} ms, sentence p50 "
            f"{row['delay_p50_ms']:.1f} p99 {row['delay_p99_ms']:.1f} ms, cpu/chunk "
            f"{row['cpu_per_chunk_ms']:.3f} ms, calls/reply {row['calls_per_reply']:.2f}"
        )
        if "added_p99_ms" in row:
            cell += f", added p50 {row['added_p50_ms']:.1f} p99 {row['added_p99_ms']:.1f} ms"
        cells.append(cell)
    return f"moderation {r['server']:13s} " + "; ".join(cells)


def moderate(kinds: list[str], args: argparse.Namespace, settings: driver.Settings) -> list[Any]:
    """The moderation workload, for each holdback in the run (a relay cannot moderate). A
    revision that cannot start with `--moderation` is left out, with a line."""
    results: list[dict[str, Any]] = []
    measured = [k for k in kinds if k in driver.HOLDBACKS or k.startswith(driver.BASE_PREFIX)]
    if not measured:
        return results
    upstream = driver.Upstream(settings, chars=settings.mod_chars, style="prose")
    try:
        for run, kind in enumerate(measured, 1):
            try:
                r = moderation_run.measure(
                    kind,
                    args.mod_latencies,
                    args.mod_rounds,
                    args.mod_conversations,
                    run,
                    upstream,
                    settings,
                )
            except procs.ProcessFailedError as exc:
                print(f"moderation {kind}: left out, it did not run: {exc}", flush=True)
                continue
            results.append(r)
            print(_mod_line(r), flush=True)
    finally:
        upstream.stop()
    return results


def render(header: str, data: Any) -> str:
    """The report of a saved or fresh load run; a plain list is an old run (10-turn only)."""
    if isinstance(data, list):
        data = {"turns": data, "burst": []}
    parts = [header]
    if data.get("turns"):
        parts.append(report.bench_report(data["turns"]))
    if data.get("burst"):
        parts.append(burst_report.burst_report(data["burst"]))
    if data.get("watchers"):
        parts.append(watchers_report.watchers_report(data["watchers"]))
    if data.get("moderation"):
        parts.append(moderation_report.moderation_report(data["moderation"]))
    if data.get("cluster"):
        parts.append(cluster_report.cluster_report(data["cluster"]))
    return "\n\n".join(parts)


def _worktree(rev: str, work: Path) -> Path:
    """A detached worktree of `rev` in the run's work directory (removed with `_unworktree`)."""
    tree = work / f"base-{rev}"
    subprocess.run(
        ["git", "-C", str(BENCH), "worktree", "add", "--detach", "--force", str(tree), rev],
        capture_output=True,
        timeout=120,
        check=True,
    )
    return tree


def _unworktree(tree: Path) -> None:
    subprocess.run(
        ["git", "-C", str(BENCH), "worktree", "remove", "--force", str(tree)],
        capture_output=True,
        timeout=120,
        check=False,
    )


def bench(args: argparse.Namespace, settings: driver.Settings) -> tuple[str, dict[str, Any]]:
    kinds = _kinds(args)
    data: dict[str, Any] = {"turns": [], "burst": [], "watchers": [], "moderation": []}
    workloads = WORKLOADS[args.workload]
    data["cluster"] = []
    if "turns" in workloads:
        data["turns"] = turns(kinds, args, settings)
    if "burst" in workloads:
        data["burst"] = bursts(kinds, args, settings)
    if "watchers" in workloads:
        data["watchers"] = watch(kinds, args, settings)
    if "moderation" in workloads:
        data["moderation"] = moderate(kinds, args, settings)
    if "cluster" in workloads:
        data["cluster"] = cluster_cli.run(kinds, args, settings)
    return render(_header("Load and latency", sys.argv[1:]), data), data


def _profile_spec(text: str) -> tuple[str, int, bool]:
    kind, _, rest = text.partition(":")
    n_text, _, workload = rest.partition(":")
    if workload not in ("", "burst", "turns"):
        raise SystemExit(f"--profile expects KIND:N or KIND:N:burst, not {text!r}")
    return kind, int(n_text or ("100" if workload == "burst" else "200")), workload == "burst"


def profile(args: argparse.Namespace, settings: driver.Settings) -> tuple[str, Any]:
    kind, n, burst = _profile_spec(args.profile)
    suffix = "-burst" if burst else ""
    out = settings.work / f"profile-{kind}-{n}{suffix}.txt"
    upstream = driver.Upstream(settings, chars=settings.burst_chars if burst else None)
    try:
        if burst:
            r = driver.measure_burst(kind, n, 1, upstream, settings, profile=out)
            measured = (
                f"CPU/conversation {r['cpu_per_conversation_ms']:.2f} ms, "
                f"p99 completion {r['end_p99_ms']:.1f} ms"
            )
        else:
            r = driver.measure(kind, n, 1, upstream, settings, profile=out)
            measured = (
                f"CPU/chunk {r['cpu_per_chunk_ms']:.3f} ms, p99 added {r['added_p99_ms']:.2f} ms"
            )
    finally:
        upstream.stop()
    raw = out.read_text()
    saved = args.out / f"profile-{kind}-{n}{suffix}{args.tag}.txt"
    saved.write_text(raw)
    what = f"N = {n}" + (f", new conversations ({settings.burst_rounds} rounds)" if burst else "")
    text = "\n\n".join(
        [
            _header(f"Profile of {kind} at {what}", sys.argv[1:]),
            f"(measured under the profiler: {measured}; raw stacks in {saved.name})",
            "### Most self time\n\n" + profiling.self_table(raw),
            "### Most often on the stack\n\n" + profiling.inclusive_table(raw),
        ]
    )
    return text, r


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.workload is None:
        args.workload = "cluster" if args.processes else "all"
    args.out.mkdir(parents=True, exist_ok=True)
    if args.from_json is not None:
        saved = json.loads(args.from_json.read_text())
        print(render(f"## Load and latency\n\n(re-rendered from {args.from_json})", saved))
        return 0
    work = Path(tempfile.mkdtemp(prefix="holdback-bench-"))
    settings = driver.Settings(
        window=args.window,
        chars=args.chars,
        rate=args.rate,
        deflate=args.deflate,
        burst_rounds=args.burst_rounds,
        watch_chars=args.watch_chars,
        mod_chars=args.mod_chars,
        work=work,
    )
    trees: list[Path] = []
    try:
        for rev in args.base:
            settings.bases[rev] = _worktree(rev, work)
            trees.append(settings.bases[rev])
        if args.soak:
            data: Any = soak.run(settings, args.minutes, args.soak_n, args.seed, args.soak_server)
            text = report.soak_report(data, _header("Soak", sys.argv[1:]))
            name = "server_soak"
        elif args.profile:
            text, data = profile(args, settings)
            name = "server_profile"
        else:
            text, data = bench(args, settings)
            name = "server_load"
    finally:
        for tree in trees:
            _unworktree(tree)
        if args.keep:
            print(f"work directory kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    print(text)
    (args.out / f"{name}{args.tag}.md").write_text(text + "\n", encoding="utf-8")
    (args.out / f"{name}{args.tag}.json").write_text(json.dumps(data, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
