"""Alembic environment for holdback: async, batch mode on SQLite, URL set by the caller.

The rule: the schema is made only by these migrations. `holdback.store.migrate` runs them on
a connection it has already opened (passed in `config.attributes["connection"]`, inside its
own transaction and lock); the `alembic` command line runs them through an async engine built
from `sqlalchemy.url`, or from HOLDBACK_DATABASE_URL / the default data directory when that
is empty. Either way the engine is holdback's own (`holdback.store.engine`), so SQLite gets
the same pragmas and transactional DDL as the server.
"""

from __future__ import annotations

import asyncio
import os
from logging.config import fileConfig

from alembic import context
from sqlalchemy.engine import Connection

from holdback.store.engine import WRITE, create_engine, parse_database_url
from holdback.store.locations import resolve_data_dir, resolve_database_url
from holdback.store.schema import Base

config = context.config
if config.config_file_name is not None:
    fileConfig(config.config_file_name, disable_existing_loggers=False)
target_metadata = Base.metadata


def _url() -> str:
    url = config.get_main_option("sqlalchemy.url")
    if url:
        return url
    return resolve_database_url(None, os.environ, resolve_data_dir(None, os.environ))


def _configure(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )


def _run_on(connection: Connection) -> None:
    _configure(connection)
    with context.begin_transaction():
        context.run_migrations()


async def _run_async() -> None:
    engine = create_engine(parse_database_url(_url()), foreign_keys=False)
    try:
        async with engine.connect() as plain:
            connection = await plain.execution_options(**{WRITE: True})
            await connection.run_sync(_run_on)
            await connection.commit()
    finally:
        await engine.dispose()


def run_migrations_offline() -> None:
    target = parse_database_url(_url())
    context.configure(
        url=target.url,
        target_metadata=target_metadata,
        literal_binds=True,
        render_as_batch=target.is_sqlite,
        dialect_opts={"paramstyle": "named"},
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is None:
        asyncio.run(_run_async())
    else:
        _run_on(connection)


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
