"""`GET /api/models`: the models this server offers, and what each needs to answer.

The rules:
- A model's id is its provider spec as `--model` / `HOLDBACK_MODELS` name it (`demo`,
  `openai:gpt-4o-mini`), in the order given; the first is the default. Its label is for people:
  `Offline demo`, `gpt-4o-mini (OpenAI)`, `llama3.1:8b (OpenAI-compatible)` when the base URL
  is not the vendor's.
- Signed-in users only, like every `/api` route but the session and the login.
- A model that needs an API key and has none is known at start-up (`missing_keys`), by the
  variable's name only: no key value is ever read out, logged or sent.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from holdback.app.http_api import _runtime, _user
from holdback.errors import ConfigurationError
from holdback.providers import anthropic, openai_chat
from holdback.providers.registry import Kind, parse_spec

DEMO_LABEL: Final = "Offline demo"


@dataclass(frozen=True, slots=True)
class _Upstream:
    """How one provider kind reaches its vendor: its name, and the variables it reads."""

    vendor: str
    key_variable: str
    url_variable: str
    default_url: str


_UPSTREAMS: Final[dict[Kind, _Upstream]] = {
    "openai": _Upstream(
        "OpenAI", "OPENAI_API_KEY", "OPENAI_BASE_URL", openai_chat.DEFAULT_BASE_URL
    ),
    "openai-responses": _Upstream(
        "OpenAI Responses", "OPENAI_API_KEY", "OPENAI_BASE_URL", openai_chat.DEFAULT_BASE_URL
    ),
    "anthropic": _Upstream(
        "Anthropic", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", anthropic.DEFAULT_BASE_URL
    ),
}


def _set(env: Mapping[str, str], name: str) -> bool:
    return bool(env.get(name, "").strip())


def _vendor_url(upstream: _Upstream, env: Mapping[str, str]) -> bool:
    """Whether the model is reached at its vendor's own URL (no base URL, or that one)."""
    url = env.get(upstream.url_variable, "").strip().rstrip("/")
    return not url or url == upstream.default_url.rstrip("/")


def label(spec: str, env: Mapping[str, str]) -> str:
    """A model's name for people (a provider given in code, not by a spec: its id)."""
    try:
        parsed = parse_spec(spec)
    except ConfigurationError:
        return spec
    if parsed.kind == "demo":
        return DEMO_LABEL
    upstream = _UPSTREAMS[parsed.kind]
    vendor = upstream.vendor
    if not _vendor_url(upstream, env):
        vendor = "Anthropic-compatible" if parsed.kind == "anthropic" else "OpenAI-compatible"
    return f"{parsed.model} ({vendor})"


def listing(models: Sequence[str], default: str, env: Mapping[str, str]) -> dict[str, object]:
    """The body of `GET /api/models`."""
    return {
        "models": [{"id": spec, "label": label(spec, env)} for spec in models],
        "default": default,
    }


def missing_keys(models: Sequence[str], env: Mapping[str, str]) -> list[str]:
    """One warning per API key variable that models need and the environment lacks, naming
    the variable and the models, never a value. At the vendor's URL every reply of those
    models fails until the key is set; at another URL (a local server) it may need none."""
    wanting: dict[str, list[str]] = {}
    at_vendor: dict[str, bool] = {}
    for spec in models:
        parsed = parse_spec(spec)
        if parsed.kind == "demo":
            continue
        upstream = _UPSTREAMS[parsed.kind]
        if _set(env, upstream.key_variable):
            continue
        wanting.setdefault(upstream.key_variable, []).append(spec)
        vendor = _vendor_url(upstream, env)
        at_vendor[upstream.key_variable] = at_vendor.get(upstream.key_variable, False) or vendor
    warnings = []
    for variable, specs in wanting.items():
        names = ", ".join(specs)
        if at_vendor[variable]:
            warnings.append(
                f"{variable} is not set: {names} cannot answer (every reply ends with an "
                f"upstream_auth error) until it is set in the server's environment"
            )
        else:
            warnings.append(
                f"{variable} is not set: {names} will call its base URL without an API key "
                "(fine for a local server that needs none)"
            )
    return warnings


async def list_models(request: Request) -> Response:
    user = await _user(request)
    if isinstance(user, Response):
        return user
    runtime = _runtime(request)
    service = runtime.service
    return JSONResponse(listing(list(service.models), service.default_model, runtime.settings.env))


routes = [Route("/api/models", list_models, methods=["GET"])]
