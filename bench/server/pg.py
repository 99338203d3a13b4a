"""A throwaway PostgreSQL for the cluster workload, and the CPU it spends.

The rule it keeps: the benchmark's database is the tests' throwaway server
(`tests/support/postgres.py`: initdb and pg_ctl as user postgres, 127.0.0.1 on a free port,
fsync off, stopped by its PID and deleted with its directory, and a watchdog that does both if
this process dies), started by the run and gone when it ends; one fresh database per
measurement. Its CPU is the postmaster's and every backend's, those that exited too: a live
backend's own clock, plus what the postmaster reaped from the ones gone (`cutime`, `cstime`),
so a pooled connection closed mid-round is not lost from the count.
"""

from __future__ import annotations

import contextlib
import sys
import time
from pathlib import Path
from typing import Any

from . import procs, watchers

REPO = procs.BENCH_DIR.parent


def _support() -> Any:
    """`tests.support.postgres`, imported from the repository's root (bench runs from bench/)."""
    if str(REPO) not in sys.path:
        sys.path.append(str(REPO))
    from tests.support import postgres

    return postgres


class Postgres:
    """One throwaway server for a run; `database()` hands out fresh, empty databases."""

    def __init__(self) -> None:
        support = _support()
        bindir = support.find_bindir()
        if bindir is None:
            raise procs.ProcessFailedError(
                "PostgreSQL is not installed (no initdb/pg_ctl under /usr/lib/postgresql/*/bin);"
                " `make test` installs it (apt-get install -y postgresql)"
            )
        self._server = support.start_throwaway_server(bindir)
        self.pid: int = self._server.postmaster_pid
        self.version = _version(bindir)

    def database(self) -> str:
        """A `postgresql+asyncpg://` URL of a new, empty database."""
        url: str = self._server.url(self._server.create_database())
        return url

    def stop(self) -> None:
        self._server.stop()

    def __enter__(self) -> Postgres:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()


def _version(bindir: Path) -> str:
    """`15` for /usr/lib/postgresql/15/bin (the tests' choice of binaries)."""
    return bindir.parent.name


def cpu_seconds(postmaster: int) -> float:
    """The server's CPU: every live process's clock (postmaster and backends, to the
    nanosecond) and the reaped backends' user and system time (in clock ticks)."""
    reaped = 0
    with contextlib.suppress(OSError, ValueError, IndexError):
        raw = Path(f"/proc/{postmaster}/stat").read_text()
        fields = raw[raw.rindex(")") + 2 :].split()
        reaped = int(fields[13]) + int(fields[14])  # cutime, cstime
    return watchers.cpu_seconds(postmaster) + reaped / procs.CLK_TCK


def wait_gone(pid: int, timeout: float = 30.0) -> bool:
    """True once `pid` no longer exists (the postmaster after `stop`)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not Path(f"/proc/{pid}").exists():
            return True
        time.sleep(0.05)
    return False
