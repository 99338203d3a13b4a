"""The bounds on one upstream reply and on a vault come from `HOLDBACK_*` variables, reach the
provider and the store a server builds, and are refused by name when unusable."""

from __future__ import annotations

from pathlib import Path

import pytest

from holdback.app.settings import resolve
from holdback.errors import ConfigurationError
from holdback.providers.limits import UpstreamLimits
from tests.app.support import chat, echo_upstream, make_settings, recv, running_app, send

UPSTREAM_ENV = {
    "HOLDBACK_UPSTREAM_MAX_LINE_CHARS": "4096",
    "HOLDBACK_UPSTREAM_MAX_EVENT_CHARS": "8192",
    "HOLDBACK_UPSTREAM_MAX_REPLY_CHARS": "2048",
    "HOLDBACK_UPSTREAM_REPLY_TIMEOUT": "30",
    "HOLDBACK_UPSTREAM_HEAD_TIMEOUT": "5",
    "HOLDBACK_UPSTREAM_MAX_HEADER_BYTES": "4096",
    "HOLDBACK_UPSTREAM_MAX_HEADERS": "64",
    "HOLDBACK_UPSTREAM_MAX_INFLATED_BYTES": "65536",
}


def test_upstream_limits_and_the_vault_bound_come_from_their_variables() -> None:
    settings = resolve(env={**UPSTREAM_ENV, "HOLDBACK_MAX_VAULT_ENTRIES": "50"})
    assert settings.upstream_limits == UpstreamLimits(
        max_line_chars=4096,
        max_event_chars=8192,
        max_reply_chars=2048,
        reply_timeout=30.0,
        head_timeout=5.0,
        max_header_bytes=4096,
        max_headers=64,
        max_inflated_bytes=65536,
    )
    assert settings.max_vault_entries == 50
    defaults = resolve(env={})
    assert defaults.upstream_limits == UpstreamLimits()
    assert defaults.max_vault_entries == 10_000


@pytest.mark.parametrize(
    "name",
    [*UPSTREAM_ENV, "HOLDBACK_MAX_VAULT_ENTRIES"],
)
@pytest.mark.parametrize("value", ["0", "-5", "lots"])
def test_unusable_bounds_are_refused_by_name(name: str, value: str) -> None:
    with pytest.raises(ConfigurationError, match=name):
        resolve(env={name: value})


def test_a_reply_past_the_configured_size_ends_with_upstream_too_large(tmp_path: Path) -> None:
    with echo_upstream(repeat=40) as upstream:
        env = {
            "OPENAI_BASE_URL": upstream.url + "/v1",
            "OPENAI_API_KEY": "x",
            "HOLDBACK_UPSTREAM_MAX_REPLY_CHARS": "1024",
        }
        settings = make_settings(tmp_path, env, model="openai:test")
        with running_app(settings) as client, client.websocket_connect("/ws") as ws:
            frames = chat(ws, "a sentence of about fifty characters, said twice.")
    errors = [f for f in frames if f.get("type") == "error"]
    assert [e["code"] for e in errors] == ["upstream_too_large"]
    shown = "".join(f.get("text", "") for f in frames if f.get("type") == "assistant_delta")
    assert 0 < len(shown) <= 1024


def test_the_vault_bound_reaches_the_store(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, {"HOLDBACK_MAX_VAULT_ENTRIES": "2"})
    with running_app(settings) as client, client.websocket_connect("/ws") as ws:
        text = "write to a@example.org, b@example.org and c@example.org"
        send(ws, {"type": "user_message", "conversation_id": None, "text": text})
        frame = recv(ws)
        while frame["type"] != "error":
            frame = recv(ws)
    assert frame["code"] == "vault_full"
