"""Raw byte scans: no original value is ever written to the database files, in any form.

Canary values go in through every door the store has (vault, term lists, messages, audit,
updates, rotation); then the bytes of the database files themselves are searched. A control
string stored in the clear must be found, which proves the scan can see what is stored.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from holdback.store import Store, VaultItem, VaultKey, rotate_vault_key
from holdback.store.schema import VaultEntryRow
from tests.store.conftest import sqlite_url
from tests.support.postgres import PostgresServer

pytestmark = pytest.mark.anyio

CANARIES = [
    "canary.sarah.7f3a9@example.org",
    "Zqx Canaryname Wvb",
    "+1 555 0199 8877",
    "4111-1111-CANARY-1111",
    "Ünïcødé-Çanary-名前",
]
TERM_CANARIES = ["Acmecanary Holdings", "Globexcanary Intl"]
CONTROL = "control-visible-6d1e2"


def encodings(text: str) -> list[bytes]:
    return [text.encode("utf-8"), text.encode("utf-16-le")]


def sqlite_files(db: Path) -> list[Path]:
    candidates = [db, *(db.with_name(db.name + s) for s in ("-wal", "-shm", "-journal"))]
    return [p for p in candidates if p.exists()]


def scan(files: list[Path], needles: list[str]) -> list[tuple[str, str]]:
    found = []
    for path in files:
        try:
            data = path.read_bytes()
        except FileNotFoundError:  # PostgreSQL rewrites some files (relcache init) at any time
            continue
        for needle in needles:
            if any(form in data for form in encodings(needle)):
                found.append((path.name, needle))
    return found


async def fill(store: Store) -> tuple[str, dict[str, str]]:
    """Store every canary through every door; returns a conversation id and its vault."""
    user = await store.create_user("alice", "$argon2id$not-a-value")
    chat = await store.create_conversation(user.id, "About <NAME_1>")
    tokens = await store.assign_tokens(
        chat.id, [VaultItem("email", v, v.lower()) for v in CANARIES]
    )
    message = await store.add_message(
        chat.id, "user", f"{CONTROL} mail {tokens[0]} and {tokens[1]}", meta={"n": 1}
    )
    reply = await store.add_message(chat.id, "assistant", "", status="incomplete")
    await store.update_message(
        reply.id,
        text=f"Writing to {tokens[0]} now.",
        parts={"reasoning": f"{tokens[2]} is a phone"},
        status="complete",
        finish_reason="stop",
    )
    await store.record_audit(chat.id, message.id, "masked", {"email": len(CANARIES)})
    await store.save_term_list("clients", "client", "sensitive", TERM_CANARIES)
    # Overwrite once: the first ciphertext must not leave plaintext behind either.
    await store.save_term_list("clients", "client", "sensitive", [*TERM_CANARIES, "x"])
    vault = await store.load_vault(chat.id)
    assert sorted(vault.values()) == sorted(CANARIES)
    return chat.id, vault


async def test_sqlite_files_never_hold_an_original_value(tmp_path: Path) -> None:
    db = tmp_path / "holdback.db"
    old_key = VaultKey.generate()
    store = await Store.open(sqlite_url(db), vault_key=old_key)
    await fill(store)
    needles = CANARIES + TERM_CANARIES

    # While open, before any checkpoint: main file, WAL and shared memory.
    files = sqlite_files(db)
    assert db.with_name("holdback.db-wal") in files
    assert (("holdback.db-wal", CONTROL) in scan(files, [CONTROL])) or scan([db], [CONTROL])
    assert scan(files, needles) == []

    await store.database.autocommit("PRAGMA wal_checkpoint(TRUNCATE)")
    assert scan([db], [CONTROL]) == [("holdback.db", CONTROL)]
    assert scan(sqlite_files(db), needles) == []
    await store.close()
    assert scan(sqlite_files(db), needles) == []

    # Rotation re-seals everything; the new ciphertexts hold no plaintext either.
    new_key = VaultKey.generate()
    await rotate_vault_key(sqlite_url(db), old_key, new_key)
    assert scan(sqlite_files(db), needles) == []
    reopened = await Store.open(sqlite_url(db), vault_key=new_key)
    lists = await reopened.load_term_lists()
    await reopened.close()
    assert lists[0].terms == (*TERM_CANARIES, "x")
    assert scan(sqlite_files(db), needles) == []


@pytest.mark.postgres
async def test_postgres_cluster_files_never_hold_an_original_value(
    postgres_server: PostgresServer, postgres_url: str
) -> None:
    if postgres_server.workdir is None:
        pytest.skip("an external PostgreSQL server: its files are not readable here")
    store = await Store.open(postgres_url, vault_key=VaultKey.generate())
    await fill(store)
    await store.close()
    postgres_server.execute("CHECKPOINT")
    files = [p for p in postgres_server.workdir.rglob("*") if p.is_file()]
    assert scan(files, [CONTROL]) != []  # the scan does see stored text
    assert scan(files, CANARIES + TERM_CANARIES) == []


async def test_deleting_a_conversation_shreds_its_vault_from_the_sqlite_files(
    tmp_path: Path,
) -> None:
    db = tmp_path / "holdback.db"
    store = await Store.open(sqlite_url(db), vault_key=VaultKey.generate())
    chat, vault = await fill(store)
    kept_user = await store.ensure_local_user()
    kept = await store.create_conversation(kept_user.id)
    kept_tokens = await store.assign_tokens(kept.id, [VaultItem("name", "Kept Person", "kept")])
    await store.add_message(kept.id, "user", f"hello {kept_tokens[0]}")

    async def ciphertexts(session: AsyncSession) -> list[bytes]:
        rows = await session.scalars(
            select(VaultEntryRow.value_ciphertext).where(VaultEntryRow.conversation_id == chat)
        )
        return [bytes(b) for b in rows]

    blobs = await store.database.read(ciphertexts)
    assert len(blobs) == len(CANARIES)
    await store.database.autocommit("PRAGMA wal_checkpoint(TRUNCATE)")
    raw = b"".join(p.read_bytes() for p in sqlite_files(db))
    assert all(blob in raw for blob in blobs)  # the control: the scan sees ciphertext

    owner = await store.get_user_by_name("alice")
    assert owner is not None
    assert await store.delete_conversation(chat, owner.id)
    assert await store.load_vault(chat) == {}
    assert await store.list_messages(chat) == []
    # Without the vault, what remains of the stored text is tokens.
    remaining = await store.list_messages(kept.id)
    assert [m.text for m in remaining] == ["hello <NAME_1>"]
    await store.close()

    raw = b"".join(p.read_bytes() for p in sqlite_files(db))
    assert [blob for blob in blobs if blob in raw] == []
    assert scan(sqlite_files(db), [*CANARIES, *vault.values()]) == []
