"""Provider specs (`demo`, `openai:<model>`, ...) and the one function that builds them.

The rule it keeps: a provider is named by a spec string `KIND` or `KIND:MODEL`; a spec or a
base URL that cannot work fails at once with a `ConfigurationError` subclass that says what is
wrong. The model part is everything after the first colon, so Ollama's `llama3.1:8b` works.
Upstreams are configured the way their own users configure them: `OPENAI_BASE_URL` and
`OPENAI_API_KEY` (shared by `openai` and `openai-responses`, and by every OpenAI-compatible
server), `ANTHROPIC_BASE_URL` and `ANTHROPIC_API_KEY`. A key may be absent when the base URL
points at a local server that needs none; with the vendor's own URL and no key, each reply
ends with an `upstream_auth` error event that names the variable to set, without a request.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal, TypeAlias
from urllib.parse import urlsplit

from holdback.errors import ConfigurationError
from holdback.providers import anthropic, openai_chat
from holdback.providers.anthropic import AnthropicProvider
from holdback.providers.base import Provider
from holdback.providers.demo import DemoProvider
from holdback.providers.http import StreamSettings
from holdback.providers.openai_chat import OpenAIChatProvider
from holdback.providers.openai_responses import OpenAIResponsesProvider
from holdback.providers.transport import UpstreamClient

Kind: TypeAlias = Literal["demo", "openai", "openai-responses", "anthropic"]
KINDS: Final[tuple[Kind, ...]] = ("demo", "openai", "openai-responses", "anthropic")
DEFAULT_SPEC: Final = "demo"


class InvalidProviderSpecError(ConfigurationError):
    """A provider spec is not `demo`, `openai:<model>`, `openai-responses:<model>` or
    `anthropic:<model>`."""


class InvalidBaseURLError(ConfigurationError):
    """A provider base URL (`OPENAI_BASE_URL`, `ANTHROPIC_BASE_URL`) is not an http(s) URL."""


@dataclass(frozen=True, slots=True)
class ProviderSpec:
    """A parsed provider spec: its kind and, except for `demo`, its model."""

    kind: Kind
    model: str = ""

    def __str__(self) -> str:
        return self.kind if self.kind == "demo" else f"{self.kind}:{self.model}"


def parse_spec(spec: str) -> ProviderSpec:
    """Parse `demo`, `openai:M`, `openai-responses:M` or `anthropic:M`."""
    text = spec.strip()
    kind, colon, model = text.partition(":")
    model = model.strip()
    usage = "use demo, openai:<model>, openai-responses:<model> or anthropic:<model>"
    if kind == "demo":
        if colon:
            raise InvalidProviderSpecError(f"the demo provider takes no model name; {usage}")
        return ProviderSpec("demo")
    for known in KINDS:
        if kind == known:
            if not model or any(c.isspace() for c in model):
                raise InvalidProviderSpecError(
                    f"provider {known!r} needs a model name without spaces, "
                    f"e.g. {known}:<model>; {usage}"
                )
            return ProviderSpec(known, model)
    shown = kind if len(kind) <= 40 else kind[:40] + "…"
    raise InvalidProviderSpecError(f"unknown provider {shown!r}; {usage}")


def _setting(env: Mapping[str, str], name: str) -> str | None:
    value = env.get(name, "").strip()
    return value or None


def _base_url(env: Mapping[str, str], name: str, default: str) -> str:
    value = _setting(env, name)
    if value is None:
        return default
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidBaseURLError(f"{name} must be an http:// or https:// URL with a host")
    return value.rstrip("/")


def make_provider(
    spec: str,
    *,
    env: Mapping[str, str] | None = None,
    settings: StreamSettings | None = None,
    client: UpstreamClient | None = None,
    demo_chunk_delay: float = 0.02,
) -> Provider:
    """Build the provider a spec names, configured from `env` (default: the process's)."""
    parsed = parse_spec(spec)
    env = os.environ if env is None else env
    if parsed.kind == "demo":
        return DemoProvider(chunk_delay=demo_chunk_delay)
    if parsed.kind == "anthropic":
        return AnthropicProvider(
            parsed.model,
            base_url=_base_url(env, "ANTHROPIC_BASE_URL", anthropic.DEFAULT_BASE_URL),
            api_key=_setting(env, "ANTHROPIC_API_KEY"),
            settings=settings,
            client=client,
        )
    base_url = _base_url(env, "OPENAI_BASE_URL", openai_chat.DEFAULT_BASE_URL)
    api_key = _setting(env, "OPENAI_API_KEY")
    if parsed.kind == "openai":
        return OpenAIChatProvider(
            parsed.model, base_url=base_url, api_key=api_key, settings=settings, client=client
        )
    return OpenAIResponsesProvider(
        parsed.model, base_url=base_url, api_key=api_key, settings=settings, client=client
    )
