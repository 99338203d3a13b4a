"""The cluster workload's options (`bench/server_load.py --processes 1,2`) and its run.

The rule it keeps: every bound of the workload is checked when the options are read, so a
run that starts can finish within its timeouts (at most four configurations, 12 processes,
`watchers.MAX_VIEWERS` viewers, a stagger under half a second), and the cluster workload
measures holdback only: this checkout's and each `--base` revision's.
"""

from __future__ import annotations

import argparse
from typing import Any

from . import driver, fanout, watchers
from .cluster import measure

MAX_PROCESSES = 12


def _processes(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected process counts, not {text!r}") from None
    if not values or any(not 1 <= v <= 8 for v in values) or len(set(values)) < len(values):
        raise argparse.ArgumentTypeError("each process count once, between 1 and 8")
    return values


def _fan_ks(text: str) -> tuple[int, ...]:
    values = tuple(int(x) for x in text.split(",") if x.strip())
    if any(not 1 <= v <= watchers.MAX_VIEWERS for v in values):
        raise argparse.ArgumentTypeError(f"each K between 1 and {watchers.MAX_VIEWERS}")
    return values  # empty: no fan-out


def bounded(name: str, low: int, high: int) -> Any:
    """An argparse type: an int between `low` and `high` (the option's bound)."""

    def parse(text: str) -> int:
        value = int(text)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{name} must be between {low} and {high}")
        return value

    return parse


def _staggers(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, not {text!r}") from None
    if not values or any(not 0 <= v <= 0.5 for v in values) or len(set(values)) < len(values):
        raise argparse.ArgumentTypeError("each --fan-stagger once, between 0 and 0.5 s")
    return values


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--processes",
        type=_processes,
        default=None,
        help="the cluster workload's process counts on one PostgreSQL (1,2); implies "
        "--workload cluster unless another is named",
    )
    p.add_argument(
        "--cluster-n",
        type=bounded("--cluster-n", 1, 1000),
        default=200,
        help="new conversations at once per cluster round",
    )
    p.add_argument(
        "--cluster-rounds",
        type=bounded("--cluster-rounds", 1, 10),
        default=5,
        help="cluster rounds per process count",
    )
    p.add_argument(
        "--cluster-sqlite",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also one process on SQLite, the embedded default, for reference",
    )
    p.add_argument("--fan-ks", type=_fan_ks, default=(1, 5, 20), help="viewers on B ('' none)")
    p.add_argument(
        "--fan-rounds", type=bounded("--fan-rounds", 1, 30), default=5, help="fan-out rounds"
    )
    p.add_argument(
        "--fan-where",
        type=fanout._places,
        default=fanout.PLACES,
        help="where the viewers are: remote (on B), local (on A, for comparison)",
    )
    p.add_argument(
        "--fan-stagger",
        type=_staggers,
        default=(0.0, 0.05),
        help="seconds between the viewers' watches, one fan-out each (0: all at once; "
        "default 0,0.05)",
    )


def run(kinds: list[str], args: argparse.Namespace, settings: driver.Settings) -> list[Any]:
    """The cluster workload for each holdback of the run (this checkout's, each `--base`)."""
    measured = [k for k in kinds if k == "holdback" or k.startswith(driver.BASE_PREFIX)]
    options = {
        "n": args.cluster_n,
        "rounds": args.cluster_rounds,
        "sqlite": args.cluster_sqlite,
        "fan_ks": args.fan_ks,
        "fan_rounds": args.fan_rounds,
        "fan_where": args.fan_where,
        "fan_stagger": args.fan_stagger,
    }
    processes = args.processes or (1, 2)
    # Every configuration runs at once, each process with up to 16 connections to the
    # database (its pool and its listener); the throwaway server takes 300.
    if len(processes) + args.cluster_sqlite > 4 or sum(processes) > MAX_PROCESSES:
        raise SystemExit(
            f"at most four cluster configurations and {MAX_PROCESSES} processes in all per run"
        )
    results = []
    for number, kind in enumerate(measured, 1):
        results.append(measure(kind, processes, options, settings, number))
    return results
