"""Running the Alembic migrations in `migrations/`, the only thing that makes the schema.

The rules:
- A migration run is one transaction: on PostgreSQL and on SQLite (where holdback emits its
  own BEGIN, which makes DDL transactional) it commits whole or not at all.
- Concurrent runs are serialized: several servers starting at once against one PostgreSQL
  take an advisory lock; on SQLite the run holds the write lock (`BEGIN IMMEDIATE`).
- On SQLite, migrations run with foreign-key enforcement off (a table rebuild in batch mode
  would otherwise cascade-delete rows that refer to it) and check the references afterwards.
- The migrations directory is `HOLDBACK_MIGRATIONS_DIR`, else `migrations/` at the top of the
  source tree this package is installed from.
"""

from __future__ import annotations

import os
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util.exc import CommandError
from sqlalchemy import text
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from holdback.store.driver_errors import DRIVER_ERRORS, translate
from holdback.store.engine import WRITE, DatabaseTarget, create_engine, parse_database_url
from holdback.store.errors import SchemaVersionError, StoreError

ENV_MIGRATIONS_DIR = "HOLDBACK_MIGRATIONS_DIR"
# pg_advisory_xact_lock key: the bytes of "holdback" as a signed 64-bit integer.
_PG_MIGRATION_LOCK = int.from_bytes(b"holdback", "big")


def migrations_dir() -> Path:
    override = os.environ.get(ENV_MIGRATIONS_DIR)
    path = Path(override) if override else Path(__file__).resolve().parents[3] / "migrations"
    if not (path / "env.py").is_file():
        raise SchemaVersionError(
            f"the migrations directory {path} has no env.py; set {ENV_MIGRATIONS_DIR} "
            "to the holdback migrations/ directory"
        )
    return path


def alembic_config(url: str | None = None) -> Config:
    """An Alembic configuration for `migrations/`, without an ini file."""
    config = Config()
    config.set_main_option("script_location", str(migrations_dir()))
    if url is not None:
        # ConfigParser interpolates '%': URL-encoded passwords need it doubled.
        config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def head_revision() -> str:
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    if head is None:
        raise SchemaVersionError("the migrations directory holds no revisions")
    return head


async def current_revision(conn: AsyncConnection) -> str | None:
    def read(sync_conn: Connection) -> str | None:
        return MigrationContext.configure(sync_conn).get_current_revision()

    return await conn.run_sync(read)


async def check_schema(engine: AsyncEngine, target: DatabaseTarget) -> None:
    """Raise `SchemaVersionError` unless the database is at this holdback's head revision."""
    async with engine.connect() as conn:
        current = await current_revision(conn)
    head = head_revision()
    if current == head:
        return
    if current is None:
        raise SchemaVersionError(
            f"{target.describe()} has no holdback schema yet; run `holdback db upgrade`"
        )
    known = {rev.revision for rev in ScriptDirectory.from_config(alembic_config()).walk_revisions()}
    if current not in known:
        raise SchemaVersionError(
            f"{target.describe()} was migrated by a newer holdback (revision {current}); "
            "upgrade holdback, or restore a backup made for this version"
        )
    raise SchemaVersionError(
        f"{target.describe()} is at schema revision {current}, not {head}; "
        "run `holdback db upgrade`"
    )


async def upgrade(url: str, revision: str = "head", *, busy_timeout: float = 30.0) -> None:
    """Migrate the database at `url` up to `revision` (default: the newest)."""
    await _run(url, "upgrade", revision, busy_timeout)


async def downgrade(url: str, revision: str, *, busy_timeout: float = 30.0) -> None:
    """Migrate the database at `url` down to `revision` (`"base"` removes every table)."""
    await _run(url, "downgrade", revision, busy_timeout)


async def _run(url: str, direction: str, revision: str, busy_timeout: float) -> None:
    target = parse_database_url(url)
    config = alembic_config(target.url.render_as_string(hide_password=False))
    engine = create_engine(target, busy_timeout=busy_timeout, foreign_keys=False)
    try:
        async with engine.connect() as plain:
            conn = await plain.execution_options(**{WRITE: True})
            async with conn.begin():
                if conn.dialect.name == "postgresql":
                    await conn.execute(
                        text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_MIGRATION_LOCK}
                    )
                await conn.run_sync(_alembic, config, direction, revision)
                if conn.dialect.name == "sqlite":
                    broken = (await conn.exec_driver_sql("PRAGMA foreign_key_check")).first()
                    if broken is not None:
                        raise SchemaVersionError(
                            f"migrating {target.describe()} {direction} to {revision} would "
                            f"leave rows of {broken[0]} pointing nowhere; nothing was changed"
                        )
    except StoreError:
        raise
    except CommandError as exc:
        raise SchemaVersionError(
            f"cannot migrate {target.describe()} {direction} to {revision}: {exc}"
        ) from None
    except DRIVER_ERRORS as exc:
        raise translate(exc, target, busy_timeout=busy_timeout) from None
    finally:
        await engine.dispose()


def _alembic(sync_conn: Connection, config: Config, direction: str, revision: str) -> None:
    config.attributes["connection"] = sync_conn
    if direction == "upgrade":
        command.upgrade(config, revision)
    else:
        command.downgrade(config, revision)
