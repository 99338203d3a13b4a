"""A term list changed elsewhere (the command line, another server) is picked up by a running
server's watcher, and new messages use it; a failing look keeps the detectors in use."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from holdback.app import term_reload
from holdback.app.settings import resolve
from holdback.app.term_reload import TermLists, detectors_for
from holdback.detect import DetectorSet, TermMatcher
from holdback.store import Store, VaultKey
from tests.store.conftest import sqlite_url

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_a_change_made_elsewhere_is_used_within_the_poll(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(term_reload, "POLL_SECONDS", 0.05)
    settings = resolve(env={})
    store = await Store.open(sqlite_url(tmp_path / "h.db"), vault_key=VaultKey.generate())
    used: list[tuple[DetectorSet, TermMatcher | None]] = []
    try:
        terms = TermLists(
            settings,
            store,
            lambda d, f: used.append((d, f)),
            version=await store.term_lists_version(),
        )
        await store.save_term_list("clients", "clients", "sensitive", ["Globex Nightjar"])
        await store.save_term_list("never", "forbidden", "forbidden", ["hunter2"])
        terms.start()  # the lists changed since `version`: the first look reloads them
        with anyio.fail_after(10):
            await terms.until_reloads(1)
        detectors, forbidden = used[-1]
        assert [f.kind for f in detectors.detect("meet Globex Nightjar")] == ["clients"]
        assert forbidden is not None
        assert len(forbidden)
        await store.delete_term_list("clients")
        with anyio.fail_after(10):
            await terms.until_reloads(terms.reloads + 1)
        assert used[-1][0].detect("meet Globex Nightjar") == []
        await terms.stop()
    finally:
        await store.close()


def test_detectors_for_builds_dictionaries_and_the_forbidden_matcher() -> None:
    settings = resolve(env={})
    detectors, forbidden = detectors_for(settings, [])
    assert forbidden is None
    assert "email" in detectors.kinds
