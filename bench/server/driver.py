"""One measurement: a server under test, the shared upstream, a load generator, and /proc.

The rule it keeps: the relay and holdback are measured the same way, one after the other, with
the same upstream, the same generator settings and the same window, and every child process is
torn down with its process group before the next measurement starts. CPU is read from /proc at
the window's edges, so start-up, ramp-up and drain are never counted.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from websockets.sync.client import connect as ws_connect
from websockets.typing import Origin

from . import analysis, procs, profiling, script, watchers

VENV_BIN = Path(sys.executable).parent
# holdback as committed, and holdback with the profile-driven fix applied from outside
# (`patched.py`); both restore, guard and store.
HOLDBACKS = ("holdback", "holdback-fixed")
# `holdback@REV`: holdback as of an earlier revision, from a worktree (`Settings.bases`), for
# before/after figures from one run.
BASE_PREFIX = "holdback@"


def restores(kind: str) -> bool:
    """The server restores tokens (a holdback of any revision)."""
    return kind in HOLDBACKS or kind.startswith(BASE_PREFIX)


# The bare relays, each on one HTTP client (`relay.py`); `relay-aiohttp` is the strongest.
RELAYS = {"relay": "httpx", "relay-aiohttp": "aiohttp"}


@dataclass(slots=True)
class Settings:
    """Knobs shared by every measurement of a run."""

    window: float = 20.0
    ramp: float = 2.0
    settle: float = 3.0
    rate: float = 20.0
    chars: int = 400
    deflate: bool = False
    burst_chars: int = 85  # about 30 chunks of 1-6 characters
    burst_rounds: int = 5
    watch_chars: int = 350  # the watchers workload's replies: about 100 chunks
    mod_chars: int = 800  # the moderation workload's replies: about 7 sentences, 230 chunks
    bases: dict[str, Path] = field(default_factory=dict)  # revision -> its worktree
    work: Path = field(default_factory=lambda: Path("/tmp/holdback-bench"))

    @property
    def reply_seconds(self) -> float:
        return self.chars / 3.5 / self.rate


class Upstream:
    """The shared fake upstream process."""

    def __init__(
        self,
        settings: Settings,
        fault_seed: int | None = None,
        chars: int | None = None,
        style: str = "script",
    ) -> None:
        self.port = procs.free_port()
        argv = [sys.executable, "-m", "server.upstream", "--port", str(self.port)]
        argv += ["--rate", str(settings.rate), "--chars", str(chars or settings.chars)]
        argv += ["--style", style]
        if fault_seed is not None:
            argv += ["--fault-seed", str(fault_seed)]
        self.child = procs.Child("upstream", argv, settings.work)
        procs.wait_http(f"{self.base}/healthz", self.child)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def take_log(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"{self.base}/log", timeout=60) as response:
            data: dict[str, Any] = orjson.loads(response.read())
            return data

    def stop(self) -> None:
        self.child.stop()


def _holdback_command(
    kind: str, settings: Settings, upstream: Upstream, port: int, data_dir: Path, auth: str
) -> tuple[list[str], dict[str, str]]:
    """`holdback serve` of this kind (as committed, fixed, or of a base revision) on `port`
    over `data_dir`, talking to `upstream`: its argv and environment."""
    exe = [str(VENV_BIN / "holdback")]
    python_path = str(procs.BENCH_DIR)
    if kind == "holdback-fixed":
        exe = [sys.executable, "-m", "server.patched"]
    elif kind.startswith(BASE_PREFIX):
        tree = settings.bases[kind.removeprefix(BASE_PREFIX)]
        exe = [sys.executable, "-c", "from holdback.cli import main; raise SystemExit(main())"]
        python_path = f"{tree / 'server'}:{python_path}"
    argv = [*exe, "serve", "--host", "127.0.0.1", "--port", str(port)]
    argv += ["--model", "openai:bench-model", "--data-dir", str(data_dir), "--auth", auth]
    env = {
        "PYTHONPATH": python_path,
        "OPENAI_BASE_URL": f"{upstream.base}/v1",
        "OPENAI_API_KEY": "x",
        "HOLDBACK_DATA_DIR": str(data_dir),
        "HOLDBACK_RATE_LIMIT": "100000",
    }
    return argv, env


def start_server(
    kind: str, upstream: Upstream, settings: Settings, tag: str
) -> tuple[procs.Child, int]:
    """Start the relay or holdback on a free port; returns once `/healthz` answers."""
    port = procs.free_port()
    if kind in RELAYS:
        argv = [sys.executable, "-m", "server.relay", "--port", str(port)]
        argv += ["--upstream", f"{upstream.base}/v1", "--client", RELAYS[kind]]
        child = procs.Child(f"relay-{tag}", argv, settings.work)
    elif restores(kind):
        data_dir = settings.work / f"data-{tag}"
        shutil.rmtree(data_dir, ignore_errors=True)
        data_dir.mkdir(mode=0o700, parents=True)  # holdback refuses a directory others can read
        argv, env = _holdback_command(kind, settings, upstream, port, data_dir, "none")
        child = procs.Child(f"holdback-{tag}", argv, settings.work, env=env, cwd=data_dir)
    else:
        raise ValueError(f"unknown server kind {kind!r}")
    procs.wait_http(f"http://127.0.0.1:{port}/healthz", child)
    return child, port


def holdback_available() -> bool:
    """True when `holdback serve` exists in this checkout."""
    exe = VENV_BIN / "holdback"
    if not exe.exists():
        return False
    done = subprocess.run(
        [str(exe), "serve", "--help"], capture_output=True, timeout=60, check=False
    )
    return done.returncode == 0


def generator_argv(
    port: int,
    n: int,
    run: int,
    times: tuple[int, int, int, int],
    settings: Settings,
    out: Path,
    *,
    fault_seed: int | None = None,
    keep_frames: bool = True,
) -> list[str]:
    start, stop, deadline = times[0], times[2], times[3]
    argv = [sys.executable, "-m", "server.generator", "--url", f"ws://127.0.0.1:{port}/ws"]
    argv += ["--origin", f"http://127.0.0.1:{port}", "--n", str(n), "--run", str(run)]
    argv += ["--start-ns", str(start), "--ramp", str(settings.ramp)]
    argv += ["--stop-ns", str(stop), "--deadline-ns", str(deadline), "--out", str(out)]
    if settings.deflate:
        argv.append("--deflate")
    if fault_seed is not None:
        argv += ["--fault-seed", str(fault_seed)]
    if not keep_frames:
        argv.append("--no-frames")
    return argv


def warm_up(port: int) -> None:
    """One conversation before measuring, so lazy imports and caches count as idle memory."""
    url = f"ws://127.0.0.1:{port}/ws"
    text = script.user_message(0, script.stream_key(0, 0, 0))
    with ws_connect(url, origin=Origin(f"http://127.0.0.1:{port}"), open_timeout=30) as ws:
        ws.send(
            orjson.dumps({"type": "user_message", "conversation_id": None, "text": text}).decode()
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            frame = orjson.loads(ws.recv(timeout=max(0.1, deadline - time.monotonic())))
            if frame.get("type") in ("assistant_done", "error"):
                return
    raise procs.ProcessFailedError("the warm-up reply did not finish within 60 s")


def _sleep_until(when_ns: int) -> None:
    delay = (when_ns - time.monotonic_ns()) / 1e9
    if delay > 0:
        time.sleep(delay)


def measure(
    kind: str,
    n: int,
    run: int,
    upstream: Upstream,
    settings: Settings,
    profile: Path | None = None,
) -> dict[str, Any]:
    """One window of N conversations against one server; returns its figures.

    With `profile`, py-spy samples the server during the window into that file.
    """
    tag = f"{kind}-{n}-{run}"
    server, port = start_server(kind, upstream, settings, tag)
    generator: procs.Child | None = None
    try:
        warm_up(port)
        time.sleep(0.5)
        idle_rss = procs.rss_bytes(server.pid)
        upstream.take_log()
        now = time.monotonic_ns()
        start = now + int(0.5e9)
        window_start = start + int((settings.ramp + settings.settle) * 1e9)
        window_end = window_start + int(settings.window * 1e9)
        deadline = window_end + int((settings.reply_seconds * 2 + 15) * 1e9)
        out = settings.work / f"gen-{tag}.json"
        argv = generator_argv(
            port,
            n,
            run,
            (start, window_start, window_end, deadline),
            settings,
            out,
        )
        generator = procs.Child(f"gen-{tag}", argv, settings.work)
        _sleep_until(window_start)
        spy = profiling.start(server.pid, settings.window, profile) if profile else None
        cpu0 = {
            p: procs.cpu_seconds(c.pid)
            for p, c in (("server", server), ("upstream", upstream.child), ("generator", generator))
        }
        busy0 = procs.machine_busy_seconds()
        t0 = time.monotonic_ns()
        _sleep_until(window_end)
        cpu1 = {
            p: procs.cpu_seconds(c.pid)
            for p, c in (("server", server), ("upstream", upstream.child), ("generator", generator))
        }
        busy1 = procs.machine_busy_seconds()
        t1 = time.monotonic_ns()
        rss_at_n = procs.rss_bytes(server.pid)
        if spy is not None:
            spy.wait(timeout=60)
        generator.wait(timeout=(deadline - time.monotonic_ns()) / 1e9 + 20)
        log = upstream.take_log()
        if not server.alive():
            raise procs.ProcessFailedError(f"{kind} died during the run:\n{server.tail()}")
    finally:
        if generator is not None:
            generator.stop()
        server.stop(grace=10.0)
    gen = json.loads(out.read_text())
    out.unlink()
    window = (window_start, window_end)
    fig = analysis.analyse(log["streams"], gen["rounds"], window, restores=restores(kind))
    chunks = sum(
        1 for s in log["streams"] for t in s.get("sent_ns", ()) if window_start <= t < window_end
    )
    seconds = (t1 - t0) / 1e9
    cpu = {p: cpu1[p] - cpu0[p] for p in cpu0}
    result: dict[str, Any] = {
        "server": kind,
        "n": n,
        "window_s": seconds,
        "rate": settings.rate,
        "chunks": chunks,
        "cpu_per_chunk_ms": cpu["server"] / chunks * 1e3 if chunks else float("nan"),
        "server_cpu_pct": cpu["server"] / seconds * 100,
        "upstream_cpu_pct": cpu["upstream"] / seconds * 100,
        "generator_cpu_pct": cpu["generator"] / seconds * 100,
        "background_cpu_pct": (busy1 - busy0 - sum(cpu.values())) / seconds * 100,
        "frames_per_s": fig.frames / seconds,
        "chunks_per_s": chunks / seconds,
        "idle_rss_mb": idle_rss / 2**20,
        "rss_mb": rss_at_n / 2**20,
        "rss_per_conn_kb": (rss_at_n - idle_rss) / n / 1024,
        "upstream_lag_us": log["lag_us"],
        "upstream_counts": log["counts"],
        "generator_lag_us": gen["lag_us"],
        "generator_failures": gen["failures"],
        "connects": gen["connects"],
    }
    result.update(fig.summary())
    return result


def measure_burst(
    kind: str,
    n: int,
    run: int,
    upstream: Upstream,
    settings: Settings,
    profile: Path | None = None,
) -> dict[str, Any]:
    """`settings.burst_rounds` rounds of N new one-turn conversations opened at once.

    The server's CPU is read just before the first round and after the last conversation
    closed, so it holds everything those conversations cost (and the pauses' idle time).
    """
    tag = f"burst-{kind}-{n}-{run}"
    server, port = start_server(kind, upstream, settings, tag)
    generator: procs.Child | None = None
    out = settings.work / f"gen-{tag}.json"
    try:
        warm_up(port)
        time.sleep(0.5)
        upstream.take_log()
        argv = [sys.executable, "-m", "server.burst", "--url", f"ws://127.0.0.1:{port}/ws"]
        argv += ["--origin", f"http://127.0.0.1:{port}", "--n", str(n), "--run", str(run)]
        argv += ["--rounds", str(settings.burst_rounds), "--out", str(out)]
        cpu0 = procs.cpu_seconds(server.pid)
        t0 = time.monotonic_ns()
        generator = procs.Child(f"gen-{tag}", argv, settings.work)
        spy = None
        if profile is not None:
            reply = settings.burst_chars / 3.5 / settings.rate
            seconds = settings.burst_rounds * (reply + 1.5)
            spy = profiling.start(server.pid, seconds, profile)
        generator.wait(timeout=settings.burst_rounds * 90 + 30)
        cpu1 = procs.cpu_seconds(server.pid)
        t1 = time.monotonic_ns()
        if spy is not None:
            spy.wait(timeout=120)
        log = upstream.take_log()
        if not server.alive():
            raise procs.ProcessFailedError(f"{kind} died during the run:\n{server.tail()}")
    finally:
        if generator is not None:
            generator.stop()
        server.stop(grace=10.0)
    records = orjson.loads(out.read_bytes())["records"]
    out.unlink()
    figures = analysis.burst_figures(records, log["streams"], restores=restores(kind))
    cpu = cpu1 - cpu0
    result: dict[str, Any] = {
        "server": kind,
        "workload": "burst",
        "n": n,
        "rounds": settings.burst_rounds,
        "seconds": (t1 - t0) / 1e9,
        "cpu_s": cpu,
        "cpu_per_conversation_ms": cpu / len(records) * 1e3 if records else float("nan"),
        "chunks_per_reply": _mean(len(s.get("sizes", ())) for s in log["streams"]),
        "upstream_lag_us": log["lag_us"],
    }
    result.update(figures)
    return result


def measure_watchers(
    kind: str,
    ks: tuple[int, ...],
    rounds: int,
    run: int,
    upstream: Upstream,
    settings: Settings,
) -> dict[str, Any]:
    """One reply watched by K viewers under three policies, for each K (`watchers.py`).

    The team is made in a new store before holdback starts (`--auth password`, API tokens);
    the rig reads the server's CPU at each round's edges itself. `upstream` should make
    replies of `settings.watch_chars`.
    """
    if not restores(kind):
        raise ValueError(f"only holdback watches replies, not {kind!r}")
    tag = f"watch-{kind}-{run}"
    data_dir = settings.work / f"data-{tag}"
    shutil.rmtree(data_dir, ignore_errors=True)
    tokens = settings.work / f"tokens-{tag}.json"
    out = settings.work / f"watch-{tag}.json"
    viewers = max(ks)
    argv = [sys.executable, "-m", "server.watchers", "setup", "--data-dir", str(data_dir)]
    argv += ["--viewers", str(viewers), "--out", str(tokens)]
    # The team is made by the store of the holdback measured, so its schema is that one's.
    setup_env = None
    if kind.startswith(BASE_PREFIX):
        tree = settings.bases[kind.removeprefix(BASE_PREFIX)]
        setup_env = {"PYTHONPATH": f"{tree / 'server'}:{procs.BENCH_DIR}"}
    setup = procs.Child(f"setup-{tag}", argv, settings.work, env=setup_env)
    try:
        if setup.wait(timeout=120) != 0:
            raise procs.ProcessFailedError(f"the team was not made:\n{setup.tail()}")
    finally:
        setup.stop()
    port = procs.free_port()
    argv, env = _holdback_command(kind, settings, upstream, port, data_dir, "password")
    env["HOLDBACK_ALLOWED_HOSTS"] = "127.0.0.1"
    server = procs.Child(f"holdback-{tag}", argv, settings.work, env=env, cwd=data_dir)
    rig: procs.Child | None = None
    try:
        procs.wait_http(f"http://127.0.0.1:{port}/healthz", server)
        upstream.take_log()
        argv = [sys.executable, "-m", "server.watchers", "run"]
        argv += ["--url", f"ws://127.0.0.1:{port}/ws", "--origin", f"http://127.0.0.1:{port}"]
        argv += ["--server-pid", str(server.pid), "--data-dir", str(data_dir)]
        argv += ["--tokens", str(tokens), "--ks", ",".join(map(str, ks))]
        argv += ["--rounds", str(rounds), "--out", str(out)]
        t0 = time.monotonic_ns()
        rig = procs.Child(f"rig-{tag}", argv, settings.work)
        reply = settings.watch_chars / 3.5 / settings.rate
        sub_rounds = rounds * len(watchers.configs(ks)) + 1
        if rig.wait(timeout=sub_rounds * (reply * 3 + 20) + 60) != 0:
            raise procs.ProcessFailedError(f"the watchers rig failed:\n{rig.tail()}")
        seconds = (time.monotonic_ns() - t0) / 1e9
        log = upstream.take_log()
        if not server.alive():
            raise procs.ProcessFailedError(f"{kind} died during the run:\n{server.tail()}")
    finally:
        if rig is not None:
            rig.stop()
        server.stop(grace=10.0)
        tokens.unlink(missing_ok=True)
    data = orjson.loads(out.read_bytes())
    out.unlink()
    result: dict[str, Any] = {
        "server": kind,
        "workload": "watchers",
        "ks": list(ks),
        "rounds": rounds,
        "seconds": seconds,
        "chars": settings.watch_chars,
        "rate": settings.rate,
        "chunks_per_reply": _mean(len(s.get("sizes", ())) for s in log["streams"]),
        "upstream_lag_us": log["lag_us"],
        "warm_up": data.get("warm_up"),
    }
    result.update(watchers.figures(data, log["streams"]))
    return result


def _mean(values: Any) -> float:
    items = list(values)
    return sum(items) / len(items) if items else float("nan")


def machine() -> str:
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{os.cpu_count()} cores, {cpu}, Python {sys.version.split()[0]}"
