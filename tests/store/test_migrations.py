"""The migrations: the only source of the schema, up and down cleanly on both engines."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, text
from sqlalchemy.engine import Connection

from holdback.store import Store, VaultKey, downgrade, upgrade
from holdback.store.engine import create_engine, parse_database_url
from holdback.store.errors import SchemaVersionError
from holdback.store.migrate import ENV_MIGRATIONS_DIR, head_revision, migrations_dir
from holdback.store.schema import Base

pytestmark = pytest.mark.anyio
REPO = Path(__file__).resolve().parents[2]

TABLES = {
    "users",
    "auth_sessions",
    "api_tokens",
    "conversations",
    "messages",
    "vault_entries",
    "term_lists",
    "audit_events",
    "store_settings",
    "groups",
    "group_members",
    "reveal_levels",
    "never_restore",
    "shares",
    "reveal_events",
    "admin_events",
}


async def tables_and_revision(url: str) -> tuple[set[str], str | None]:
    engine = create_engine(parse_database_url(url))
    try:
        async with engine.connect() as conn:

            def read(sync: Connection) -> tuple[set[str], str | None]:
                names = set(inspect(sync).get_table_names())
                return names, MigrationContext.configure(sync).get_current_revision()

            return await conn.run_sync(read)
    finally:
        await engine.dispose()


async def schema_diff(url: str) -> list[object]:
    engine = create_engine(parse_database_url(url))
    try:
        async with engine.connect() as conn:

            def diff(sync: Connection) -> list[object]:
                context = MigrationContext.configure(sync, opts={"compare_type": True})
                return list(compare_metadata(context, Base.metadata))

            return await conn.run_sync(diff)
    finally:
        await engine.dispose()


async def test_up_down_up_is_clean(database_url: str) -> None:
    await upgrade(database_url)
    names, revision = await tables_and_revision(database_url)
    assert names >= TABLES
    assert revision == head_revision()

    await downgrade(database_url, "base")
    names, revision = await tables_and_revision(database_url)
    assert names & TABLES == set()
    assert revision is None

    await upgrade(database_url)
    names, revision = await tables_and_revision(database_url)
    assert names >= TABLES
    assert revision == head_revision()


async def test_upgrade_twice_is_a_no_op(database_url: str) -> None:
    await upgrade(database_url)
    await upgrade(database_url)
    assert (await tables_and_revision(database_url))[1] == head_revision()


async def test_migrated_schema_matches_the_orm_mapping(database_url: str) -> None:
    await upgrade(database_url)
    assert await schema_diff(database_url) == []


async def test_create_all_schema_and_migrated_schema_agree(tmp_path: Path) -> None:
    # The one place create_all is allowed: proving the diff check can see a difference.
    url = f"sqlite+aiosqlite:///{tmp_path / 'made-by-create-all.db'}"
    engine = create_engine(parse_database_url(url))
    async with engine.begin() as conn:
        await conn.run_sync(Base.metadata.create_all)
        await conn.exec_driver_sql("DROP INDEX ix_audit_events_message_id")
    await engine.dispose()
    diff = await schema_diff(url)
    assert [entry[0] for entry in diff if isinstance(entry, tuple)] == ["add_index"]


async def test_downgrade_removes_data_and_upgrade_restores_an_empty_schema(
    database_url: str, vault_key: VaultKey
) -> None:
    store = await Store.open(database_url, vault_key=vault_key)
    user = await store.ensure_local_user()
    await store.create_conversation(user.id, "t")
    await store.close()
    await downgrade(database_url, "base")
    await upgrade(database_url)
    store = await Store.open(database_url, vault_key=vault_key)
    try:
        assert await store.get_user_by_name("local") is None
    finally:
        await store.close()


async def test_store_without_migrate_refuses_an_unmigrated_database(
    database_url: str, vault_key: VaultKey
) -> None:
    with pytest.raises(SchemaVersionError, match="holdback db upgrade"):
        await Store.open(database_url, vault_key=vault_key, migrate=False)
    await upgrade(database_url)
    store = await Store.open(database_url, vault_key=vault_key, migrate=False)
    await store.close()


async def test_database_from_a_newer_holdback_is_refused(
    database_url: str, vault_key: VaultKey
) -> None:
    await upgrade(database_url)
    engine = create_engine(parse_database_url(database_url))
    async with engine.begin() as conn:
        await conn.execute(text("UPDATE alembic_version SET version_num = 'ffff_future'"))
    await engine.dispose()
    with pytest.raises(SchemaVersionError, match="newer holdback"):
        await Store.open(database_url, vault_key=vault_key, migrate=False)
    with pytest.raises(SchemaVersionError, match="cannot migrate"):
        await upgrade(database_url)


def test_the_alembic_command_line_uses_the_same_migrations(database_url: str) -> None:
    env = {**os.environ, "HOLDBACK_DATABASE_URL": database_url}
    alembic = [sys.executable, "-m", "alembic", "-c", str(REPO / "alembic.ini")]
    for argv in (["upgrade", "head"], ["check"], ["downgrade", "base"], ["upgrade", "head"]):
        done = subprocess.run(
            [*alembic, *argv], cwd=REPO, env=env, capture_output=True, text=True, check=False
        )
        assert done.returncode == 0, done.stderr
    done = subprocess.run(
        [*alembic, "current"], cwd=REPO, env=env, capture_output=True, text=True, check=False
    )
    assert f"{head_revision()} (head)" in done.stdout


def test_migrations_dir_can_be_overridden(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert (migrations_dir() / "env.py").is_file()
    monkeypatch.setenv(ENV_MIGRATIONS_DIR, str(tmp_path))
    with pytest.raises(SchemaVersionError, match=ENV_MIGRATIONS_DIR):
        migrations_dir()
