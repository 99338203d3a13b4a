"""Moderator specs: `off`, `openai:<model>`, `http:<url>`, `rules:<file>`; every spec that
cannot work is refused at start-up with a `ConfigurationError` that says what is wrong."""

from __future__ import annotations

from pathlib import Path

import pytest

from holdback.errors import ConfigurationError
from holdback.moderation.openai import OpenAIModerator
from holdback.moderation.registry import (
    MissingModerationKeyError,
    ModerationSpec,
    make_moderator,
    parse_spec,
)
from holdback.moderation.rules import RulesFileError, RulesModerator
from holdback.moderation.webhook import WebhookModerator

pytestmark = pytest.mark.anyio

EXAMPLE = Path(__file__).parents[2] / "docs" / "moderation-rules.example.toml"


@pytest.mark.parametrize(
    ("spec", "parsed"),
    [
        ("off", ModerationSpec("off")),
        (" OFF ", ModerationSpec("off")),
        ("openai:omni-moderation-latest", ModerationSpec("openai", "omni-moderation-latest")),
        ("http:http://127.0.0.1:9000/check", ModerationSpec("http", "http://127.0.0.1:9000/check")),
        (
            "http:https://guard.example/v1?x=1",
            ModerationSpec("http", "https://guard.example/v1?x=1"),
        ),
        ("rules:/etc/holdback/rules.toml", ModerationSpec("rules", "/etc/holdback/rules.toml")),
        ("rules:C:/rules.toml", ModerationSpec("rules", "C:/rules.toml")),
    ],
)
def test_specs_parse(spec: str, parsed: ModerationSpec) -> None:
    assert parse_spec(spec) == parsed
    assert parse_spec(str(parsed)) == parsed


@pytest.mark.parametrize(
    ("spec", "reason"),
    [
        ("", "empty"),
        ("off:now", "takes nothing"),
        ("openai", "needs a model"),
        ("openai:", "needs a model"),
        ("openai:two words", "needs a model"),
        ("http", "needs a URL"),
        ("http:ftp://x/", "http:// or https://"),
        ("http:127.0.0.1:9000", "http:// or https://"),
        ("rules", "needs a file"),
        ("llamaguard:x", "unknown moderator 'llamaguard'"),
    ],
)
def test_bad_specs_say_why(spec: str, reason: str) -> None:
    with pytest.raises(ConfigurationError, match=reason):
        parse_spec(spec)


async def test_each_kind_is_built() -> None:
    assert make_moderator("off", {}, client=None) is None
    rules = make_moderator(f"rules:{EXAMPLE}", {}, client=None)
    assert isinstance(rules, RulesModerator)
    hook = make_moderator("http:http://127.0.0.1:9/check", {}, client=None)
    assert isinstance(hook, WebhookModerator)
    local = make_moderator(
        "openai:omni-moderation-latest", {"OPENAI_BASE_URL": "http://127.0.0.1:9/v1/"}, client=None
    )
    assert isinstance(local, OpenAIModerator)
    assert local.url == "http://127.0.0.1:9/v1/moderations"
    keyed = make_moderator("openai:m", {"OPENAI_API_KEY": "k"}, client=None)
    assert isinstance(keyed, OpenAIModerator)
    assert keyed.url == "https://api.openai.com/v1/moderations"
    for moderator in (rules, hook, local, keyed):
        assert moderator is not None
        await moderator.aclose()


def test_openais_own_url_needs_a_key() -> None:
    with pytest.raises(MissingModerationKeyError, match="OPENAI_API_KEY"):
        make_moderator("openai:omni-moderation-latest", {}, client=None)


@pytest.mark.parametrize(
    ("spec", "env", "named"),
    [
        ("openai:m", {"OPENAI_BASE_URL": "ftp://x"}, "OPENAI_BASE_URL"),
        (
            "openai:m",
            {"OPENAI_API_KEY": "k", "HOLDBACK_MODERATION_ACTIONS": "x=y"},
            "HOLDBACK_MODERATION_ACTIONS",
        ),
        ("rules:/nonexistent/rules.toml", {}, "does not exist"),
    ],
)
def test_configuration_faults_are_named(spec: str, env: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigurationError, match=named):
        make_moderator(spec, env, client=None)


def test_a_bad_rules_file_is_a_configuration_error(tmp_path: Path) -> None:
    path = tmp_path / "r.toml"
    path.write_text("[categories.a]\naction = 'stop'\nphrases = ['x']\n")
    with pytest.raises(RulesFileError):
        make_moderator(f"rules:{path}", {}, client=None)
