"""Helpers for the server suite: apps in process, real servers in subprocesses, an echo upstream.

The rules they keep: every server and upstream is real and listens on 127.0.0.1 only; every
environment is explicit (never the real HOME or its data directory); every process, socket and
event loop a helper opens is closed by it. Canary values are distinctive strings that no code
path may ever write to the upstream, to a log or to a frame where it does not belong.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from starlette.applications import Starlette
from starlette.exceptions import StarletteDeprecationWarning

from holdback.app.application import create_app
from holdback.app.settings import Settings, resolve
from holdback.providers.base import Provider
from holdback.providers.registry import make_provider
from tests.providers.fakeserver import FakeUpstream, RecordedRequest, Reply, split_random

T = TypeVar("T")

with warnings.catch_warnings():
    # Starlette prefers `httpx2` for its test client; plain httpx still works the same.
    warnings.simplefilter("ignore", StarletteDeprecationWarning)
    from starlette.testclient import TestClient, WebSocketTestSession

__all__ = ["TestClient", "WebSocketTestSession"]

Frame = dict[str, Any]

# -- canaries ---------------------------------------------------------------------------------

EMAIL = "canary.ada@lovelace-canary.example"
PHONE = "+1 415 555 2671"
CARD = "4556 7375 8689 9855"  # Luhn-valid
IBAN = "GB82 WEST 1234 5698 7654 32"
CLIENT = "Zyxwcanary Holdings"  # from a sensitive-terms file, kind `clients`
USER_CANARIES = (EMAIL, PHONE, CARD, IBAN, CLIENT)

INJECTED_EMAIL = "intruder.canary@injected-leak.example"
INJECTED_PHONE = "+1 650 253 0000"
FORBIDDEN = "db01.vaultcanary.internal"
INJECTED = (INJECTED_EMAIL, INJECTED_PHONE, FORBIDDEN)

CANARY_TEXT = (
    f"Please email {EMAIL} and call {PHONE} about the {CLIENT} renewal; "
    f"the card is {CARD} and the refund goes to IBAN {IBAN}. Thanks!"
)


def luhn_valid(number: str) -> bool:
    digits = [int(c) for c in number if c.isdigit()][::-1]
    total = sum(
        d if i % 2 == 0 else (d * 2 - 9 if d * 2 > 9 else d * 2) for i, d in enumerate(digits)
    )
    return total % 10 == 0


def variants(value: str) -> list[str]:
    """A value as it could appear in captured text: plain, JSON-escaped, digits only."""
    forms = {value, json.dumps(value)[1:-1], value.lower()}
    digits = "".join(c for c in value if c.isdigit())
    if len(digits) >= 10:
        forms.add(digits)
    return sorted(forms)


def leaks(haystack: str, values: Sequence[str]) -> list[str]:
    """The values (in any of their forms) found in a text."""
    lowered = haystack.lower()
    return [v for v in values if any(form.lower() in lowered for form in variants(v))]


def write_terms(directory: Path) -> tuple[Path, Path]:
    """A sensitive-terms file (kind `clients`) and a forbidden-terms file."""
    directory.mkdir(parents=True, exist_ok=True)
    sensitive = directory / "clients.txt"
    sensitive.write_text(f"# clients\n{CLIENT}\n", encoding="utf-8")
    forbidden = directory / "internal.txt"
    forbidden.write_text(f"{FORBIDDEN}\n", encoding="utf-8")
    return sensitive, forbidden


# -- token checks -----------------------------------------------------------------------------


def token_ids(masked: Sequence[Mapping[str, Any]]) -> list[str]:
    return [str(m["token"]).strip("<>") for m in masked]


def token_texts(text: str, ids: Sequence[str]) -> list[str]:
    """Every spelling of one of the given token ids that a text contains."""
    found = []
    for ident in ids:
        escaped = ident.replace("_", "\\_")
        for form in (ident, escaped):
            if form.lower() in text.lower():
                found.append(form)
    return found


# -- frames -----------------------------------------------------------------------------------


def content_of(frames: Sequence[Frame], channel: str = "content") -> str:
    return "".join(
        f["text"]
        for f in frames
        if f.get("type") == "assistant_delta" and f.get("channel") == channel
    )


def assistant_frames(frames: Sequence[Frame]) -> list[Frame]:
    return [f for f in frames if str(f.get("type", "")).startswith("assistant_")]


def send(ws: WebSocketTestSession, frame: Frame) -> None:
    ws.send_text(json.dumps(frame))


def recv(ws: WebSocketTestSession) -> Frame:
    frame: Frame = json.loads(ws.receive_text())
    return frame


def until_done(ws: WebSocketTestSession, limit: int = 100_000) -> list[Frame]:
    """Frames up to and including the next `assistant_done`."""
    frames: list[Frame] = []
    for _ in range(limit):
        frame = recv(ws)
        frames.append(frame)
        if frame["type"] == "assistant_done":
            return frames
    raise AssertionError("no assistant_done")


def chat(ws: WebSocketTestSession, text: str, conversation_id: str | None = None) -> list[Frame]:
    """Send a user message and return every frame of its reply."""
    send(ws, {"type": "user_message", "conversation_id": conversation_id, "text": text})
    return until_done(ws)


# -- apps in process --------------------------------------------------------------------------


def base_env(tmp_path: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = {
        "HOME": str(tmp_path),
        "HOLDBACK_DEMO_CHUNK_DELAY": "0",
        "HOLDBACK_SHUTDOWN_GRACE": "2",
        # Starlette's TestClient addresses every WebSocket to the host name "testserver".
        "HOLDBACK_ALLOWED_HOSTS": "testserver",
    }
    env.update(extra or {})
    return env


def make_settings(tmp_path: Path, env: Mapping[str, str] | None = None, **flags: Any) -> Settings:
    flags.setdefault("data_dir", str(tmp_path / "data"))
    return resolve(env=base_env(tmp_path, env), **flags)


def openai_provider(upstream: FakeUpstream) -> Provider:
    return make_provider(
        "openai:test", env={"OPENAI_BASE_URL": upstream.url + "/v1", "OPENAI_API_KEY": "x"}
    )


@contextlib.contextmanager
def running_app(
    settings: Settings, provider: Provider | None = None, base_url: str = "http://testserver"
) -> Iterator[TestClient]:
    app: Starlette = create_app(settings, provider=provider)
    with TestClient(app, base_url=base_url) as client:
        yield client


def wait_stored(client: TestClient, conversation_id: str, timeout: float = 15.0) -> Frame:
    """The conversation once no reply streams in it any more."""
    deadline = time.monotonic() + timeout
    while True:
        body: Frame = client.get(f"/api/conversations/{conversation_id}").json()
        if not body["streaming"]:
            return body
        if time.monotonic() > deadline:
            raise AssertionError("the reply did not finish in time")
        time.sleep(0.02)


# -- the command line, in process -------------------------------------------------------------


def run_cli(argv: Sequence[str], stdin: str = "") -> tuple[int, str, str]:
    """Run `holdback ARGV` in this process; returns (status, stdout, stderr)."""
    from holdback.cli import main

    out, err = io.StringIO(), io.StringIO()
    old_stdin = sys.stdin
    sys.stdin = io.StringIO(stdin)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = main(list(argv))
    finally:
        sys.stdin = old_stdin
    return status, out.getvalue(), err.getvalue()


def add_user(data_dir: Path, name: str, password: str, *extra: str) -> None:
    status, _, err = run_cli(["user", "add", name, "--data-dir", str(data_dir), *extra], password)
    assert status == 0, err


def create_token(data_dir: Path, name: str, *extra: str) -> str:
    status, out, err = run_cli(["token", "create", name, "--data-dir", str(data_dir), *extra])
    assert status == 0, err
    return out.strip()


# -- the echo upstream ------------------------------------------------------------------------


def openai_sse(pieces: Sequence[str], channel: str = "content") -> list[bytes]:
    """Chat Completions stream events, one per piece, then the finish and `[DONE]`."""
    key = "reasoning_content" if channel == "reasoning" else "content"
    events = [
        b"data: "
        + json.dumps({"choices": [{"index": 0, "delta": {key: piece}}]}).encode()
        + b"\n\n"
        for piece in pieces
    ]
    finish = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
    events.append(b"data: " + json.dumps(finish).encode() + b"\n\n")
    events.append(b"data: [DONE]\n\n")
    return events


class EchoUpstream(FakeUpstream):
    """An OpenAI-compatible upstream that streams back the last user message it was sent.

    The echo is cut into chunks of `low`..`high` characters (so tokens are split), `inject`
    is appended as text the model made up on its own, `repeat` repeats the echo, and
    `chunk_delay` paces the chunks. Every request is recorded whole.
    """

    def __init__(
        self,
        *,
        inject: str = "",
        repeat: int = 1,
        chunk_delay: float = 0.0,
        low: int = 1,
        high: int = 5,
        seed: int = 11,
    ) -> None:
        super().__init__()
        self.inject = inject
        self.repeat = repeat
        self.chunk_delay = chunk_delay
        self.low, self.high = low, high
        self.rng = random.Random(seed)
        self.override: Callable[[RecordedRequest], Reply] | None = None

    def reply_text(self, request: RecordedRequest) -> str:
        messages = request.json()["messages"]
        last = [m["content"] for m in messages if m["role"] == "user"][-1]
        return last * self.repeat + self.inject

    def reply_for(self, request: RecordedRequest) -> Reply:
        if self.override is not None:
            return self.override(request)
        pieces = split_random(self.reply_text(request), self.rng, self.low, self.high)
        return Reply(chunks=openai_sse(pieces), chunk_delay=self.chunk_delay)

    def bodies(self) -> str:
        """Every request body received, as text."""
        return "\n".join(r.body.decode("utf-8") for r in self.requests)


@contextlib.contextmanager
def echo_upstream(**kwargs: Any) -> Iterator[EchoUpstream]:
    server = EchoUpstream(**kwargs).start()
    try:
        yield server
    finally:
        server.stop()


# -- real servers in subprocesses -------------------------------------------------------------

_SERVING = re.compile(r"holdback is serving on (http://[^\s/]+)/")


def process_env(tmp_path: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """A clean environment for a subprocess: PATH, a private HOME, unbuffered output."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp_path),
        "LANG": "C.UTF-8",
        "PYTHONUNBUFFERED": "1",
        "HOLDBACK_DEMO_CHUNK_DELAY": "0",
        "HOLDBACK_SHUTDOWN_GRACE": "2",
    }
    if "PYTHONPATH" in os.environ:  # a checkout tested with another's environment
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    env.update(extra or {})
    return env


class ServerProcess:
    """`holdback serve --port 0` (or `demo`) in a subprocess; its stdout and stderr go to one log file."""

    def __init__(
        self,
        log_path: Path,
        env: Mapping[str, str],
        args: Sequence[str] = (),
        command: str = "serve",
    ) -> None:
        self.command = command
        self.log_path = log_path
        self.env = dict(env)
        self.args = list(args)
        self.proc: subprocess.Popen[bytes] | None = None
        self.base = ""

    @property
    def port(self) -> int:
        return int(self.base.rsplit(":", 1)[1])

    @property
    def ws_url(self) -> str:
        return "ws" + self.base[4:] + "/ws"

    @property
    def origin(self) -> str:
        return self.base

    def output(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def start(self, timeout: float = 30.0) -> ServerProcess:
        command = [sys.executable, "-m", "holdback", self.command, "--port", "0", *self.args]
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            match = _SERVING.search(self.output())
            if match:
                self.base = match.group(1)
                return self
            if self.proc.poll() is not None:
                raise AssertionError(f"the server exited early:\n{self.output()}")
            time.sleep(0.05)
        self.stop()
        raise AssertionError(f"the server did not start:\n{self.output()}")

    def signal(self, sig: int = signal.SIGTERM) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def wait(self, timeout: float = 30.0) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout=timeout)

    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM, wait, and SIGKILL if it will not stop."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=timeout)
        return self.proc.returncode

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def run_holdback(
    args: Sequence[str], env: Mapping[str, str], stdin: str = "", timeout: float = 60.0
) -> subprocess.CompletedProcess[str]:
    """`python -m holdback ARGS` to completion."""
    return subprocess.run(
        [sys.executable, "-m", "holdback", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=dict(env),
        timeout=timeout,
        check=False,
    )


def store_op(data_dir: Path, work: Callable[[Any], Awaitable[T]]) -> T:
    """Run `work(store)` on the SQLite store of `data_dir` (which must exist), beside a
    running server (WAL lets both in), and close it."""
    from holdback.store import Store
    from holdback.store.crypto import load_vault_key

    async def run() -> T:
        store = await Store.open(
            f"sqlite+aiosqlite:///{data_dir / 'holdback.db'}",
            vault_key=load_vault_key(data_dir, {}, create=False),
            migrate=False,
        )
        try:
            return await work(store)
        finally:
            await store.close()

    return asyncio.run(run())
