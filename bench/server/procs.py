"""Child processes of the benchmark, and what `/proc` says about them.

The rule it keeps: every process the benchmark starts runs in its own process group and is
ended with its whole group, SIGTERM first and SIGKILL after a grace period, so a run leaves no
orphans whatever way it ends. CPU time and RSS are read from `/proc/<pid>` (Linux only), in
seconds and bytes, for the process and every descendant of it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO

CLK_TCK = os.sysconf("SC_CLK_TCK")
BENCH_DIR = Path(__file__).resolve().parent.parent


class ProcessFailedError(RuntimeError):
    """A child process of the benchmark died or never became ready."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Child:
    """One child process in its own group; its output goes to a log file."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        log_dir: Path,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.name = name
        self.log_path = log_dir / f"{name}.log"
        self._log: IO[bytes] = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        full_env = dict(os.environ)
        full_env["PYTHONPATH"] = str(BENCH_DIR)
        full_env.update(env or {})
        self.proc = subprocess.Popen(
            list(argv),
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=full_env,
            cwd=str(cwd or BENCH_DIR),
            start_new_session=True,
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def tail(self, lines: int = 20) -> str:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def wait(self, timeout: float) -> int:
        return self.proc.wait(timeout)

    def stop(self, grace: float = 5.0) -> None:
        """End the whole process group: SIGTERM, then SIGKILL after `grace` seconds."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(grace)
        # The leader may be gone while its children live on: the group is killed regardless.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(grace)
        self._log.close()


def wait_http(url: str, child: Child, timeout: float = 30.0) -> None:
    """Poll `url` until it answers 200; fail at once if the child dies."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not child.alive():
            raise ProcessFailedError(f"{child.name} exited early:\n{child.tail()}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.1)
    raise ProcessFailedError(f"{child.name} was not ready within {timeout:g} s:\n{child.tail()}")


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            raw = (task / "children").read_text().split()
            out.extend(int(c) for c in raw)
    except OSError:
        pass
    return out


def tree(pid: int) -> list[int]:
    """`pid` and all its descendants."""
    seen = [pid]
    i = 0
    while i < len(seen) and len(seen) < 1000:
        seen.extend(_children(seen[i]))
        i += 1
    return seen


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process and its live descendants, in seconds."""
    total = 0
    for p in tree(pid):
        try:
            raw = Path(f"/proc/{p}/stat").read_text()
        except OSError:
            continue
        fields = raw[raw.rindex(")") + 2 :].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / CLK_TCK


def rss_bytes(pid: int) -> int:
    """Resident set size of a process and its live descendants, in bytes."""
    total = 0
    for p in tree(pid):
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
                    break
        except OSError:
            continue
    return total


def machine_busy_seconds() -> float:
    """CPU time every core of the machine spent busy (user, system, irq, steal), in seconds."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[:8])
    return (user + nice + system + irq + softirq + steal) / CLK_TCK
