"""Moderation settings and the runtime: `--moderation` / `HOLDBACK_MODERATION`, the timeout,
the concurrency, the window and `--moderate-input`; refused by name when unusable; the
moderator built once, kept on the runtime and the chat service, and closed on shutdown."""

from __future__ import annotations

from pathlib import Path

import pytest

from holdback.app.application import build_runtime
from holdback.app.commands import _close
from holdback.app.settings import resolve
from holdback.errors import ConfigurationError
from holdback.moderation.base import Verdict
from holdback.moderation.calls import ModerationCalls
from holdback.moderation.rules import RulesFileError, RulesModerator
from holdback.moderation.webhook import WebhookModerator
from tests.app.support import make_settings
from tests.app.test_settings import serve_parser

pytestmark = pytest.mark.anyio

EXAMPLE = Path(__file__).parents[2] / "docs" / "moderation-rules.example.toml"


def test_defaults() -> None:
    settings = resolve(env={})
    assert settings.moderation == "off"
    assert settings.moderation_timeout == 3.0
    assert settings.moderation_concurrency == 8
    assert settings.moderation_window == 400
    assert settings.moderate_input is False


def test_flags_and_variables() -> None:
    env = {
        "HOLDBACK_MODERATION": "openai:omni-moderation-latest",
        "HOLDBACK_MODERATION_TIMEOUT": "1.5",
        "HOLDBACK_MODERATION_CONCURRENCY": "2",
        "HOLDBACK_MODERATION_WINDOW": "200",
        "HOLDBACK_MODERATE_INPUT": "yes",
    }
    settings = resolve(env=env)
    assert settings.moderation == "openai:omni-moderation-latest"
    assert settings.moderation_timeout == 1.5
    assert settings.moderation_concurrency == 2
    assert settings.moderation_window == 200
    assert settings.moderate_input is True
    assert resolve(moderation="off", env=env).moderation == "off"  # a flag beats its variable
    assert resolve(moderate_input=True, env={}).moderate_input is True


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"HOLDBACK_MODERATION": "magic"}, "--moderation / HOLDBACK_MODERATION: unknown"),
        ({"HOLDBACK_MODERATION": "http:ftp://x"}, "--moderation / HOLDBACK_MODERATION"),
        ({"HOLDBACK_MODERATION": "openai:"}, "--moderation / HOLDBACK_MODERATION"),
        ({"HOLDBACK_MODERATION_TIMEOUT": "0"}, "HOLDBACK_MODERATION_TIMEOUT"),
        ({"HOLDBACK_MODERATION_TIMEOUT": "soon"}, "HOLDBACK_MODERATION_TIMEOUT"),
        ({"HOLDBACK_MODERATION_CONCURRENCY": "0"}, "HOLDBACK_MODERATION_CONCURRENCY"),
        ({"HOLDBACK_MODERATION_WINDOW": "20"}, "HOLDBACK_MODERATION_WINDOW"),
        ({"HOLDBACK_MODERATE_INPUT": "perhaps"}, "HOLDBACK_MODERATE_INPUT"),
    ],
)
def test_unusable_values_are_refused_by_name(env: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigurationError, match=named):
        resolve(env=env)


def test_serve_help_names_the_flags_and_variables() -> None:
    flat = " ".join(serve_parser().format_help().split())
    for word in (
        "--moderation SPEC",
        "--moderate-input",
        "HOLDBACK_MODERATION;",
        "HOLDBACK_MODERATION_TIMEOUT",
        "HOLDBACK_MODERATION_WINDOW",
        "HOLDBACK_MODERATE_INPUT=1",
        "rules:FILE",
    ):
        assert word in flat


async def test_off_builds_no_moderator(tmp_path: Path) -> None:
    runtime = await build_runtime(make_settings(tmp_path))
    try:
        assert runtime.moderation is None
        assert runtime.service.moderation is None
    finally:
        await _close(runtime)


async def test_the_runtime_keeps_one_moderator_and_closes_it(tmp_path: Path) -> None:
    settings = make_settings(
        tmp_path,
        {"HOLDBACK_MODERATION_WINDOW": "300", "HOLDBACK_MODERATION_TIMEOUT": "2"},
        moderation=f"rules:{EXAMPLE}",
        moderate_input=True,
    )
    runtime = await build_runtime(settings)
    try:
        calls = runtime.moderation
        assert isinstance(calls, ModerationCalls)
        assert isinstance(calls.moderator, RulesModerator)
        assert calls.timeout == 2.0
        assert runtime.service.moderation is calls
        assert runtime.service.moderation_window == 300
        assert runtime.service.moderate_input is True
        verdict = await calls.check("He was diagnosed with flu.", "content", "c-1")
        assert verdict == Verdict("withhold", "medical")
    finally:
        await _close(runtime)
    assert calls._closed


async def test_an_http_moderator_shares_the_process_pool(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, moderation="http:http://127.0.0.1:9/check")
    runtime = await build_runtime(settings)
    try:
        assert runtime.http is not None  # made for the moderator: the demo model needs none
        assert runtime.moderation is not None
        moderator = runtime.moderation.moderator
        assert isinstance(moderator, WebhookModerator)
        assert moderator._client is runtime.http
    finally:
        await _close(runtime)


async def test_a_moderator_that_cannot_work_stops_the_start(tmp_path: Path) -> None:
    missing = make_settings(tmp_path, moderation=f"rules:{tmp_path / 'absent.toml'}")
    with pytest.raises(RulesFileError, match="does not exist"):
        await build_runtime(missing)
    keyless = make_settings(tmp_path, moderation="openai:omni-moderation-latest")
    with pytest.raises(ConfigurationError, match="OPENAI_API_KEY"):
        await build_runtime(keyless)
