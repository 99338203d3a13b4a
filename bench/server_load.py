"""`make bench-server`: holdback against a bare relay under load, and the soak.

The rule it keeps: every holdback figure is printed next to the relay's from the same run, as a
ratio, and every process the run starts is gone when it ends. By default it measures
N = 50, 100, 200 and then grows N until both servers' p99 added latency passes 100 ms (or
`--max-n`). `--soak` runs the fault-injecting soak instead. `--profile KIND:N` records a py-spy
profile of one server during one window. Results go to bench/results/server_load*.md/.json.

    .venv/bin/python bench/server_load.py                  # load and latency, ~10 minutes
    .venv/bin/python bench/server_load.py --soak --minutes 10
    .venv/bin/python bench/server_load.py --profile holdback:200
"""

from __future__ import annotations

import argparse
import datetime
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from server import driver, profiling, report, soak  # noqa: E402

BASE_NS = (50, 100, 200)
GROW_NS = (300, 400, 500, 600, 800, 1000, 1200, 1600)


def _ns(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated numbers, not {text!r}"
        ) from None
    if not values or any(not 1 <= v <= 5000 for v in values):
        raise argparse.ArgumentTypeError("each N must be between 1 and 5000")
    return values


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--ns", type=_ns, default=BASE_NS, help="Ns always measured (50,100,200)")
    p.add_argument("--grow", type=_ns, default=GROW_NS, help="Ns tried upward after those")
    p.add_argument("--max-n", type=int, default=1600)
    p.add_argument("--window", type=float, default=20.0, help="measured seconds per N")
    p.add_argument("--servers", default="relay,holdback")
    p.add_argument("--chars", type=int, default=400, help="characters per reply")
    p.add_argument("--rate", type=float, default=20.0, help="upstream chunks/s per stream")
    p.add_argument("--deflate", action="store_true", help="clients negotiate permessage-deflate")
    p.add_argument("--soak", action="store_true")
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument("--soak-n", type=int, default=50)
    p.add_argument("--seed", type=int, default=7, help="fault plan seed for the soak")
    p.add_argument("--soak-server", default="holdback", choices=("holdback", "holdback-fixed"))
    p.add_argument("--profile", default=None, metavar="KIND:N")
    p.add_argument("--out", type=Path, default=BENCH / "results")
    p.add_argument("--tag", default="", help="suffix for the output file names")
    p.add_argument("--keep", action="store_true", help="keep the work directory (logs)")
    p.add_argument("--from-json", type=Path, default=None, help="re-render a saved load run")
    return p


def _header(title: str, argv: list[str]) -> str:
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    command = " ".join(["bench/server_load.py", *argv])
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


def bench(args: argparse.Namespace, settings: driver.Settings) -> tuple[str, list[Any]]:
    kinds = [k.strip() for k in args.servers.split(",") if k.strip()]
    if "holdback" in kinds and not driver.holdback_available():
        print("holdback serve is not available in this checkout: measuring the relay only")
        kinds.remove("holdback")
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
                    f"N={n:5d} {kind:9s} cpu/chunk {r['cpu_per_chunk_ms']:.3f} ms  "
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
    return report.bench_report(results, _header("Load and latency", sys.argv[1:])), results


def profile(args: argparse.Namespace, settings: driver.Settings) -> tuple[str, Any]:
    kind, _, n_text = args.profile.partition(":")
    n = int(n_text or "200")
    out = settings.work / f"profile-{kind}-{n}.txt"
    upstream = driver.Upstream(settings)
    try:
        r = driver.measure(kind, n, 1, upstream, settings, profile=out)
    finally:
        upstream.stop()
    raw = out.read_text()
    saved = args.out / f"profile-{kind}-{n}{args.tag}.txt"
    saved.write_text(raw)
    text = "\n\n".join(
        [
            _header(f"Profile of {kind} at N = {n}", sys.argv[1:]),
            f"(measured under the profiler: CPU/chunk {r['cpu_per_chunk_ms']:.3f} ms, "
            f"p99 added {r['added_p99_ms']:.2f} ms; raw stacks in {saved.name})",
            "### Most self time\n\n" + profiling.self_table(raw),
            "### Most often on the stack\n\n" + profiling.inclusive_table(raw),
        ]
    )
    return text, r


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.from_json is not None:
        saved = json.loads(args.from_json.read_text())
        print(
            report.bench_report(
                saved, f"## Load and latency\n\n(re-rendered from {args.from_json})"
            )
        )
        return 0
    work = Path(tempfile.mkdtemp(prefix="holdback-bench-"))
    settings = driver.Settings(
        window=args.window, chars=args.chars, rate=args.rate, deflate=args.deflate, work=work
    )
    try:
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
