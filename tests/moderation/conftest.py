"""Fixtures for moderation tests: a loopback moderation service per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.moderation.fakemod import ModerationService


@pytest.fixture
def service() -> Iterator[ModerationService]:
    with ModerationService() as server:
        yield server
