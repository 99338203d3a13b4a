"""Settings: every flag of `holdback serve` is also a `HOLDBACK_*` variable; a flag beats its
variable, a variable beats the default, and an unusable value is refused at start-up with a
message that names the flag or the variable.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from pathlib import Path

import pytest

from holdback.app.commands import settings_from
from holdback.app.settings import Settings, is_loopback, resolve
from holdback.cli import build_parser
from holdback.errors import ConfigurationError
from holdback.providers.demo import DemoProvider
from tests.app.support import make_settings, run_cli, running_app

DOCS = Path(__file__).resolve().parents[2] / "docs"
PATTERNS = str(DOCS / "patterns.example.toml")
PEOPLE = str(DOCS / "people.example.csv")

# One usable, non-default value per flag: (flag value(s), environment value, attribute, expected).
SAMPLES: dict[str, tuple[list[str], str, str, object]] = {
    "host": (["127.0.0.2"], "127.0.0.2", "host", "127.0.0.2"),
    "port": (["8123"], "8123", "port", 8123),
    "model": (["openai:gpt-test"], "openai:gpt-test", "model", "openai:gpt-test"),
    "database_url": (
        ["sqlite+aiosqlite:////tmp/hb-settings.db"],
        "sqlite+aiosqlite:////tmp/hb-settings.db",
        "database_url",
        "sqlite+aiosqlite:////tmp/hb-settings.db",
    ),
    "data_dir": (["/tmp/hb-settings"], "/tmp/hb-settings", "data_dir", Path("/tmp/hb-settings")),
    "auth": (["password"], "password", "auth", "password"),
    "sensitive_terms": (
        ["/t/clients.txt", "/t/projects.txt"],
        "/t/clients.txt,/t/projects.txt",
        "sensitive_terms",
        (Path("/t/clients.txt"), Path("/t/projects.txt")),
    ),
    "forbidden_terms": (
        ["/t/hosts.txt"],
        "/t/hosts.txt",
        "forbidden_terms",
        (Path("/t/hosts.txt"),),
    ),
    "patterns": ([PATTERNS], PATTERNS, "patterns_file", Path(PATTERNS)),
    "people": ([PEOPLE], PEOPLE, "people_file", Path(PEOPLE)),
    "guard_mode": (["block"], "block", "guard_mode", "block"),
    "moderation": (
        ["rules:/t/rules.toml"],
        "rules:/t/rules.toml",
        "moderation",
        "rules:/t/rules.toml",
    ),
    "moderate_input": ([], "1", "moderate_input", True),
    "debug": ([], "1", "debug", True),
}


def serve_parser() -> argparse.ArgumentParser:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    serve: argparse.ArgumentParser = sub.choices["serve"]
    return serve


def serve_flags() -> list[argparse.Action]:
    return [a for a in serve_parser()._actions if a.option_strings and a.dest != "help"]


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in list(os.environ):
        if name.startswith("HOLDBACK_"):
            monkeypatch.delenv(name)
    return monkeypatch


def parse(argv: list[str]) -> Settings:
    return settings_from(build_parser().parse_args(["serve", *argv]))


def test_every_serve_flag_has_a_sample() -> None:
    assert sorted(a.dest for a in serve_flags()) == sorted(SAMPLES)


@pytest.mark.parametrize("dest", sorted(SAMPLES))
def test_every_flag_is_also_an_environment_variable(
    clean_env: pytest.MonkeyPatch, dest: str
) -> None:
    action = next(a for a in serve_flags() if a.dest == dest)
    flag_values, env_value, attribute, expected = SAMPLES[dest]
    variable = "HOLDBACK_" + dest.upper()
    assert variable in (action.help or ""), (
        f"--help for {action.option_strings[0]} names its variable"
    )
    extra = ["--host", "127.0.0.1"] if dest == "auth" else []
    by_flag = parse([action.option_strings[0], *flag_values, *extra])
    assert getattr(by_flag, attribute) == expected
    clean_env.setenv(variable, env_value)
    by_env = parse(extra)
    assert getattr(by_env, attribute) == expected
    # The whole settings agree, not just the one field.
    assert by_env == dataclasses.replace(by_flag, env=by_env.env)


def test_flag_beats_variable_beats_default() -> None:
    env = {
        "HOLDBACK_PORT": "9001",
        "HOLDBACK_MODEL": "openai:from-env",
        "HOLDBACK_GUARD_MODE": "block",
    }
    assert resolve(env={}).port == 8000
    assert resolve(env=env).port == 9001
    assert resolve(port=9002, env=env).port == 9002
    assert resolve(model="demo", env=env).model == "demo"
    assert resolve(guard_mode="redact", env=env).guard_mode == "redact"
    assert resolve(
        env={"HOLDBACK_SENSITIVE_TERMS": "/a.txt"}, sensitive_terms=["/b.txt"]
    ).sensitive_terms == (Path("/b.txt"),)
    assert resolve(env={"HOLDBACK_PORT": "  "}).port == 8000  # blank counts as unset


def test_defaults() -> None:
    settings = resolve(env={})
    assert settings.host == "127.0.0.1"
    assert settings.port == 8000
    assert settings.model == "demo"
    assert settings.auth == "none"
    assert settings.guard_mode == "redact"
    assert settings.max_frame_bytes == 64 * 1024
    assert settings.rate_limit_per_minute == 30
    assert settings.allowed_origins == ()
    assert settings.database_url is None
    assert settings.data_dir is None
    assert settings.sqlite_synchronous == "normal"


def test_environment_only_settings() -> None:
    settings = resolve(
        env={
            "HOLDBACK_GUARD_WINDOW": "512",
            "HOLDBACK_PHONE_REGION": "de",
            "HOLDBACK_MAX_FRAME_BYTES": "4096",
            "HOLDBACK_RATE_LIMIT": "5",
            "HOLDBACK_SEND_QUEUE_BYTES": "8192",
            "HOLDBACK_DEMO_CHUNK_DELAY": "0",
            "HOLDBACK_SHUTDOWN_GRACE": "0.5",
            "HOLDBACK_SQLITE_SYNCHRONOUS": "FULL",
        }
    )
    assert settings.sqlite_synchronous == "full"
    assert settings.guard_window == 512
    assert settings.phone_region == "DE"
    assert settings.max_frame_bytes == 4096
    assert settings.rate_limit_per_minute == 5
    assert settings.send_queue_bytes == 8192
    assert settings.demo_chunk_delay == 0
    assert settings.shutdown_grace == 0.5


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"HOLDBACK_PORT": "eighty"}, "HOLDBACK_PORT"),
        ({"HOLDBACK_PORT": "70000"}, "HOLDBACK_PORT"),
        ({"HOLDBACK_AUTH": "maybe"}, "HOLDBACK_AUTH"),
        ({"HOLDBACK_GUARD_MODE": "shout"}, "HOLDBACK_GUARD_MODE"),
        ({"HOLDBACK_GUARD_WINDOW": "2"}, "HOLDBACK_GUARD_WINDOW"),
        ({"HOLDBACK_MAX_FRAME_BYTES": "10"}, "HOLDBACK_MAX_FRAME_BYTES"),
        ({"HOLDBACK_RATE_LIMIT": "0"}, "HOLDBACK_RATE_LIMIT"),
        ({"HOLDBACK_SEND_QUEUE_BYTES": "lots"}, "HOLDBACK_SEND_QUEUE_BYTES"),
        ({"HOLDBACK_DEMO_CHUNK_DELAY": "-1"}, "HOLDBACK_DEMO_CHUNK_DELAY"),
        ({"HOLDBACK_SHUTDOWN_GRACE": "soon"}, "HOLDBACK_SHUTDOWN_GRACE"),
        ({"HOLDBACK_SQLITE_SYNCHRONOUS": "off"}, "HOLDBACK_SQLITE_SYNCHRONOUS"),
        ({"HOLDBACK_HOST": "0.0.0.0", "HOLDBACK_AUTH": "none"}, "--auth none"),
    ],
)
def test_unusable_values_are_refused_by_name(env: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigurationError, match=named):
        resolve(env=env)


def test_serve_refuses_bad_settings_with_one_line(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("HOLDBACK_PORT", "eighty")
    status, out, err = run_cli(["serve"])
    assert status == 2
    assert out == ""
    assert err.startswith("holdback: --port / HOLDBACK_PORT must be a whole number")
    assert "Traceback" not in err
    clean_env.delenv("HOLDBACK_PORT")
    status, _, err = run_cli(["serve", "--host", "0.0.0.0", "--auth", "none"])
    assert status == 2
    assert "refusing --auth none on 0.0.0.0" in err


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("10.0.0.1", False),
        ("", False),
    ],
)
def test_is_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


# -- phone regions and the entropy detector (issue 14) -----------------------------------------


@pytest.mark.parametrize(
    ("env", "regions"),
    [
        ({}, ("US",)),
        ({"HOLDBACK_PHONE_REGIONS": "GB"}, ("GB",)),
        ({"HOLDBACK_PHONE_REGIONS": "gb, de ,US"}, ("GB", "DE", "US")),
        ({"HOLDBACK_PHONE_REGIONS": "DE,de,GB"}, ("DE", "GB")),
        ({"HOLDBACK_PHONE_REGION": "fr"}, ("FR",)),  # the alias
        ({"HOLDBACK_PHONE_REGION": "fr,be"}, ("FR", "BE")),
        ({"HOLDBACK_PHONE_REGIONS": "GB,US", "HOLDBACK_PHONE_REGION": "DE"}, ("GB", "US")),
        ({"HOLDBACK_PHONE_REGIONS": "  ", "HOLDBACK_PHONE_REGION": "DE"}, ("DE",)),
    ],
)
def test_phone_regions(env: dict[str, str], regions: tuple[str, ...]) -> None:
    settings = resolve(env=env)
    assert settings.phone_regions == regions
    assert settings.phone_region == regions[0]  # the default region is the first listed


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"HOLDBACK_PHONE_REGIONS": "US,XX"}, "HOLDBACK_PHONE_REGIONS"),
        ({"HOLDBACK_PHONE_REGIONS": "USA"}, "HOLDBACK_PHONE_REGIONS"),
        ({"HOLDBACK_PHONE_REGION": "EU"}, "HOLDBACK_PHONE_REGION"),
        ({"HOLDBACK_ENTROPY_SECRETS": "maybe"}, "HOLDBACK_ENTROPY_SECRETS"),
    ],
)
def test_unusable_regions_and_flags_are_refused_by_name(env: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigurationError, match=named):
        resolve(env=env)


@pytest.mark.parametrize(
    ("value", "on"),
    [("", False), ("0", False), ("false", False), ("off", False), ("1", True), ("true", True),
     ("YES", True), (" on ", True)],
)  # fmt: skip
def test_entropy_secrets_flag(value: str, on: bool) -> None:
    assert resolve(env={"HOLDBACK_ENTROPY_SECRETS": value}).entropy_secrets is on
    assert resolve(env={}).entropy_secrets is False


def test_the_runtime_detects_what_the_settings_ask(tmp_path: Path) -> None:
    """application.py builds the detectors from the settings: every listed region, and the
    entropy detector only when it is asked for."""
    london, key = "020 7946 0958", "q7Xc2LmZ9vTb4NwR8sKd1YfH6jPg3AeUx"
    env = {"HOLDBACK_PHONE_REGIONS": "US,GB", "HOLDBACK_ENTROPY_SECRETS": "1"}
    with running_app(make_settings(tmp_path, env), DemoProvider(chunk_delay=0)) as client:
        runtime = client.app.state.runtime  # type: ignore[attr-defined]
        assert runtime.settings.phone_region == "US"
        found = [(f.kind, f.value) for f in runtime.detectors.detect(f"call {london}, key {key}")]
        assert found == [("phone", london), ("secret", key)]
    with running_app(make_settings(tmp_path / "plain"), DemoProvider(chunk_delay=0)) as client:
        runtime = client.app.state.runtime  # type: ignore[attr-defined]
        assert runtime.detectors.detect(f"call {london}, key {key}") == []


# -- the bounds of docs/limits.md (issue 15) ---------------------------------------------------

# variable: (attribute, default, a usable value and what it becomes, an unusable value)
LIMITS: dict[str, tuple[str, object, tuple[str, object], str]] = {
    "HOLDBACK_MAX_BODY_BYTES": ("max_body_bytes", 16384, ("1024", 1024), "100"),
    "HOLDBACK_MAX_LOGIN_BODY_BYTES": ("max_login_body_bytes", 4096, ("512", 512), "big"),
    "HOLDBACK_BODY_TIMEOUT": ("body_timeout", 10.0, ("2.5", 2.5), "0"),
    "HOLDBACK_HEADER_TIMEOUT": ("header_timeout", 10.0, ("3", 3.0), "-1"),
    "HOLDBACK_MAX_HEADER_BYTES": ("max_header_bytes", 16384, ("8192", 8192), "10"),
    "HOLDBACK_MAX_CONNECTIONS": ("max_connections", 1000, ("50", 50), "0"),
    "HOLDBACK_WS_FRAME_RATE": ("ws_frame_rate", 20, ("5", 5), "0"),
    "HOLDBACK_WS_IDLE_TIMEOUT": ("ws_idle_timeout", 60.0, ("300", 300.0), "never"),
    "HOLDBACK_WS_RECHECK": ("ws_recheck", 30.0, ("5", 5.0), "0"),
    "HOLDBACK_HASH_WORKERS": ("hash_workers", 2, ("4", 4), "0"),
    "HOLDBACK_LOGIN_QUEUE": ("login_queue", 32, ("8", 8), "0"),
    "HOLDBACK_LOGIN_BACKOFF_AFTER": ("login_backoff_after", 3, ("5", 5), "0"),
    "HOLDBACK_LOGIN_BACKOFF": ("login_backoff", 1.0, ("0.5", 0.5), "0"),
    "HOLDBACK_LOGIN_LOCK_AFTER": ("login_lock_after", 10, ("20", 20), "0"),
    "HOLDBACK_LOGIN_LOCK_TIME": ("login_lock_time", 900.0, ("60", 60.0), "0.5"),
}


@pytest.mark.parametrize("variable", sorted(LIMITS))
def test_every_bound_has_a_default_a_variable_and_a_refusal(variable: str) -> None:
    attribute, default, (value, expected), unusable = LIMITS[variable]
    assert getattr(resolve(env={}), attribute) == default
    assert getattr(Settings(), attribute) == default
    assert getattr(resolve(env={variable: value}), attribute) == expected
    assert getattr(resolve(env={variable: "  "}), attribute) == default  # blank is unset
    with pytest.raises(ConfigurationError, match=variable):
        resolve(env={variable: unusable})


def test_every_bound_is_documented() -> None:
    limits = (Path(__file__).resolve().parents[2] / "docs" / "limits.md").read_text()
    for variable in LIMITS:
        assert f"`{variable}`" in limits, variable


def test_team_files_that_cannot_be_used_refuse_the_start(
    clean_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    bad = tmp_path / "patterns.toml"
    bad.write_text("[[pattern]]\nlabel = \"account\"\nregex = ['ACC-\\d+']\n", encoding="utf-8")
    with pytest.raises(
        ConfigurationError, match=r"entry 1 \(account\): regex 1 is refused: .*no length bound"
    ):
        parse(["--patterns", str(bad)])
    people = tmp_path / "people.csv"
    people.write_text("Sarah\n", encoding="utf-8")
    clean_env.setenv("HOLDBACK_PEOPLE", str(people))
    with pytest.raises(ConfigurationError, match="line 1: expected given names, family name"):
        parse([])


def test_team_detectors_join_the_term_lists(clean_env: pytest.MonkeyPatch) -> None:
    from holdback.app.term_reload import detectors_for

    settings = parse(["--patterns", PATTERNS, "--people", PEOPLE])
    detectors, _ = detectors_for(settings, [])
    found = detectors.detect("Ms Connor on ACC-2024-00817")
    assert [(f.kind, f.value) for f in found] == [
        ("person", "Ms Connor"),
        ("account", "ACC-2024-00817"),
    ]
