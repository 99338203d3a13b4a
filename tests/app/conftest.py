"""Fixtures of the server suite: an echo upstream, users with API tokens, and PostgreSQL.

Users are made once per session with the real commands (`holdback user add`, `holdback token
create`, run in process) and their data directory is copied for every test that wants them,
so each test still owns its database and no test pays for argon2 twice.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.app.support import EchoUpstream, add_user, create_token, echo_upstream
from tests.support.postgres import postgres_server, postgres_url

__all__ = ["postgres_server", "postgres_url"]

PASSWORDS = {"alice": "correct horse battery", "bob": "bob-password-123"}


@dataclass
class Accounts:
    """A data directory holding users alice and bob, with an API token each."""

    data_dir: Path
    tokens: dict[str, str] = field(default_factory=dict)
    passwords: dict[str, str] = field(default_factory=lambda: dict(PASSWORDS))

    def bearer(self, name: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[name]}"}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def upstream() -> Iterator[EchoUpstream]:
    """An echo upstream that streams back the last user message in 1-5 character chunks."""
    with echo_upstream() as server:
        yield server


@pytest.fixture(scope="session")
def accounts_template(tmp_path_factory: pytest.TempPathFactory) -> Accounts:
    data = tmp_path_factory.mktemp("accounts") / "data"
    made = Accounts(data)
    for name, password in PASSWORDS.items():
        add_user(data, name, password)
        made.tokens[name] = create_token(data, name)
    return made


@pytest.fixture
def accounts(tmp_path: Path, accounts_template: Accounts) -> Accounts:
    """A private copy of the template, at `tmp_path / "data"` (where make_settings looks)."""
    data = tmp_path / "data"
    shutil.copytree(accounts_template.data_dir, data)
    return Accounts(data, dict(accounts_template.tokens))
