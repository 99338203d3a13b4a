"""Readiness: `GET /readyz` says whether this process can serve, for a load balancer.

The rules:
- Ready (200, `{"status": "ready"}`) only when the database answered a query within
  `READY_TIMEOUT` seconds and its schema is at this build's head revision. Anything else is
  503, `{"status": "not_ready", "reason": ...}`, the reason in our own fixed words: it never
  quotes a driver's message, a URL, a host, a user or a password.
- Bounded in time: a database that does not answer is not ready after `READY_TIMEOUT`, even
  if connecting would take longer.
- One check at a time per process: probes arriving while one is in flight share its answer,
  so a flood of probes costs the database one query at a time, and a probe that goes away
  does not cancel the others'.
- `/healthz` (in `http_api`) stays liveness only: it touches nothing but the event loop, so a
  database outage takes a process out of rotation without getting it restarted.
"""

from __future__ import annotations

import asyncio
import functools
import logging

from alembic.script import ScriptDirectory
from sqlalchemy import inspect, text
from sqlalchemy.engine import Connection
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from holdback.errors import describe
from holdback.store.driver_errors import DRIVER_ERRORS
from holdback.store.errors import (
    DatabaseAccessDeniedError,
    DatabaseUnreachableError,
    SchemaVersionError,
    StoreError,
)
from holdback.store.migrate import alembic_config, head_revision
from holdback.store.repository import Store

log = logging.getLogger(__name__)

READY_TIMEOUT = 2.0  # seconds a readiness check may take
_VERSION_TABLE = "alembic_version"  # Alembic's default, which migrations/env.py keeps


@functools.cache
def _revisions() -> tuple[str, frozenset[str]]:
    """This build's head revision and every revision it knows (read once: they are files)."""
    known = ScriptDirectory.from_config(alembic_config()).walk_revisions()
    return head_revision(), frozenset(rev.revision for rev in known)


class Readiness:
    """The readiness checks of one store; concurrent callers share the check in flight."""

    def __init__(self, store: Store, timeout: float = READY_TIMEOUT) -> None:
        self.store = store
        self.timeout = timeout
        self._running: asyncio.Task[str | None] | None = None

    async def reason(self) -> str | None:
        """None when ready, else why not (our own words)."""
        if self._running is None or self._running.done():
            self._running = asyncio.create_task(self._check(), name="readiness")
        return await asyncio.shield(self._running)

    async def _check(self) -> str | None:
        try:
            async with asyncio.timeout(self.timeout):
                return await self._schema()
        except TimeoutError:
            return f"the database did not answer within {self.timeout:g} s"
        except DRIVER_ERRORS as exc:
            return _words(self.store.database.translate(exc))
        except StoreError as exc:
            return _words(exc)
        except Exception as exc:
            log.warning("the readiness check failed: %s", describe(exc))
            return "the database check failed"

    async def _schema(self) -> str | None:
        head, known = _revisions()
        async with self.store.database.engine.connect() as conn:
            current = await conn.run_sync(_stamped)
        if current == head:
            return None
        if current is None:
            return "the database has no holdback schema; run `holdback db upgrade`"
        if current not in known:
            return f"the database schema ({current}) is newer than this build's ({head})"
        return f"the database schema is at revision {current}, this build needs {head}"


def _stamped(sync: Connection) -> str | None:
    """The revision Alembic stamped, read directly: its `MigrationContext` would log two lines
    at every probe."""
    if not inspect(sync).has_table(_VERSION_TABLE):
        return None
    versions = sync.execute(text(f"SELECT version_num FROM {_VERSION_TABLE}")).scalars().all()
    return ",".join(sorted(versions)) or None  # one row: holdback's history has one head


def _words(exc: StoreError) -> str:
    """A store error's kind, never its message (which names the database's location)."""
    if isinstance(exc, DatabaseUnreachableError):
        return "the database is unreachable"
    if isinstance(exc, DatabaseAccessDeniedError):
        return "the database refused access"
    if isinstance(exc, SchemaVersionError):
        return "the database schema could not be read"
    return "the database failed to answer"


def _readiness(request: Request) -> Readiness:
    state = request.app.state
    checker: Readiness | None = getattr(state, "readiness", None)
    if checker is None:
        checker = state.readiness = Readiness(state.runtime.store)
    return checker


async def readyz(request: Request) -> Response:
    reason = await _readiness(request).reason()
    if reason is None:
        return JSONResponse({"status": "ready"})
    return JSONResponse({"status": "not_ready", "reason": reason}, status_code=503)


routes = [Route("/readyz", readyz)]
