"""A title that would overfill its conversation's vault (#15, item 1: vault entries bounded).

The rule: creating or renaming a conversation pseudonymizes its title with the conversation's
vault; past `max_vault_entries` the update is refused whole (`VaultFullError`), and the client
gets 409 with the wire code `vault_full` and its fixed sentence, never a 500 and never the
title's values. Nothing changes: a conversation made for the title goes too, a renamed one
keeps its title, and the vault holds what it held.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from holdback.app.runtime import Runtime
from holdback.errors import WIRE_ERRORS
from holdback.providers.demo import DemoProvider
from tests.app.support import EMAIL, PHONE, TestClient, make_settings, running_app

TWO_VALUES = f"Mail {EMAIL} and call {PHONE}"
ONE_VALUE = f"Mail {EMAIL}"


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    with running_app(make_settings(tmp_path), DemoProvider(chunk_delay=0)) as c:
        runtime: Runtime = c.app.state.runtime  # type: ignore[attr-defined]
        runtime.store.max_vault_entries = 1  # the bound, as HOLDBACK_MAX_VAULT_ENTRIES=1 sets it
        yield c


def assert_vault_full(response_status: int, body: dict[str, object], text: str) -> None:
    assert response_status == 409
    assert body == {"code": "vault_full", "message": WIRE_ERRORS["vault_full"]}
    assert EMAIL not in text
    assert PHONE not in text


def test_a_title_at_the_bound_is_kept(client: TestClient) -> None:
    created = client.post("/api/conversations", json={"title": ONE_VALUE})
    assert created.status_code == 201
    assert created.json()["title"] == ONE_VALUE


def test_creating_with_a_title_past_the_bound_is_refused_and_leaves_nothing(
    client: TestClient,
) -> None:
    refused = client.post("/api/conversations", json={"title": TWO_VALUES})
    assert_vault_full(refused.status_code, refused.json(), refused.text)
    assert client.get("/api/conversations").json()["conversations"] == []


def test_renaming_past_the_bound_is_refused_and_keeps_the_title(client: TestClient) -> None:
    created = client.post("/api/conversations", json={"title": "plain"})
    conversation_id = created.json()["id"]
    refused = client.patch(f"/api/conversations/{conversation_id}", json={"title": TWO_VALUES})
    assert_vault_full(refused.status_code, refused.json(), refused.text)
    after = client.get(f"/api/conversations/{conversation_id}")
    assert after.json()["title"] == "plain"
    runtime: Runtime = client.app.state.runtime  # type: ignore[attr-defined]
    assert client.portal is not None
    vault = client.portal.call(runtime.store.load_vault, conversation_id)
    assert list(vault.entries) == []
    # The conversation goes on: a title its vault can hold is taken.
    renamed = client.patch(f"/api/conversations/{conversation_id}", json={"title": ONE_VALUE})
    assert renamed.status_code == 200
    assert renamed.json()["title"] == ONE_VALUE
