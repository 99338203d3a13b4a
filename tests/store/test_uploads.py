"""Pending uploads in the store: sealed to their row and owner, expired on time, bounded per
user, gone with their user; migration 0007."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from holdback.store import Store
from holdback.store.errors import UserNotFoundError
from holdback.store.schema import UploadRow
from holdback.store.uploads import StoredUpload, TooManyUploadsError, Uploads

pytestmark = pytest.mark.anyio

EMAIL = "canary.ada@lovelace-canary.example"
NAME = f"{EMAIL} notes.txt"
TEXT = f"Mail {EMAIL}, please."


async def _set(store: Store, upload_id: str, **values: object) -> None:
    async def work(session: AsyncSession) -> None:
        await session.execute(update(UploadRow).where(UploadRow.id == upload_id).values(**values))

    await store.database.write(work, what="test")


async def _rows(store: Store) -> int:
    async def work(session: AsyncSession) -> int:
        return int(await session.scalar(select(func.count()).select_from(UploadRow)) or 0)

    return await store.database.read(work)


async def test_an_upload_is_sealed_and_read_back_by_its_owner_only(store: Store) -> None:
    alice = await store.create_user("alice", None)
    bob = await store.create_user("bob", None)
    uploads = Uploads(store)
    upload_id = await uploads.add(alice.id, NAME, TEXT, size=123, media_type="text/plain")

    async def raw(session: AsyncSession) -> UploadRow:
        row = await session.get(UploadRow, upload_id)
        assert row is not None
        return row

    row = await store.database.read(raw)
    assert EMAIL.encode() not in bytes(row.name_ciphertext) + bytes(row.text_ciphertext)
    assert (row.size, row.chars, row.media_type, row.used_at) == (
        123,
        len(TEXT),
        "text/plain",
        None,
    )
    assert await uploads.take(bob.id, [upload_id]) == {}
    taken = await uploads.take(alice.id, [upload_id, "f" * 32])
    assert list(taken) == [upload_id]
    assert isinstance(taken[upload_id], StoredUpload)
    assert (taken[upload_id].name, taken[upload_id].text) == (NAME, TEXT)
    assert EMAIL not in repr(taken[upload_id])
    row = await store.database.read(raw)
    assert row.used_at is not None


async def test_a_ciphertext_moved_to_another_row_does_not_open(store: Store) -> None:
    alice = await store.create_user("alice", None)
    uploads = Uploads(store)
    first = await uploads.add(alice.id, "a.txt", TEXT, size=1, media_type="text/plain")
    second = await uploads.add(alice.id, "b.txt", "other", size=1, media_type="text/plain")

    async def move(session: AsyncSession) -> None:
        row = await session.get(UploadRow, first)
        assert row is not None
        await session.execute(
            update(UploadRow)
            .where(UploadRow.id == second)
            .values(text_ciphertext=row.text_ciphertext)
        )

    await store.database.write(move, what="test")
    taken = await uploads.take(alice.id, [first, second])
    assert list(taken) == [first]  # the altered row is as good as unknown


async def test_uploads_expire_unused_after_the_ttl_and_used_after_the_grace(
    store: Store,
) -> None:
    alice = await store.create_user("alice", None)
    uploads = Uploads(store, ttl=timedelta(hours=24), used_grace=timedelta(minutes=10))
    old = await uploads.add(alice.id, "old.txt", TEXT, size=1, media_type="text/plain")
    used = await uploads.add(alice.id, "used.txt", TEXT, size=1, media_type="text/plain")
    fresh = await uploads.add(alice.id, "fresh.txt", TEXT, size=1, media_type="text/plain")
    now = datetime.now(UTC)
    await _set(store, old, created_at=now - timedelta(hours=25))
    assert list(await uploads.take(alice.id, [used])) == [used]
    await _set(store, used, used_at=now - timedelta(minutes=11))
    assert await uploads.take(alice.id, [old]) == {}
    assert await uploads.take(alice.id, [used]) == {}
    assert list(await uploads.take(alice.id, [fresh])) == [fresh]  # taken twice: the grace
    assert list(await uploads.take(alice.id, [fresh])) == [fresh]
    assert await uploads.sweep() == 2
    assert await _rows(store) == 1


async def test_pending_uploads_are_bounded_per_user(store: Store) -> None:
    alice = await store.create_user("alice", None)
    bob = await store.create_user("bob", None)
    uploads = Uploads(store, max_pending=2)
    ids = [
        await uploads.add(alice.id, f"{n}.txt", TEXT, size=1, media_type="text/plain")
        for n in range(2)
    ]
    with pytest.raises(TooManyUploadsError):
        await uploads.add(alice.id, "3.txt", TEXT, size=1, media_type="text/plain")
    await uploads.add(bob.id, "b.txt", TEXT, size=1, media_type="text/plain")  # bob's own bound
    await uploads.take(alice.id, ids[:1])  # a used upload is no longer pending
    await uploads.add(alice.id, "3.txt", TEXT, size=1, media_type="text/plain")
    assert await uploads.discard(alice.id, ids) == 2
    assert await uploads.discard(bob.id, ids) == 0
    with pytest.raises(UserNotFoundError):
        await uploads.add("0" * 32, "x.txt", TEXT, size=1, media_type="text/plain")


async def test_a_users_uploads_go_with_them(store: Store) -> None:
    await store.create_user("admin", None)  # the first user is the admin, who stays
    alice = await store.create_user("alice", None)
    await Uploads(store).add(alice.id, "a.txt", TEXT, size=1, media_type="text/plain")
    assert await _rows(store) == 1
    await store.delete_user("alice", conversations_to=None)
    assert await _rows(store) == 0
