"""The real holdback server for the browser tests: `holdback serve` as a child process.

The rule it keeps: the server under test is started exactly as a user starts it (the console
script, flags, environment), talks to the fake model over loopback only, and is always stopped
when the tests end (terminate, wait, then kill), so no run leaves an orphan behind. Its output
goes to a log file, which the tests also read: no log line may hold an original value.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tests.browser.canaries import FORBIDDEN_TERMS, SENSITIVE_TERM_FILES

BANNER_RE = re.compile(r"holdback is serving on (http://127\.0\.0\.1:\d+)/")
START_TIMEOUT = 30.0
_INHERITED_OUT = ("PROXY", "HOLDBACK_", "OPENAI_", "ANTHROPIC_")


class ServerStartError(Exception):
    """`holdback serve` exited or stayed silent instead of printing its URL."""


@dataclass
class ServerProcess:
    process: subprocess.Popen[bytes]
    url: str
    log_path: Path

    def log_text(self) -> str:
        return self.log_path.read_text("utf-8", errors="replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


def holdback_executable() -> Path:
    return Path(sys.executable).with_name("holdback")


def write_term_files(root: Path) -> tuple[list[Path], list[Path]]:
    terms = root / "terms"
    terms.mkdir(parents=True, exist_ok=True)
    sensitive = []
    for kind, values in SENSITIVE_TERM_FILES.items():
        path = terms / f"{kind}.txt"
        path.write_text("# made-up canary terms\n" + "\n".join(values) + "\n", "utf-8")
        sensitive.append(path)
    forbidden = terms / "forbidden.txt"
    forbidden.write_text("\n".join(FORBIDDEN_TERMS) + "\n", "utf-8")
    return sensitive, [forbidden]


def server_env(root: Path, upstream_url: str) -> dict[str, str]:
    env = {
        k: v for k, v in os.environ.items() if not any(part in k.upper() for part in _INHERITED_OUT)
    }
    env.update(
        HOME=str(root),
        HOLDBACK_DATA_DIR=str(root / "data"),
        OPENAI_BASE_URL=f"{upstream_url}/v1",
        OPENAI_API_KEY="x",
        NO_PROXY="127.0.0.1,localhost",
        PYTHONUNBUFFERED="1",
        # The split-at-every-boundary runs send dozens of messages within a minute.
        HOLDBACK_RATE_LIMIT="10000",
        HOLDBACK_DEMO_CHUNK_DELAY="0.005",
        HOLDBACK_SHUTDOWN_GRACE="2",
    )
    return env


def start_server(
    root: Path,
    upstream_url: str,
    *,
    terms: tuple[list[Path], list[Path]] | None = None,
    extra_args: tuple[str, ...] = (),
) -> ServerProcess:
    """`holdback serve` on a free loopback port, with the canary term files unless `terms`
    gives other (sensitive, forbidden) files; `extra_args` go on its command line."""
    sensitive, forbidden = terms if terms is not None else write_term_files(root)
    log_path = root / "server.log"
    command = [
        str(holdback_executable()),
        "serve",
        "--port",
        "0",
        "--model",
        "openai:canary",
        "--auth",
        "none",
        "--sensitive-terms",
        *map(str, sensitive),
        "--forbidden-terms",
        *map(str, forbidden),
        *extra_args,
    ]
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            command,
            env=server_env(root, upstream_url),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=root,
        )
    server = ServerProcess(process, "", log_path)
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        m = BANNER_RE.search(server.log_text())
        if m:
            server.url = m.group(1)
            return server
        if process.poll() is not None:
            break
        time.sleep(0.05)
    server.stop()
    raise ServerStartError(
        f"holdback serve did not start (exit status {process.returncode}):\n"
        + server.log_text()[-4000:]
    )
