"""Fixtures for provider tests: the anyio backend and a loopback fake upstream per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from holdback.providers.http import RetryPolicy, StreamSettings
from tests.providers.fakeserver import FakeUpstream


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def upstream() -> Iterator[FakeUpstream]:
    with FakeUpstream() as server:
        yield server


@pytest.fixture
def fast() -> StreamSettings:
    """Short timeouts and near-instant backoff, so fault tests stay quick."""
    return StreamSettings(
        connect_timeout=2.0,
        stall_timeout=0.3,
        retry=RetryPolicy(attempts=3, base_delay=0.01, max_delay=0.05),
    )
