"""The leak demonstration: every scenario through every pipeline, judged on the wire.

The rules these tests keep: `holdback demo --verify` exits 0 and prints the table the runs
really produce (pinned here, so a change in what leaks is a visible change); holdback's side
leaks nothing and each scenario defeats at least one naive design; the sockets send exactly
the frames `--verify` judges; the oracle imports nothing it judges and finds a secret in every
decoded form; and the demo is admitted like `/ws` (Host, Origin, credential).
"""

from __future__ import annotations

import ast
import dataclasses
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.websockets import WebSocketDisconnect

from holdback.app import demo, demo_oracle
from holdback.app.demo_pipelines import NAIVE, PIPELINES
from holdback.app.demo_scenarios import SCENARIOS, Step
from holdback.providers.demo import DemoProvider
from tests.app.conftest import Accounts
from tests.app.support import TestClient, make_settings, recv, running_app, send

# scenario -> leaks per pipeline (per_chunk, after_stream, tail_window, holdback)
EXPECTED_LEAKS = {
    "split": [1, 1, 0, 0],
    "invented": [1, 1, 1, 0],
    "forbidden": [1, 1, 0, 0],
    "encoded": [2, 2, 2, 0],
    "glued": [1, 1, 1, 0],
    "tool_json": [1, 1, 1, 0],
    "error_body": [2, 2, 2, 0],
    "cut": [1, 1, 0, 0],
}


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    with running_app(make_settings(tmp_path), DemoProvider(chunk_delay=0)) as c:
        yield c


def test_verify_command_exits_0_with_the_table_the_runs_produce() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "holdback", "demo", "--verify"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[1].split() == ["scenario", *PIPELINES]
    printed = {line.split()[0]: [int(n) for n in line.split()[1:]] for line in lines[2:10]}
    assert printed == EXPECTED_LEAKS
    assert lines[10].split() == ["total", "10", "10", "7", "0"]
    assert "Corruption" in done.stdout
    assert done.stdout.rstrip().endswith("OK: holdback's side leaked nothing in 8 scenarios")
    results = demo.table()
    for scenario in SCENARIOS:
        counts = [len(results[scenario.id][p].leaks) for p in PIPELINES]
        assert counts == EXPECTED_LEAKS[scenario.id]
        assert any(counts[: len(NAIVE)]), f"{scenario.id} defeats no naive design"
        assert results[scenario.id]["holdback"].corruption == []


def test_verify_fails_when_holdbacks_side_leaks(monkeypatch: pytest.MonkeyPatch) -> None:
    """The exit status is earned: holdback's column given per-chunk frames fails the run."""
    original = demo.run
    monkeypatch.setattr(
        demo, "run", lambda s, p, **g: original(s, "per_chunk" if p == "holdback" else p, **g)
    )

    class Out:
        text = ""

        def write(self, s: str) -> None:
            self.text += s

    out = Out()
    assert demo.verify(out) == 1  # type: ignore[arg-type]
    assert "FAIL: holdback's side leaked 10 time(s)" in out.text


def test_the_oracle_imports_nothing_it_judges() -> None:
    tree = ast.parse(Path(demo_oracle.__file__).read_text())
    imported = {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in (
            node.names if isinstance(node, ast.Import) else [ast.alias(node.module or "")]
        )
    }
    assert imported <= {"__future__", "html", "json", "re", "collections", "dataclasses", "typing"}


def delta(text: str, channel: str = "content") -> str:
    return json.dumps({"type": "assistant_delta", "channel": channel, "text": text})


@pytest.mark.parametrize(
    ("frames", "form"),
    [
        ([delta("to bob.smith@evil.example")], "verbatim"),
        ([delta("to bob.smith@ev"), delta("il.example")], "verbatim"),
        ([delta('{"to": "bob.smith\\u0040evil.example"}', "tool_call")], "json escape"),
        ([delta("bob.smith&#64;evil&period;example")], "html entity"),
        ([delta("**bob**.smith@evil\\.example")], "markdown"),
        ([delta("BOB.SMITH@\u200bevil.example")], "normalized"),
        ([json.dumps({"type": "error", "message": "no bob.smith@evil.example"})], "verbatim"),
    ],
)
def test_the_oracle_finds_a_secret_in_every_form(frames: list[str], form: str) -> None:
    verdict = demo_oracle.judge(frames, ["bob.smith@evil.example"], ["<EMAIL_1>"])
    assert [(f.frame, f.form) for f in verdict.leaks] == [(len(frames), form)]


def test_the_oracle_tells_corruption_from_leaks() -> None:
    frames = [delta("mail <EMA"), delta("IL_1> and [redacted email]")]
    verdict = demo_oracle.judge(frames, ["bob.smith@evil.example"], ["<EMAIL_1>"])
    assert verdict.leaks == []
    assert [(f.frame, f.offset, f.text) for f in verdict.corruption] == [
        (1, 5, "<EMA"),
        (2, 0, "IL_1>"),
    ]


def replay(client: TestClient, pipeline: str, scenario: str) -> list[str]:
    with client.websocket_connect(f"/demo/ws/{pipeline}") as ws:
        send(ws, {"type": "start", "scenario": scenario})
        frames = [ws.receive_text()]
        while json.loads(frames[-1])["type"] != "assistant_done":
            frames.append(ws.receive_text())
        send(ws, {"type": "nonsense"})
        assert recv(ws)["code"] == "unknown_type"
    return frames


def test_the_sockets_send_exactly_what_verify_judges(client: TestClient) -> None:
    for scenario in SCENARIOS:
        for pipeline in PIPELINES:
            received = replay(client, pipeline, scenario.id)
            assert received == [raw for step in demo.encoded(scenario, pipeline) for raw in step]


def test_the_scenario_list_and_page(client: TestClient) -> None:
    body = client.get("/demo/scenarios").json()
    assert [p["id"] for p in body["pipelines"]] == list(PIPELINES)
    assert [s["id"] for s in body["scenarios"]] == list(EXPECTED_LEAKS)
    for s in body["scenarios"]:
        assert s["secrets"]
        assert s["steps"]
        for value in s["values"]:
            assert value not in s["upstream_sent"]  # the upstream saw tokens only
    assert client.get("/demo").status_code == 200
    with client.websocket_connect("/demo/ws/holdback") as ws:
        send(ws, {"type": "start", "scenario": "nope"})
        assert recv(ws)["code"] == "unknown_type"


def test_demo_socket_refuses_foreign_origins_and_unknown_pipelines(client: TestClient) -> None:
    with (
        pytest.raises(WebSocketDisconnect),
        client.websocket_connect("/demo/ws/holdback", headers={"Origin": "http://evil.example"}),
    ):
        pass
    with pytest.raises(WebSocketDisconnect), client.websocket_connect("/demo/ws/other"):
        pass


def test_demo_socket_refuses_foreign_host_names(client: TestClient) -> None:
    """DNS rebinding: without logins, only this machine's own names are answered (as /ws)."""
    with (
        pytest.raises(WebSocketDisconnect),
        client.websocket_connect("/demo/ws/per_chunk", headers={"Host": "rebound.example"}),
    ):
        pass
    assert client.get("/demo/scenarios", headers={"Host": "rebound.example"}).status_code == 403


def test_demo_needs_a_login_when_the_server_has_logins(tmp_path: Path, accounts: Accounts) -> None:
    settings = make_settings(tmp_path, auth="password")
    with running_app(settings, DemoProvider(chunk_delay=0)) as client:
        for pipeline in PIPELINES:
            with (
                pytest.raises(WebSocketDisconnect),
                client.websocket_connect(f"/demo/ws/{pipeline}"),
            ):
                pass
        page = client.get("/demo", follow_redirects=False)
        assert page.status_code == 303
        assert page.headers["location"] == "/"
        assert client.get("/demo/scenarios").status_code == 401
        bob = accounts.bearer("bob")
        assert client.get("/demo", headers=bob).status_code == 200
        assert client.get("/demo/scenarios", headers=bob).json()["scenarios"]
        with client.websocket_connect("/demo/ws/holdback", headers=bob) as ws:
            send(ws, {"type": "start", "scenario": "split"})
            assert recv(ws)["type"] == "assistant_start"


def test_the_checker_in_docs_demo_md_agrees_with_verify(tmp_path: Path) -> None:
    """docs/demo.md's standalone checker, run on runs shaped like the page's download."""
    doc = (Path(__file__).parents[2] / "docs" / "demo.md").read_text()
    checker = tmp_path / "check_run.py"
    checker.write_text(doc.split("```python\n", 1)[1].split("```", 1)[0])
    results = demo.table()
    for scenario in SCENARIOS:
        run = tmp_path / f"{scenario.id}.jsonl"
        lines = [{"kind": "scenario", **scenario.wire(), "pipelines": list(PIPELINES)}]
        for pipeline in PIPELINES:
            for n, raw in enumerate(
                (raw for step in demo.encoded(scenario, pipeline) for raw in step), 1
            ):
                lines.append({"kind": "frame", "pipeline": pipeline, "n": n, "t_ms": 0, "raw": raw})
        run.write_text("".join(json.dumps(line) + "\n" for line in lines))
        done = subprocess.run(
            [sys.executable, str(checker), str(run)],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        printed = {line.split(":")[0]: int(line.split()[1]) for line in done.stdout.splitlines()}
        assert printed == {p: len(results[scenario.id][p].leaks) for p in PIPELINES}, (
            scenario.id,
            done.stdout,
        )


@pytest.mark.parametrize("guard", [{}, {"mode": "block"}, {"window": 16}, {"window": 256}], ids=str)
def test_holdback_leaks_nothing_under_any_guard_setting_or_chunking(
    guard: dict[str, object],
) -> None:
    """Not a property of the scripted chunk boundaries: the same replies streamed one
    character at a time, under the guard settings a server can run with, leak nothing."""
    for scenario in SCENARIOS:
        steps = [
            Step(step.kind, ch, step.call_id, step.name)
            if step.kind in ("text", "tool_args")
            else step
            for step in scenario.steps
            for ch in (step.text if step.kind in ("text", "tool_args") else [""])
        ]
        one_by_one = dataclasses.replace(scenario, steps=tuple(steps))
        for variant in (scenario, one_by_one):
            found = demo.verdict(variant, "holdback", **guard)
            assert found.leaks == [], (scenario.id, guard, found.leaks)
            assert found.corruption == [], (scenario.id, guard, found.corruption)
