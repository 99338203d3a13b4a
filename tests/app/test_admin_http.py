"""The admin API and the audit over HTTP: users, groups, API tokens, reveal policies.

Only admins; every change is on the trail by name (never a password, a token or a value); bad
input is a 400 that changes nothing; a CSV cell that could start a formula is written as text.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from holdback.app.auth import SESSION_COOKIE
from tests.app.support import EMAIL, EchoUpstream, TestClient, leaks
from tests.app.test_shares_http import (
    PASSWORD,
    TEXT,
    Team,
    admin,
    chat_as,
    read,
    share,
    team,
    team_app,
    team_template,
)

__all__ = ["team", "team_template"]  # fixtures


@pytest.fixture
def client(tmp_path: Path, team: Team, upstream: EchoUpstream) -> Iterator[TestClient]:
    with team_app(tmp_path, upstream) as c:
        yield c


def actions(client: TestClient, team: Team) -> list[tuple[str, str | None, str | None]]:
    """The admin events by a user (not the command line), oldest first."""
    events = client.get("/api/audit", headers=team.bearer("alice")).json()["events"]
    return [
        (e["event"], e["user"], e["target"])
        for e in reversed(events)
        if e["event"] != "reveal" and e["user_id"]
    ]


def login(client: TestClient, name: str, password: str) -> int:
    client.cookies.clear()
    response = client.post("/api/login", json={"username": name, "password": password})
    client.cookies.clear()
    return response.status_code


def test_members_are_refused_and_strangers_asked_to_sign_in(client: TestClient, team: Team) -> None:
    for path in (
        "/api/admin/users",
        "/api/admin/groups",
        "/api/admin/tokens",
        "/api/audit",
        "/api/admin/policies",
    ):
        refused = client.get(path, headers=team.bearer("bob"))
        assert refused.status_code == 403, path
        assert refused.json() == {"code": "forbidden", "message": "only an admin may do this"}
        assert client.get(path).status_code == 401
        assert client.get(path, headers=team.bearer("alice")).status_code == 200
    made = client.post("/api/admin/groups", json={"name": "g"}, headers=team.bearer("bob"))
    assert made.status_code == 403
    assert admin(client, team, "GET", "/api/admin/groups") == {"groups": []}


# -- users --------------------------------------------------------------------------------


def test_users_listed_added_and_signed_in(client: TestClient, team: Team) -> None:
    users = admin(client, team, "GET", "/api/admin/users")["users"]
    assert [(u["name"], u["role"], u["disabled"]) for u in users][:2] == [
        ("alice", "admin", False),
        ("bob", "member", False),
    ]
    assert set(users[0]) == {"id", "name", "role", "disabled", "created_at", "groups"}
    made = client.post(
        "/api/admin/users",
        json={"name": "grace", "password": "grace-pass-1"},
        headers=team.bearer("alice"),
    )
    assert made.status_code == 201
    assert (made.json()["name"], made.json()["role"]) == ("grace", "member")
    assert login(client, "grace", "grace-pass-1") == 200
    again = client.post(
        "/api/admin/users",
        json={"name": "grace", "password": "another-pass"},
        headers=team.bearer("alice"),
    )
    assert again.status_code == 409
    assert again.json()["code"] == "exists"
    boss = admin(
        client,
        team,
        "POST",
        "/api/admin/users",
        json={"name": "heidi", "password": "heidi-pass-1", "role": "admin"},
    )
    assert boss["role"] == "admin"
    assert actions(client, team) == [
        ("user.add", "alice", "grace"),
        ("user.add", "alice", "heidi"),
        ("user.role", "alice", "heidi admin"),
    ]


@pytest.mark.parametrize(
    "body",
    [
        None,
        {},
        {"name": "ivan"},
        {"name": "ivan", "password": "short"},
        {"name": "", "password": "long enough pass"},
        {"name": "a\x00b", "password": "long enough pass"},
        {"name": "ivan", "password": "long enough pass", "role": "owner"},
        {"name": "ivan", "password": 12345678},
    ],
)
def test_bad_new_users_are_refused(client: TestClient, team: Team, body: Any) -> None:
    response = client.post("/api/admin/users", json=body, headers=team.bearer("alice"))
    assert response.status_code == 400
    assert response.json()["code"] == "bad_request"
    assert "long enough pass" not in response.text
    names = [u["name"] for u in admin(client, team, "GET", "/api/admin/users")["users"]]
    assert "ivan" not in names


def test_disable_and_enable(client: TestClient, team: Team) -> None:
    off = admin(client, team, "POST", "/api/admin/users/erin/disable")
    assert (off["disabled"], off["changed"]) == (True, True)
    assert client.get("/api/conversations", headers=team.bearer("erin")).status_code == 401
    assert login(client, "erin", PASSWORD) == 401
    assert admin(client, team, "POST", "/api/admin/users/erin/disable")["changed"] is False
    on = admin(client, team, "POST", "/api/admin/users/erin/enable")
    assert (on["disabled"], on["changed"]) == (False, True)
    assert client.get("/api/conversations", headers=team.bearer("erin")).status_code == 200
    self_off = client.post("/api/admin/users/alice/disable", headers=team.bearer("alice"))
    assert self_off.status_code == 400
    assert (
        client.post("/api/admin/users/nobody/disable", headers=team.bearer("alice")).status_code
        == 404
    )
    assert actions(client, team) == [
        ("user.disable", "alice", "erin"),
        ("user.enable", "alice", "erin"),
    ]


def test_roles_and_the_last_admin(client: TestClient, team: Team) -> None:
    last = client.post(
        "/api/admin/users/alice/role", json={"role": "member"}, headers=team.bearer("alice")
    )
    assert last.status_code == 409
    assert last.json()["code"] == "last_admin"
    bad = client.post(
        "/api/admin/users/bob/role", json={"role": "boss"}, headers=team.bearer("alice")
    )
    assert bad.status_code == 400
    made = admin(client, team, "POST", "/api/admin/users/bob/role", json={"role": "admin"})
    assert (made["role"], made["changed"]) == ("admin", True)
    assert client.get("/api/admin/users", headers=team.bearer("bob")).status_code == 200
    admin(client, team, "POST", "/api/admin/users/bob/role", json={"role": "member"})
    assert client.get("/api/admin/users", headers=team.bearer("bob")).status_code == 403


def test_a_new_password_ends_the_old_sessions(client: TestClient, team: Team) -> None:
    assert (
        client.post("/api/login", json={"username": "erin", "password": PASSWORD}).status_code
        == 200
    )
    old_session = client.cookies.get(SESSION_COOKIE)
    assert client.get("/api/conversations").status_code == 200
    client.cookies.clear()
    short = client.post(
        "/api/admin/users/erin/password", json={"password": "x"}, headers=team.bearer("alice")
    )
    assert short.status_code == 400
    new = "a brand new password"
    admin(client, team, "POST", "/api/admin/users/erin/password", json={"password": new})
    assert login(client, "erin", PASSWORD) == 401
    assert login(client, "erin", new) == 200
    client.cookies.set(SESSION_COOKIE, str(old_session))
    ended = client.get("/api/conversations")
    client.cookies.clear()
    assert ended.status_code == 401
    assert client.get("/api/conversations", headers=team.bearer("erin")).status_code == 200
    assert (
        client.post(
            "/api/admin/users/nobody/password", json={"password": new}, headers=team.bearer("alice")
        ).status_code
        == 404
    )
    trail = json.dumps(client.get("/api/audit", headers=team.bearer("alice")).json())
    assert new not in trail
    assert ("user.password", "alice", "erin") in actions(client, team)


def test_deleting_a_user_hands_over_or_shreds(client: TestClient, team: Team) -> None:
    kept = chat_as(client, team, "carol", TEXT)
    gone = chat_as(client, team, "dave", TEXT)
    path = "/api/admin/users/carol"
    for query in (
        "",
        "?shred=1&conversations_to=alice",
        "?conversations_to=bob",
        "?conversations_to=carol",
    ):
        refused = client.delete(path + query, headers=team.bearer("alice"))
        assert refused.status_code == 400, query
    assert (
        client.delete("/api/admin/users/alice?shred=1", headers=team.bearer("alice")).status_code
        == 400
    )
    handed = admin(client, team, "DELETE", path + "?conversations_to=alice")
    assert handed == {
        "deleted": "carol",
        "conversations": 1,
        "conversations_to": "alice",
        "shredded": False,
    }
    assert read(client, team, "alice", kept)["messages"][0]["text"] == TEXT
    shredded = admin(client, team, "DELETE", "/api/admin/users/dave?shred=1")
    assert (shredded["conversations"], shredded["shredded"]) == (1, True)
    assert (
        client.get(
            f"/api/conversations/{gone}?view=model", headers=team.bearer("alice")
        ).status_code
        == 404
    )
    vaults = {row[0] for row in team.db_rows("vault_entries", "conversation_id")}
    assert kept in vaults  # carol's, now alice's
    assert gone not in vaults
    assert client.delete(path + "?shred=1", headers=team.bearer("alice")).status_code == 404
    assert actions(client, team) == [
        ("user.delete", "alice", "carol (given to alice)"),
        ("user.delete", "alice", "dave (shredded)"),
    ]


# -- groups -------------------------------------------------------------------------------


def test_groups_and_members(client: TestClient, team: Team) -> None:
    made = client.post("/api/admin/groups", json={"name": "sales"}, headers=team.bearer("alice"))
    assert made.status_code == 201
    assert (made.json()["name"], made.json()["members"]) == ("sales", [])
    dup = client.post("/api/admin/groups", json={"name": "sales"}, headers=team.bearer("alice"))
    assert dup.status_code == 409
    for body in (None, {}, {"name": ""}, {"name": 3}):
        assert (
            client.post("/api/admin/groups", json=body, headers=team.bearer("alice")).status_code
            == 400
        )
    added = client.post("/api/admin/groups/sales/members/bob", headers=team.bearer("alice"))
    assert (added.status_code, added.json()["members"]) == (201, ["bob"])
    again = client.post("/api/admin/groups/sales/members/bob", headers=team.bearer("alice"))
    assert again.status_code == 200
    assert (
        client.post(
            "/api/admin/groups/sales/members/nobody", headers=team.bearer("alice")
        ).status_code
        == 404
    )
    assert (
        client.post(
            "/api/admin/groups/nogroup/members/bob", headers=team.bearer("alice")
        ).status_code
        == 404
    )
    users = admin(client, team, "GET", "/api/admin/users")["users"]
    assert next(u for u in users if u["name"] == "bob")["groups"] == ["sales"]
    renamed = admin(client, team, "PATCH", "/api/admin/groups/sales", json={"name": "revenue"})
    assert (renamed["name"], renamed["members"]) == ("revenue", ["bob"])
    assert (
        client.patch(
            "/api/admin/groups/sales", json={"name": "x"}, headers=team.bearer("alice")
        ).status_code
        == 404
    )
    gone = client.delete("/api/admin/groups/revenue/members/bob", headers=team.bearer("alice"))
    assert gone.status_code == 204
    assert (
        client.delete(
            "/api/admin/groups/revenue/members/bob", headers=team.bearer("alice")
        ).status_code
        == 404
    )
    assert (
        client.delete("/api/admin/groups/revenue", headers=team.bearer("alice")).status_code == 204
    )
    assert (
        client.delete("/api/admin/groups/revenue", headers=team.bearer("alice")).status_code == 404
    )
    assert actions(client, team) == [
        ("group.create", "alice", "sales"),
        ("group.member.add", "alice", "sales bob"),
        ("group.rename", "alice", "sales -> revenue"),
        ("group.member.remove", "alice", "revenue bob"),
        ("group.delete", "alice", "revenue"),
    ]


# -- API tokens ---------------------------------------------------------------------------


def test_tokens_listed_without_their_text_created_and_revoked(
    client: TestClient, team: Team
) -> None:
    listed = client.get("/api/admin/tokens", headers=team.bearer("alice"))
    tokens = listed.json()["tokens"]
    assert {t["owner"] for t in tokens} == {"alice", "bob", "carol", "dave", "erin", "frank"}
    assert set(tokens[0]) == {
        "id",
        "name",
        "owner",
        "created_at",
        "last_used_at",
        "revoked_at",
        "active",
    }
    for secret in team.tokens.values():
        assert secret not in listed.text
    made = client.post(
        "/api/admin/tokens", json={"user": "erin", "name": "ci"}, headers=team.bearer("alice")
    )
    assert made.status_code == 201
    secret = made.json()["token"]
    assert (made.json()["owner"], made.json()["name"]) == ("erin", "ci")
    bearer = {"Authorization": f"Bearer {secret}"}
    assert client.get("/api/session", headers=bearer).json()["user"]["name"] == "erin"
    erin = client.get("/api/admin/tokens?user=erin", headers=team.bearer("alice")).json()
    assert [t["name"] for t in erin["tokens"]] == ["cli", "ci"]
    assert secret not in json.dumps(erin)
    revoked = admin(client, team, "POST", f"/api/admin/tokens/{made.json()['id']}/revoke")
    assert (revoked["active"], revoked["changed"]) == (False, True)
    assert revoked["revoked_at"] is not None
    assert client.get("/api/conversations", headers=bearer).status_code == 401
    assert (
        client.post("/api/admin/tokens/nope/revoke", headers=team.bearer("alice")).status_code
        == 404
    )
    for body in ({}, {"user": "nobody"}, {"user": "erin", "name": ""}):
        assert client.post(
            "/api/admin/tokens", json=body, headers=team.bearer("alice")
        ).status_code in (400, 404)
    admin(client, team, "POST", "/api/admin/users/frank/disable")
    disabled = client.post(
        "/api/admin/tokens", json={"user": "frank"}, headers=team.bearer("alice")
    )
    assert disabled.status_code == 409
    trail = json.dumps(client.get("/api/audit", headers=team.bearer("alice")).json())
    assert secret not in trail
    assert ("token.create", "alice", f"erin {made.json()['id']}") in actions(client, team)
    assert ("token.revoke", "alice", f"erin {made.json()['id']}") in actions(client, team)


# -- policies -----------------------------------------------------------------------------


def test_policies_set_listed_and_cleared(client: TestClient, team: Team) -> None:
    admin(client, team, "POST", "/api/admin/groups", json={"name": "ops"})
    put = admin(client, team, "PUT", "/api/admin/policies/default/email", json={"level": "masked"})
    assert put == {"scope": "default", "kind": "email", "level": "masked", "changed": True}
    admin(client, team, "PUT", "/api/admin/policies/ops/phone", json={"level": "plain"})
    made = client.post(
        "/api/admin/never-restore", json={"kind": "credit_card"}, headers=team.bearer("alice")
    )
    assert made.status_code == 201
    listed = admin(client, team, "GET", "/api/admin/policies")
    assert [(s["scope"], s["kind"], s["level"]) for s in listed["levels"]] == [
        ("default", "email", "masked"),
        ("ops", "phone", "plain"),
    ]
    assert listed["never_restore"] == ["credit_card"]
    for path, body in (
        ("/api/admin/policies/default/email", {"level": "shown"}),
        ("/api/admin/policies/default/email", None),
        ("/api/admin/policies/default/E-MAIL", {"level": "plain"}),
    ):
        refused = client.put(path, json=body, headers=team.bearer("alice"))
        assert refused.status_code == 400, (path, body)
    assert (
        client.put(
            "/api/admin/policies/nogroup/email",
            json={"level": "plain"},
            headers=team.bearer("alice"),
        ).status_code
        == 404
    )
    assert (
        client.post(
            "/api/admin/never-restore", json={"kind": "A B"}, headers=team.bearer("alice")
        ).status_code
        == 400
    )
    assert admin(client, team, "GET", "/api/admin/policies")["levels"] == listed["levels"]
    assert (
        client.delete("/api/admin/policies/ops/phone", headers=team.bearer("alice")).status_code
        == 204
    )
    assert (
        client.delete("/api/admin/policies/ops/phone", headers=team.bearer("alice")).status_code
        == 404
    )
    assert (
        client.delete(
            "/api/admin/never-restore/credit_card", headers=team.bearer("alice")
        ).status_code
        == 204
    )
    assert (
        client.delete(
            "/api/admin/never-restore/credit_card", headers=team.bearer("alice")
        ).status_code
        == 404
    )
    assert actions(client, team)[1:] == [
        ("policy.set", "alice", "default email masked"),
        ("policy.set", "alice", "ops phone plain"),
        ("policy.never_restore", "alice", "credit_card"),
        ("policy.clear", "alice", "ops phone"),
        ("policy.allow_restore", "alice", "credit_card"),
    ]


def test_a_policy_change_holds_at_once(client: TestClient, team: Team) -> None:
    cid = chat_as(client, team, "bob", TEXT)
    share(client, team, cid, user="carol", access="read")
    assert EMAIL not in json.dumps(read(client, team, "carol", cid))
    admin(client, team, "PUT", "/api/admin/policies/default/email", json={"level": "plain"})
    assert EMAIL in read(client, team, "carol", cid)["messages"][0]["text"]
    admin(client, team, "DELETE", "/api/admin/policies/default/email")
    assert EMAIL not in json.dumps(read(client, team, "carol", cid))


def test_the_preview_shows_values_as_a_viewer_would_see_them(
    client: TestClient, team: Team
) -> None:
    admin(client, team, "POST", "/api/admin/groups", json={"name": "ops"})
    admin(client, team, "PUT", "/api/admin/policies/default/email", json={"level": "masked"})
    admin(client, team, "PUT", "/api/admin/policies/ops/email", json={"level": "plain"})
    values = [
        {"kind": "email", "value": "ada@example.com"},
        {"kind": "credit_card", "value": "4556 7375 8689 9855"},
    ]
    default = admin(client, team, "POST", "/api/admin/policies/preview", json={"values": values})
    assert [(v["kind"], v["level"], v["shown"]) for v in default["values"]] == [
        ("email", "masked", "a\u2022\u2022\u2022@example.com"),
        ("credit_card", "label", "[card number]"),
    ]
    ops = admin(
        client,
        team,
        "POST",
        "/api/admin/policies/preview",
        json={"groups": ["ops"], "values": values},
    )
    assert ops["values"][0]["shown"] == "ada@example.com"
    for viewer in (["ops"], {"groups": ["ops"]}):
        also = admin(
            client,
            team,
            "POST",
            "/api/admin/policies/preview",
            json={"viewer": viewer, "values": values},
        )
        assert also["values"] == ops["values"]
    owner = admin(
        client, team, "POST", "/api/admin/policies/preview", json={"owner": True, "values": values}
    )
    assert [v["level"] for v in owner["values"]] == ["plain", "plain"]
    for body in (
        {},
        {"values": "x"},
        {"values": [{"kind": "email"}]},
        {"values": values, "groups": "ops"},
    ):
        assert (
            client.post(
                "/api/admin/policies/preview", json=body, headers=team.bearer("alice")
            ).status_code
            == 400
        )
    assert (
        client.post(
            "/api/admin/policies/preview",
            json={"groups": ["nope"], "values": values},
            headers=team.bearer("alice"),
        ).status_code
        == 404
    )
    assert [a for a in actions(client, team) if "preview" in a[0]] == []  # a read


# -- the audit ----------------------------------------------------------------------------


def test_audit_filters_and_csv(client: TestClient, team: Team) -> None:
    cid = chat_as(client, team, "bob", TEXT)
    share(client, team, cid, user="carol", access="read")
    admin(client, team, "PUT", "/api/admin/policies/default/email", json={"level": "masked"})
    admin(client, team, "POST", "/api/admin/groups", json={"name": "=HYPERLINK(1)"})
    read(client, team, "carol", cid)
    audit = "/api/audit"
    everything = client.get(audit, headers=team.bearer("alice")).json()["events"]
    times = [e["time"] for e in everything]
    assert times == sorted(times, reverse=True)
    carol = client.get(audit + "?user=carol", headers=team.bearer("alice")).json()["events"]
    assert carol
    assert {(e["event"], e["kind"], e["level"]) for e in carol} == {("reveal", "email", "masked")}
    mine = client.get(f"{audit}?conversation={cid}", headers=team.bearer("alice")).json()
    assert {e["event"] for e in mine["events"]} == {"reveal"}
    assert {e["user"] for e in mine["events"]} == {"bob", "carol"}
    later = client.get(audit, params={"since": "2999-01-01T00:00:00"}, headers=team.bearer("alice"))
    assert later.json() == {"events": []}
    before = client.get(
        audit, params={"until": "2000-01-01T00:00:00Z"}, headers=team.bearer("alice")
    )
    assert before.json() == {"events": []}
    for query in (
        "?since=yesterday",
        "?until=2026-13-01",
        "?limit=0",
        "?limit=x",
        "?conversation=../x",
    ):
        assert client.get(audit + query, headers=team.bearer("alice")).status_code == 400, query
    assert client.get(audit + "?user=nobody", headers=team.bearer("alice")).status_code == 404
    limited = client.get(audit + "?limit=2", headers=team.bearer("alice")).json()["events"]
    assert limited == everything[:2]
    exported = client.get(audit + "?format=csv", headers=team.bearer("alice"))
    assert exported.status_code == 200
    assert exported.headers["content-type"].startswith("text/csv")
    rows = list(csv.reader(io.StringIO(exported.text)))
    assert rows[0] == [
        "time",
        "event",
        "user",
        "user_id",
        "conversation_id",
        "message_id",
        "token",
        "kind",
        "level",
        "target",
    ]
    assert len(rows) == len(everything) + 1
    assert [r[9] for r in rows[1:] if r[1] == "group.create"] == ["'=HYPERLINK(1)"]
    assert not any(cell[:1] in "=+-@" for row in rows[1:] for cell in row if cell)
    assert leaks(exported.text, [EMAIL]) == []
