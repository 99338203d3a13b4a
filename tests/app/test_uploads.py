"""`POST /api/uploads`: each type read to text, masked spans without values, clear refusals,
sealed at rest, one user's uploads unknown to every other.

Canary values go in every file and file name; none may come back but the name the user sent,
nor reach a log, an error body or the database file in the clear.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from holdback.app.limits import body_limit
from holdback.app.uploads import UnknownAttachmentError, take_attachments
from holdback.errors import ConfigurationError
from holdback.providers.demo import DemoProvider
from tests.app.conftest import Accounts
from tests.app.documents import inflating_docx, make_docx, make_pdf
from tests.app.support import (
    CARD,
    EMAIL,
    IBAN,
    PHONE,
    TestClient,
    leaks,
    make_settings,
    running_app,
    store_op,
)

CANARIES = (EMAIL, PHONE, CARD, IBAN)
TEXT = f"Dear team,\nplease mail {EMAIL} or call {PHONE}.\nThe card is {CARD}.\n"
NAME_CANARY = "ada.report@lovelace-canary.example"  # a value in a file's name


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    with running_app(make_settings(tmp_path), DemoProvider(chunk_delay=0)) as c:
        yield c


def upload(
    client: TestClient,
    name: str,
    data: bytes,
    media_type: str = "application/octet-stream",
    **kwargs: Any,
) -> Any:
    return client.post("/api/uploads", files={"file": (name, data, media_type)}, **kwargs)


def check_summary(body: dict[str, Any], text: str) -> None:
    """The spans point at the values in the extracted text; the tokens sit at `at` in the
    preview; no value is anywhere in the answer but in the name."""
    answer = {k: v for k, v in body.items() if k != "name"}
    assert leaks(json.dumps(answer), CANARIES) == []
    for span in body["masked"]:
        assert span["end"] > span["start"]
        if span["at"] is not None:
            at = span["at"]
            assert body["preview"][at : at + len(span["token"])] == span["token"]
    assert sum(body["counts"].values()) == len(body["masked"])


@pytest.mark.parametrize(
    ("name", "media_type", "recorded"),
    [
        ("notes.txt", "text/plain", "text/plain"),
        ("notes.md", "text/markdown", "text/markdown"),
        ("table.csv", "text/csv", "text/csv"),
        ("data.json", "application/json", "application/json"),
        ("script.py", "text/x-python", "text/plain"),
        ("main.rs", "application/octet-stream", "text/plain"),
        ("README", "application/octet-stream", "text/plain"),
        ("notes.weird", "text/plain", "text/plain"),  # an unknown extension sent as text
    ],
)
def test_text_like_files_are_read_as_utf8(
    client: TestClient, name: str, media_type: str, recorded: str
) -> None:
    data = TEXT.encode("utf-8")
    if name.endswith(".json"):
        data = json.dumps({"note": TEXT}).encode()
    response = upload(client, name, data, media_type)
    assert response.status_code == 201, response.text
    body = response.json()
    assert set(body) >= {"id", "name", "size", "masked", "media_type", "chars", "preview"}
    assert body["name"] == name
    assert body["size"] == len(data)
    assert body["media_type"] == recorded
    assert {s["kind"] for s in body["masked"]} == {"email", "phone", "credit_card"}
    assert body["counts"] == {"email": 1, "phone": 1, "credit_card": 1}
    assert body["values"] == 3
    check_summary(body, TEXT)


def test_spans_point_into_the_extracted_text(client: TestClient) -> None:
    text = f"\ufeffFirst {EMAIL}, again {EMAIL}\r\nthen IBAN {IBAN}."
    body = upload(client, "a.txt", text.encode("utf-8")).json()
    extracted = text.lstrip("\ufeff").replace("\r\n", "\n")
    assert body["chars"] == len(extracted)
    assert [extracted[s["start"] : s["end"]] for s in body["masked"]] == [EMAIL, EMAIL, IBAN]
    # One token per value: the same address twice is one value, masked twice.
    assert [s["token"] for s in body["masked"]] == ["<EMAIL_1>", "<EMAIL_1>", "<IBAN_1>"]
    assert body["values"] == 2
    assert body["preview"] == "First <EMAIL_1>, again <EMAIL_1>\nthen IBAN <IBAN_1>."
    assert body["preview_complete"] is True
    check_summary(body, extracted)


def test_utf16_with_a_byte_order_mark_is_read(client: TestClient) -> None:
    body = upload(client, "export.csv", TEXT.encode("utf-16")).json()
    assert body["chars"] == len(TEXT)
    assert body["counts"]["email"] == 1


def test_pdf_pages_are_read_through_pypdf(client: TestClient) -> None:
    data = make_pdf([f"Invoice for {EMAIL}", f"Pay with card {CARD} (page two)"])
    response = upload(client, "invoice.pdf", data, "application/pdf")
    assert response.status_code == 201, response.text
    body = response.json()
    assert body["media_type"] == "application/pdf"
    assert body["preview"] == "Invoice for <EMAIL_1>\n\nPay with card <CREDIT_CARD_1> (page two)"
    check_summary(body, "")


def test_a_pdf_with_an_empty_user_password_is_read(client: TestClient) -> None:
    data = make_pdf([f"Mail {EMAIL}"], password="")
    body = upload(client, "open.pdf", data).json()
    assert body["preview"] == "Mail <EMAIL_1>"


def test_docx_paragraphs_and_tables_are_read_through_python_docx(client: TestClient) -> None:
    data = make_docx([f"Contact {EMAIL}"], table=[["Name", "IBAN"], ["Ada", IBAN]])
    response = upload(client, "contract.docx", data)
    assert response.status_code == 201, response.text
    body = response.json()
    assert body["preview"] == ("Contact <EMAIL_1>\nName | IBAN\nAda | <IBAN_1>\nThe end.")
    assert body["media_type"].endswith("wordprocessingml.document")
    check_summary(body, "")


def test_a_long_preview_is_cut_at_a_token_boundary(client: TestClient) -> None:
    text = ("x" * 3990) + f" {EMAIL} " + ("y" * 5000) + f" {PHONE}"
    body = upload(client, "long.txt", text.encode()).json()
    assert body["preview_complete"] is False
    assert body["preview"].endswith("<EMAIL_1>")  # the token the cut fell in is kept whole
    assert body["masked"][0]["at"] == 3991
    assert body["masked"][1]["at"] is None  # past the preview
    assert body["counts"] == {"email": 1, "phone": 1}


# -- refusals -----------------------------------------------------------------------------


@pytest.fixture
def small(tmp_path: Path) -> Iterator[TestClient]:
    env = {"HOLDBACK_MAX_UPLOAD_BYTES": "4096", "HOLDBACK_MAX_UPLOAD_CHARS": "1000"}
    with running_app(make_settings(tmp_path, env), DemoProvider(chunk_delay=0)) as c:
        yield c


def refusal(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body: dict[str, Any] = response.json()
    assert body["code"] == code
    assert body["message"]
    assert leaks(response.text, (*CANARIES, NAME_CANARY)) == []
    return body


def test_a_file_over_the_byte_limit_is_refused(small: TestClient) -> None:
    # Just over: the route counts the file's bytes. Far over: the body limit refuses it
    # before it is read. Both say `upload_too_large`, with the limit.
    just_over = refusal(upload(small, "a.txt", b"a" * 4097), 413, "upload_too_large")
    assert just_over["limit"] == 4096
    refusal(upload(small, "a.txt", b"a" * 200_000), 413, "upload_too_large")


def test_text_over_the_character_limit_is_refused(small: TestClient) -> None:
    body = refusal(upload(small, "a.txt", ("é" * 1001).encode()), 413, "upload_too_long")
    assert body["limit"] == 1000
    assert upload(small, "a.txt", ("é" * 1000).encode()).status_code == 201


@pytest.mark.parametrize(
    ("name", "media_type", "data"),
    [
        ("photo.png", "image/png", b"\x89PNG\r\n\x1a\n" + b"\0" * 32),
        ("bundle.zip", "application/zip", b"PK\x05\x06" + b"\0" * 18),
        ("old.doc", "application/msword", b"\xd0\xcf\x11\xe0" + b"\0" * 60),
        ("sheet.xlsx", "application/octet-stream", b"PK\x03\x04"),
        ("blob", "application/octet-stream", b"\x00\x01\x02\xff\xfe"),
        ("noext", "image/jpeg", b"\xff\xd8\xff"),
    ],
)
def test_unsupported_types_are_refused(
    client: TestClient, name: str, media_type: str, data: bytes
) -> None:
    refusal(upload(client, name, data, media_type), 415, "unsupported_type")


@pytest.mark.parametrize(
    ("name", "data", "code"),
    [
        ("latin1.txt", f"caf\xe9 {EMAIL}".encode("latin-1"), "unreadable_file"),
        ("binary.txt", f"{EMAIL}\0\0".encode(), "unreadable_file"),
        ("fake.pdf", f"not a pdf {EMAIL}".encode(), "unreadable_file"),
        ("cut.pdf", make_pdf([f"Mail {EMAIL}"])[:300], "unreadable_file"),
        ("fake.docx", f"not a zip {EMAIL}".encode(), "unreadable_file"),
        ("bomb.docx", inflating_docx(200 * 1024 * 1024), "unreadable_file"),
        ("locked.pdf", make_pdf([f"Mail {EMAIL}"], password="s3cret"), "encrypted_file"),
        ("locked.docx", b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\0" * 504, "encrypted_file"),
        ("empty.txt", b"", "empty_file"),
        ("blank.md", b"  \n\t\n", "empty_file"),
        ("blank.pdf", make_pdf([""]), "empty_file"),
    ],
)
def test_unreadable_files_are_refused_with_a_reason(
    client: TestClient, caplog: pytest.LogCaptureFixture, name: str, data: bytes, code: str
) -> None:
    caplog.set_level(logging.DEBUG)
    refusal(upload(client, name, data), 400, code)
    assert leaks(caplog.text, CANARIES) == []


def test_a_malformed_upload_is_a_bad_request(client: TestClient) -> None:
    refusal(client.post("/api/uploads", content=b"plain", headers={"content-type": "text/plain"}),
            400, "bad_upload")  # fmt: skip
    refusal(client.post("/api/uploads", files={"other": ("a.txt", b"x")}), 400, "bad_upload")
    two = [("file", ("a.txt", b"one")), ("file", ("b.txt", b"two"))]
    refusal(client.post("/api/uploads", files=two), 400, "bad_upload")
    refusal(client.post("/api/uploads", data={"file": "not a file"}), 400, "bad_upload")


def test_pending_uploads_per_user_are_bounded(client: TestClient) -> None:
    ids = [upload(client, f"{n}.txt", b"note").json()["id"] for n in range(20)]
    refusal(upload(client, "one-more.txt", b"note"), 429, "too_many_uploads")
    assert client.delete(f"/api/uploads/{ids[0]}").status_code == 204
    assert upload(client, "one-more.txt", b"note").status_code == 201


# -- at rest, and whose ---------------------------------------------------------------------


def test_uploads_are_sealed_at_rest(
    tmp_path: Path, client: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    files = [
        (f"{NAME_CANARY}.txt", TEXT.encode()),
        (f"{NAME_CANARY}.pdf", make_pdf([TEXT.replace("\n", " ")])),
        (f"{NAME_CANARY}.docx", make_docx([TEXT], table=[["IBAN", IBAN]])),
    ]
    ids = []
    for name, data in files:
        response = upload(client, name, data)
        assert response.status_code == 201, response.text
        assert response.json()["name"] == name  # the user's own name, sent back once
        ids.append(response.json()["id"])
    data_dir = tmp_path / "data"
    stored = b"".join(p.read_bytes() for p in data_dir.glob("holdback.db*"))
    for value in (*CANARIES, NAME_CANARY):
        for form in {value, value.lower(), "".join(c for c in value if c.isalnum())}:
            assert form.encode() not in stored
            assert form.encode("utf-16-le") not in stored
    with contextlib.closing(sqlite3.connect(data_dir / "holdback.db")) as db:
        rows = db.execute("SELECT id, size, chars, media_type, used_at FROM uploads").fetchall()
    assert sorted(r[0] for r in rows) == sorted(ids)
    assert all(r[4] is None for r in rows)
    assert leaks(caplog.text, (*CANARIES, NAME_CANARY)) == []
    # Their text comes back whole to the owner's message, through take_attachments.
    user_id = client.get("/api/session").json()["user"]["id"]
    documents = store_op(data_dir, lambda store: take_attachments(store, user_id, ids))
    assert [d.name for d in documents] == [name for name, _ in files]
    assert documents[0].text == TEXT
    assert EMAIL in documents[1].text
    assert IBAN in documents[2].text
    assert leaks(repr(documents), (*CANARIES, NAME_CANARY)) == []


@pytest.fixture
def team(tmp_path: Path, accounts: Accounts) -> Iterator[TestClient]:
    settings = make_settings(tmp_path, auth="password")
    with running_app(settings, DemoProvider(chunk_delay=0)) as c:
        yield c


def test_another_users_upload_is_unknown(team: TestClient, accounts: Accounts) -> None:
    alice, bob = accounts.bearer("alice"), accounts.bearer("bob")
    assert upload(team, "a.txt", b"note").status_code == 401  # signed out
    upload_id = upload(team, "a.txt", TEXT.encode(), headers=alice).json()["id"]
    bob_id = team.get("/api/session", headers=bob).json()["user"]["id"]
    alice_id = team.get("/api/session", headers=alice).json()["user"]["id"]

    async def bob_takes(store: Any) -> str:
        try:
            await take_attachments(store, bob_id, [upload_id])
        except UnknownAttachmentError as exc:
            return exc.code
        return "taken"

    assert store_op(accounts.data_dir, bob_takes) == "unknown_attachment"
    assert team.delete(f"/api/uploads/{upload_id}", headers=bob).status_code == 404
    # Still alice's, untouched by bob's attempts.
    taken = store_op(
        accounts.data_dir, lambda store: take_attachments(store, alice_id, [upload_id])
    )
    assert [d.text for d in taken] == [TEXT]
    assert team.delete(f"/api/uploads/{upload_id}", headers=alice).status_code == 204
    assert team.delete(f"/api/uploads/{upload_id}", headers=alice).status_code == 404


def test_a_cross_site_upload_is_refused(client: TestClient) -> None:
    response = upload(client, "a.txt", b"note", headers={"origin": "https://evil.example"})
    assert response.status_code == 403


def test_the_upload_bounds_are_settings(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    assert (settings.max_upload_bytes, settings.max_upload_chars) == (10 * 1024 * 1024, 200_000)
    assert body_limit(settings, "/api/uploads") > settings.max_upload_bytes
    assert body_limit(settings, "/api/conversations") == settings.max_body_bytes
    for name, value in (("HOLDBACK_MAX_UPLOAD_BYTES", "12"), ("HOLDBACK_MAX_UPLOAD_CHARS", "x")):
        with pytest.raises(ConfigurationError, match=name):
            make_settings(tmp_path, {name: value})
