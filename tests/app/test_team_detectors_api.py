"""A team's pattern sets and people lists edited by an admin over HTTP: judged by the files'
loaders at save time (a bad one is a 400 with the reason, and nothing is stored), for admins
only, audited by name, and used by the next message without a restart."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from tests.app.conftest import Accounts
from tests.app.support import EchoUpstream, chat, make_settings, openai_provider, running_app

# Made-up people and identifiers, in no other test.
PERSON = ("Henrietta", "Quillfeather")
MATTER = "MAT/50213"
PATTERNS = """# the team's matter numbers
[[pattern]]
label = "matter"
regex = ['MAT/\\d{5}']
match = ["MAT/88213", "matter mat/88213."]
no_match = ["MAT/8821"]
"""
PEOPLE = "given,family,aliases\nHenrietta,Quillfeather,Etta\n"
MESSAGE = f"Ask Ms Quillfeather and Etta Quillfeather about {MATTER} today."
VALUES = (*PERSON, MATTER, "Etta")


@pytest.fixture
def client(tmp_path: Path, accounts: Accounts, upstream: EchoUpstream) -> Iterator[TestClient]:
    with running_app(make_settings(tmp_path, auth="password"), openai_provider(upstream)) as c:
        yield c


def masked_kinds(client: TestClient, headers: dict[str, str], text: str) -> list[str]:
    with client.websocket_connect("/ws", headers=headers) as ws:
        frames = chat(ws, text)
    return [m["kind"] for m in frames[0]["masked"]]


def test_a_set_and_a_list_mask_the_next_message_and_go_when_deleted(
    client: TestClient,
    accounts: Accounts,
    upstream: EchoUpstream,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    alice = accounts.bearer("alice")  # the first user: an admin
    assert masked_kinds(client, alice, MESSAGE) == []
    put = client.put("/api/admin/pattern-sets/matters", json={"toml": PATTERNS}, headers=alice)
    assert put.status_code == 200, put.text
    assert put.json() == {"name": "matters", "labels": ["matter"], "entries": 1}
    put = client.put("/api/admin/people-lists/clients", json={"csv": PEOPLE}, headers=alice)
    assert put.status_code == 200, put.text
    assert put.json() == {"name": "clients", "people": 1}

    upstream.requests.clear()
    assert masked_kinds(client, alice, MESSAGE) == ["person", "person", "matter"]
    sent = upstream.bodies()
    assert not any(value in sent for value in VALUES)
    # Every form of one person is one token.
    assert "Ask <PERSON_1> and <PERSON_1> about <MATTER_1> today." in sent

    listed = client.get("/api/admin/pattern-sets", headers=alice).json()
    assert [(s["name"], s["labels"], s["entries"]) for s in listed["pattern_sets"]] == [
        ("matters", ["matter"], 1)
    ]
    assert listed["file"] is None
    people = client.get("/api/admin/people-lists", headers=alice).json()
    assert [(p["name"], p["people"]) for p in people["people_lists"]] == [("clients", 1)]
    assert not any(value in str(people) for value in VALUES)  # counts only in the listing
    shown = client.get("/api/admin/pattern-sets/matters", headers=alice).json()
    assert shown["toml"] == PATTERNS  # as written, comments and all
    shown = client.get("/api/admin/people-lists/clients", headers=alice).json()
    assert shown["csv"] == PEOPLE
    assert shown["rows"] == [{"given": "Henrietta", "family": "Quillfeather", "aliases": ["Etta"]}]

    audit = client.get("/api/audit?format=csv", headers=alice).text
    assert "patterns.set" in audit
    assert "people.set" in audit
    assert not any(value in audit for value in VALUES)

    assert client.delete("/api/admin/people-lists/clients", headers=alice).status_code == 204
    assert masked_kinds(client, alice, MESSAGE) == ["matter"]
    assert client.delete("/api/admin/pattern-sets/matters", headers=alice).status_code == 204
    assert masked_kinds(client, alice, MESSAGE) == []
    assert client.delete("/api/admin/pattern-sets/matters", headers=alice).status_code == 404
    assert client.get("/api/admin/people-lists/clients", headers=alice).status_code == 404
    audit = client.get("/api/audit?format=csv", headers=alice).text
    assert "patterns.delete" in audit
    assert "people.delete" in audit
    assert caplog.records  # the server did log, and no line holds a name or an identifier
    assert not any(value in caplog.text for value in VALUES)


def test_json_forms_are_stored_as_the_file_would_hold_them(
    client: TestClient, accounts: Accounts
) -> None:
    alice = accounts.bearer("alice")
    entries = [
        {
            "label": "matter",
            "regex": ["MAT/\\d{5}", "M-\\d{6}"],
            "context": ["matter", "file"],
            "context_window": 30,
            "match": ["matter MAT/88213", "it's matter M-123456"],
            "no_match": ["MAT/88213 on its own"],
        }
    ]
    put = client.put("/api/admin/pattern-sets/matters", json={"patterns": entries}, headers=alice)
    assert put.status_code == 200, put.text
    shown = client.get("/api/admin/pattern-sets/matters", headers=alice).json()
    assert "regex = ['MAT/\\d{5}', 'M-\\d{6}']" in shown["toml"]
    assert '"it\'s matter M-123456"' in shown["toml"]  # a quote inside: a basic string
    rows = [{"given": "Henrietta Ann", "family": "Quillfeather", "aliases": ["Etta", "H. A. Q"]}]
    put = client.put("/api/admin/people-lists/clients", json={"people": rows}, headers=alice)
    assert put.status_code == 200, put.text
    shown = client.get("/api/admin/people-lists/clients", headers=alice).json()
    assert shown["rows"] == rows
    assert shown["csv"] == "given,family,aliases\nHenrietta Ann,Quillfeather,Etta|H. A. Q\n"
    assert masked_kinds(client, alice, "file matter M-123456 for Etta Quillfeather") == [
        "matter",
        "person",
    ]


ROUTES = [
    ("GET", "/api/admin/pattern-sets", None),
    ("GET", "/api/admin/pattern-sets/x", None),
    ("PUT", "/api/admin/pattern-sets/x", {"toml": PATTERNS}),
    ("DELETE", "/api/admin/pattern-sets/x", None),
    ("GET", "/api/admin/people-lists", None),
    ("GET", "/api/admin/people-lists/x", None),
    ("PUT", "/api/admin/people-lists/x", {"csv": PEOPLE}),
    ("DELETE", "/api/admin/people-lists/x", None),
]


@pytest.mark.parametrize(("method", "path", "body"), ROUTES)
def test_for_admins_only(
    client: TestClient, accounts: Accounts, method: str, path: str, body: Any
) -> None:
    member = client.request(method, path, json=body, headers=accounts.bearer("bob"))
    assert member.status_code == 403
    assert member.json()["code"] == "forbidden"
    assert client.request(method, path, json=body).status_code == 401
    alice = accounts.bearer("alice")
    assert client.get("/api/admin/pattern-sets", headers=alice).json()["pattern_sets"] == []
    assert client.get("/api/admin/people-lists", headers=alice).json()["people_lists"] == []


BAD_PATTERNS = [
    ({"toml": PATTERNS.replace('"MAT/88213", ', '"MAT/88213", "MAT/1", ')},
     "pattern set 'x': entry 1 (matter): example match[2] is not found"),
    ({"toml": PATTERNS.replace("no_match = [\"MAT/8821\"]", 'no_match = ["MAT/50213"]')},
     "pattern set 'x': entry 1 (matter): example no_match[1] is found"),
    ({"toml": "[[pattern]]\nlabel = 'acc'\nregex = ['(\\d+)+']\n"},
     "pattern set 'x': entry 1 (acc): regex 1 is refused:"),
    ({"toml": "[[pattern]]\nlabel = 'acc'\nregex = ['ACC-\\d{4,}']\n"},
     "no length bound"),
    ({"toml": "[[pattern]]\nlabel = 'email'\nregex = ['A\\d{4}']\n"}, "is a built-in kind"),
    ({"toml": "[[pattern\nlabel = 'acc'"}, "pattern set 'x' is not TOML"),
    ({"toml": 7}, "'toml' is the pattern set's text, a string"),
    ({"patterns": [{"label": "acc", "regex": "A\\d{4}", "context_window": 1.5}]},
     "entry 1: context_window must be a string, a whole number or a list of strings"),
    ({"patterns": "A\\d{4}"}, "'patterns' is a list of entries"),
    ({"toml": PATTERNS, "patterns": []}, "one of the two"),
    ({}, "send JSON with 'toml'"),
]  # fmt: skip
BAD_PEOPLE = [
    ({"csv": "Henrietta\n"}, "people list 'x', line 1: expected given names, family name"),
    ({"csv": "a,b\nHenrietta,Quillfeather,Etta,extra\n"}, "people list 'x', line 2"),
    ({"people": [{"given": "Henrietta"}]}, "people list 'x', row 1: family is required"),
    ({"people": [{"given": "Henrietta", "family": "Quill", "nick": "E"}]}, "unknown field"),
    ({"people": [{"family": "Quill", "aliases": ["E|tta"]}]}, "an alias cannot hold | or ;"),
    ({"people": {"family": "Quill"}}, "'people' is a list of rows"),
    ({"csv": None}, "'csv' is the people list's text, a string"),
]


@pytest.mark.parametrize(
    ("path", "body", "reason"),
    [("pattern-sets", b, r) for b, r in BAD_PATTERNS]
    + [("people-lists", b, r) for b, r in BAD_PEOPLE],
)
def test_a_bad_definition_is_refused_with_its_reason_and_nothing_stored(
    client: TestClient, accounts: Accounts, path: str, body: Any, reason: str
) -> None:
    alice = accounts.bearer("alice")
    refused = client.put(f"/api/admin/{path}/x", json=body, headers=alice)
    assert refused.status_code == 400, refused.text
    answer = refused.json()
    assert answer["code"] == "bad_request"
    assert reason in answer["message"]
    assert not any(value in answer["message"] for value in (*VALUES, "88213", "Henrietta"))
    assert client.get(f"/api/admin/{path}/x", headers=alice).status_code == 404
    audit = client.get("/api/audit?format=csv", headers=alice).text
    assert ".set" not in audit


def test_a_bad_name_or_body_is_refused(client: TestClient, accounts: Accounts) -> None:
    alice = accounts.bearer("alice")
    refused = client.put(
        "/api/admin/pattern-sets/x",
        content=b"not json",
        headers={**alice, "Content-Type": "application/json"},
    )
    assert refused.status_code == 400
    long = client.put(f"/api/admin/people-lists/{'n' * 201}", json={"csv": PEOPLE}, headers=alice)
    assert long.status_code == 400
    assert client.get("/api/admin/people-lists", headers=alice).json()["people_lists"] == []
