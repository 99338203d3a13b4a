"""Server settings: every flag of `holdback serve`, also settable as a `HOLDBACK_*` variable.

The rule: a flag beats its variable, a variable beats the default, and a value that cannot be
used is refused at start-up with a message that names the flag and the variable.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from holdback.detect.validators import phone_region_known
from holdback.errors import ConfigurationError
from holdback.moderation.calls import DEFAULT_CONCURRENCY, DEFAULT_TIMEOUT
from holdback.moderation.registry import parse_spec as parse_moderation_spec
from holdback.moderation.windows import DEFAULT_BOUND as DEFAULT_MODERATION_WINDOW
from holdback.providers.limits import UpstreamLimits
from holdback.providers.registry import DEFAULT_SPEC, parse_spec
from holdback.store.engine import SYNCHRONOUS
from holdback.stream.guard import DEFAULT_WINDOW, GuardMode

AuthMode = Literal["none", "password"]


@dataclass(frozen=True, slots=True)
class Settings:
    host: str = "127.0.0.1"
    port: int = 8000
    model: str = "demo"  # the default model: the first of `models`
    models: tuple[str, ...] = ("demo",)  # every model a conversation may use, the default first
    database_url: str | None = None
    data_dir: Path | None = None
    auth: AuthMode = "none"
    sensitive_terms: tuple[Path, ...] = ()
    forbidden_terms: tuple[Path, ...] = ()
    patterns_file: Path | None = None  # a team's identifier formats (TOML), docs/detectors.md
    people_file: Path | None = None  # a team's people (CSV), docs/detectors.md
    guard_mode: GuardMode = "redact"
    guard_window: int = DEFAULT_WINDOW
    phone_region: str = "US"  # the default region: how a national number is read first
    phone_regions: tuple[str, ...] = ("US",)  # every region whose numbers are detected
    entropy_secrets: bool = False  # also detect long random-looking strings as secrets
    # Policy moderation (docs/moderation.md): `off`, `openai:<model>`, `http:<url>`,
    # `rules:<file>`; seconds per call, calls in flight, a window's bound in characters.
    moderation: str = "off"
    moderation_timeout: float = DEFAULT_TIMEOUT
    moderation_concurrency: int = DEFAULT_CONCURRENCY
    moderation_window: int = DEFAULT_MODERATION_WINDOW
    moderate_input: bool = False  # a user's message is moderated before the model sees it
    allowed_origins: tuple[str, ...] = ()
    allowed_hosts: tuple[str, ...] = ()
    max_frame_bytes: int = 64 * 1024
    rate_limit_per_minute: int = 30
    send_queue_bytes: int = 1024 * 1024
    # Seconds a watched reply's frames may wait to go out together (`sender.Sender`).
    watch_interval: float = 0.1
    # Seconds a reply's lease lasts unless renewed, on a shared PostgreSQL (`app/cluster.py`).
    lease_ttl: float = 15.0
    demo_chunk_delay: float = 0.02
    shutdown_grace: float = 10.0
    session_days: int = 14
    # Bounds on what a client may make the server hold or wait for (docs/limits.md).
    max_body_bytes: int = 16 * 1024  # a request body, on every route but the login
    max_login_body_bytes: int = 4 * 1024  # the body of POST /api/login
    body_timeout: float = 10.0  # seconds to receive a whole request body
    header_timeout: float = 10.0  # seconds to receive a request head (and idle keep-alive)
    max_header_bytes: int = 16 * 1024  # a request head
    max_connections: int = 1000  # open connections before new HTTP requests get 503
    ws_frame_rate: int = 20  # frames a client may send in any one second, per connection
    ws_idle_timeout: float = 60.0  # seconds a socket may stay silent with no reply streaming
    ws_recheck: float = 30.0  # seconds between credential checks of a silent socket
    hash_workers: int = 2  # threads that run argon2, at most
    login_queue: int = 32  # logins waiting for or running a password check, at most
    login_backoff_after: int = 3  # failed logins (per account, per address) before backoff
    login_backoff: float = 1.0  # the first wait; it doubles per further failure, up to 60 s
    login_lock_after: int = 10  # failed logins that lock an account
    login_lock_time: float = 900.0  # seconds an account stays locked
    max_vault_entries: int = 10_000  # values (and reserved ids) one conversation's vault holds
    max_upload_bytes: int = 10 * 1024 * 1024  # a file posted to /api/uploads
    max_upload_chars: int = 200_000  # the text extracted from one uploaded file
    # SQLite's synchronous level (docs/storage.md): "normal" survives a process crash, "full"
    # a power loss too.
    sqlite_synchronous: str = "normal"
    upstream_limits: UpstreamLimits = field(default_factory=UpstreamLimits)
    debug: bool = False  # a start-up error also prints its traceback
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ), repr=False)

    def __post_init__(self) -> None:
        # `model` is the default and comes first in `models`, however Settings was made
        # (`Settings(model=...)` alone means that one model).
        if not self.models or self.models[0] != self.model:
            rest = () if self.models == ("demo",) else self.models
            models = (self.model, *(m for m in rest if m != self.model))
            object.__setattr__(self, "models", models)

    @property
    def is_loopback(self) -> bool:
        return is_loopback(self.host)


def is_loopback(host: str) -> bool:
    if host in ("localhost", "ip6-localhost"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _split(value: str) -> tuple[str, ...]:
    """A list of values separated by commas."""
    return tuple(p.strip() for p in value.split(",") if p.strip())


def _split_paths(value: str) -> tuple[str, ...]:
    """A list of files separated by commas or by the system's path separator."""
    return _split(value.replace(os.pathsep, ","))


def _team_files(patterns: str | None, people: str | None) -> tuple[Path | None, Path | None]:
    """The patterns and people files, loaded once here: one that cannot be used refuses the
    start, with the entry or line and the reason."""
    from holdback.app.team_detectors import team_detectors

    files = (
        Path(patterns).expanduser() if patterns else None,
        Path(people).expanduser() if people else None,
    )
    team_detectors(*files)
    return files


def _int(value: str, name: str, low: int, high: int) -> int:
    try:
        number = int(value)
    except ValueError:
        raise ConfigurationError(f"{name} must be a whole number, not {value!r}") from None
    if not low <= number <= high:
        raise ConfigurationError(f"{name} must be between {low} and {high}, not {number}")
    return number


def _phone_regions(env: Mapping[str, str]) -> tuple[str, ...]:
    """`HOLDBACK_PHONE_REGIONS` (or its alias `HOLDBACK_PHONE_REGION`): region codes separated
    by commas, the first the default. Each must be a region phonenumbers knows."""
    name = "HOLDBACK_PHONE_REGIONS"
    value = env.get(name, "").strip()
    if not value:
        name = "HOLDBACK_PHONE_REGION"
        value = env.get(name, "").strip()
    regions: list[str] = []
    for code in _split(value.upper()) or ("US",):
        if not phone_region_known(code):
            raise ConfigurationError(
                f"{name} must list region codes such as US, GB or DE; {code!r} is not one"
            )
        if code not in regions:
            regions.append(code)
    return tuple(regions)


def _flag(value: str, name: str) -> bool:
    word = value.strip().lower()
    if word in ("1", "true", "yes", "on"):
        return True
    if word in ("", "0", "false", "no", "off"):
        return False
    raise ConfigurationError(f"{name} must be 1 or 0 (true or false), not {value!r}")


def _float(value: str, name: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise ConfigurationError(f"{name} must be a number, not {value!r}") from None
    if number < 0:
        raise ConfigurationError(f"{name} must not be negative")
    return number


def _seconds(value: str, name: str, low: float, high: float) -> float:
    """A duration in seconds, within [low, high]."""
    number = _float(value, name)
    if not low <= number <= high:
        raise ConfigurationError(f"{name} must be between {low:g} and {high:g} seconds")
    return number


def _models(flags: str | Sequence[str] | None, env: Mapping[str, str]) -> tuple[str, ...]:
    """The models, the default first: every `--model` given, else `HOLDBACK_MODELS` (separated
    by commas), else `HOLDBACK_MODEL`, else the offline demo. Each is a provider spec
    (`providers/registry.parse_spec`), named as it parses; a model named twice counts once."""
    if isinstance(flags, str):
        flags = [flags]
    given = [f.strip() for f in flags or () if f.strip()]
    source = "--model"
    if not given:
        source = "HOLDBACK_MODELS"
        given = list(_split(env.get("HOLDBACK_MODELS", "")))
    if not given:
        source = "HOLDBACK_MODEL"
        single = env.get("HOLDBACK_MODEL", "").strip()
        given = [single] if single else []
    models: list[str] = []
    for spec in given or [DEFAULT_SPEC]:
        try:
            name = str(parse_spec(spec))
        except ConfigurationError as exc:
            raise ConfigurationError(f"{source}: {exc}") from None
        if name not in models:
            models.append(name)
    return tuple(models)


def resolve(
    *,
    host: str | None = None,
    port: int | str | None = None,
    model: str | Sequence[str] | None = None,
    database_url: str | None = None,
    data_dir: str | None = None,
    auth: str | None = None,
    sensitive_terms: Sequence[str] | None = None,
    forbidden_terms: Sequence[str] | None = None,
    patterns: str | None = None,
    people: str | None = None,
    guard_mode: str | None = None,
    moderation: str | None = None,
    moderate_input: bool | None = None,
    debug: bool | None = None,
    env: Mapping[str, str] | None = None,
) -> Settings:
    """Settings from flags (None when not given) and the environment."""
    env = dict(os.environ if env is None else env)

    def pick(flag: object, name: str) -> str | None:
        if flag is not None:
            return str(flag)
        value = env.get(name, "").strip()
        return value or None

    host_value = pick(host, "HOLDBACK_HOST") or "127.0.0.1"
    port_value = _int(pick(port, "HOLDBACK_PORT") or "8000", "--port / HOLDBACK_PORT", 0, 65535)
    auth_value = pick(auth, "HOLDBACK_AUTH") or ("none" if is_loopback(host_value) else "password")
    if auth_value not in ("none", "password"):
        raise ConfigurationError(
            f"--auth / HOLDBACK_AUTH must be none or password, not {auth_value!r}"
        )
    if auth_value == "none" and not is_loopback(host_value):
        raise ConfigurationError(
            f"refusing --auth none on {host_value}: without a login anyone who can reach the "
            "address could read every conversation; bind to 127.0.0.1 or use --auth password"
        )
    mode = pick(guard_mode, "HOLDBACK_GUARD_MODE") or "redact"
    if mode not in ("redact", "block"):
        raise ConfigurationError(
            f"--guard-mode / HOLDBACK_GUARD_MODE must be redact or block, not {mode!r}"
        )
    sensitive = (
        tuple(sensitive_terms)
        if sensitive_terms
        else _split_paths(env.get("HOLDBACK_SENSITIVE_TERMS", ""))
    )
    forbidden = (
        tuple(forbidden_terms)
        if forbidden_terms
        else _split_paths(env.get("HOLDBACK_FORBIDDEN_TERMS", ""))
    )
    data = pick(data_dir, "HOLDBACK_DATA_DIR")
    patterns_file, people_file = _team_files(
        pick(patterns, "HOLDBACK_PATTERNS"), pick(people, "HOLDBACK_PEOPLE")
    )
    phone_regions = _phone_regions(env)
    models = _models(model, env)
    return Settings(
        host=host_value,
        port=port_value,
        model=models[0],
        models=models,
        database_url=pick(database_url, "HOLDBACK_DATABASE_URL"),
        data_dir=Path(data).expanduser() if data else None,
        auth=auth_value,  # type: ignore[arg-type]
        sensitive_terms=tuple(Path(p) for p in sensitive),
        forbidden_terms=tuple(Path(p) for p in forbidden),
        patterns_file=patterns_file,
        people_file=people_file,
        guard_mode=mode,  # type: ignore[arg-type]
        guard_window=_int(
            env.get("HOLDBACK_GUARD_WINDOW", str(DEFAULT_WINDOW)),
            "HOLDBACK_GUARD_WINDOW",
            16,
            65536,
        ),
        phone_region=phone_regions[0],
        phone_regions=phone_regions,
        entropy_secrets=_flag(env.get("HOLDBACK_ENTROPY_SECRETS", ""), "HOLDBACK_ENTROPY_SECRETS"),
        allowed_origins=tuple(
            o.rstrip("/") for o in _split(env.get("HOLDBACK_ALLOWED_ORIGINS", ""))
        ),
        allowed_hosts=tuple(h.lower() for h in _split(env.get("HOLDBACK_ALLOWED_HOSTS", ""))),
        max_frame_bytes=_int(
            env.get("HOLDBACK_MAX_FRAME_BYTES", str(64 * 1024)),
            "HOLDBACK_MAX_FRAME_BYTES",
            1024,
            16 * 1024 * 1024,
        ),
        rate_limit_per_minute=_int(
            env.get("HOLDBACK_RATE_LIMIT", "30"), "HOLDBACK_RATE_LIMIT", 1, 100_000
        ),
        send_queue_bytes=_int(
            env.get("HOLDBACK_SEND_QUEUE_BYTES", str(1024 * 1024)),
            "HOLDBACK_SEND_QUEUE_BYTES",
            4096,
            1 << 30,
        ),
        lease_ttl=_seconds(env.get("HOLDBACK_LEASE_TTL", "15"), "HOLDBACK_LEASE_TTL", 1.0, 600.0),
        watch_interval=_seconds(
            env.get("HOLDBACK_WATCH_INTERVAL", "0.1"), "HOLDBACK_WATCH_INTERVAL", 0.0, 1.0
        ),
        demo_chunk_delay=_float(
            env.get("HOLDBACK_DEMO_CHUNK_DELAY", "0.02"), "HOLDBACK_DEMO_CHUNK_DELAY"
        ),
        shutdown_grace=_float(env.get("HOLDBACK_SHUTDOWN_GRACE", "10"), "HOLDBACK_SHUTDOWN_GRACE"),
        sqlite_synchronous=_synchronous(env),
        **_moderation(pick(moderation, "HOLDBACK_MODERATION"), moderate_input, env),
        **_limits(env),
        debug=bool(debug) or _flag(env.get("HOLDBACK_DEBUG", ""), "HOLDBACK_DEBUG"),
        env=env,
    )


def _moderation(
    spec: str | None, moderate_input: bool | None, env: Mapping[str, str]
) -> dict[str, Any]:
    """The moderation settings. The spec's shape is checked here; its file or URL is used
    when the runtime is built (`moderation.registry.make_moderator`)."""
    try:
        name = str(parse_moderation_spec(spec or "off"))
    except ConfigurationError as exc:
        raise ConfigurationError(f"--moderation / HOLDBACK_MODERATION: {exc}") from None
    flag = env.get("HOLDBACK_MODERATE_INPUT", "")
    return {
        "moderation": name,
        "moderate_input": bool(moderate_input) or _flag(flag, "HOLDBACK_MODERATE_INPUT"),
        "moderation_timeout": _seconds(
            env.get("HOLDBACK_MODERATION_TIMEOUT", "").strip() or str(DEFAULT_TIMEOUT),
            "HOLDBACK_MODERATION_TIMEOUT",
            0.05,
            600,
        ),
        "moderation_concurrency": _int(
            env.get("HOLDBACK_MODERATION_CONCURRENCY", "").strip() or str(DEFAULT_CONCURRENCY),
            "HOLDBACK_MODERATION_CONCURRENCY",
            1,
            1024,
        ),
        "moderation_window": _int(
            env.get("HOLDBACK_MODERATION_WINDOW", "").strip() or str(DEFAULT_MODERATION_WINDOW),
            "HOLDBACK_MODERATION_WINDOW",
            128,  # `moderation.windows.Windows`: twice the longest token
            100_000,
        ),
    }


def _synchronous(env: Mapping[str, str]) -> str:
    value = env.get("HOLDBACK_SQLITE_SYNCHRONOUS", "").strip().lower() or "normal"
    if value not in SYNCHRONOUS:
        raise ConfigurationError(
            f"HOLDBACK_SQLITE_SYNCHRONOUS must be {' or '.join(SYNCHRONOUS)}, not {value!r}"
        )
    return value


def _limits(env: Mapping[str, str]) -> dict[str, Any]:
    """The bounds of docs/limits.md, each from its `HOLDBACK_*` variable or its default."""
    defaults = Settings.__dataclass_fields__

    def number(attribute: str, name: str, low: int, high: int) -> int:
        value = env.get(name, "").strip() or str(defaults[attribute].default)
        return _int(value, name, low, high)

    def seconds(attribute: str, name: str, low: float, high: float) -> float:
        value = env.get(name, "").strip() or str(defaults[attribute].default)
        return _seconds(value, name, low, high)

    return {
        "max_body_bytes": number("max_body_bytes", "HOLDBACK_MAX_BODY_BYTES", 256, 64 << 20),
        "max_login_body_bytes": number(
            "max_login_body_bytes", "HOLDBACK_MAX_LOGIN_BODY_BYTES", 256, 1 << 20
        ),
        "body_timeout": seconds("body_timeout", "HOLDBACK_BODY_TIMEOUT", 0.1, 3600),
        "header_timeout": seconds("header_timeout", "HOLDBACK_HEADER_TIMEOUT", 0.1, 3600),
        "max_header_bytes": number("max_header_bytes", "HOLDBACK_MAX_HEADER_BYTES", 1024, 1 << 20),
        "max_connections": number("max_connections", "HOLDBACK_MAX_CONNECTIONS", 1, 1_000_000),
        "ws_frame_rate": number("ws_frame_rate", "HOLDBACK_WS_FRAME_RATE", 1, 100_000),
        "ws_idle_timeout": seconds("ws_idle_timeout", "HOLDBACK_WS_IDLE_TIMEOUT", 0.1, 86400),
        "ws_recheck": seconds("ws_recheck", "HOLDBACK_WS_RECHECK", 0.1, 3600),
        "hash_workers": number("hash_workers", "HOLDBACK_HASH_WORKERS", 1, 64),
        "login_queue": number("login_queue", "HOLDBACK_LOGIN_QUEUE", 1, 100_000),
        "login_backoff_after": number(
            "login_backoff_after", "HOLDBACK_LOGIN_BACKOFF_AFTER", 1, 1_000_000
        ),
        "login_backoff": seconds("login_backoff", "HOLDBACK_LOGIN_BACKOFF", 0.001, 3600),
        "login_lock_after": number("login_lock_after", "HOLDBACK_LOGIN_LOCK_AFTER", 1, 1_000_000),
        "login_lock_time": seconds("login_lock_time", "HOLDBACK_LOGIN_LOCK_TIME", 1, 30 * 86400),
        "max_vault_entries": number(
            "max_vault_entries", "HOLDBACK_MAX_VAULT_ENTRIES", 1, 10_000_000
        ),
        "max_upload_bytes": number("max_upload_bytes", "HOLDBACK_MAX_UPLOAD_BYTES", 1024, 64 << 20),
        "max_upload_chars": number("max_upload_chars", "HOLDBACK_MAX_UPLOAD_CHARS", 1000, 500_000),
        "upstream_limits": _upstream_limits(env),
    }


# Each bound of one upstream reply (`UpstreamLimits`), from its variable: (field, variable,
# lowest, highest accepted).
_UPSTREAM_NUMBERS = (
    ("max_line_chars", "HOLDBACK_UPSTREAM_MAX_LINE_CHARS", 1024, 1 << 30),
    ("max_event_chars", "HOLDBACK_UPSTREAM_MAX_EVENT_CHARS", 1024, 1 << 30),
    ("max_reply_chars", "HOLDBACK_UPSTREAM_MAX_REPLY_CHARS", 1024, 1 << 30),
    ("max_header_bytes", "HOLDBACK_UPSTREAM_MAX_HEADER_BYTES", 1024, 1 << 20),
    ("max_headers", "HOLDBACK_UPSTREAM_MAX_HEADERS", 8, 10_000),
    ("max_inflated_bytes", "HOLDBACK_UPSTREAM_MAX_INFLATED_BYTES", 1024, 1 << 32),
)
_UPSTREAM_SECONDS = (
    ("reply_timeout", "HOLDBACK_UPSTREAM_REPLY_TIMEOUT", 1, 86400),
    ("head_timeout", "HOLDBACK_UPSTREAM_HEAD_TIMEOUT", 1, 3600),
)


def _upstream_limits(env: Mapping[str, str]) -> UpstreamLimits:
    defaults = UpstreamLimits()
    values: dict[str, Any] = {}
    for attribute, name, low, high in _UPSTREAM_NUMBERS:
        value = env.get(name, "").strip()
        values[attribute] = _int(value, name, low, high) if value else getattr(defaults, attribute)
    for attribute, name, flow, fhigh in _UPSTREAM_SECONDS:
        value = env.get(name, "").strip()
        values[attribute] = (
            _seconds(value, name, flow, fhigh) if value else getattr(defaults, attribute)
        )
    return UpstreamLimits(**values)
