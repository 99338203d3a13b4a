"""Models (#18, item 3): several models per server, listed by `GET /api/models`.

The rules: `--model` may be given several times and `HOLDBACK_MODELS` is a comma-separated
list, the first the default (`HOLDBACK_MODEL` alone is one model); the app builds one
provider per model and hands them to the chat service by id; `/api/models` lists them, with a
label for people, to signed-in users only; a model without the API key it needs is known by
the variable's name, never a value; the demo model says it is an offline demo.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from holdback.app.commands import settings_from
from holdback.app.models_api import label, missing_keys
from holdback.app.settings import Settings, resolve
from holdback.cli import build_parser
from holdback.errors import ConfigurationError
from holdback.providers.anthropic import AnthropicProvider
from holdback.providers.demo import INTRO, DemoProvider
from holdback.providers.openai_chat import OpenAIChatProvider
from tests.app.support import (
    add_user,
    chat,
    content_of,
    make_settings,
    running_app,
)

KEY_CANARY = "sk-canary-models-7d1e"


def serve_args(*argv: str) -> Settings:
    return settings_from(build_parser().parse_args(["serve", *argv]))


# -- settings ---------------------------------------------------------------------------------


def test_one_model_by_default_and_by_holdback_model() -> None:
    assert resolve(env={}).models == ("demo",)
    single = resolve(env={"HOLDBACK_MODEL": "openai:gpt-4o-mini"})
    assert single.models == ("openai:gpt-4o-mini",)
    assert single.model == "openai:gpt-4o-mini"


def test_model_flags_in_order_the_first_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HOLDBACK_MODELS", raising=False)
    monkeypatch.delenv("HOLDBACK_MODEL", raising=False)
    settings = serve_args("--model", "openai:gpt-4o-mini", "--model", "demo", "--model", "demo")
    assert settings.models == ("openai:gpt-4o-mini", "demo")  # named twice counts once
    assert settings.model == "openai:gpt-4o-mini"


def test_holdback_models_is_a_list_and_flags_beat_it() -> None:
    env = {"HOLDBACK_MODELS": " anthropic:claude-x , demo,", "HOLDBACK_MODEL": "openai:other"}
    assert resolve(env=env).models == ("anthropic:claude-x", "demo")  # beats HOLDBACK_MODEL
    assert resolve(env=env, model=["demo"]).models == ("demo",)
    assert resolve(env={"HOLDBACK_MODELS": " , "}).models == ("demo",)  # blank is unset


@pytest.mark.parametrize(
    ("flags", "env", "named"),
    [
        (["gemini:pro"], {}, "--model"),
        (None, {"HOLDBACK_MODELS": "demo,gemini:pro"}, "HOLDBACK_MODELS"),
        (None, {"HOLDBACK_MODEL": "openai"}, "HOLDBACK_MODEL"),
    ],
)
def test_an_unknown_model_is_refused_by_where_it_was_named(
    flags: list[str] | None, env: dict[str, str], named: str
) -> None:
    with pytest.raises(ConfigurationError, match=named):
        resolve(env=env, model=flags)


def test_settings_made_directly_keep_model_first() -> None:
    assert Settings(model="openai:x").models == ("openai:x",)
    assert Settings(model="demo", models=("openai:x", "demo")).models == ("demo", "openai:x")


# -- labels and keys --------------------------------------------------------------------------


def test_labels_for_people() -> None:
    assert label("demo", {}) == "Offline demo"
    assert label("openai:gpt-4o-mini", {}) == "gpt-4o-mini (OpenAI)"
    assert label("openai-responses:o3", {}) == "o3 (OpenAI Responses)"
    assert label("anthropic:claude-x", {}) == "claude-x (Anthropic)"
    local = {"OPENAI_BASE_URL": "http://127.0.0.1:11434/v1"}
    assert label("openai:llama3.1:8b", local) == "llama3.1:8b (OpenAI-compatible)"
    vendor = {"OPENAI_BASE_URL": "https://api.openai.com/v1/"}
    assert label("openai:gpt-4o", vendor) == "gpt-4o (OpenAI)"


def test_missing_keys_name_the_variable_never_a_value() -> None:
    models = ("demo", "openai:a", "openai-responses:b", "anthropic:c")
    warnings = missing_keys(models, {})
    assert len(warnings) == 2
    assert warnings[0].startswith("OPENAI_API_KEY is not set: openai:a, openai-responses:b")
    assert warnings[1].startswith("ANTHROPIC_API_KEY is not set: anthropic:c")
    keyed = {"OPENAI_API_KEY": KEY_CANARY, "ANTHROPIC_API_KEY": KEY_CANARY}
    assert missing_keys(models, keyed) == []
    assert missing_keys(("demo",), {}) == []
    assert missing_keys(models, {"OPENAI_API_KEY": "  ", "ANTHROPIC_API_KEY": KEY_CANARY}) != []
    # A local server may need no key: still said, and said so.
    (local,) = missing_keys(("openai:llama",), {"OPENAI_BASE_URL": "http://127.0.0.1:1/v1"})
    assert "without an API key" in local


# -- the app ----------------------------------------------------------------------------------


def test_one_provider_per_model_the_default_first(tmp_path: Path) -> None:
    env = {
        "HOLDBACK_MODELS": "demo,openai:gpt-4o-mini,anthropic:claude-x",
        "OPENAI_API_KEY": KEY_CANARY,
    }
    with running_app(make_settings(tmp_path, env)) as client:
        service = client.app.state.runtime.service  # type: ignore[attr-defined]
        assert list(service.models) == ["demo", "openai:gpt-4o-mini", "anthropic:claude-x"]
        assert service.default_model == "demo"
        assert service.provider is service.models["demo"]
        assert isinstance(service.models["demo"], DemoProvider)
        assert isinstance(service.models["openai:gpt-4o-mini"], OpenAIChatProvider)
        assert isinstance(service.models["anthropic:claude-x"], AnthropicProvider)
        body = client.get("/api/models").json()
    assert body == {
        "models": [
            {"id": "demo", "label": "Offline demo"},
            {"id": "openai:gpt-4o-mini", "label": "gpt-4o-mini (OpenAI)"},
            {"id": "anthropic:claude-x", "label": "claude-x (Anthropic)"},
        ],
        "default": "demo",
    }
    assert KEY_CANARY not in str(body)


def test_a_given_provider_stands_in_for_the_default(tmp_path: Path) -> None:
    provider = DemoProvider(chunk_delay=0)
    with running_app(make_settings(tmp_path, {"HOLDBACK_MODEL": "openai:x"}), provider) as client:
        service = client.app.state.runtime.service  # type: ignore[attr-defined]
        assert service.models == {"openai:x": provider}
        assert client.get("/api/models").json() == {
            "models": [{"id": "openai:x", "label": "x (OpenAI)"}],
            "default": "openai:x",
        }


def test_models_are_for_signed_in_users_only(tmp_path: Path) -> None:
    add_user(tmp_path / "data", "alice", "pw-models-canary")
    settings = make_settings(tmp_path, {"HOLDBACK_MODELS": "openai:a,demo"}, auth="password")
    with running_app(settings) as client:
        refused = client.get("/api/models")
        assert refused.status_code == 401
        assert refused.json()["code"] == "unauthorized"
        signed_in = client.post(
            "/api/login", json={"username": "alice", "password": "pw-models-canary"}
        )
        assert signed_in.status_code == 200
        body = client.get("/api/models").json()
    assert [m["id"] for m in body["models"]] == ["openai:a", "demo"]
    assert body["default"] == "openai:a"


def test_the_demo_model_says_it_is_an_offline_demo(tmp_path: Path) -> None:
    with running_app(make_settings(tmp_path)) as client, client.websocket_connect("/ws") as ws:
        frames = chat(ws, "What is a good name for a cat?")
    text = content_of(frames)
    assert text.startswith(INTRO + "\n\n")
    assert "offline demo" in text
    assert "no LLM is connected" in text
