"""Search and export over HTTP: a user finds their messages by a word or by an original value
(through the vault's keyed hash), sees each snippet restored as they may read it, and exports
a conversation as Markdown or JSON; nobody finds or exports what they may not read, and every
value shown plain or masked is on the reveal trail.
"""

from __future__ import annotations

import json
import logging
import random
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from holdback.app.export_api import current_path, markdown
from holdback.app.search_api import window
from holdback.store.records import Conversation, Message
from holdback.tokens import TOKEN_RE
from tests.app.support import CARD, EMAIL, PHONE, EchoUpstream, TestClient, leaks
from tests.app.test_shares_http import (
    TEXT,
    Team,
    admin,
    chat_as,
    read,
    reveals,
    share,
    team,
    team_app,
    team_template,
)

__all__ = ["team", "team_template"]  # fixtures

CANARIES = (EMAIL, PHONE, CARD)
NOTE = f"The quarterly budget goes to {EMAIL} today."


@pytest.fixture
def client(tmp_path: Path, team: Team, upstream: EchoUpstream) -> Iterator[TestClient]:
    with team_app(tmp_path, upstream) as c:
        yield c


def search(client: TestClient, team: Team, name: str, q: str) -> list[dict[str, Any]]:
    response = client.get("/api/search", params={"q": q}, headers=team.bearer(name))
    assert response.status_code == 200, response.text
    assert response.headers["cache-control"] == "no-store"
    body = response.json()
    assert set(body) == {"results"}
    for result in body["results"]:
        assert set(result) == {"conversation_id", "message_id", "snippet"}
    results: list[dict[str, Any]] = body["results"]
    return results


def export(client: TestClient, team: Team, name: str, cid: str, fmt: str) -> Any:
    return client.get(
        f"/api/conversations/{cid}/export", params={"format": fmt}, headers=team.bearer(name)
    )


# -- search -------------------------------------------------------------------------------


def test_a_word_finds_the_owners_messages_restored(client: TestClient, team: Team) -> None:
    cid = chat_as(client, team, "bob", NOTE)
    chat_as(client, team, "bob", "Something else entirely.", cid)
    messages = read(client, team, "bob", cid)["messages"]
    found = search(client, team, "bob", "BUDGET")
    # Newest first: the echo, then the question.
    assert [(r["conversation_id"], r["message_id"]) for r in found] == [
        (cid, messages[1]["id"]),
        (cid, messages[0]["id"]),
    ]
    assert all(EMAIL in r["snippet"] and "quarterly budget" in r["snippet"] for r in found)
    assert search(client, team, "bob", "budget quarterly") == found  # every word, any order
    assert search(client, team, "bob", "budget nowhere") == []


def test_an_original_value_is_found_by_its_keyed_hash(client: TestClient, team: Team) -> None:
    cid = chat_as(client, team, "bob", TEXT)
    user_message = read(client, team, "bob", cid)["messages"][0]["id"]
    formats = ("(415) 555-2671", "415.555.2671", "4155552671", "14155552671", "+14155552671")
    for query in (EMAIL, EMAIL.upper(), *formats):
        found = search(client, team, "bob", query)
        assert {r["conversation_id"] for r in found} == {cid}, query
        assert user_message in {r["message_id"] for r in found}, query
    # A value with words: both must be there.
    assert search(client, team, "bob", f"mail {EMAIL}")
    assert search(client, team, "bob", f"invoice {EMAIL}") == []
    # A value nobody holds finds nothing.
    assert search(client, team, "bob", "nobody.else@lovelace-canary.example") == []


def test_nothing_is_found_across_users(client: TestClient, team: Team) -> None:
    chat_as(client, team, "bob", NOTE)
    for query in ("budget", EMAIL, "(415) 555-2671"):
        assert search(client, team, "carol", query) == []


def test_a_tokens_spelling_finds_nothing(client: TestClient, team: Team) -> None:
    chat_as(client, team, "bob", TEXT)
    for query in ("EMAIL", "email_1", "<EMAIL_1>", "PHONE_1", "CREDIT_CARD", "<", "_1"):
        assert search(client, team, "bob", query) == [], query


def test_a_shared_viewer_finds_words_never_values_they_do_not_see(
    client: TestClient, team: Team
) -> None:
    cid = chat_as(client, team, "bob", NOTE)
    share(client, team, cid, user="carol", access="read")
    found = search(client, team, "carol", "budget")
    assert len(found) == 2
    assert all("[email address]" in r["snippet"] for r in found)
    assert leaks(json.dumps(found), CANARIES) == []
    # At `label`, the value itself finds nothing: a hit would confirm it.
    assert search(client, team, "carol", EMAIL) == []
    assert client.get("/api/audit?user=carol", headers=team.bearer("alice")).json() == {
        "events": []
    }
    admin(client, team, "PUT", "/api/admin/policies/default/email", json={"level": "masked"})
    found = search(client, team, "carol", "budget")
    assert all("c\u2022\u2022\u2022@lovelace-canary.example" in r["snippet"] for r in found)
    assert leaks(json.dumps(found), CANARIES) == []
    assert search(client, team, "carol", EMAIL) == []  # masked is not plain either
    events = client.get("/api/audit?user=carol", headers=team.bearer("alice")).json()["events"]
    assert {(e["message_id"], e["token"], e["level"]) for e in events} == {
        (r["message_id"], "<EMAIL_1>", "masked") for r in found
    }
    # Shown plain, the value is found.
    admin(client, team, "POST", "/api/admin/groups", json={"name": "ops"})
    admin(client, team, "POST", "/api/admin/groups/ops/members/carol")
    admin(client, team, "PUT", "/api/admin/policies/ops/email", json={"level": "plain"})
    found = search(client, team, "carol", EMAIL.upper())
    assert len(found) == 2
    assert all(EMAIL in r["snippet"] for r in found)


def test_a_never_restored_kind_is_not_found_by_value_even_by_its_owner(
    client: TestClient, team: Team
) -> None:
    chat_as(client, team, "bob", NOTE)
    assert search(client, team, "bob", EMAIL)
    admin(client, team, "POST", "/api/admin/never-restore", json={"kind": "email"})
    assert search(client, team, "bob", EMAIL) == []
    found = search(client, team, "bob", "budget")
    assert found
    assert all(EMAIL not in r["snippet"] for r in found)


def test_the_owners_search_is_on_the_trail(client: TestClient, team: Team) -> None:
    cid = chat_as(client, team, "bob", NOTE)
    before = len(reveals(team))
    found = search(client, team, "bob", "budget")
    rows = reveals(team)[before:]
    assert len(rows) == 2
    events = client.get(f"/api/audit?user=bob&conversation={cid}", headers=team.bearer("alice"))
    latest = events.json()["events"][:2]
    assert {(e["message_id"], e["token"], e["level"]) for e in latest} == {
        (r["message_id"], "<EMAIL_1>", "plain") for r in found
    }


def test_snippets_never_cut_a_value(client: TestClient, team: Team) -> None:
    packed = "|".join([EMAIL, CARD, PHONE] * 6)  # no space for the window to cut at
    text = f"start {packed} middle-marker {packed} end"
    cid = chat_as(client, team, "bob", text)
    share(client, team, cid, user="carol", access="read")
    admin(client, team, "PUT", "/api/admin/policies/default/email", json={"level": "masked"})
    for name in ("bob", "carol"):
        found = search(client, team, name, "middle-marker")
        assert found, name
        for r in found:
            snippet = r["snippet"]
            assert "middle-marker" in snippet
            assert not TOKEN_RE.search(snippet)
            # Every piece of a canary in the snippet is the whole canary (or its mask).
            for piece in re.split(r"[ |…]+", snippet):
                if "canary" in piece and name == "bob":
                    assert piece == EMAIL, piece
            assert leaks(snippet, CANARIES if name == "carol" else ()) == []


def blank_tokens(text: str) -> str:
    return TOKEN_RE.sub(lambda m: "\0" * len(m.group()), text)


def test_the_window_never_cuts_a_token() -> None:
    rng = random.Random(7)
    parts = ["<EMAIL_1>", "<PHONE_12>", "<CREDIT_CARD_3>", "word", "x", " ", " ", ",", "EMAIL_1"]
    for _ in range(400):
        text = "".join(rng.choice(parts) for _ in range(rng.randint(1, 120)))
        blanked = blank_tokens(text)
        spots = [m.span() for m in TOKEN_RE.finditer(text)]
        spots += [m.span() for m in re.finditer("word", blanked)]
        if not spots:
            continue
        start, end = rng.choice(spots)
        lo, hi = window(text, start, end)
        assert lo <= start
        assert end <= hi
        for m in TOKEN_RE.finditer(text):
            assert not m.start() < lo < m.end(), (text, lo)
            assert not m.start() < hi < m.end(), (text, hi)


@pytest.mark.parametrize(
    "q", ["", "   ", "x" * 201, "a\x00b", "one two three four five six seven eight nine"]
)
def test_bad_searches_are_refused(client: TestClient, team: Team, q: str) -> None:
    response = client.get("/api/search", params={"q": q}, headers=team.bearer("bob"))
    assert response.status_code == 400
    assert response.json()["code"] == "bad_request"


def test_search_needs_a_user(client: TestClient) -> None:
    assert client.get("/api/search", params={"q": "budget"}).status_code == 401


# -- export -------------------------------------------------------------------------------


def test_the_owner_exports_markdown_and_json(client: TestClient, team: Team) -> None:
    cid = chat_as(client, team, "bob", TEXT)
    chat_as(client, team, "bob", "Second question", cid)
    body = read(client, team, "bob", cid)
    md = export(client, team, "bob", cid, "md")
    assert md.status_code == 200
    assert md.headers["content-type"].startswith("text/markdown")
    disposition = md.headers["content-disposition"]
    assert disposition.startswith("attachment; filename=")
    assert disposition.endswith('.md"')
    assert leaks(disposition, CANARIES) == []
    assert md.headers["cache-control"] == "no-store"
    text = md.text
    assert text.startswith(f"# {body['title']}\n")
    assert text.count("\n### User") == 2
    assert text.count("\n### Assistant") == 2
    assert EMAIL in text
    assert PHONE in text
    assert CARD in text
    for m in body["messages"]:
        assert m["created_at"] in text
    as_json = export(client, team, "bob", cid, "json")
    assert as_json.status_code == 200
    assert as_json.headers["content-disposition"].endswith('.json"')
    data = as_json.json()
    assert data["messages"] == body["messages"]
    assert data["current_path"] == body["current_path"] == [m["id"] for m in body["messages"]]
    for key in ("id", "title", "created_at", "system_prompt", "model", "streaming"):
        assert data[key] == body[key], key
    assert (data["title"], data["view"], data["owner"], data["access"]) == (
        body["title"],
        "owner",
        "bob",
        "owner",
    )
    assert export(client, team, "bob", cid, "pdf").status_code == 400


def test_a_restricted_viewer_exports_without_a_hidden_value(client: TestClient, team: Team) -> None:
    cid = chat_as(client, team, "bob", TEXT)
    share(client, team, cid, user="carol", access="read")
    admin(client, team, "PUT", "/api/admin/policies/default/email", json={"level": "masked"})
    shown = read(client, team, "carol", cid)
    before = len(reveals(team))
    for fmt in ("md", "json"):
        response = export(client, team, "carol", cid, fmt)
        assert response.status_code == 200, fmt
        assert leaks(response.content.decode("utf-8"), CANARIES) == [], fmt
        assert "[phone number]" in response.text
        assert "c\u2022\u2022\u2022@lovelace-canary.example" in response.text
    data = export(client, team, "carol", cid, "json").json()
    assert data["messages"] == shown["messages"]
    assert (data["view"], data["shared"], data["owner"], data["access"]) == (
        "shared",
        True,
        "bob",
        "read",
    )
    # Each export showed the masked e-mail address in the title and both messages.
    rows = reveals(team)[before:]
    assert len(rows) == 3 * 3
    assert {(r[4], r[6]) for r in rows} == {("<EMAIL_1>", "masked")}


def test_nobody_else_exports(client: TestClient, team: Team) -> None:
    cid = chat_as(client, team, "bob", TEXT)
    for name in ("erin", "alice"):  # alice is an admin: still not hers to read
        for fmt in ("md", "json"):
            response = export(client, team, name, cid, fmt)
            assert response.status_code == 404, (name, fmt)
            assert response.json() == {"code": "not_found", "message": "no such conversation"}
    missing = "/api/conversations/" + "0" * 32 + "/export"
    assert client.get(missing, headers=team.bearer("bob")).status_code == 404
    assert client.get(f"/api/conversations/{cid}/export").status_code == 401


def test_no_canary_in_the_logs_or_the_trail(
    tmp_path: Path, team: Team, upstream: EchoUpstream, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)  # the driver's statements and parameters too
    with team_app(tmp_path, upstream) as client:
        cid = chat_as(client, team, "bob", TEXT)
        share(client, team, cid, user="carol", access="read")
        queries = (EMAIL, "(415) 555-2671", "14155552671", "card", f"x {CARD}", "x" * 300)
        for name in ("bob", "carol"):
            for q in queries:
                client.get("/api/search", params={"q": q}, headers=team.bearer(name))
            for fmt in ("md", "json"):
                export(client, team, name, cid, fmt)
    assert "holdback is ready" in caplog.text
    # The test client's own log names each request's URL, the query in it: not the server's.
    server_lines = "\n".join(
        r.getMessage() for r in caplog.records if not r.name.startswith("httpx")
    )
    assert leaks(server_lines, CANARIES) == []
    tables = json.dumps([team.db_rows(t) for t in ("reveal_events", "admin_events")], default=str)
    assert leaks(tables, CANARIES) == []


# -- the branch exported ------------------------------------------------------------------


def _message(ident: str, seq: int, parent: str | None) -> Message:
    now = datetime.now(UTC)
    return Message(ident, "c", seq, "user", "", {}, "complete", None, {}, now, now, parent)


def _conversation(leaf: str | None) -> Conversation:
    now = datetime.now(UTC)
    return Conversation("c", "o", "", now, now, current_leaf=leaf)


def test_the_current_path() -> None:
    linear = [_message(i, n, None) for n, i in enumerate("abc", start=1)]
    assert [m.id for m in current_path(_conversation(None), linear[::-1])] == ["a", "b", "c"]
    # a - b - c, and b' (d) regenerated beside b with its own reply e.
    tree = [
        _message("a", 1, None),
        _message("b", 2, "a"),
        _message("c", 3, "b"),
        _message("d", 4, "a"),
        _message("e", 5, "d"),
    ]
    assert [m.id for m in current_path(_conversation("c"), tree)] == ["a", "b", "c"]
    assert [m.id for m in current_path(_conversation("e"), tree)] == ["a", "d", "e"]
    assert [m.id for m in current_path(_conversation(None), tree)] == ["a", "d", "e"]
    assert [m.id for m in current_path(_conversation("d"), tree)] == ["a", "d"]
    assert [m.id for m in current_path(_conversation("gone"), tree)] == ["a", "d", "e"]
    looped = [_message("x", 1, "y"), _message("y", 2, "x")]
    assert {m.id for m in current_path(_conversation("y"), looped)} == {"x", "y"}
    assert current_path(_conversation(None), []) == []


def test_markdown_lists_attachments_and_unfinished_replies() -> None:
    body = {
        "title": "Two\nlines",
        "messages": [
            {
                "role": "user",
                "text": "See the file.",
                "created_at": "2025-01-02T03:04:05+00:00",
                "tool_calls": [],
                "status": "complete",
                "attachments": [{"index": 1, "size": 12, "media_type": "text/plain"}],
            },
            {
                "role": "assistant",
                "model": "demo",
                "text": "Cut",
                "created_at": "2025-01-02T03:04:06+00:00",
                "tool_calls": [{"call_id": "call_1", "name": "f", "arguments": "{}"}],
                "status": "incomplete",
                "finish_reason": "length",
            },
        ],
    }
    text = markdown(body)
    assert text.startswith("# Two lines\n")
    assert "### User · 2025-01-02T03:04:05+00:00" in text
    assert "- document 1 (text/plain, 12 bytes)" in text
    assert "### Assistant (demo) · 2025-01-02T03:04:06+00:00" in text
    assert "```json\n{}\n```" in text
    assert "*(incomplete: length)*" in text
