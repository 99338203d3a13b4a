"""The cluster workload (issue 20): holdback as 1 and 2 processes on one PostgreSQL.

The rule it keeps: every process measured is a real `holdback serve` on loopback; those of
one configuration share one throwaway PostgreSQL (`pg.py`) through `HOLDBACK_DATABASE_URL`
and one `HOLDBACK_VAULT_KEY`, each configuration on a database of its own; the first process
of a configuration starts alone (it migrates the schema), the others after it answers, and
every process is gone when the measurement ends. CPU is read from each process's own clock
at the edges of each round, by the load's own process (`cluster_load.py`, `fanout.py`), for
every server, PostgreSQL (with its exited backends), the upstream and the clients, and the
machine's busy time beside them, so the 2-core picture is whole.

Two measurements:
- throughput (`throughputs`): for each P, rounds of N new one-turn conversations, spread
  round-robin over the P processes; replies per second per round, CPU per streamed chunk
  summed over the P servers, and each part's share of the machine. With `sqlite`, one
  process on the embedded default (no cluster) is measured the same way, for reference.
  Every configuration runs from the start, and they take turns within each round, so work
  beside the run falls on each alike (the others idle meanwhile: their timers are "other");
- fan-out (`fan_out`): one reply on A watched by K connections on B (and, for comparison,
  on A): the extra CPU on the watchers' process per connection and per frame.
"""

from __future__ import annotations

import os
import secrets
import shutil
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import orjson

from . import analysis, cluster_load, driver, fanout, pg, procs, watchers

WARM_UPS = 2  # conversations through each process before measuring
PAUSE = 1.0  # seconds between rounds
QUIET = cluster_load.QUIET


def _pythonpath(kind: str, settings: driver.Settings) -> str:
    """The holdback a rig's own store calls should import: the measured revision's."""
    if kind.startswith(driver.BASE_PREFIX):
        tree = settings.bases[kind.removeprefix(driver.BASE_PREFIX)]
        return f"{tree / 'server'}:{procs.BENCH_DIR}"
    return str(procs.BENCH_DIR)


def _shared(database_url: str | None) -> dict[str, str]:
    """What every process of one measurement shares (nothing, on SQLite)."""
    if database_url is None:
        return {}
    return {"HOLDBACK_DATABASE_URL": database_url, "HOLDBACK_VAULT_KEY": secrets.token_urlsafe(32)}


def start(
    kind: str,
    count: int,
    shared: dict[str, str],
    upstream: driver.Upstream,
    settings: driver.Settings,
    tag: str,
    auth: str,
) -> list[tuple[procs.Child, int]]:
    """`count` holdback processes on the shared database; the first alone, then the rest."""
    started: list[tuple[procs.Child, int]] = []
    try:
        for i in range(count):
            port = procs.free_port()
            data_dir = settings.work / f"data-{tag}-{i}"
            shutil.rmtree(data_dir, ignore_errors=True)
            data_dir.mkdir(mode=0o700, parents=True)
            argv, env = driver._holdback_command(kind, settings, upstream, port, data_dir, auth)
            env.update(shared, HOLDBACK_ALLOWED_HOSTS="127.0.0.1")
            child = procs.Child(f"holdback-{tag}-{i}", argv, settings.work, env=env, cwd=data_dir)
            started.append((child, port))
            if i == 0:  # it migrates the schema; the others find it done
                procs.wait_http(f"http://127.0.0.1:{port}/healthz", child, timeout=60)
        for child, port in started[1:]:
            procs.wait_http(f"http://127.0.0.1:{port}/healthz", child, timeout=60)
    except BaseException:
        stop(started)
        raise
    return started


def stop(started: list[tuple[procs.Child, int]]) -> None:
    for child, _ in started:
        child.stop(grace=10.0)


def _alive(started: list[tuple[procs.Child, int]], kind: str) -> None:
    for child, _ in started:
        if not child.alive():
            raise procs.ProcessFailedError(f"{kind} died during the run:\n{child.tail()}")


@dataclass
class Config:
    """One configuration of the throughput measurement: P processes on one database."""

    count: int
    engine: str  # postgresql or sqlite
    first_tag: int
    started: list[tuple[procs.Child, int]] = field(default_factory=list)
    rounds: list[dict[str, Any]] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.engine}-{self.count}"


def throughputs(
    kind: str,
    configs: list[Config],
    postgres: pg.Postgres,
    upstream: driver.Upstream,
    settings: driver.Settings,
    n: int,
    rounds: int,
) -> list[dict[str, Any]]:
    """Rounds of N new conversations for every configuration, the configurations taking
    turns within each round (so work beside the run, if any, falls on each alike); all of
    them are started (and warmed up) first, each on its own database, and stopped after."""
    try:
        for c in configs:
            database = postgres.database() if c.engine == "postgresql" else None
            tag = f"cluster-{kind}-{c.name}"
            c.started = start(kind, c.count, _shared(database), upstream, settings, tag, "none")
            for _ in range(WARM_UPS):
                for _, port in c.started:
                    driver.warm_up(port)
        upstream.take_log()
        t0 = time.monotonic()
        for r in range(rounds):
            for c in configs[r % len(configs) :] + configs[: r % len(configs)]:
                time.sleep(PAUSE)
                found = _one_round(kind, c, postgres, upstream, settings, n, r)
                found["round"] = r
                c.rounds.append(found)
        seconds = time.monotonic() - t0
        log = upstream.take_log()
        for c in configs:
            _alive(c.started, kind)
    finally:
        for c in configs:
            stop(c.started)
    used, is_quiet = quiet_rounds([c.rounds for c in configs], rounds)
    results = []
    for c in configs:
        result = throughput_figures([c.rounds[r] for r in used], log["streams"], c.count)
        result["quiet"] = is_quiet
        result["left_out"] = [
            {"round": r, "other_pct": cluster_load.beside(rnd["cpu"], rnd["seconds"])}
            for r, rnd in enumerate(c.rounds)
            if r not in used
        ]
        result["rounds_total"] = rounds
        result.update(
            server=kind,
            workload="cluster",
            engine=c.engine,
            processes=c.count,
            n=n,
            seconds=seconds,
            chars=settings.burst_chars,
            rate=settings.rate,
            upstream_lag_us=log["lag_us"],
        )
        results.append(result)
    return results


def quiet_rounds(per_config: list[list[dict[str, Any]]], rounds: int) -> tuple[list[int], bool]:
    """The round numbers to use, and whether they are the quiet ones: a round where any
    configuration had work beside it is left out for all of them, unless that leaves fewer
    than half of the rounds (then all are used, and the report says the machine was busy)."""
    quiet = [
        r
        for r in range(rounds)
        if all(not cluster_load.beside(c[r]["cpu"], c[r]["seconds"]) > QUIET for c in per_config)
    ]
    if len(quiet) * 2 >= rounds:
        return quiet, True
    return list(range(rounds)), False


def _one_round(
    kind: str,
    c: Config,
    postgres: pg.Postgres,
    upstream: driver.Upstream,
    settings: driver.Settings,
    n: int,
    r: int,
) -> dict[str, Any]:
    """One round of one configuration, by a load process of its own (`cluster_load.py`)."""
    tag = f"{kind}-{c.name}-{r}"
    out = settings.work / f"load-{tag}.json"
    argv = [sys.executable, "-m", "server.cluster_load", "--n", str(n), "--rounds", "1"]
    argv += ["--out", str(out), "--run", str(c.first_tag + r)]
    for i, (child, port) in enumerate(c.started):
        argv += ["--url", f"ws://127.0.0.1:{port}/ws", "--cpu", f"{_name(i)}={child.pid}"]
    if c.engine == "postgresql":
        argv += ["--cpu", f"postgres={postgres.pid}"]
    argv += ["--cpu", f"upstream={upstream.child.pid}"]
    load = procs.Child(f"load-{tag}", argv, settings.work)
    try:
        reply = settings.burst_chars / 3.5 / settings.rate
        if load.wait(timeout=reply * 20 + 120) != 0:
            raise procs.ProcessFailedError(f"the cluster load failed:\n{load.tail()}")
    finally:
        load.stop()
    (found,) = orjson.loads(out.read_bytes())["rounds"]
    out.unlink()
    result: dict[str, Any] = found
    return result


def _name(i: int) -> str:
    return "abcdefgh"[i]


def throughput_figures(
    rounds: list[dict[str, Any]], streams: list[dict[str, Any]], count: int
) -> dict[str, Any]:
    """Replies per second per round (complete replies over the round's time), CPU per
    streamed chunk and per reply by part, each part's share of the round's time, the
    latencies and checks of every conversation (`analysis.burst_figures`)."""
    chunks_by_key = {s["key"]: len(s.get("sent_ns", ())) for s in streams}
    servers = [_name(i) for i in range(count)]
    per_round: list[dict[str, Any]] = []
    records: list[dict[str, Any]] = []
    totals: dict[str, float] = {}
    for rnd in rounds:
        done = [r for r in rnd["records"] if r["outcome"] == "done:complete"]
        chunks = sum(chunks_by_key.get(r["key"], 0) for r in rnd["records"])
        cpu = dict(rnd["cpu"])
        cpu["servers"] = sum(cpu[s] for s in servers)
        for name, value in cpu.items():
            totals[name] = totals.get(name, 0.0) + value
        totals["chunks"] = totals.get("chunks", 0.0) + chunks
        totals["replies"] = totals.get("replies", 0.0) + len(done)
        totals["seconds"] = totals.get("seconds", 0.0) + rnd["seconds"]
        per_round.append(
            {
                "round": rnd["round"],
                "seconds": rnd["seconds"],
                "replies": len(done),
                "replies_per_s": len(done) / rnd["seconds"] if rnd["seconds"] else 0.0,
                "chunks": chunks,
                "cpu_s": cpu,
            }
        )
        records.extend(rnd["records"])
    rates = [r["replies_per_s"] for r in per_round]
    seconds = totals.get("seconds", 0.0)
    chunks = totals.get("chunks", 0.0)
    replies = totals.get("replies", 0.0)
    parts = [*servers, "servers", "postgres", "clients", "upstream", "machine"]
    if "machine" in totals:  # what ran beside the measured processes (other work, the kernel)
        measured = ("servers", "postgres", "clients", "upstream")
        totals["other"] = totals["machine"] - sum(totals.get(p, 0.0) for p in measured)
        parts.append("other")
    result: dict[str, Any] = {
        "rounds": per_round,
        "replies_per_s": statistics.median(rates) if rates else float("nan"),
        "replies_per_s_min": min(rates, default=float("nan")),
        "replies_per_s_max": max(rates, default=float("nan")),
        "chunks_per_reply": chunks / replies if replies else float("nan"),
        "share_pct": {p: totals[p] / seconds * 100 for p in parts if p in totals and seconds},
        "per_chunk_ms": {p: totals[p] / chunks * 1e3 for p in parts if p in totals and chunks},
        "per_reply_ms": {p: totals[p] / replies * 1e3 for p in parts if p in totals and replies},
        "replies_by_process": [
            sum(1 for r in records if r.get("process") == i and r["outcome"] == "done:complete")
            for i in range(count)
        ],
        "cores": _cores(),
    }
    result.update(analysis.burst_figures(records, streams, restores=True))
    return result


def _cores() -> int:
    return os.cpu_count() or 1


def fan_out(
    kind: str,
    database_url: str,
    postgres: pg.Postgres,
    upstream: driver.Upstream,
    settings: driver.Settings,
    ks: tuple[int, ...],
    rounds: int,
    where: tuple[str, ...],
    run: int,
    stagger: float = 0.0,
) -> dict[str, Any]:
    """One reply on A watched by K viewers on B (and on A): `fanout.py`'s rounds."""
    tag = f"fanout-{kind}-{run}"
    shared = _shared(database_url)
    data_dir = settings.work / f"data-{tag}-team"
    tokens = settings.work / f"tokens-{tag}.json"
    out = settings.work / f"fanout-{tag}.json"
    env = {"PYTHONPATH": _pythonpath(kind, settings), **shared}
    argv = [sys.executable, "-m", "server.watchers", "setup", "--data-dir", str(data_dir)]
    argv += ["--viewers", str(max(ks)), "--out", str(tokens)]
    setup = procs.Child(f"setup-{tag}", argv, settings.work, env=env)
    try:
        if setup.wait(timeout=120) != 0:
            raise procs.ProcessFailedError(f"the team was not made:\n{setup.tail()}")
    finally:
        setup.stop()
    started: list[tuple[procs.Child, int]] = []
    rig: procs.Child | None = None
    try:
        started = start(kind, 2, shared, upstream, settings, tag, "password")
        (a, a_port), (b, b_port) = started
        upstream.take_log()
        argv = [sys.executable, "-m", "server.fanout", "--url", f"ws://127.0.0.1:{a_port}/ws"]
        argv += ["--viewer-url", f"ws://127.0.0.1:{b_port}/ws"]
        argv += ["--a-pid", str(a.pid), "--b-pid", str(b.pid), "--pg-pid", str(postgres.pid)]
        argv += ["--data-dir", str(data_dir), "--tokens", str(tokens)]
        argv += ["--ks", ",".join(map(str, ks)), "--rounds", str(rounds)]
        argv += ["--where", ",".join(where), "--stagger", str(stagger), "--out", str(out)]
        t0 = time.monotonic()
        rig = procs.Child(f"rig-{tag}", argv, settings.work, env=env)
        reply = settings.watch_chars / 3.5 / settings.rate
        sub_rounds = rounds * (1 + len(where) * len(watchers.configs(ks))) + len(where)
        per_round = reply * 3 + 20 + stagger * max(ks)
        if rig.wait(timeout=sub_rounds * per_round + 60) != 0:
            raise procs.ProcessFailedError(f"the fan-out rig failed:\n{rig.tail()}")
        seconds = time.monotonic() - t0
        log = upstream.take_log()
        _alive(started, kind)
    finally:
        if rig is not None:
            rig.stop()
        stop(started)
        tokens.unlink(missing_ok=True)
    data = orjson.loads(out.read_bytes())
    out.unlink()
    result = fanout.figures(data, log["streams"])
    result.update(
        server=kind,
        workload="fanout",
        ks=list(ks),
        where=list(where),
        stagger=stagger,
        rounds=rounds,
        seconds=seconds,
        chars=settings.watch_chars,
        rate=settings.rate,
        chunks_per_reply=_mean_chunks(log["streams"]),
        warm_up=data.get("warm_up"),
    )
    return result


def _mean_chunks(streams: list[dict[str, Any]]) -> float:
    sizes = [len(s.get("sizes", ())) for s in streams]
    return sum(sizes) / len(sizes) if sizes else float("nan")


def measure(
    kind: str,
    processes: tuple[int, ...],
    options: dict[str, Any],
    settings: driver.Settings,
    run: int,
) -> dict[str, Any]:
    """Everything the cluster workload measures for one holdback, on one throwaway
    PostgreSQL started for it (and stopped, whatever happens)."""
    result: dict[str, Any] = {"server": kind, "throughput": [], "fanout": []}
    with pg.Postgres() as postgres:
        result["postgres"] = postgres.version
        configs = [Config(1, "sqlite", 0)] if options["sqlite"] else []
        configs += [Config(p, "postgresql", 0) for p in processes]
        for i, c in enumerate(configs):
            c.first_tag = cluster_load.RUN_BASE + i * options["rounds"]
        upstream = driver.Upstream(settings, chars=settings.burst_chars)
        try:
            found = throughputs(
                kind, configs, postgres, upstream, settings, options["n"], options["rounds"]
            )
        finally:
            upstream.stop()
        for r in found:
            result["throughput"].append(r)
            print(_line(r), flush=True)
        # Each stagger on a database of its own; the comparison on A only with the first.
        for i, stagger in enumerate(options["fan_stagger"] if options["fan_ks"] else ()):
            where = options["fan_where"] if i == 0 else ("remote",)
            upstream = driver.Upstream(settings, chars=settings.watch_chars)
            try:
                fan = fan_out(
                    kind,
                    postgres.database(),
                    postgres,
                    upstream,
                    settings,
                    options["fan_ks"],
                    options["fan_rounds"],
                    where,
                    run * 10 + i,
                    stagger,
                )
            finally:
                upstream.stop()
            result["fanout"].append(fan)
            print(_fan_line(fan), flush=True)
    return result


def _line(r: dict[str, Any]) -> str:
    share = r["share_pct"]
    return (
        f"cluster {r['server']} {r['engine']} P={r['processes']} N={r['n']}: "
        f"{r['replies_per_s']:.1f} replies/s, cpu/chunk servers "
        f"{r['per_chunk_ms'].get('servers', float('nan')):.3f} ms, postgres "
        f"{r['per_chunk_ms'].get('postgres', 0.0):.3f} ms; busy servers "
        f"{share.get('servers', 0):.0f}% postgres {share.get('postgres', 0):.0f}% clients "
        f"{share.get('clients', 0):.0f}% machine {share.get('machine', 0):.0f}%; complete "
        f"{r['complete']}/{r['conversations']} mismatches {r['mismatches']} leaks {r['leaks']}"
    )


def _fan_line(r: dict[str, Any]) -> str:
    cells = [
        f"{row['where']} K={row['k']}: +{row['extra_ms']:.2f} ms/conn, "
        f"{row['per_frame_ms']:.3f} ms/frame"
        for row in r["rows"]
        if row["k"]
    ]
    return f"fan-out {r['server']} (one reply {r['reply_ms']:.1f} ms): " + "; ".join(cells)
