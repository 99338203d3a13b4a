"""The whole server against the adversarial corpus: what the browser shows is what the guard
screened (issue #13).

The rule it keeps: for every case, in `redact` and in `block` guard mode, and for every
chunking of the upstream stream, no forbidden value, no invented token and no value inside a
URL reaches any server->client frame in any form the client decodes (judged by the independent
oracle), every frame field from a closed vocabulary stays in it, tool-call ids are the
server's own, the stored conversation (owner and model views) holds nothing forbidden either,
and the database file never receives a user value in clear. The same holds on the rendered
path (a moderated server, char by char and at random splits), where the viewer's text is
rendered from the one tokenized stream window by window, as on PostgreSQL.

One app and one scripted loopback upstream per guard mode (module-scoped), one WebSocket and
one new conversation per run. The upstream retries nothing (one attempt), so an HTTP error
case costs one request. Receives are bounded by a timeout; nothing sleeps.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest

from holdback.providers.http import RetryPolicy, StreamSettings
from holdback.providers.registry import make_provider
from tests.adversarial import oracle
from tests.adversarial.cases import (
    CASES,
    CHUNKINGS,
    USER_EMAIL,
    USER_TERM,
    Case,
    Chunking,
    Wire,
    render,
    write_terms,
)
from tests.app.support import TestClient, WebSocketTestSession, make_settings, running_app
from tests.providers.fakeserver import FakeUpstream, RecordedRequest, Reply

Frame = dict[str, Any]

# `moderated`: redact, with a rules moderator that allows everything, so every reply takes
# the rendered path (one tokenized stream, each viewer's text rendered from it, released
# window by window: `app/rendered_views.py`), the path every reply takes on PostgreSQL too.
MODES = ("redact", "block")
NEVER_SAID = """[categories.never]
action = "block"
phrases = ["zqxv never said wkpj"]
"""
FINISH_REASONS = {"stop", "length", "tool_calls", "content_filter", "error", "other", None}
STATUSES = {"complete", "incomplete", "blocked"}
ERROR_CODE = re.compile(r"[a-z_]+")
TOOL_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,64}")
RECEIVE_TIMEOUT = 20.0
FRAME_LIMIT = 100_000


class ScriptedUpstream(FakeUpstream):
    """Answers every request with the current case's wire (retries would see the same)."""

    def __init__(self) -> None:
        super().__init__()
        self.wire: Wire | None = None

    def reply_for(self, request: RecordedRequest) -> Reply:
        wire = self.wire
        if wire is None:
            return Reply(status=500, chunks=[b'{"error": "no case scripted"}'], headers={})
        return Reply(
            status=wire.status, chunks=wire.chunks, headers={"content-type": wire.content_type}
        )


@dataclass
class Server:
    mode: str
    client: TestClient
    upstream: ScriptedUpstream
    data_dir: Path
    clear_counts: dict[str, int] = field(default_factory=dict)


@contextlib.contextmanager
def serving(mode: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp(f"adversarial-{mode}")
    sensitive, forbidden = write_terms(tmp / "terms")
    env = {"HOLDBACK_RATE_LIMIT": "100000"}
    if mode == "moderated":
        rules = tmp / "terms" / "moderation.toml"
        rules.write_text(NEVER_SAID, encoding="utf-8")
        env["HOLDBACK_MODERATION"] = f"rules:{rules}"
    settings = make_settings(
        tmp,
        env=env,
        sensitive_terms=[str(sensitive)],
        forbidden_terms=[str(forbidden)],
        guard_mode="block" if mode == "block" else "redact",
    )
    upstream = ScriptedUpstream().start()
    provider = make_provider(
        "openai:test",
        env={"OPENAI_BASE_URL": upstream.url + "/v1", "OPENAI_API_KEY": "x"},
        settings=StreamSettings(stall_timeout=RECEIVE_TIMEOUT, retry=RetryPolicy(attempts=1)),
    )
    try:
        with running_app(settings, provider) as client:
            yield Server(mode, client, upstream, tmp / "data")
    finally:
        upstream.stop()


@pytest.fixture(scope="module", params=MODES)
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    with serving(request.param, tmp_path_factory) as running:
        yield running


@pytest.fixture(scope="module")
def moderated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with serving("moderated", tmp_path_factory) as running:
        yield running


# -- one run ----------------------------------------------------------------------------------


def receive(ws: WebSocketTestSession) -> Frame:
    """The next frame, or a failure after RECEIVE_TIMEOUT (a hang is a finding, not a wait)."""

    async def next_message() -> Any:
        with anyio.fail_after(RECEIVE_TIMEOUT):
            return await ws._send_rx.receive()

    message = ws.portal.call(next_message)
    if message.get("type") != "websocket.send":
        raise AssertionError(f"the connection ended instead: {message}")
    frame: Frame = json.loads(message["text"])
    return frame


def reply_frames(ws: WebSocketTestSession, case: Case) -> list[Frame]:
    """Send the case's message; every frame up to `assistant_done` (or a pre-reply error)."""
    ws.send_text(
        json.dumps({"type": "user_message", "conversation_id": None, "text": case.user_text})
    )
    frames: list[Frame] = []
    for _ in range(FRAME_LIMIT):
        frame = receive(ws)
        frames.append(frame)
        if frame.get("type") == "assistant_done":
            return frames
        if frame.get("type") == "error" and not frame.get("message_id"):
            return frames
    raise AssertionError("no assistant_done")


def without_masked_tokens(frames: list[Frame]) -> list[Frame]:
    """The frames, minus `message_accepted.masked[].token`: the one place tokens belong."""
    out = []
    for frame in frames:
        if frame.get("type") == "message_accepted":
            masked = [{k: v for k, v in m.items() if k != "token"} for m in frame.get("masked", [])]
            frame = {**frame, "masked": masked}
        out.append(frame)
    return out


def without_stored_masked_tokens(body: Frame) -> Frame:
    """A stored conversation, minus `messages[].masked[].token` (the user's own tokens)."""
    messages = [
        {
            **m,
            "masked": [{k: v for k, v in s.items() if k != "token"} for s in m.get("masked") or []],
        }
        for m in body.get("messages", [])
    ]
    return {**body, "messages": messages}


def vocabulary_problems(frames: list[Frame], case: Case) -> list[str]:
    problems = []
    for frame in frames:
        kind = frame.get("type")
        if kind == "assistant_done":
            if frame.get("finish_reason") not in FINISH_REASONS:
                problems.append(f"finish_reason {frame.get('finish_reason')!r}")
            if frame.get("status") not in STATUSES:
                problems.append(f"status {frame.get('status')!r}")
        elif kind == "error":
            if not ERROR_CODE.fullmatch(str(frame.get("code"))):
                problems.append(f"error code {frame.get('code')!r}")
        elif kind == "assistant_delta" and frame.get("channel") == "tool_call":
            if not TOOL_NAME.fullmatch(str(frame.get("name", ""))):
                problems.append(f"tool name {frame.get('name')!r}")
            if frame.get("call_id") in case.upstream_ids or not frame.get("call_id"):
                problems.append(f"call_id {frame.get('call_id')!r} is not the server's own")
    return list(dict.fromkeys(problems))


def stored(client: TestClient, conversation_id: str, view: str = "") -> Frame:
    """The stored conversation, once its reply is no longer streaming (bounded re-reads)."""
    url = f"/api/conversations/{conversation_id}" + (f"?view={view}" if view else "")
    for _ in range(1000):
        response = client.get(url)
        assert response.status_code == 200, response.text
        body: Frame = response.json()
        if not any(m.get("status") == "streaming" for m in body["messages"]):
            return body
    raise AssertionError("the reply is still streaming in storage")


def clear_counts(data_dir: Path, values: list[str]) -> dict[str, int]:
    """How often each value occurs in clear (UTF-8, as written or lower-cased; a long number
    also as its digits) in the data directory's files (the database and its journal)."""
    blobs = [p.read_bytes() for p in data_dir.rglob("*") if p.is_file()]
    counts = {}
    for value in values:
        forms = {value.encode("utf-8"), value.lower().encode("utf-8")}
        digits = "".join(c for c in value if c.isdigit())
        if len(digits) >= 9:
            forms.add(digits.encode("ascii"))
        counts[value] = sum(blob.count(form) for blob in blobs for form in forms)
    return counts


def user_values(frames: list[Frame], case: Case) -> list[str]:
    accepted = next((f for f in frames if f.get("type") == "message_accepted"), None)
    if accepted is None:
        return []
    return [case.user_text[m["start"] : m["end"]] for m in accepted["masked"]]


def run(server: Server, case: Case, chunking: Chunking) -> None:
    server.upstream.wire = render(case.script, chunking, case.seed)
    calls = len(server.upstream.requests)
    with server.client.websocket_connect("/ws") as ws:
        frames = reply_frames(ws, case)
    assert len(server.upstream.requests) > calls, f"the upstream was never called: {frames[-1]}"
    problems: list[str] = []
    screened = without_masked_tokens(frames)
    if leaked := oracle.find_leaks(screened, case.forbidden):
        problems.append(f"on the wire: {leaked}")
    if in_urls := oracle.find_url_leaks(frames, case.url_forbidden):
        problems.append(f"inside a URL on the wire: {in_urls}")
    problems += vocabulary_problems(frames, case)
    if server.mode != "block":
        shown = oracle.leaks_in(oracle.decoded_views(frames), case.must_show)
        missing = [s for s in case.must_show if s not in shown]
        if missing:
            problems.append(f"redact mode dropped benign text {missing}")

    conversation_id = frames[0].get("conversation_id")
    if conversation_id:
        owner = stored(server.client, conversation_id)
        model = stored(server.client, conversation_id, "model")
        tokens = [str(m.get("token")) for f in frames for m in f.get("masked", [])]
        for label, body, forbidden in (
            ("owner view", owner, case.forbidden),
            (
                "model view",
                model,
                [v for v in case.forbidden if not any(t in v or v in t for t in tokens)],
            ),
        ):
            views = oracle.stored_views(without_stored_masked_tokens(body))
            if leaked := oracle.leaks_in(views, forbidden):
                problems.append(f"stored, {label}: {leaked}")
            if urls := oracle.leaks_in_urls(views, case.url_forbidden):
                problems.append(f"stored, {label}, inside a URL: {urls}")
    values = user_values(frames, case)
    for value, after in clear_counts(server.data_dir, values).items():
        before = server.clear_counts.get(value, 0)
        server.clear_counts[value] = after
        if after > before:
            problems.append(f"database file gained {after - before} clear copies of {value!r}")
    assert not problems, "\n".join([f"{case.name} [{server.mode}, {chunking}]", *problems])


# -- the tests --------------------------------------------------------------------------------


def test_database_starts_without_user_values(server: Server) -> None:
    """Baseline for the per-run database check: the term files are stored sealed."""
    counts = clear_counts(server.data_dir, [USER_TERM, USER_EMAIL])
    server.clear_counts.update(counts)
    assert counts == {USER_TERM: 0, USER_EMAIL: 0}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("chunking", CHUNKINGS)
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_case(server: Server, case: Case, chunking: Chunking) -> None:
    run(server, case, chunking)


def test_database_starts_without_user_values_moderated(moderated: Server) -> None:
    test_database_starts_without_user_values(moderated)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("chunking", [c for c in CHUNKINGS if c != "one"])
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_case_rendered(moderated: Server, case: Case, chunking: Chunking) -> None:
    """The rendered path, char by char and at random splits."""
    run(moderated, case, chunking)
