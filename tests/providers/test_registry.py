"""Provider specs: what parses, what is refused (with a ConfigurationError that says why), and
how the environment configures each provider."""

from __future__ import annotations

import pytest

from holdback.errors import ConfigurationError
from holdback.providers.anthropic import AnthropicProvider
from holdback.providers.demo import DemoProvider
from holdback.providers.openai_chat import OpenAIChatProvider
from holdback.providers.openai_responses import OpenAIResponsesProvider
from holdback.providers.registry import (
    DEFAULT_SPEC,
    InvalidBaseURLError,
    InvalidProviderSpecError,
    ProviderSpec,
    make_provider,
    parse_spec,
)


@pytest.mark.parametrize(
    ("spec", "parsed"),
    [
        ("demo", ProviderSpec("demo")),
        ("  demo\n", ProviderSpec("demo")),
        ("openai:gpt-4o", ProviderSpec("openai", "gpt-4o")),
        ("openai:llama3.1:8b", ProviderSpec("openai", "llama3.1:8b")),
        ("openai-responses:o4-mini", ProviderSpec("openai-responses", "o4-mini")),
        ("anthropic:claude-sonnet-4-5", ProviderSpec("anthropic", "claude-sonnet-4-5")),
        ("openai:org/Llama-3.3-70B", ProviderSpec("openai", "org/Llama-3.3-70B")),
    ],
)  # fmt: skip
def test_valid_specs(spec: str, parsed: ProviderSpec) -> None:
    assert parse_spec(spec) == parsed
    assert str(parsed) == spec.strip()


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("", "unknown provider ''"),
        ("openai", "needs a model name"),
        ("openai:", "needs a model name"),
        ("anthropic:  ", "needs a model name"),
        ("openai:gpt 4o", "without spaces"),
        ("demo:fast", "takes no model name"),
        ("gemini:pro", "unknown provider 'gemini'"),
        ("OpenAI:gpt-4o", "unknown provider 'OpenAI'"),
    ],
)
def test_bad_specs_are_refused_with_a_reason(spec: str, says: str) -> None:
    with pytest.raises(InvalidProviderSpecError, match=says) as caught:
        parse_spec(spec)
    assert isinstance(caught.value, ConfigurationError)
    assert "openai:<model>" in str(caught.value)
    with pytest.raises(InvalidProviderSpecError):
        make_provider(spec, env={})


def test_demo_is_the_default_and_builds_offline() -> None:
    provider = make_provider(DEFAULT_SPEC, env={}, demo_chunk_delay=0)
    assert isinstance(provider, DemoProvider)
    assert provider.chunk_delay == 0
    assert provider.name == "demo"


def test_openai_kinds_share_the_openai_environment() -> None:
    env = {"OPENAI_BASE_URL": "http://localhost:11434/v1/", "OPENAI_API_KEY": "ollama"}
    chat = make_provider("openai:qwen3:4b", env=env)
    responses = make_provider("openai-responses:qwen3:4b", env=env)
    assert isinstance(chat, OpenAIChatProvider)
    assert isinstance(responses, OpenAIResponsesProvider)
    for provider in (chat, responses):
        assert provider.base_url == "http://localhost:11434/v1"
        assert provider.model == "qwen3:4b"
    assert chat.name == "openai:qwen3:4b"
    assert responses.name == "openai-responses:qwen3:4b"


def test_defaults_when_the_environment_is_empty() -> None:
    chat = make_provider("openai:gpt-4o", env={"OPENAI_BASE_URL": "  "})
    claude = make_provider("anthropic:claude-sonnet-4-5", env={})
    assert isinstance(chat, OpenAIChatProvider)
    assert isinstance(claude, AnthropicProvider)
    assert chat.base_url == "https://api.openai.com/v1"
    assert claude.base_url == "https://api.anthropic.com"
    assert claude.name == "anthropic:claude-sonnet-4-5"


def test_process_environment_is_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:9/")
    provider = make_provider("anthropic:claude-haiku-4-5")
    assert isinstance(provider, AnthropicProvider)
    assert provider.base_url == "http://127.0.0.1:9"


@pytest.mark.parametrize("url", ["localhost:11434", "ftp://example.com", "http://", "not a url"])
def test_bad_base_url_is_refused(url: str) -> None:
    with pytest.raises(InvalidBaseURLError, match="OPENAI_BASE_URL must be an http"):
        make_provider("openai:gpt-4o", env={"OPENAI_BASE_URL": url})
    with pytest.raises(InvalidBaseURLError, match="ANTHROPIC_BASE_URL"):
        make_provider("anthropic:claude", env={"ANTHROPIC_BASE_URL": url})
