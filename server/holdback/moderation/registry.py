"""Moderator specs (`off`, `openai:<model>`, `http:<url>`, `rules:<file>`) and the one
function that builds them.

The rule it keeps: a moderator is named by one spec string, `--moderation` /
`HOLDBACK_MODERATION`, and a spec that cannot work fails at start-up with a
`ConfigurationError` that says what is wrong: an unknown kind, a missing model, URL or file,
a URL that is not http(s), a rules file that does not load, OpenAI's own URL without
`OPENAI_API_KEY`. The part after the first colon is the model, the URL or the file, whole
(`http:http://127.0.0.1:9000/check`). `parse_spec` checks only the spec's shape, so settings
can be resolved without reading files; `make_moderator` builds it.

The environment, read as the providers read theirs: `OPENAI_BASE_URL` (default
https://api.openai.com/v1) and `OPENAI_API_KEY` for `openai:`, `HOLDBACK_MODERATION_ACTIONS`
(`category=action,...`) for `openai:`'s flagged categories, `HOLDBACK_MODERATION_TOKEN` (a
bearer token) for `http:`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal, TypeAlias
from urllib.parse import urlsplit

from holdback.errors import ConfigurationError
from holdback.moderation import openai, webhook
from holdback.moderation.base import Moderator
from holdback.moderation.calls import DEFAULT_TIMEOUT
from holdback.moderation.openai import OpenAIModerator, parse_actions
from holdback.moderation.rules import RulesModerator
from holdback.moderation.webhook import WebhookModerator, check_url
from holdback.providers.transport import UpstreamClient

Kind: TypeAlias = Literal["off", "openai", "http", "rules"]
KINDS: Final[tuple[Kind, ...]] = ("off", "openai", "http", "rules")
USAGE: Final = "use off, openai:<model>, http:<url> or rules:<file>"


class InvalidModerationSpecError(ConfigurationError):
    """A moderation spec is not `off`, `openai:<model>`, `http:<url>` or `rules:<file>`."""


class MissingModerationKeyError(ConfigurationError):
    """`openai:` moderation against OpenAI's own URL, with no `OPENAI_API_KEY`."""


@dataclass(frozen=True, slots=True)
class ModerationSpec:
    kind: Kind
    target: str = ""  # the model, the URL or the file

    def __str__(self) -> str:
        return self.kind if self.kind == "off" else f"{self.kind}:{self.target}"


def parse_spec(spec: str) -> ModerationSpec:
    """The shape of a spec: its kind and its model, URL or file; nothing is read or opened."""
    text = spec.strip()
    kind, colon, target = text.partition(":")
    kind, target = kind.strip().lower(), target.strip()
    if not text:
        raise InvalidModerationSpecError(f"the moderation spec is empty; {USAGE}")
    if kind == "off":
        if colon:
            raise InvalidModerationSpecError(f"moderation off takes nothing after it; {USAGE}")
        return ModerationSpec("off")
    if kind == "openai":
        if not target or any(c.isspace() for c in target):
            raise InvalidModerationSpecError(
                f"openai moderation needs a model without spaces, e.g. "
                f"openai:omni-moderation-latest; {USAGE}"
            )
        return ModerationSpec("openai", target)
    if kind == "http":
        if not target:
            raise InvalidModerationSpecError(f"http moderation needs a URL; {USAGE}")
        check_url(target)
        return ModerationSpec("http", target)
    if kind == "rules":
        if not target:
            raise InvalidModerationSpecError(f"rules moderation needs a file; {USAGE}")
        return ModerationSpec("rules", target)
    shown = kind if len(kind) <= 40 else kind[:40] + "…"
    raise InvalidModerationSpecError(f"unknown moderator {shown!r}; {USAGE}")


def _setting(env: Mapping[str, str], name: str) -> str | None:
    value = env.get(name, "").strip()
    return value or None


def _openai_base_url(env: Mapping[str, str]) -> str:
    value = _setting(env, "OPENAI_BASE_URL")
    if value is None:
        return openai.DEFAULT_BASE_URL
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidModerationSpecError(
            "OPENAI_BASE_URL must be an http:// or https:// URL with a host"
        )
    return value.rstrip("/")


def make_moderator(
    spec: str,
    env: Mapping[str, str],
    *,
    client: UpstreamClient | None,
    timeout: float = DEFAULT_TIMEOUT,
) -> Moderator | None:
    """The moderator a spec names (None for `off`), configured from `env`. An HTTP moderator
    uses `client` (the process's pool) and leaves it open; with None it makes its own and
    closes it in `aclose`. `timeout` bounds each of its HTTP waits."""
    parsed = parse_spec(spec)
    if parsed.kind == "off":
        return None
    if parsed.kind == "rules":
        return RulesModerator.from_file(parsed.target)
    if parsed.kind == "http":
        return WebhookModerator(
            parsed.target,
            client=client,
            token=_setting(env, webhook.TOKEN_VARIABLE),
            timeout=timeout,
        )
    base_url = _openai_base_url(env)
    api_key = _setting(env, "OPENAI_API_KEY")
    if api_key is None and base_url == openai.DEFAULT_BASE_URL:
        raise MissingModerationKeyError(
            "openai moderation against api.openai.com needs OPENAI_API_KEY (or set "
            "OPENAI_BASE_URL to a server that needs no key)"
        )
    return OpenAIModerator(
        parsed.target,
        client=client,
        base_url=base_url,
        api_key=api_key,
        actions=parse_actions(env.get(openai.ACTIONS_VARIABLE, "")),
        timeout=timeout,
    )
