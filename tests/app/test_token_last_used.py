"""An API token's last use is noted (to the minute), and listed; never its secret."""

from __future__ import annotations

import asyncio
from pathlib import Path

from holdback.providers.demo import DemoProvider
from holdback.store import Store
from holdback.store.crypto import load_vault_key
from tests.app.conftest import Accounts
from tests.app.support import make_settings, running_app


def last_used(data: Path) -> dict[str, object]:
    async def run() -> dict[str, object]:
        store = await Store.open(
            f"sqlite+aiosqlite:///{data / 'holdback.db'}",
            vault_key=load_vault_key(data, {}, create=False),
            migrate=False,
        )
        try:
            return {t.user_name: t.last_used_at for t in await store.list_api_tokens()}
        finally:
            await store.close()

    return asyncio.run(run())


def test_a_token_used_over_http_has_a_last_use(tmp_path: Path, accounts: Accounts) -> None:
    assert last_used(accounts.data_dir) == {"alice": None, "bob": None}
    settings = make_settings(tmp_path, auth="password")
    with running_app(settings, DemoProvider(chunk_delay=0)) as client:
        assert client.get("/api/session", headers=accounts.bearer("bob")).status_code == 200
    used = last_used(accounts.data_dir)
    assert used["alice"] is None
    assert used["bob"] is not None
