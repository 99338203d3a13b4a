"""Sharing over HTTP: an owner shares a conversation with a user or a group, to read or to
continue; the viewer reads it under their reveal policy; what they were shown is on the trail.

Also the helpers of the team tests (`test_admin_http`, `test_authz_matrix`): a data directory
with six users and an API token each (alice, the first, is the admin), and an app on it.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.app.support import (
    CARD,
    EMAIL,
    FORBIDDEN,
    PHONE,
    EchoUpstream,
    TestClient,
    add_user,
    chat,
    create_token,
    leaks,
    make_settings,
    openai_provider,
    running_app,
    write_terms,
)

PASSWORD = "team-password-123"
NAMES = ("alice", "bob", "carol", "dave", "erin", "frank")
CANARIES = (EMAIL, PHONE, CARD)
TEXT = f"Mail {EMAIL} or call {PHONE}; the card is {CARD}."


@dataclass
class Team:
    """A data directory with the users of `NAMES` and an API token each; `bob-spare` is a
    second token of bob's."""

    data_dir: Path
    tokens: dict[str, str] = field(default_factory=dict)

    def bearer(self, name: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[name]}"}

    def db_rows(self, table: str, columns: str = "*") -> list[tuple[Any, ...]]:
        with contextlib.closing(sqlite3.connect(self.data_dir / "holdback.db")) as db:
            return list(db.execute(f"SELECT {columns} FROM {table}"))


@pytest.fixture(scope="session")
def team_template(tmp_path_factory: pytest.TempPathFactory) -> Team:
    data = tmp_path_factory.mktemp("team") / "data"
    team = Team(data)
    for name in NAMES:
        add_user(data, name, PASSWORD)
        team.tokens[name] = create_token(data, name)
    team.tokens["bob-spare"] = create_token(data, "bob")
    return team


@pytest.fixture
def team(tmp_path: Path, team_template: Team) -> Team:
    data = tmp_path / "data"
    shutil.copytree(team_template.data_dir, data)
    return Team(data, dict(team_template.tokens))


@contextlib.contextmanager
def team_app(tmp_path: Path, upstream: EchoUpstream) -> Iterator[TestClient]:
    settings = make_settings(tmp_path, auth="password")
    with running_app(settings, openai_provider(upstream)) as client:
        yield client


@pytest.fixture
def client(tmp_path: Path, team: Team, upstream: EchoUpstream) -> Iterator[TestClient]:
    with team_app(tmp_path, upstream) as c:
        yield c


def chat_as(
    client: TestClient, team: Team, name: str, text: str, conversation_id: str | None = None
) -> str:
    """Send a message as `name` and wait until its reply is stored; the conversation's id."""
    with client.websocket_connect("/ws", headers=team.bearer(name)) as ws:
        frames = chat(ws, text, conversation_id)
    cid = str(frames[0]["conversation_id"])
    deadline = time.monotonic() + 15
    while client.get(f"/api/conversations/{cid}", headers=team.bearer(name)).json()["streaming"]:
        assert time.monotonic() < deadline, "the reply was not stored in time"
        time.sleep(0.02)
    return cid


def share(
    client: TestClient, team: Team, cid: str, owner: str = "bob", **body: str
) -> dict[str, Any]:
    response = client.post(
        f"/api/conversations/{cid}/shares", json=body, headers=team.bearer(owner)
    )
    assert response.status_code == 201, response.text
    shared: dict[str, Any] = response.json()
    return shared


def admin(client: TestClient, team: Team, method: str, path: str, **kw: Any) -> Any:
    """An admin request (as alice) that must succeed; its JSON, if any."""
    response = client.request(method, path, headers=team.bearer("alice"), **kw)
    assert response.status_code < 300, (method, path, response.text)
    return response.json() if response.content else None


def read(client: TestClient, team: Team, name: str, cid: str) -> dict[str, Any]:
    response = client.get(f"/api/conversations/{cid}", headers=team.bearer(name))
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def shown_text(body: dict[str, Any]) -> str:
    return json.dumps(
        [body["title"], [[m["text"], m["reasoning"], m["tool_calls"]] for m in body["messages"]]]
    )


def reveals(team: Team) -> list[tuple[Any, ...]]:
    return team.db_rows("reveal_events")


# -- the owner, unchanged -----------------------------------------------------------------


def test_owner_reads_as_before_and_the_read_is_on_the_trail(client: TestClient, team: Team) -> None:
    cid = chat_as(client, team, "bob", TEXT)
    before = len(reveals(team))  # the reply, as it streamed to bob
    body = read(client, team, "bob", cid)
    assert body["view"] == "owner"
    assert (body["shared"], body["owner"], body["access"]) == (False, "bob", "owner")
    assert [m["text"] for m in body["messages"]] == [TEXT, TEXT]
    assert body["title"] == TEXT[:60] or body["title"].startswith("Mail ")
    listed = client.get("/api/conversations", headers=team.bearer("bob")).json()
    assert [(c["id"], c["shared"], c["owner"]) for c in listed["conversations"]] == [
        (cid, False, "bob")
    ]
    # The read showed bob his values again: each message's tokens, and the title's.
    rows = client.get(f"/api/audit?user=bob&conversation={cid}", headers=team.bearer("alice"))
    events = rows.json()["events"]
    assert len(events) == len(reveals(team)) > before
    user, reply = body["messages"]
    read_back = {(e["message_id"], e["token"], e["level"]) for e in events[: len(events) - before]}
    for message_id in (user["id"], reply["id"]):
        for token in ("<EMAIL_1>", "<PHONE_1>", "<CREDIT_CARD_1>"):
            assert (message_id, token, "plain") in read_back
    assert {(None, "<EMAIL_1>", "plain"), (None, "<PHONE_1>", "plain")} <= read_back


# -- sharing with a user ------------------------------------------------------------------


def test_a_shared_reader_sees_labels_by_default(client: TestClient, team: Team) -> None:
    cid = chat_as(client, team, "bob", TEXT)
    made = share(client, team, cid, user="carol", access="read")
    assert set(made) == {"id", "conversation_id", "user", "group", "access", "created_at"}
    assert (made["conversation_id"], made["user"], made["group"], made["access"]) == (
        cid,
        "carol",
        None,
        "read",
    )
    body = read(client, team, "carol", cid)
    assert body["view"] == "shared"
    assert (body["shared"], body["owner"], body["access"]) == (True, "bob", "read")
    assert leaks(json.dumps(body), CANARIES) == []
    text = body["messages"][0]["text"]
    assert "[email address]" in text
    assert "[phone number]" in text
    assert "[card number]" in text
    listed = client.get("/api/conversations", headers=team.bearer("carol")).json()
    assert [(c["id"], c["shared"], c["owner"], c["access"]) for c in listed["conversations"]] == [
        (cid, True, "bob", "read")
    ]
    assert leaks(json.dumps(listed), CANARIES) == []
    carol = client.get("/api/audit?user=carol", headers=team.bearer("alice")).json()
    assert carol == {"events": []}  # labels show nothing of a value


def test_levels_decide_what_a_viewer_sees_and_the_trail_says_so(
    client: TestClient, team: Team
) -> None:
    cid = chat_as(client, team, "bob", TEXT)
    share(client, team, cid, user="carol", access="read")
    admin(client, team, "PUT", "/api/admin/policies/default/email", json={"level": "masked"})
    admin(client, team, "POST", "/api/admin/groups", json={"name": "billing"})
    admin(client, team, "POST", "/api/admin/groups/billing/members/carol")
    admin(client, team, "PUT", "/api/admin/policies/billing/credit_card", json={"level": "plain"})
    body = read(client, team, "carol", cid)
    user, reply = body["messages"]
    assert "c\u2022\u2022\u2022@lovelace-canary.example" in user["text"]
    assert EMAIL not in shown_text(body)
    assert CARD in user["text"]  # billing sees cards plain
    assert CARD in reply["text"]
    assert "[phone number]" in user["text"]
    assert leaks(shown_text(body), [PHONE]) == []
    rows = client.get("/api/audit?user=carol", headers=team.bearer("alice")).json()["events"]
    seen = {(e["token"], e["kind"], e["level"], e["message_id"]) for e in rows}
    assert seen >= {
        ("<EMAIL_1>", "email", "masked", user["id"]),
        ("<CREDIT_CARD_1>", "credit_card", "plain", user["id"]),
        ("<CREDIT_CARD_1>", "credit_card", "plain", reply["id"]),
        ("<EMAIL_1>", "email", "masked", None),  # the title
    }
    assert all(e["user"] == "carol" and e["conversation_id"] == cid for e in rows)
    assert not any(e["kind"] == "phone" for e in rows)  # a label is not a reveal
    # Leaving the group: cards are labels again, from the next read on.
    client.delete("/api/admin/groups/billing/members/carol", headers=team.bearer("alice"))
    assert CARD not in shown_text(read(client, team, "carol", cid))


def test_a_never_restored_kind_is_not_plain_even_to_the_owner(
    client: TestClient, team: Team
) -> None:
    cid = chat_as(client, team, "bob", TEXT)
    share(client, team, cid, user="carol", access="read")
    admin(client, team, "POST", "/api/admin/groups", json={"name": "ops"})
    admin(client, team, "POST", "/api/admin/groups/ops/members/carol")
    admin(client, team, "PUT", "/api/admin/policies/ops/email", json={"level": "plain"})
    assert EMAIL in read(client, team, "carol", cid)["messages"][0]["text"]
    admin(client, team, "POST", "/api/admin/never-restore", json={"kind": "email"})
    owner = read(client, team, "bob", cid)
    assert EMAIL not in shown_text(owner)
    assert "[email address]" in owner["messages"][0]["text"]
    assert PHONE in owner["messages"][0]["text"]  # the rest as before
    assert EMAIL not in shown_text(read(client, team, "carol", cid))
    admin(client, team, "DELETE", "/api/admin/never-restore/email")
    assert EMAIL in read(client, team, "bob", cid)["messages"][0]["text"]


def test_a_users_own_spelling_is_shown_only_where_the_value_is(
    client: TestClient, team: Team
) -> None:
    shouted = EMAIL.upper()
    cid = chat_as(client, team, "bob", f"First {EMAIL}.")
    chat_as(client, team, "bob", f"Again {shouted}.", cid)
    assert read(client, team, "bob", cid)["messages"][2]["text"] == f"Again {shouted}."
    share(client, team, cid, user="carol", access="read")
    assert leaks(shown_text(read(client, team, "carol", cid)), [EMAIL]) == []
    admin(client, team, "PUT", "/api/admin/policies/default/email", json={"level": "plain"})
    assert read(client, team, "carol", cid)["messages"][2]["text"] == f"Again {shouted}."


def test_sharing_again_changes_the_access_and_unsharing_ends_it(
    client: TestClient, team: Team
) -> None:
    cid = chat_as(client, team, "bob", TEXT)
    first = share(client, team, cid, user="dave", access="read")
    again = share(client, team, cid, user="dave", access="write")
    assert again["id"] == first["id"]
    assert read(client, team, "dave", cid)["access"] == "write"
    listed = client.get(f"/api/conversations/{cid}/shares", headers=team.bearer("bob")).json()
    assert [(s["id"], s["user"], s["access"]) for s in listed["shares"]] == [
        (first["id"], "dave", "write")
    ]
    path = f"/api/conversations/{cid}/shares/{first['id']}"
    assert client.delete(path, headers=team.bearer("dave")).status_code == 404  # not the owner
    assert client.delete(path, headers=team.bearer("bob")).status_code == 204
    assert client.delete(path, headers=team.bearer("bob")).status_code == 404
    assert client.get(f"/api/conversations/{cid}", headers=team.bearer("dave")).status_code == 404
    assert client.get("/api/conversations", headers=team.bearer("dave")).json() == {
        "conversations": []
    }


def test_sharing_with_a_group(client: TestClient, team: Team) -> None:
    cid = chat_as(client, team, "bob", TEXT)
    admin(client, team, "POST", "/api/admin/groups", json={"name": "support"})
    for name in ("carol", "erin"):
        admin(client, team, "POST", f"/api/admin/groups/support/members/{name}")
    made = share(client, team, cid, group="support", access="read")
    assert (made["user"], made["group"]) == (None, "support")
    for name in ("carol", "erin"):
        assert read(client, team, name, cid)["access"] == "read"
    assert client.get(f"/api/conversations/{cid}", headers=team.bearer("dave")).status_code == 404
    # A direct share to continue beats the group's to read.
    share(client, team, cid, user="erin", access="write")
    assert read(client, team, "erin", cid)["access"] == "write"
    assert read(client, team, "carol", cid)["access"] == "read"


def test_a_writer_continues_the_conversation(client: TestClient, team: Team) -> None:
    cid = chat_as(client, team, "bob", TEXT)
    share(client, team, cid, user="dave", access="write")
    chat_as(client, team, "dave", "Please summarise.", cid)
    assert len(read(client, team, "bob", cid)["messages"]) == 4


@pytest.mark.parametrize(
    "body",
    [
        None,
        "not json",
        [],
        {},
        {"user": "carol"},
        {"user": "carol", "access": "admin"},
        {"user": "carol", "group": "x", "access": "read"},
        {"user": 5, "access": "read"},
        {"user": "", "access": "read"},
        {"user": "nobody", "access": "read"},
        {"group": "nogroup", "access": "read"},
        {"user": "bob", "access": "read"},  # the owner
    ],
)
def test_bad_shares_are_refused_and_change_nothing(
    client: TestClient, team: Team, body: object
) -> None:
    created = client.post("/api/conversations", json={"title": "t"}, headers=team.bearer("bob"))
    path = f"/api/conversations/{created.json()['id']}/shares"
    if body is None:
        response = client.post(path, headers=team.bearer("bob"))
    elif isinstance(body, str):
        response = client.post(path, content=body, headers=team.bearer("bob"))
    else:
        response = client.post(path, json=body, headers=team.bearer("bob"))
    assert response.status_code == 400, response.text
    assert response.json()["code"] == "bad_request"
    assert client.get(path, headers=team.bearer("bob")).json() == {"shares": []}


def test_only_the_owner_shares(client: TestClient, team: Team) -> None:
    cid = chat_as(client, team, "bob", TEXT)
    share(client, team, cid, user="dave", access="write")
    path = f"/api/conversations/{cid}/shares"
    for name in ("dave", "erin", "alice"):
        made = client.post(path, json={"user": "erin", "access": "read"}, headers=team.bearer(name))
        assert made.status_code == 404, name
        assert made.json() == {"code": "not_found", "message": "no such conversation"}
        assert client.get(path, headers=team.bearer(name)).status_code == 404
    missing = "/api/conversations/" + "0" * 32 + "/shares"
    assert (
        client.post(
            missing, json={"user": "erin", "access": "read"}, headers=team.bearer("bob")
        ).status_code
        == 404
    )
    assert client.get(f"/api/conversations/{cid}", headers=team.bearer("erin")).status_code == 404


def test_patch_and_delete_stay_the_owners(client: TestClient, team: Team) -> None:
    cid = chat_as(client, team, "bob", TEXT)
    share(client, team, cid, user="dave", access="write")
    path = f"/api/conversations/{cid}"
    for name in ("dave", "alice"):
        assert client.patch(path, json={"title": "x"}, headers=team.bearer(name)).status_code == 404
        assert client.delete(path, headers=team.bearer(name)).status_code == 404
    assert read(client, team, "bob", cid)["title"] != "x"
    assert client.delete(path, headers=team.bearer("bob")).status_code == 204
    assert client.get(path, headers=team.bearer("dave")).status_code == 404


def test_the_model_view_is_for_the_owner_and_admins(client: TestClient, team: Team) -> None:
    cid = chat_as(client, team, "bob", TEXT)
    share(client, team, cid, user="carol", access="read")
    path = f"/api/conversations/{cid}?view=model"
    assert client.get(path, headers=team.bearer("carol")).status_code == 404
    assert client.get(path, headers=team.bearer("erin")).status_code == 404
    for name in ("bob", "alice"):
        model = client.get(path, headers=team.bearer(name))
        assert model.status_code == 200, name
        assert model.json()["view"] == "model"
        assert "<EMAIL_1>" in model.json()["messages"][0]["text"]
        assert leaks(model.text, CANARIES) == []
    # An admin reading someone's conversation as the model saw it is on the trail.
    events = client.get("/api/audit", headers=team.bearer("alice")).json()["events"]
    assert [
        (e["event"], e["user"], e["target"])
        for e in events
        if e["event"] != "reveal" and e["user_id"]
    ] == [("conversation.model_view", "alice", cid)]
    assert all(e["user"] == "bob" for e in events if e["event"] == "reveal")
    # ... and is not a way to read it restored.
    assert client.get(f"/api/conversations/{cid}", headers=team.bearer("alice")).status_code == 404
    assert client.get("/api/conversations", headers=team.bearer("alice")).json() == {
        "conversations": []
    }


def test_lists_merge_own_and_shared_newest_first(client: TestClient, team: Team) -> None:
    older = chat_as(client, team, "carol", "my own first")
    theirs = chat_as(client, team, "bob", TEXT)
    share(client, team, theirs, user="carol", access="read")
    newer = client.post(
        "/api/conversations", json={"title": "mine"}, headers=team.bearer("carol")
    ).json()["id"]
    listed = client.get("/api/conversations", headers=team.bearer("carol")).json()
    assert [(c["id"], c["shared"]) for c in listed["conversations"]] == [
        (newer, False),
        (theirs, True),
        (older, False),
    ]


def test_a_forbidden_term_is_never_restored_for_a_viewer(
    tmp_path: Path, team: Team, upstream: EchoUpstream
) -> None:
    _, forbidden = write_terms(tmp_path / "terms")
    settings = make_settings(tmp_path, auth="password", forbidden_terms=[str(forbidden)])
    with running_app(settings, openai_provider(upstream)) as client:
        cid = chat_as(client, team, "bob", f"The host is {FORBIDDEN}, mail {EMAIL}.")
        model = client.get(f"/api/conversations/{cid}?view=model", headers=team.bearer("bob"))
        assert FORBIDDEN not in model.text
        assert "<FORBIDDEN_1>" in model.json()["messages"][0]["text"]
        owner = read(client, team, "bob", cid)
        assert owner["messages"][0]["text"] == f"The host is {FORBIDDEN}, mail {EMAIL}."
        share(client, team, cid, user="carol", access="read")
        for kind in ("forbidden", "email"):
            admin(
                client, team, "PUT", f"/api/admin/policies/default/{kind}", json={"level": "plain"}
            )
        shown = shown_text(read(client, team, "carol", cid))
        assert EMAIL in shown
        assert FORBIDDEN not in shown
        events = client.get("/api/audit?user=carol", headers=team.bearer("alice")).json()
        assert {e["kind"] for e in events["events"]} == {"email"}
