"""`GET /readyz`: ready only with a database that answers at this build's schema revision.

In process on both engines: ready at head; not ready (503, the revision in our own words)
once the database is migrated down to 0007, ready again once it is upgraded; `/healthz`
answers throughout. Against a real `holdback serve` on PostgreSQL: a database that does not
answer (a lock held on the revision table) is not ready within the 2 s bound, and eight
probes at once cost it one waiting query; a database that is gone is "unreachable". No
answer names the database's location, user or password.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import anyio
import asyncpg
import httpx
import pytest

from holdback.providers.demo import DemoProvider
from holdback.store import downgrade, upgrade
from holdback.store.migrate import head_revision
from tests.app.support import ServerProcess, make_settings, process_env, running_app
from tests.support.postgres import PostgresServer

ENGINES = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
NOT_ANSWERING = "the database did not answer within 2 s"


@pytest.fixture(params=ENGINES)
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        (tmp_path / "data").mkdir(mode=0o700)
        return f"sqlite+aiosqlite:///{tmp_path / 'data' / 'holdback.db'}"
    url: str = request.getfixturevalue("postgres_url")
    return url


def secrets_of(url: str) -> list[str]:
    """What a readiness answer must never say: the database's name, host, user, driver."""
    parts = urlsplit(url)
    found = [parts.path.rsplit("/", 1)[-1], parts.hostname or "", parts.username or ""]
    return [s for s in found if len(s) > 3] + ["asyncpg", "sqlite+", "postgresql"]


def assert_quiet(body: str, url: str) -> None:
    for secret in secrets_of(url):
        assert secret not in body


def test_ready_then_not_ready_while_the_schema_is_behind(database_url: str, tmp_path: Path) -> None:
    settings = make_settings(tmp_path, database_url=database_url)
    with running_app(settings, DemoProvider(chunk_delay=0)) as client:
        ready = client.get("/readyz")
        assert (ready.status_code, ready.json()) == (200, {"status": "ready"})

        asyncio.run(downgrade(database_url, "0007"))
        behind = client.get("/readyz")
        assert behind.status_code == 503
        assert behind.json() == {
            "status": "not_ready",
            "reason": f"the database schema is at revision 0007, this build needs {head_revision()}",
        }
        assert_quiet(behind.text, database_url)
        assert client.get("/healthz").json() == {"status": "ok"}  # liveness is not readiness

        asyncio.run(upgrade(database_url))
        assert client.get("/readyz").json() == {"status": "ready"}


@pytest.fixture
def served(tmp_path: Path, postgres_url: str) -> Iterator[ServerProcess]:
    """`holdback serve` on the test's PostgreSQL database."""
    env = process_env(
        tmp_path,
        {
            "HOLDBACK_DATABASE_URL": postgres_url,
            "HOLDBACK_VAULT_KEY": secrets.token_urlsafe(32),
            "HOLDBACK_DATA_DIR": str(tmp_path / "data"),
        },
    )
    with ServerProcess(tmp_path / "server.log", env) as server:
        yield server


def libpq(url: str) -> str:
    return url.replace("postgresql+asyncpg://", "postgresql://", 1)


async def waiting_on_locks(admin: asyncpg.Connection, database: str) -> int:
    count = await admin.fetchval(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND wait_event_type = 'Lock'",
        database,
    )
    return int(count)


async def until_waiting(admin: asyncpg.Connection, database: str) -> int:
    """How many queries wait on a lock, once one does (polled: the database's state)."""
    for _ in range(500):
        if waiting := await waiting_on_locks(admin, database):
            return waiting
        await anyio.sleep(0.01)
    raise AssertionError("no query came to wait on the lock")


@pytest.mark.postgres
@pytest.mark.server
@pytest.mark.anyio
async def test_a_database_that_does_not_answer_is_not_ready_in_bounded_time(
    served: ServerProcess, postgres_url: str
) -> None:
    database = urlsplit(postgres_url).path.rsplit("/", 1)[-1]
    async with httpx.AsyncClient(base_url=served.base, timeout=10) as http:
        migration_lines = served.output().count("alembic.runtime.migration")  # the start's
        assert (await http.get("/readyz")).json() == {"status": "ready"}
        holder = await asyncpg.connect(libpq(postgres_url))
        admin = await asyncpg.connect(libpq(postgres_url))
        try:
            locked = holder.transaction()
            await locked.start()
            await holder.execute("LOCK TABLE alembic_version IN ACCESS EXCLUSIVE MODE")
            started = time.monotonic()
            answers: list[httpx.Response] = []

            async def probe() -> None:
                answers.append(await http.get("/readyz"))

            with anyio.fail_after(10):
                async with anyio.create_task_group() as tg:
                    for _ in range(8):
                        tg.start_soon(probe)
                    # The probes share one check: one query waits on the lock, not eight.
                    assert await until_waiting(admin, database) == 1
            elapsed = time.monotonic() - started
            assert 1.9 < elapsed < 4.0
            for answer in answers:
                assert answer.status_code == 503
                assert answer.json() == {"status": "not_ready", "reason": NOT_ANSWERING}
            assert (await http.get("/healthz")).json() == {"status": "ok"}
            await locked.rollback()
            assert (await http.get("/readyz")).json() == {"status": "ready"}
            # A probe reads the revision itself: Alembic's context would log at every probe.
            assert served.output().count("alembic.runtime.migration") == migration_lines
        finally:
            await holder.close()
            await admin.close()


@pytest.mark.postgres
@pytest.mark.server
@pytest.mark.anyio
async def test_a_database_that_is_gone_is_unreachable(
    served: ServerProcess, postgres_url: str, postgres_server: PostgresServer
) -> None:
    async with httpx.AsyncClient(base_url=served.base, timeout=10) as http:
        assert (await http.get("/readyz")).json() == {"status": "ready"}
        await anyio.to_thread.run_sync(
            postgres_server.drop_database, urlsplit(postgres_url).path.rsplit("/", 1)[-1]
        )
        gone = await http.get("/readyz")
        assert gone.status_code == 503
        assert gone.json() == {"status": "not_ready", "reason": "the database is unreachable"}
        assert_quiet(gone.text, postgres_url)
        assert (await http.get("/healthz")).json() == {"status": "ok"}
