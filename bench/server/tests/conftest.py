"""Fixtures for the benchmark's tests: anyio on asyncio (no pytest-asyncio)."""

from __future__ import annotations

import pytest


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
