"""Each moderator through the whole server: a loopback model echoes the user's message, the
moderator is a rules file or a loopback service, and the frames, the stored reply and what
the moderator was sent are checked. Windows reach the moderator tokenized; a withheld
sentence never reaches a frame; a failing moderator stops the reply with `moderation_failed`
and nothing unchecked after it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.app.support import (
    assistant_frames,
    chat,
    content_of,
    echo_upstream,
    make_settings,
    openai_provider,
    running_app,
)
from tests.moderation.fakemod import ModerationService, answer
from tests.moderation.test_openai import EXAMPLE as OPENAI_FLAGGED
from tests.providers.fakeserver import RecordedRequest, Reply

EXAMPLE_RULES = Path(__file__).parents[2] / "docs" / "moderation-rules.example.toml"
EMAIL = "dana.ruiz@example.org"
MESSAGE = f"Write to {EMAIL} today. She was diagnosed with flu. Thanks a lot."
SECRET = "diagnosed"


def hook(request: RecordedRequest) -> Reply:
    text = request.json()["text"]
    if SECRET in text:
        return answer({"action": "withhold", "category": "medical"})
    return answer({"action": "allow"})


def openai_answer(request: RecordedRequest) -> Reply:
    body: dict[str, Any] = json.loads(json.dumps(OPENAI_FLAGGED))
    result = body["results"][0]
    if SECRET not in request.json()["input"]:
        result["flagged"] = False
        result["categories"]["violence"] = False
    return answer(body)


def run(
    tmp_path: Path, spec: str, env: dict[str, str] | None = None
) -> tuple[list[dict[str, Any]], str]:
    settings = make_settings(tmp_path, env, moderation=spec)
    with echo_upstream() as upstream, running_app(settings, openai_provider(upstream)) as client:
        with client.websocket_connect("/ws") as ws:
            frames = chat(ws, MESSAGE)
        cid = frames[0]["conversation_id"]
        stored = client.get(f"/api/conversations/{cid}").json()["messages"][1]["text"]
    return frames, stored


def errors_of(frames: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [f for f in frames if f["type"] == "error"]


def check_withheld(frames: list[dict[str, Any]], stored: str, category: str) -> None:
    shown = content_of(frames)
    assert f"[withheld by policy: {category}]" in shown
    assert SECRET not in json.dumps(assistant_frames(frames) + errors_of(frames))
    assert shown.startswith(f"Write to {EMAIL} today. ")
    assert shown.endswith("Thanks a lot.")
    assert SECRET not in stored


def test_rules(tmp_path: Path) -> None:
    frames, stored = run(tmp_path, f"rules:{EXAMPLE_RULES}")
    check_withheld(frames, stored, "medical")


def test_webhook(tmp_path: Path) -> None:
    with ModerationService(hook) as service:
        frames, stored = run(tmp_path, f"http:{service.url}/check")
        texts = [r.json()["text"] for r in service.requests]
    check_withheld(frames, stored, "medical")
    assert "Write to <EMAIL_1> today." in texts  # one window, tokenized, as stored
    assert EMAIL not in json.dumps(texts)


def test_openai(tmp_path: Path) -> None:
    with ModerationService(openai_answer) as service:
        env = {
            "OPENAI_BASE_URL": service.url + "/v1",
            "OPENAI_API_KEY": "k",
            "HOLDBACK_MODERATION_ACTIONS": "violence=withhold",
        }
        frames, stored = run(tmp_path, "openai:omni-moderation-latest", env)
        inputs = [r.json()["input"] for r in service.requests]
    check_withheld(frames, stored, "violence")
    assert EMAIL not in json.dumps(inputs)


@pytest.mark.parametrize("failure", ["http-500", "malformed", "unknown-action"])
def test_a_failing_moderator_stops_the_reply(tmp_path: Path, failure: str) -> None:
    def broken(request: RecordedRequest) -> Reply:
        if SECRET not in request.json()["text"]:
            return answer({"action": "allow"})
        if failure == "http-500":
            return answer({"error": "down"}, status=500)
        if failure == "malformed":
            return Reply(200, [b"{"], {"content-type": "application/json"}, framing="length")
        return answer({"action": "maybe"})

    with ModerationService(broken) as service:
        frames, stored = run(tmp_path, f"http:{service.url}/check")
    errors = [f for f in frames if f["type"] == "error"]
    assert [e["code"] for e in errors] == ["moderation_failed"]
    shown = content_of(frames)
    assert SECRET not in json.dumps(assistant_frames(frames) + errors_of(frames))
    assert "Thanks" not in shown  # nothing after the window that failed
    assert SECRET not in stored
