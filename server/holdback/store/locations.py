"""Where holdback keeps its data: the data directory and the database URL.

The rule: a flag beats an environment variable, which beats the default. The data directory
is `--data-dir`, else `HOLDBACK_DATA_DIR`, else `~/.local/share/holdback`. The database is
`--database-url`, else `HOLDBACK_DATABASE_URL`, else a SQLite file `holdback.db` in the data
directory. The data directory holds the key file, so it is created private (mode 0700).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from sqlalchemy.engine import URL

from holdback.store.errors import DatabaseAccessDeniedError

ENV_DATA_DIR = "HOLDBACK_DATA_DIR"
ENV_DATABASE_URL = "HOLDBACK_DATABASE_URL"
DATABASE_FILE_NAME = "holdback.db"


def resolve_data_dir(flag: str | os.PathLike[str] | None, env: Mapping[str, str]) -> Path:
    """The data directory (not created here)."""
    if flag:
        return Path(flag).expanduser()
    if env.get(ENV_DATA_DIR):
        return Path(env[ENV_DATA_DIR]).expanduser()
    home = Path(env["HOME"]) if env.get("HOME") else Path.home()
    return home / ".local" / "share" / "holdback"


def default_database_url(data_dir: Path) -> str:
    """The embedded default: a SQLite file in the data directory."""
    path = (data_dir / DATABASE_FILE_NAME).absolute()
    return URL.create("sqlite+aiosqlite", database=str(path)).render_as_string()


def resolve_database_url(flag: str | None, env: Mapping[str, str], data_dir: Path) -> str:
    if flag:
        return flag
    if env.get(ENV_DATABASE_URL):
        return env[ENV_DATABASE_URL]
    return default_database_url(data_dir)


def ensure_data_dir(data_dir: Path) -> Path:
    """Create the data directory (mode 0700) if it does not exist yet."""
    try:
        data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise DatabaseAccessDeniedError(
            f"cannot create the data directory {data_dir}: {exc.strerror or type(exc).__name__}"
        ) from None
    return data_dir
