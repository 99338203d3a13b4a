"""Who may use which route: every conversation, share, admin and audit route, tried by each of
seven callers, allowed or refused as the protocol says (docs/protocol.md).

The callers, on a conversation bob owns: bob (the owner), carol (shared to read), dave (shared
to continue), erin (a member it is not shared with), alice (an admin, not the owner), frank
(shared to read, then disabled) and bob's revoked API token. Refusals: 401 for a credential
that names nobody, 403 `forbidden` for a member on an admin route, 404 `not_found` for a
conversation the caller may not see (exactly as for one that does not exist).

Then the canary: a value in the conversation never reaches the trail's tables, the audit's
JSON or CSV, or a log line, whoever reads and whatever admins do.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.app.support import CARD, EMAIL, PHONE, EchoUpstream, TestClient, leaks
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

CALLERS = {
    "revoked": "bob-spare",
    "disabled": "frank",
    "member": "erin",
    "reader": "carol",
    "writer": "dave",
    "admin": "alice",
    "owner": "bob",
}
NO_ONE = {"revoked": 401, "disabled": 401}


@dataclass
class World:
    client: TestClient
    team: Team
    cid: str  # bob's conversation, with the canaries in it
    names: Iterator[int]

    def call(self, caller: str, method: str, path: str, body: Any = None) -> Any:
        headers = self.team.bearer(CALLERS[caller])
        if body is None:
            return self.client.request(method, path, headers=headers)
        return self.client.request(method, path, json=body, headers=headers)

    def fresh(self, stem: str) -> str:
        return f"{stem}{next(self.names)}"


@contextlib.contextmanager
def world(tmp_path: Path, team: Team, upstream: EchoUpstream) -> Iterator[World]:
    with team_app(tmp_path, upstream) as client:
        cid = chat_as(client, team, "bob", TEXT)
        share(client, team, cid, user="carol", access="read")
        share(client, team, cid, user="dave", access="write")
        share(client, team, cid, user="frank", access="read")
        admin(client, team, "POST", "/api/admin/groups", json={"name": "spare"})
        tokens = admin(client, team, "GET", "/api/admin/tokens?user=bob")["tokens"]
        spare = max(tokens, key=lambda t: t["created_at"])  # bob's second token
        admin(client, team, "POST", f"/api/admin/tokens/{spare['id']}/revoke")
        admin(client, team, "POST", "/api/admin/users/frank/disable")
        yield World(client, team, cid, itertools.count(1))


Prepare = Callable[[World], tuple[str, str, Any]]


def _conversation(method: str, suffix: str = "", body: Any = None) -> Prepare:
    return lambda w: (method, f"/api/conversations/{w.cid}{suffix}", body)


def _fresh_shared(w: World) -> tuple[str, str, Any]:
    made = w.call("owner", "POST", "/api/conversations", {"title": "to delete"}).json()
    share(w.client, w.team, made["id"], user="carol", access="read")
    share(w.client, w.team, made["id"], user="dave", access="write")
    return "DELETE", f"/api/conversations/{made['id']}", None


def _last_message(w: World) -> tuple[str, str, Any]:
    body = w.call("owner", "GET", f"/api/conversations/{w.cid}").json()
    return "PATCH", f"/api/conversations/{w.cid}", {"current_leaf": body["current_path"][-1]}


def _a_share(w: World) -> tuple[str, str, Any]:
    made = share(w.client, w.team, w.cid, group="spare", access="read")
    return "DELETE", f"/api/conversations/{w.cid}/shares/{made['id']}", None


def _fresh_token(w: World) -> tuple[str, str, Any]:
    made = admin(w.client, w.team, "POST", "/api/admin/tokens", json={"user": "erin"})
    return "POST", f"/api/admin/tokens/{made['id']}/revoke", None


def _level_set(w: World) -> tuple[str, str, Any]:
    admin(w.client, w.team, "PUT", "/api/admin/policies/default/email", json={"level": "masked"})
    return "DELETE", "/api/admin/policies/default/email", None


def _never_set(w: World) -> tuple[str, str, Any]:
    admin(w.client, w.team, "POST", "/api/admin/never-restore", json={"kind": "phone"})
    return "DELETE", "/api/admin/never-restore/phone", None


def _member_in(w: World) -> tuple[str, str, Any]:
    admin(w.client, w.team, "POST", "/api/admin/groups/spare/members/erin")
    return "DELETE", "/api/admin/groups/spare/members/erin", None


def _fixed(method: str, path: str, body: Any = None) -> Prepare:
    return lambda w: (method, path, body)


def conversation_route(owner: int, shared: int, model: bool = False) -> dict[str, int]:
    """Owner and admin as given; readers and writers `shared`; the member 404."""
    return {
        **NO_ONE,
        "member": 404,
        "reader": shared,
        "writer": shared,
        "admin": owner if model else 404,
        "owner": owner,
    }


def owner_only(status: int) -> dict[str, int]:
    return conversation_route(status, 404)


def admins_only(status: int) -> dict[str, int]:
    return {**NO_ONE, "member": 403, "reader": 403, "writer": 403, "owner": 403, "admin": status}


CASES: dict[str, tuple[Prepare, dict[str, int]]] = {
    # conversations
    "list conversations": (
        _fixed("GET", "/api/conversations"),
        {**NO_ONE, **dict.fromkeys(("member", "reader", "writer", "admin", "owner"), 200)},
    ),
    "get conversation": (_conversation("GET"), conversation_route(200, 200)),
    "get model view": (
        _conversation("GET", "?view=model"),
        conversation_route(200, 404, model=True),
    ),
    "rename conversation": (
        _conversation("PATCH", body={"title": "renamed"}),
        owner_only(200),
    ),
    "set system prompt": (
        _conversation("PATCH", body={"system_prompt": "Be brief."}),
        owner_only(200),
    ),
    "choose model": (_conversation("PATCH", body={"model": None}), owner_only(200)),
    "choose branch": (_last_message, owner_only(200)),
    "get instructions": (
        _fixed("GET", "/api/me/instructions"),
        {**NO_ONE, **dict.fromkeys(("member", "reader", "writer", "admin", "owner"), 200)},
    ),
    "set instructions": (
        _fixed("PUT", "/api/me/instructions", {"text": "Answer in French."}),
        {**NO_ONE, **dict.fromkeys(("member", "reader", "writer", "admin", "owner"), 200)},
    ),
    "delete conversation": (_fresh_shared, owner_only(204)),
    "share": (
        _conversation("POST", "/shares", {"user": "erin", "access": "read"}),
        owner_only(201),
    ),
    "list shares": (_conversation("GET", "/shares"), owner_only(200)),
    "unshare": (_a_share, owner_only(204)),
    # users
    "list users": (_fixed("GET", "/api/admin/users"), admins_only(200)),
    "add user": (
        lambda w: ("POST", "/api/admin/users", {"name": w.fresh("new"), "password": PASSWORD}),
        admins_only(201),
    ),
    "disable user": (_fixed("POST", "/api/admin/users/erin/disable"), admins_only(200)),
    "enable user": (_fixed("POST", "/api/admin/users/frank/enable"), admins_only(200)),
    "set role": (
        _fixed("POST", "/api/admin/users/erin/role", {"role": "member"}),
        admins_only(200),
    ),
    "set password": (
        _fixed("POST", "/api/admin/users/erin/password", {"password": "a new password"}),
        admins_only(200),
    ),
    "delete user": (_fixed("DELETE", "/api/admin/users/erin?shred=1"), admins_only(200)),
    # groups
    "list groups": (_fixed("GET", "/api/admin/groups"), admins_only(200)),
    "add group": (
        lambda w: ("POST", "/api/admin/groups", {"name": w.fresh("group")}),
        admins_only(201),
    ),
    "rename group": (
        _fixed("PATCH", "/api/admin/groups/spare", {"name": "extra"}),
        admins_only(200),
    ),
    "delete group": (_fixed("DELETE", "/api/admin/groups/spare"), admins_only(204)),
    "add member": (_fixed("POST", "/api/admin/groups/spare/members/erin"), admins_only(201)),
    "remove member": (_member_in, admins_only(204)),
    # tokens
    "list tokens": (_fixed("GET", "/api/admin/tokens"), admins_only(200)),
    "create token": (_fixed("POST", "/api/admin/tokens", {"user": "erin"}), admins_only(201)),
    "revoke token": (_fresh_token, admins_only(200)),
    # policies
    "list policies": (_fixed("GET", "/api/admin/policies"), admins_only(200)),
    "set level": (
        _fixed("PUT", "/api/admin/policies/default/email", {"level": "masked"}),
        admins_only(200),
    ),
    "clear level": (_level_set, admins_only(204)),
    "never restore": (
        _fixed("POST", "/api/admin/never-restore", {"kind": "phone"}),
        admins_only(201),
    ),
    "allow restore": (_never_set, admins_only(204)),
    "preview": (
        _fixed(
            "POST",
            "/api/admin/policies/preview",
            {"values": [{"kind": "email", "value": "x@example.com"}]},
        ),
        admins_only(200),
    ),
    # audit
    "audit": (_fixed("GET", "/api/audit"), admins_only(200)),
    "audit csv": (_fixed("GET", "/api/audit?format=csv"), admins_only(200)),
}


@pytest.mark.parametrize("route", list(CASES))
def test_who_may_use_the_route(
    route: str, tmp_path: Path, team: Team, upstream: EchoUpstream
) -> None:
    prepare, expected = CASES[route]
    assert set(expected) == set(CALLERS)
    # The refused first: what they try must not change what the allowed then find.
    order = sorted(CALLERS, key=lambda caller: expected[caller] < 400)
    with world(tmp_path, team, upstream) as w:
        for caller in order:
            method, path, body = prepare(w)
            response = w.call(caller, method, path, body)
            assert response.status_code == expected[caller], (route, caller, response.text)
            if response.status_code == 404 and path.startswith("/api/conversations"):
                assert response.json()["code"] == "not_found"
            if response.status_code == 403:
                assert response.json()["code"] == "forbidden"
            if response.status_code >= 400:
                assert leaks(response.text, [EMAIL, PHONE, CARD]) == []


def test_what_each_caller_lists_and_reads(
    tmp_path: Path, team: Team, upstream: EchoUpstream
) -> None:
    with world(tmp_path, team, upstream) as w:
        for caller, seen in (
            ("owner", (False, "owner")),
            ("reader", (True, "read")),
            ("writer", (True, "write")),
        ):
            listed = w.call(caller, "GET", "/api/conversations").json()["conversations"]
            assert [(c["id"], c["shared"], c["access"]) for c in listed] == [(w.cid, *seen)]
        for caller in ("member", "admin"):
            assert w.call(caller, "GET", "/api/conversations").json() == {"conversations": []}
        assert EMAIL in read(w.client, team, "bob", w.cid)["messages"][0]["text"]
        assert leaks(json.dumps(read(w.client, team, "carol", w.cid)), [EMAIL, PHONE, CARD]) == []
        # A disabled user keeps no access through a share, and the revoked token none at all.
        assert w.call("disabled", "GET", f"/api/conversations/{w.cid}").status_code == 401
        w.client.post("/api/admin/users/frank/enable", headers=team.bearer("alice"))
        assert w.call("disabled", "GET", f"/api/conversations/{w.cid}").status_code == 200
        assert w.call("revoked", "GET", f"/api/conversations/{w.cid}").status_code == 401


def test_no_canary_in_the_trail_or_the_logs(
    tmp_path: Path, team: Team, upstream: EchoUpstream, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    canaries = [EMAIL, PHONE, CARD]
    with world(tmp_path, team, upstream) as w:
        client = w.client
        admin(client, team, "POST", "/api/admin/groups/spare/members/carol")
        admin(client, team, "PUT", "/api/admin/policies/spare/email", json={"level": "plain"})
        admin(client, team, "PUT", "/api/admin/policies/default/phone", json={"level": "masked"})
        admin(client, team, "POST", "/api/admin/never-restore", json={"kind": "credit_card"})
        carol = read(client, team, "carol", w.cid)
        assert EMAIL in carol["messages"][0]["text"]  # the canary was shown...
        chat_as(client, team, "dave", f"Also {EMAIL}, please.", w.cid)
        read(client, team, "dave", w.cid)
        client.get("/api/conversations", headers=team.bearer("carol"))
        client.get(f"/api/conversations/{w.cid}?view=model", headers=team.bearer("alice"))
        admin(
            client,
            team,
            "POST",
            "/api/admin/policies/preview",
            json={"values": [{"kind": "email", "value": EMAIL}]},
        )
        admin(
            client,
            team,
            "POST",
            "/api/admin/users/erin/password",
            json={"password": "canary-password-42"},
        )
        secret = admin(client, team, "POST", "/api/admin/tokens", json={"user": "erin"})["token"]
        as_json = client.get("/api/audit", headers=team.bearer("alice"))
        as_csv = client.get("/api/audit?format=csv", headers=team.bearer("alice"))
        events = as_json.json()["events"]
        # ... and is on the trail as its token and kind only.
        assert ("carol", "<EMAIL_1>", "email", "plain") in {
            (e["user"], e["token"], e["kind"], e["level"]) for e in events
        }
        assert ("dave", "<PHONE_1>", "phone", "masked") in {
            (e["user"], e["token"], e["kind"], e["level"]) for e in events
        }
    assert "holdback is ready" in caplog.text  # the app's log lines are captured
    tables = json.dumps(
        [team.db_rows(t) for t in ("reveal_events", "admin_events", "audit_events")], default=str
    )
    for where, text in (
        ("tables", tables),
        ("json", as_json.text),
        ("csv", as_csv.text),
        ("logs", caplog.text),
    ):
        assert leaks(text, canaries) == [], where
        assert "canary-password-42" not in text, where
        assert secret not in text, where
