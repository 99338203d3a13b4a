"""Where holdback keeps its data: the data directory and the database URL.

The rule: a flag beats an environment variable, which beats the default. The data directory
is `--data-dir`, else `HOLDBACK_DATA_DIR`, else `~/.local/share/holdback`. The database is
`--database-url`, else `HOLDBACK_DATABASE_URL`, else a SQLite file `holdback.db` in the data
directory. The data directory holds the key file and, by default, the database, so it is
created private (mode 0700), and one that group or others can access is refused, as the key
file is.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from pathlib import Path

from sqlalchemy.engine import URL

from holdback.store.errors import DataDirectoryError

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
    """Create the data directory (mode 0700) if it does not exist yet; refuse one that group
    or others can access."""
    try:
        data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = data_dir.stat()
    except OSError as exc:
        raise DataDirectoryError(
            f"cannot create the data directory {data_dir}: {exc.strerror or type(exc).__name__}"
        ) from None
    if not stat.S_ISDIR(info.st_mode):
        raise DataDirectoryError(f"the data directory {data_dir} is not a directory")
    if info.st_mode & 0o077:
        raise DataDirectoryError(
            f"the data directory {data_dir} is accessible to other users "
            f"(mode {stat.S_IMODE(info.st_mode):04o}); run `chmod 700 {data_dir}`"
        )
    return data_dir
