"""A team's pattern sets and people lists in the store: saved, read back, versioned, deleted,
sealed (no name, example or regex in the database files, in logs or in errors), re-sealed by a
key rotation, and bound to their row."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncSession

from holdback.store import Store, VaultKey, rotate_vault_key
from holdback.store.errors import InvalidRecordError, VaultEntryCorruptError
from holdback.store.schema import TeamDetectorRow
from holdback.store.team_detectors import MAX_TEXT_CHARS
from tests.store.conftest import sqlite_url
from tests.store.test_canaries import scan, sqlite_files

pytestmark = pytest.mark.anyio

# Made-up people and identifiers, in no other test.
NAME_CANARIES = ["Quillonette", "Vantablackwood", "Zephyrine"]
PEOPLE = "given,family,aliases\nQuillonette Zephyrine,Vantablackwood,Quilly\n"
ID_CANARY = "QCX-7731-40952"
PATTERNS = f"""[[pattern]]
label = "quill"
regex = ['QCX-\\d{{4}}-\\d{{5}}']
match = ["{ID_CANARY}"]
"""
CONTROL = "control-set-name-81f4"  # a set's name is in the clear: the scan must find it


async def test_saved_read_back_versioned_and_deleted(store: Store) -> None:
    assert await store.load_team_detectors() == []
    empty = await store.team_detectors_version()
    assert empty == (0, "")
    await store.save_team_detector("patterns", "ids", PATTERNS)
    await store.save_team_detector("people", "clients", PEOPLE)
    first = await store.team_detectors_version()
    assert first[0] == 2
    entries = await store.load_team_detectors()
    assert [(e.source, e.name, e.text) for e in entries] == [
        ("patterns", "ids", PATTERNS),
        ("people", "clients", PEOPLE),
    ]
    assert [e.name for e in await store.load_team_detectors("people")] == ["clients"]
    one = await store.load_team_detector("people", "clients")
    assert one is not None
    assert one.text == PEOPLE
    assert await store.load_team_detector("patterns", "clients") is None  # per source
    # A replacement keeps the row and changes the version.
    await store.save_team_detector("people", "clients", PEOPLE + "Ann,Other,\n")
    again = await store.team_detectors_version()
    assert again[0] == 2
    assert again != first
    assert await store.delete_team_detector("people", "clients")
    assert not await store.delete_team_detector("people", "clients")
    assert (await store.team_detectors_version())[0] == 1
    # The record's repr shows no definition.
    assert ID_CANARY not in repr(await store.load_team_detectors())


@pytest.mark.parametrize(
    ("source", "name", "text"),
    [
        ("rules", "x", "a"),
        ("people", "", PEOPLE),
        ("people", "tab\there", PEOPLE),
        ("people", "x" * 201, PEOPLE),
        ("people", "big", "x" * (MAX_TEXT_CHARS + 1)),
    ],
)
async def test_a_malformed_entry_is_refused_and_nothing_stored(
    store: Store, source: str, name: str, text: str
) -> None:
    with pytest.raises(InvalidRecordError) as caught:
        await store.save_team_detector(source, name, text)  # type: ignore[arg-type]
    assert "Quill" not in str(caught.value)
    assert await store.load_team_detectors() == []


async def test_a_ciphertext_moved_to_another_row_does_not_open(store: Store) -> None:
    await store.save_team_detector("people", "a", PEOPLE)
    await store.save_team_detector("people", "b", "x,y\n")
    a = await store.load_team_detector("people", "a")
    assert a is not None

    async def move(session: AsyncSession) -> None:
        blob = (await session.get(TeamDetectorRow, ("people", "a"))).definition_ciphertext  # type: ignore[union-attr]
        await session.execute(
            update(TeamDetectorRow)
            .where(TeamDetectorRow.name == "b")
            .values(definition_ciphertext=blob)
        )

    await store.database.write(move, what="moving a ciphertext")
    with pytest.raises(VaultEntryCorruptError) as caught:
        await store.load_team_detector("people", "b")
    assert not any(n in str(caught.value) for n in NAME_CANARIES)


async def test_no_name_or_identifier_in_the_database_files_or_logs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    db = tmp_path / "holdback.db"
    old_key = VaultKey.generate()
    store = await Store.open(sqlite_url(db), vault_key=old_key)
    await store.save_team_detector("patterns", CONTROL, PATTERNS)
    await store.save_team_detector("people", "clients", PEOPLE)
    await store.save_team_detector("people", "clients", PEOPLE + "Ann,Other,\n")
    await store.close()
    needles = [*NAME_CANARIES, ID_CANARY, "QCX-"]
    assert scan(sqlite_files(db), [CONTROL]) != []  # the scan sees what is in the clear
    assert scan(sqlite_files(db), needles) == []

    new_key = VaultKey.generate()
    report = await rotate_vault_key(sqlite_url(db), old_key, new_key)
    assert report.team_detectors == 2
    assert scan(sqlite_files(db), needles) == []
    reopened = await Store.open(sqlite_url(db), vault_key=new_key)
    try:
        texts = [e.text for e in await reopened.load_team_detectors()]
    finally:
        await reopened.close()
    assert texts == [PATTERNS, PEOPLE + "Ann,Other,\n"]
    logged = caplog.text
    assert not any(n in logged for n in needles)
