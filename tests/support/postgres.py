"""A throwaway PostgreSQL server for tests, and the pytest fixtures that hand out databases.

The rule it keeps: tests that need PostgreSQL run against a *real* server, never a fake. The
server is started once per test session, on 127.0.0.1 with a free port, from the binaries that
Debian's `postgresql` package installs (`make test` installs them), in a temporary cluster
that is deleted afterwards. Every test gets a database of its own. Where the binaries are not
installed the tests are skipped with a visible reason; a server that is installed but fails to
start is an error, not a skip.

If `HOLDBACK_TEST_POSTGRES_URL` is set (for example `postgresql://postgres@127.0.0.1:5432/postgres`,
a role allowed to create databases), that server is used instead and nothing is started.

Use from a conftest:

    from tests.support.postgres import postgres_server, postgres_url  # noqa: F401

`postgres_url` yields a `postgresql+asyncpg://` URL for a fresh, empty database.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote, urlsplit, urlunsplit

import pytest

ENV_URL = "HOLDBACK_TEST_POSTGRES_URL"
PREFERRED_MAJOR = 15
SERVER_OPTIONS = (
    "-F -c fsync=off -c full_page_writes=off -c synchronous_commit=off "
    "-c listen_addresses=127.0.0.1 -c max_connections=300"
)
_DB_NAME_RE = re.compile(r"[a-z_][a-z0-9_]*\Z")
T = TypeVar("T")


class PostgresStartError(RuntimeError):
    """The PostgreSQL binaries are installed but the throwaway server did not start."""


def _run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to completion on a private event loop in a private thread.

    Fixtures may be set up while another event loop is running in this thread (anyio's), so
    the admin connection gets a loop of its own.
    """
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(coro)
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=target, name="postgres-admin")
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    value: T = box["value"]
    return value


async def _admin_execute(dsn: str, *statements: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(dsn, timeout=30)
    try:
        for statement in statements:
            await conn.execute(statement)
    finally:
        await conn.close()


def find_bindir() -> Path | None:
    """The bin directory of the installed PostgreSQL, preferring major version 15."""
    override = os.environ.get("HOLDBACK_TEST_POSTGRES_BINDIR")
    candidates = [Path(override)] if override else []
    root = Path("/usr/lib/postgresql")
    if root.is_dir():
        versions = sorted(
            (p for p in root.iterdir() if p.name.isdigit()),
            key=lambda p: (int(p.name) != PREFERRED_MAJOR, -int(p.name)),
        )
        candidates += [p / "bin" for p in versions]
    for bindir in candidates:
        if (bindir / "initdb").is_file() and (bindir / "pg_ctl").is_file():
            return bindir
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class PostgresServer:
    """A PostgreSQL server the tests may create and drop databases on."""

    scheme_netloc: str  # e.g. "postgresql://postgres@127.0.0.1:5433"
    admin_database: str = "postgres"
    postmaster_pid: int | None = None
    workdir: Path | None = None
    watchdog: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    _stopped: bool = field(default=False, repr=False)

    def url(self, database: str, driver: str = "asyncpg") -> str:
        """A SQLAlchemy URL for `database` on this server (`driver=""` gives a libpq URL)."""
        scheme, rest = self.scheme_netloc.split("://", 1)
        scheme = f"{scheme}+{driver}" if driver else scheme
        return f"{scheme}://{rest}/{quote(database)}"

    def admin_dsn(self) -> str:
        return self.url(self.admin_database, driver="")

    def execute(self, *statements: str) -> None:
        """Run administrative statements (CREATE/DROP DATABASE…) on the admin database."""
        _run_sync(_admin_execute(self.admin_dsn(), *statements))

    def create_database(self, template: str | None = None) -> str:
        """Create a new, uniquely named database and return its name."""
        name = f"holdback_test_{uuid.uuid4().hex[:16]}"
        clause = f" TEMPLATE {_ident(template)}" if template else " TEMPLATE template0"
        self.execute(f"CREATE DATABASE {_ident(name)}{clause}")
        return name

    def drop_database(self, name: str) -> None:
        self.execute(f"DROP DATABASE IF EXISTS {_ident(name)} WITH (FORCE)")

    def stop(self) -> None:
        """Stop a server this process started (fast shutdown), then delete its cluster."""
        if self._stopped:
            return
        self._stopped = True
        if self.postmaster_pid is not None:
            _stop_postmaster(self.postmaster_pid)
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
        if self.watchdog is not None:
            with contextlib.suppress(ProcessLookupError):
                self.watchdog.kill()
            self.watchdog.wait()


def _ident(name: str) -> str:
    if not _DB_NAME_RE.match(name):
        raise ValueError(f"refusing unusual database name {name!r}")
    return f'"{name}"'


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _stop_postmaster(pid: int, timeout: float = 30.0) -> None:
    for sig in (signal.SIGINT, signal.SIGQUIT, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
        deadline = time.monotonic() + timeout / 3
        while time.monotonic() < deadline:
            if not _alive(pid):
                return
            time.sleep(0.05)


def _as_postgres_cmd(cmd: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return cmd
    runuser = shutil.which("runuser")
    if runuser:
        return [runuser, "-u", "postgres", "--", *cmd]
    return ["su", "postgres", "-s", "/bin/sh", "-c", " ".join(_shell_quote(c) for c in cmd)]


def _shell_quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def _watchdog(owner_pid: int, postmaster_pid: int, workdir: Path) -> subprocess.Popen[bytes]:
    """Stop the server and delete the cluster if this test process dies without cleaning up."""
    script = (
        f"while kill -0 {owner_pid} 2>/dev/null; do sleep 1; done; "
        f"kill -INT {postmaster_pid} 2>/dev/null; sleep 3; "
        f"kill -KILL {postmaster_pid} 2>/dev/null; rm -rf {_shell_quote(str(workdir))}"
    )
    return subprocess.Popen(
        ["/bin/sh", "-c", script],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def start_throwaway_server(bindir: Path, attempts: int = 3) -> PostgresServer:
    """initdb a cluster in a temporary directory and start it on 127.0.0.1:<free port>."""
    as_root = os.geteuid() == 0
    if as_root:
        try:
            owner = pwd.getpwnam("postgres")
        except KeyError as exc:
            raise PostgresStartError("running as root but there is no 'postgres' user") from exc
    workdir = Path(tempfile.mkdtemp(prefix="holdback-pg-"))
    data, sockdir, log = workdir / "data", workdir / "sock", workdir / "server.log"
    sockdir.mkdir()
    if as_root:
        for path in (workdir, sockdir):
            os.chown(path, owner.pw_uid, owner.pw_gid)
    user = "postgres" if as_root else pwd.getpwuid(os.geteuid()).pw_name
    initdb = _as_postgres_cmd(
        [
            str(bindir / "initdb"),
            "-D",
            str(data),
            "-A",
            "trust",
            "-U",
            user,
            "-E",
            "UTF8",
            "--locale=C",
            "--no-sync",
        ]
    )
    done = subprocess.run(initdb, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        shutil.rmtree(workdir, ignore_errors=True)
        raise PostgresStartError(f"initdb failed: {done.stderr.strip() or done.stdout.strip()}")
    last_error = ""
    for _ in range(attempts):
        port = _free_port()
        options = f"{SERVER_OPTIONS} -p {port} -k {sockdir}"
        start = _as_postgres_cmd(
            [
                str(bindir / "pg_ctl"),
                "-D",
                str(data),
                "-l",
                str(log),
                "-w",
                "-t",
                "60",
                "-o",
                options,
                "start",
            ]
        )
        done = subprocess.run(start, capture_output=True, text=True, check=False)
        pid_file = data / "postmaster.pid"
        if done.returncode == 0 and pid_file.exists():
            pid = int(pid_file.read_text().split("\n", 1)[0])
            server = PostgresServer(
                scheme_netloc=f"postgresql://{user}@127.0.0.1:{port}",
                postmaster_pid=pid,
                workdir=workdir,
                watchdog=_watchdog(os.getpid(), pid, workdir),
            )
            atexit.register(server.stop)
            return server
        tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
        last_error = f"{done.stderr.strip()}\n{tail}"
    shutil.rmtree(workdir, ignore_errors=True)
    raise PostgresStartError(f"pg_ctl could not start the throwaway server:\n{last_error}")


def external_server(url: str) -> PostgresServer:
    """The server named by `HOLDBACK_TEST_POSTGRES_URL` (any driver suffix is ignored)."""
    parts = urlsplit(url)
    scheme = parts.scheme.split("+", 1)[0]
    if scheme not in ("postgresql", "postgres"):
        raise PostgresStartError(f"{ENV_URL} must be a postgresql:// URL")
    admin_db = parts.path.lstrip("/") or "postgres"
    netloc = urlunsplit(("postgresql", parts.netloc, "", "", "")).rstrip("/")
    return PostgresServer(scheme_netloc=netloc, admin_database=admin_db)


_SESSION_SERVER: PostgresServer | None = None
_SESSION_SKIP: str | None = None
_SESSION_LOCK = threading.Lock()


def session_server() -> PostgresServer:
    """The one server of this test session, started on first use (or skip with a reason)."""
    global _SESSION_SERVER, _SESSION_SKIP
    with _SESSION_LOCK:
        if _SESSION_SERVER is None and _SESSION_SKIP is None:
            external = os.environ.get(ENV_URL)
            if external:
                _SESSION_SERVER = external_server(external)
            else:
                bindir = find_bindir()
                if bindir is None:
                    _SESSION_SKIP = (
                        "PostgreSQL is not installed (no initdb/pg_ctl under "
                        "/usr/lib/postgresql/*/bin) and HOLDBACK_TEST_POSTGRES_URL is not set; "
                        "`make test` installs it with apt-get install -y postgresql"
                    )
                else:
                    _SESSION_SERVER = start_throwaway_server(bindir)
        if _SESSION_SKIP is not None:
            pytest.skip(_SESSION_SKIP)
        assert _SESSION_SERVER is not None
        return _SESSION_SERVER


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """The session's PostgreSQL server; skipped with a visible reason where none can run."""
    server = session_server()
    yield server
    server.stop()


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> Iterator[str]:
    """A `postgresql+asyncpg://` URL of a fresh, empty database, dropped after the test."""
    name = postgres_server.create_database()
    yield postgres_server.url(name)
    postgres_server.drop_database(name)


if __name__ == "__main__":  # pragma: no cover - manual smoke check
    srv = session_server()
    print(srv.url("postgres"))
    srv.stop()
    sys.exit(0)
