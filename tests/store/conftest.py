"""Fixtures of the persistence suite: every store test runs on SQLite and on PostgreSQL."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from holdback.store import Store, VaultKey
from tests.support.postgres import PostgresServer, postgres_server, postgres_url

__all__ = ["postgres_server", "postgres_url"]

ENGINES = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def sqlite_url(path: Path) -> str:
    return f"sqlite+aiosqlite:///{path}"


@pytest.fixture(params=ENGINES)
def engine_name(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


@pytest.fixture
def database_url(engine_name: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty database on the engine under test."""
    if engine_name == "sqlite":
        return sqlite_url(tmp_path / "holdback.db")
    url: str = request.getfixturevalue("postgres_url")
    return url


@pytest.fixture
def pg_server(engine_name: str, request: pytest.FixtureRequest) -> PostgresServer | None:
    """The PostgreSQL server under test, or None on SQLite."""
    if engine_name != "postgres":
        return None
    server: PostgresServer = request.getfixturevalue("postgres_server")
    return server


@pytest.fixture
def vault_key() -> VaultKey:
    return VaultKey.generate(source="test")


@pytest.fixture
async def store(database_url: str, vault_key: VaultKey) -> AsyncIterator[Store]:
    opened = await Store.open(database_url, vault_key=vault_key, busy_timeout=5.0)
    try:
        yield opened
    finally:
        await opened.close()
