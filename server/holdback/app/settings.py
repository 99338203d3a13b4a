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
from typing import Literal

from holdback.detect.validators import phone_region_known
from holdback.errors import ConfigurationError
from holdback.stream.guard import DEFAULT_WINDOW, GuardMode

AuthMode = Literal["none", "password"]


@dataclass(frozen=True, slots=True)
class Settings:
    host: str = "127.0.0.1"
    port: int = 8000
    model: str = "demo"
    database_url: str | None = None
    data_dir: Path | None = None
    auth: AuthMode = "none"
    sensitive_terms: tuple[Path, ...] = ()
    forbidden_terms: tuple[Path, ...] = ()
    guard_mode: GuardMode = "redact"
    guard_window: int = DEFAULT_WINDOW
    phone_region: str = "US"  # the default region: how a national number is read first
    phone_regions: tuple[str, ...] = ("US",)  # every region whose numbers are detected
    entropy_secrets: bool = False  # also detect long random-looking strings as secrets
    allowed_origins: tuple[str, ...] = ()
    allowed_hosts: tuple[str, ...] = ()
    max_frame_bytes: int = 64 * 1024
    rate_limit_per_minute: int = 30
    send_queue_bytes: int = 1024 * 1024
    demo_chunk_delay: float = 0.02
    shutdown_grace: float = 10.0
    session_days: int = 14
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ), repr=False)

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


def resolve(
    *,
    host: str | None = None,
    port: int | None = None,
    model: str | None = None,
    database_url: str | None = None,
    data_dir: str | None = None,
    auth: str | None = None,
    sensitive_terms: Sequence[str] | None = None,
    forbidden_terms: Sequence[str] | None = None,
    guard_mode: str | None = None,
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
    phone_regions = _phone_regions(env)
    return Settings(
        host=host_value,
        port=port_value,
        model=pick(model, "HOLDBACK_MODEL") or "demo",
        database_url=pick(database_url, "HOLDBACK_DATABASE_URL"),
        data_dir=Path(data).expanduser() if data else None,
        auth=auth_value,  # type: ignore[arg-type]
        sensitive_terms=tuple(Path(p) for p in sensitive),
        forbidden_terms=tuple(Path(p) for p in forbidden),
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
        demo_chunk_delay=_float(
            env.get("HOLDBACK_DEMO_CHUNK_DELAY", "0.02"), "HOLDBACK_DEMO_CHUNK_DELAY"
        ),
        shutdown_grace=_float(env.get("HOLDBACK_SHUTDOWN_GRACE", "10"), "HOLDBACK_SHUTDOWN_GRACE"),
        env=env,
    )
