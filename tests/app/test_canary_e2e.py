"""The product's promise end to end, with canaries: the model never sees an original value, the
user reads exactly what they wrote, and nothing the model makes up on its own leaks.

A loopback OpenAI-compatible upstream echoes the tokenized text it receives in chunks of 1-5
characters (so tokens are split mid-stream) and appends PII and a forbidden term of its own.
Everything is captured: the upstream's requests, every WebSocket frame, the logs (caplog in
process, the server's whole output for a subprocess), and each is searched for canaries.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import connect

from holdback.providers.http import RetryPolicy, StreamSettings
from holdback.providers.registry import make_provider
from tests.app.support import (
    CANARY_TEXT,
    CARD,
    EMAIL,
    FORBIDDEN,
    INJECTED,
    INJECTED_EMAIL,
    INJECTED_PHONE,
    USER_CANARIES,
    EchoUpstream,
    Frame,
    ServerProcess,
    assistant_frames,
    chat,
    content_of,
    echo_upstream,
    leaks,
    luhn_valid,
    make_settings,
    openai_provider,
    process_env,
    running_app,
    token_ids,
    token_texts,
    write_terms,
)
from tests.providers.fakeserver import RecordedRequest, Reply

INJECTION = f"\nAlso cc {INJECTED_EMAIL}, call {INJECTED_PHONE} and check {FORBIDDEN}."
REDACTED_INJECTION = "\nAlso cc [redacted email], call [redacted phone] and check [redacted]."


def check_frames(frames: list[Frame], original: str) -> None:
    accepted = next(f for f in frames if f["type"] == "message_accepted")
    ids = token_ids(accepted["masked"])
    assert {m["kind"] for m in accepted["masked"]} == {
        "email",
        "phone",
        "credit_card",
        "iban",
        "clients",
    }
    # The masked spans point at the user's own values in the text they sent.
    for span in accepted["masked"]:
        assert original[span["start"] : span["end"]] in USER_CANARIES
    # The client reads exactly what it wrote, and what the model made up is screened.
    assert content_of(frames) == original + REDACTED_INJECTION
    wire = json.dumps(frames, ensure_ascii=False)
    assert leaks(wire, INJECTED) == []
    for frame in assistant_frames(frames) + [f for f in frames if f["type"] == "error"]:
        assert token_texts(json.dumps(frame), ids) == [], frame
    # message_accepted carries tokens only in masked[].token: its title is restored.
    assert token_texts(accepted["title"], ids) == []
    assert frames[-1]["status"] == "complete"


def check_upstream(upstream: EchoUpstream) -> None:
    assert upstream.requests, "the upstream was never called"
    bodies = upstream.bodies()
    assert leaks(bodies, USER_CANARIES) == []
    for request in upstream.requests:
        for message in request.json()["messages"]:
            assert leaks(message["content"], USER_CANARIES) == []


def test_canaries_are_valid_detections() -> None:
    assert luhn_valid(CARD)


def test_echo_round_trip_in_process(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    sensitive, forbidden = write_terms(tmp_path / "terms")
    settings = make_settings(
        tmp_path, sensitive_terms=[str(sensitive)], forbidden_terms=[str(forbidden)]
    )
    with (
        echo_upstream(inject=INJECTION) as upstream,
        running_app(settings, openai_provider(upstream)) as client,
    ):
        with client.websocket_connect("/ws") as ws:
            first = chat(ws, CANARY_TEXT)
            check_frames(first, CANARY_TEXT)
            conversation_id = first[0]["conversation_id"]
            # A second turn: the history (with the screened reply) goes back to the model.
            second_text = f"Once more: {EMAIL}, and {CARD}."
            second = chat(ws, second_text, conversation_id)
        assert content_of(second) == second_text + REDACTED_INJECTION
        accepted = second[0]
        assert [m["token"] for m in accepted["masked"]] == ["<EMAIL_1>", "<CREDIT_CARD_1>"]
        assert len(upstream.requests) == 2
        history = upstream.requests[1].json()["messages"]
        assert [m["role"] for m in history] == ["system", "user", "assistant", "user"]
        assert "[redacted email]" in history[2]["content"]
        check_upstream(upstream)

        owner = client.get(f"/api/conversations/{conversation_id}").json()
        model = client.get(f"/api/conversations/{conversation_id}?view=model").json()
    assert owner["messages"][0]["text"] == CANARY_TEXT
    assert owner["messages"][1]["text"] == CANARY_TEXT + REDACTED_INJECTION
    assert leaks(json.dumps(model), USER_CANARIES + INJECTED) == []
    assert "<EMAIL_1>" in model["messages"][0]["text"]
    assert leaks(caplog.text, USER_CANARIES + INJECTED) == []
    assert "holdback is ready" in caplog.text  # the capture did see the server's logs


@pytest.mark.server
@pytest.mark.anyio
async def test_echo_round_trip_real_server(tmp_path: Path) -> None:
    sensitive, forbidden = write_terms(tmp_path / "terms")
    with echo_upstream(inject=INJECTION) as upstream:
        env = process_env(
            tmp_path,
            {
                "HOLDBACK_DATA_DIR": str(tmp_path / "data"),
                "HOLDBACK_MODEL": "openai:test",
                "OPENAI_BASE_URL": upstream.url + "/v1",
                "OPENAI_API_KEY": "x",
                "HOLDBACK_SENSITIVE_TERMS": str(sensitive),
                "HOLDBACK_FORBIDDEN_TERMS": str(forbidden),
            },
        )
        with ServerProcess(tmp_path / "server.log", env) as server:
            frames: list[Frame] = []
            async with connect(server.ws_url, origin=server.origin) as ws:
                await ws.send(
                    json.dumps(
                        {"type": "user_message", "conversation_id": None, "text": CANARY_TEXT}
                    )
                )
                async for raw in ws:
                    frames.append(json.loads(raw))
                    if frames[-1]["type"] == "assistant_done":
                        break
            check_frames(frames, CANARY_TEXT)
            check_upstream(upstream)
            async with httpx.AsyncClient(base_url=server.base) as http:
                stored: dict[str, Any] = (
                    await http.get(f"/api/conversations/{frames[0]['conversation_id']}")
                ).json()
            assert stored["messages"][1]["text"] == CANARY_TEXT + REDACTED_INJECTION
        output = server.output()
    assert "WebSocket /ws" in output
    assert "holdback is ready" in output
    assert leaks(output, USER_CANARIES + INJECTED) == []


@pytest.mark.parametrize("status", [400, 401, 429])
def test_upstream_errors_log_and_show_no_values(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, status: int
) -> None:
    # A hostile upstream that quotes what it was sent in its error: it only ever saw tokens.
    caplog.set_level(logging.DEBUG)

    def refuse(request: RecordedRequest) -> Reply:
        quoted = request.json()["messages"][-1]["content"]
        return Reply.json(status, {"error": {"message": f"cannot handle {quoted}", "type": "x"}})

    with echo_upstream() as upstream:
        upstream.override = refuse
        provider = make_provider(
            "openai:test",
            env={"OPENAI_BASE_URL": upstream.url + "/v1", "OPENAI_API_KEY": "sk-canary-key-123"},
            settings=StreamSettings(retry=RetryPolicy(attempts=1)),
        )
        sensitive, _ = write_terms(tmp_path / "terms")
        settings = make_settings(tmp_path, sensitive_terms=[str(sensitive)])
        with running_app(settings, provider) as client:
            with client.websocket_connect("/ws") as ws:
                frames = chat(ws, CANARY_TEXT)
            stored = client.get(f"/api/conversations/{frames[0]['conversation_id']}").json()
        check_upstream(upstream)
    errors = [f for f in frames if f["type"] == "error"]
    assert len(errors) == 1
    assert errors[0]["code"].startswith("upstream_")
    assert frames[-1]["status"] == "incomplete"
    assert stored["messages"][0]["text"] == CANARY_TEXT  # the user's message is kept
    secrets = [*USER_CANARIES, "sk-canary-key-123"]
    assert leaks(caplog.text, secrets) == []
    assert leaks(json.dumps(errors + assistant_frames(frames)), secrets) == []
