"""Term lists edited by an admin over HTTP hold for the next message, without a restart."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from tests.app.conftest import Accounts
from tests.app.support import (
    EchoUpstream,
    chat,
    echo_upstream,
    make_settings,
    openai_provider,
    running_app,
)

TERM = "Globex Nightjar"


@pytest.fixture
def upstream() -> Iterator[EchoUpstream]:
    with echo_upstream() as server:
        yield server


@pytest.fixture
def client(tmp_path: Path, accounts: Accounts, upstream: EchoUpstream) -> Iterator[TestClient]:
    with running_app(make_settings(tmp_path, auth="password"), openai_provider(upstream)) as c:
        yield c


def test_an_added_list_masks_the_next_message_and_a_deleted_one_no_longer(
    client: TestClient, accounts: Accounts, upstream: EchoUpstream
) -> None:
    alice = accounts.bearer("alice")  # the first user: an admin
    with client.websocket_connect("/ws", headers=alice) as ws:
        before = chat(ws, f"Meet {TERM} on Friday.")
    assert before[0]["masked"] == []
    put = client.put(
        "/api/admin/term-lists/clients",
        json={"kind": "clients", "purpose": "sensitive", "terms": [TERM]},
        headers=alice,
    )
    assert put.status_code == 200, put.text
    assert put.json() == {"name": "clients", "kind": "clients", "purpose": "sensitive", "terms": 1}
    upstream.requests.clear()
    with client.websocket_connect("/ws", headers=alice) as ws:
        after = chat(ws, f"Meet {TERM} on Friday.")
    assert [m["kind"] for m in after[0]["masked"]] == ["clients"]
    assert TERM not in upstream.bodies()
    assert "<CLIENTS_1>" in upstream.bodies()
    listed = client.get("/api/admin/term-lists", headers=alice).json()["term_lists"]
    assert [(t["name"], t["terms"]) for t in listed] == [("clients", 1)]
    assert TERM not in str(listed)  # the listing counts terms; only the list's route shows them
    shown = client.get("/api/admin/term-lists/clients", headers=alice).json()
    assert shown["terms"] == [TERM]
    audit = client.get("/api/audit?format=csv", headers=alice).text
    assert "terms.set" in audit
    assert TERM not in audit
    assert client.delete("/api/admin/term-lists/clients", headers=alice).status_code == 204
    with client.websocket_connect("/ws", headers=alice) as ws:
        gone = chat(ws, f"Meet {TERM} on Friday.")
    assert gone[0]["masked"] == []


def test_term_lists_are_for_admins_only(client: TestClient, accounts: Accounts) -> None:
    bob = accounts.bearer("bob")
    assert client.get("/api/admin/term-lists", headers=bob).status_code == 403
    put = client.put(
        "/api/admin/term-lists/x",
        json={"kind": "x", "purpose": "sensitive", "terms": ["secret plan"]},
        headers=bob,
    )
    assert put.status_code == 403
    assert client.get("/api/admin/term-lists").status_code == 401
    bad = client.put(
        "/api/admin/term-lists/x",
        json={"kind": "x", "purpose": "maybe", "terms": ["a"]},
        headers=accounts.bearer("alice"),
    )
    assert bad.status_code == 400
