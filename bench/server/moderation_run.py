"""One moderation measurement: a fake moderator per latency, a holdback per mode, the rig.

The rule it keeps: the modes differ in one thing only. Every holdback is the same revision,
started the same way on the same upstream (replies in sentences, `--style prose`), each on a
new store; the one with moderation off is told so (`HOLDBACK_MODERATION=off`, whatever the
environment says), each other one gets `--moderation http:<its moderator>/check` and
nothing else. The servers run side by side so the rig can interleave their rounds
(`moderation.py`), and every process is ended with its group when the measurement ends,
whatever way it ends. A revision that cannot start with `--moderation` fails here, loudly;
one that starts but makes no call shows it in the figures (no calls per reply), never as a
pass.
"""

from __future__ import annotations

import shutil
import sys
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import orjson

from . import driver, moderation_figures, procs

OFF: Final = moderation_figures.OFF


def mode_name(latency_ms: float) -> str:
    return f"http-{latency_ms:g}ms"


class FakeModerator:
    """One fake moderator process (`moderator.py`) at a fixed latency."""

    def __init__(self, latency_ms: float, work: Path) -> None:
        self.latency_ms = latency_ms
        self.port = procs.free_port()
        argv = [sys.executable, "-m", "server.moderator", "--port", str(self.port)]
        argv += ["--latency-ms", f"{latency_ms:g}"]
        self.child = procs.Child(f"moderator-{latency_ms:g}ms-{self.port}", argv, work)
        procs.wait_http(f"{self.base}/healthz", self.child)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"{self.base}/check"

    def take_log(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"{self.base}/log", timeout=60) as response:
            data: dict[str, Any] = orjson.loads(response.read())
            return data

    def stop(self) -> None:
        self.child.stop()


def _server(
    kind: str,
    mode: str,
    moderator: FakeModerator | None,
    upstream: driver.Upstream,
    settings: driver.Settings,
    tag: str,
) -> tuple[procs.Child, int]:
    port = procs.free_port()
    data_dir = settings.work / f"data-{tag}-{mode}"
    shutil.rmtree(data_dir, ignore_errors=True)
    data_dir.mkdir(mode=0o700, parents=True)
    argv, env = driver._holdback_command(kind, settings, upstream, port, data_dir, "none")
    if moderator is None:
        env["HOLDBACK_MODERATION"] = OFF
    else:
        argv += ["--moderation", f"http:{moderator.url}"]
    child = procs.Child(f"holdback-{tag}-{mode}", argv, settings.work, env=env, cwd=data_dir)
    procs.wait_http(f"http://127.0.0.1:{port}/healthz", child)
    return child, port


def measure(
    kind: str,
    latencies: Sequence[float],
    rounds: int,
    conversations: int,
    run: int,
    upstream: driver.Upstream,
    settings: driver.Settings,
) -> dict[str, Any]:
    """The same replies with moderation off and with a webhook moderator at each latency.
    `upstream` should make prose replies (`driver.Upstream(..., style="prose")`)."""
    if not driver.restores(kind):
        raise ValueError(f"only holdback moderates replies, not {kind!r}")
    tag = f"mod-{kind}-{run}"
    out = settings.work / f"moderation-{tag}.json"
    moderators: dict[str, FakeModerator] = {}
    servers: dict[str, tuple[procs.Child, int]] = {}
    rig: procs.Child | None = None
    try:
        for ms in latencies:
            moderators[mode_name(ms)] = FakeModerator(ms, settings.work)
        for mode in [OFF, *moderators]:
            servers[mode] = _server(kind, mode, moderators.get(mode), upstream, settings, tag)
        upstream.take_log()
        for m in moderators.values():
            m.take_log()
        argv = [sys.executable, "-m", "server.moderation", "--out", str(out)]
        for mode, (child, port) in servers.items():
            argv += ["--target", f"{mode}={port}:{child.pid}"]
        argv += ["--rounds", str(rounds), "--conversations", str(conversations)]
        t0 = time.monotonic_ns()
        rig = procs.Child(f"rig-{tag}", argv, settings.work)
        reply = settings.mod_chars / 3.5 / settings.rate
        if rig.wait(timeout=(rounds + 1) * len(servers) * (reply * 3 + 20) + 60) != 0:
            raise procs.ProcessFailedError(f"the moderation rig failed:\n{rig.tail()}")
        seconds = (time.monotonic_ns() - t0) / 1e9
        log = upstream.take_log()
        calls = {mode: m.take_log() for mode, m in moderators.items()}
        for mode, (child, _) in servers.items():
            if not child.alive():
                raise procs.ProcessFailedError(f"{kind} ({mode}) died:\n{child.tail()}")
    finally:
        if rig is not None:
            rig.stop()
        for child, _ in servers.values():
            child.stop(grace=10.0)
        for m in moderators.values():
            m.stop()
    data = orjson.loads(out.read_bytes())
    out.unlink()
    modes = {OFF: None, **{mode_name(ms): float(ms) for ms in latencies}}
    result: dict[str, Any] = {
        "server": kind,
        "workload": "moderation",
        "latencies_ms": list(latencies),
        "rounds": rounds,
        "seconds": seconds,
        "chars": settings.mod_chars,
        "rate": settings.rate,
        "upstream_lag_us": log["lag_us"],
        "bad_requests": {mode: c["counts"]["bad_requests"] for mode, c in calls.items()},
    }
    result.update(
        moderation_figures.figures(
            data, log["streams"], {mode: c["requests"] for mode, c in calls.items()}, modes
        )
    )
    return result
