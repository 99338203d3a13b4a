"""The rig itself, on loopback: upstream and relay as real processes, driven by the generator."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import httpx
import orjson
import pytest

from server import driver, procs, script

pytestmark = [pytest.mark.server, pytest.mark.slow]


@pytest.fixture
def settings(tmp_path: Path) -> driver.Settings:
    return driver.Settings(window=3.0, ramp=0.5, settle=1.0, chars=120, work=tmp_path)


def _body(text: str) -> dict[str, object]:
    return {"model": "m", "stream": True, "messages": [{"role": "user", "content": text}]}


@pytest.mark.parametrize("kind", sorted(driver.RELAYS))
def test_relay_run_matches_every_chunk(settings: driver.Settings, kind: str) -> None:
    upstream = driver.Upstream(settings)
    try:
        result = driver.measure(kind, 4, 1, upstream, settings)
    finally:
        upstream.stop()
    assert result["chunks"] > 100
    assert result["chunks_measured"] > 50
    assert (result["undelivered"], result["early"], result["mismatches"]) == (0, 0, 0)
    assert 0 < result["added_p50_ms"] < 50
    assert result["leaks"] > 0  # the relay forwards the upstream's raw tokens
    assert result["outcomes"].get("done:complete", 0) >= 4
    assert result["cpu_per_chunk_ms"] > 0
    assert upstream.child.proc.poll() is not None


def test_upstream_streams_paced_chunks_and_logs_them(settings: driver.Settings) -> None:
    upstream = driver.Upstream(settings)
    try:
        key = script.stream_key(0, 1, 2)
        text = script.user_message(1, key).replace("user.aab@acme-mail.com", "<EMAIL_4>")
        started = time.monotonic_ns()
        with (
            httpx.Client(timeout=30) as http,
            http.stream(
                "POST", f"{upstream.base}/v1/chat/completions", json=_body(text)
            ) as response,
        ):
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            lines = [line for line in response.iter_lines() if line.startswith("data: ")]
        elapsed = (time.monotonic_ns() - started) / 1e9
        log = upstream.take_log()
    finally:
        upstream.stop()
    assert lines[-1] == "data: [DONE]"
    content = "".join(
        c["delta"].get("content") or ""
        for line in lines[:-1]
        for c in orjson.loads(line[6:])["choices"]
    )
    (stream,) = log["streams"]
    assert stream["key"] == key
    assert content == stream["text"]
    assert "<EMAIL_4>" in content  # the reply echoes the request's own tokens
    assert len(stream["sent_ns"]) == len(stream["sizes"])
    gaps = [b - a for a, b in zip(stream["sent_ns"], stream["sent_ns"][1:], strict=False)]
    # 20 chunks a second: the cadence holds, though a loop that stalled (a loaded machine)
    # catches up with chunks sent back to back, as the upstream is meant to.
    assert sorted(gaps)[len(gaps) // 2] >= 40 * 10**6
    assert stream["sent_ns"][-1] - stream["sent_ns"][0] >= (len(gaps) - 1) * 40 * 10**6
    assert elapsed >= len(stream["sizes"]) / settings.rate


def _key_with(seed: int, kind: str) -> str:
    for turn in range(5000):
        key = script.stream_key(0, 0, turn)
        if script.plan_for(seed, key).kind == kind:
            return key
    raise AssertionError(f"no key with plan {kind}")


def test_upstream_injects_the_planned_faults(settings: driver.Settings) -> None:
    upstream = driver.Upstream(settings, fault_seed=11)
    try:
        with httpx.Client(timeout=30) as http:
            failing = script.user_message(0, _key_with(11, "upstream_500"))
            response = http.post(f"{upstream.base}/v1/chat/completions", json=_body(failing))
            assert response.status_code == 500
            assert response.json()["error"]["type"] == "server_error"
            cut = script.user_message(0, _key_with(11, "upstream_cut"))
            with (
                pytest.raises(httpx.RemoteProtocolError),
                http.stream(
                    "POST", f"{upstream.base}/v1/chat/completions", json=_body(cut)
                ) as streamed,
            ):
                for _ in streamed.iter_lines():
                    pass
    finally:
        upstream.stop()


def test_a_bad_request_gets_a_400(settings: driver.Settings) -> None:
    upstream = driver.Upstream(settings)
    try:
        with httpx.Client(timeout=30) as http:
            response = http.post(f"{upstream.base}/v1/chat/completions", content=b"{nope")
            assert response.status_code == 400
            assert "not JSON" in response.json()["error"]["message"]
            assert http.get(f"{upstream.base}/healthz").json() == {"status": "ok"}
    finally:
        upstream.stop()


def test_child_stop_ends_the_whole_process_group(tmp_path: Path) -> None:
    script_text = (
        "import subprocess, sys, time\n"
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'])\n"
        "print(p.pid, flush=True)\n"
        "time.sleep(300)\n"
    )
    child = procs.Child("tree", [sys.executable, "-c", script_text], tmp_path)
    deadline = time.monotonic() + 20
    while not child.log_path.read_text().strip() and time.monotonic() < deadline:
        time.sleep(0.05)
    grandchild = int(child.log_path.read_text().split()[0])
    assert grandchild in procs.tree(child.pid)
    assert procs.rss_bytes(child.pid) > 0
    child.stop(grace=2.0)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _alive(grandchild):
        time.sleep(0.05)
    assert not _alive(grandchild)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0]
    except OSError:
        return False
    return state != "Z"


def test_cpu_seconds_sees_work() -> None:
    before = procs.cpu_seconds(os.getpid())
    deadline = time.process_time() + 0.3
    while time.process_time() < deadline:
        pass
    assert procs.cpu_seconds(os.getpid()) - before >= 0.2
    assert procs.machine_busy_seconds() > 0
