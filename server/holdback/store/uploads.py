"""Pending uploads: documents a user brought in, kept sealed until a message takes them.

The rules:
- An upload's file name and extracted text may hold values, so both are stored only as
  AES-256-GCM ciphertext, sealed with the vault key under the associated data
  `upload:` + id + NUL + owner id: a ciphertext moved to another row, or to another user's
  row, fails to open. Only the size, the number of characters, the media type and two
  timestamps are in the clear.
- An upload is its owner's alone: every read names the owner, and another user's upload is
  exactly as unknown as one that never existed.
- Uploads are short-lived. One no message has taken expires `ttl` after it was made; one a
  message has taken can be taken again (a message refused after taking it may be sent again)
  for `used_grace`, then it expires too. Expired uploads are never returned, and each new
  upload sweeps them away (every user's: one indexed delete).
- A user holds at most `max_pending` uploads no message has taken; the count is made under a
  lock of the user's row, so concurrent uploads cannot pass it together.
- Nothing is sealed with a key that is no longer the database's (the key check is read, as
  every other writer of ciphertext reads it, in the same transaction).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from sqlalchemy import ColumnElement, and_, delete, func, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from holdback.errors import HoldbackError
from holdback.store import key_check
from holdback.store.accounts import new_id
from holdback.store.crypto import VaultKey
from holdback.store.errors import UserNotFoundError, VaultEntryCorruptError
from holdback.store.schema import UploadRow, UserRow

if TYPE_CHECKING:
    from holdback.store.repository import Store

DEFAULT_TTL = timedelta(hours=24)
DEFAULT_USED_GRACE = timedelta(minutes=10)
DEFAULT_MAX_PENDING = 20


class TooManyUploadsError(HoldbackError):
    """The user already holds as many pending uploads as the server allows."""

    code = "too_many_uploads"


@dataclass(frozen=True, slots=True)
class StoredUpload:
    """An upload as its owner reads it back (name and text opened)."""

    id: str
    name: str
    text: str
    size: int
    chars: int
    media_type: str
    created_at: datetime

    def __repr__(self) -> str:  # never the name or the text
        return f"StoredUpload(id={self.id!r}, size={self.size}, chars={self.chars})"


def associated_data(upload_id: str, owner_id: str) -> bytes:
    return b"upload:" + upload_id.encode("ascii") + b"\0" + owner_id.encode("ascii")


def seal(key: VaultKey, upload_id: str, owner_id: str, name: str, text: str) -> tuple[bytes, bytes]:
    """The sealed name and the sealed text of one upload."""
    aad = associated_data(upload_id, owner_id)
    name_blob = key.seal(json.dumps(name, ensure_ascii=False).encode("utf-8"), aad + b"\0name")
    text_blob = key.seal(text.encode("utf-8", "surrogatepass"), aad + b"\0text")
    return name_blob, text_blob


def open_sealed(key: VaultKey, row: UploadRow) -> StoredUpload:
    aad = associated_data(row.id, row.owner_id)
    what = f"upload {row.id}"
    name_bytes = key.open(bytes(row.name_ciphertext), aad + b"\0name", what=what)
    text_bytes = key.open(bytes(row.text_ciphertext), aad + b"\0text", what=what)
    try:
        name = json.loads(name_bytes.decode("utf-8"))
        text = text_bytes.decode("utf-8", "surrogatepass")
    except ValueError:
        raise VaultEntryCorruptError(f"{what}: the decrypted upload is malformed") from None
    if not isinstance(name, str):
        raise VaultEntryCorruptError(f"{what}: the decrypted upload is malformed")
    return StoredUpload(row.id, name, text, row.size, row.chars, row.media_type, row.created_at)


def _live(now: datetime, ttl: timedelta, used_grace: timedelta) -> ColumnElement[bool]:
    """Rows that have not expired at `now`."""
    return or_(
        and_(UploadRow.used_at.is_(None), UploadRow.created_at > now - ttl),
        and_(UploadRow.used_at.is_not(None), UploadRow.used_at > now - used_grace),
    )


async def sweep(session: AsyncSession, now: datetime, ttl: timedelta, used_grace: timedelta) -> int:
    """Delete every expired upload, whoever owns it."""
    result = await session.execute(
        delete(UploadRow).where(
            or_(
                UploadRow.created_at <= now - ttl,
                and_(UploadRow.used_at.is_not(None), UploadRow.used_at <= now - used_grace),
            )
        )
    )
    return int(getattr(result, "rowcount", 0) or 0)


class Uploads:
    """The uploads of a `Store`: each method is one transaction of its database."""

    def __init__(
        self,
        store: Store,
        *,
        ttl: timedelta = DEFAULT_TTL,
        used_grace: timedelta = DEFAULT_USED_GRACE,
        max_pending: int = DEFAULT_MAX_PENDING,
    ) -> None:
        self._db = store.database
        # The store's vault key: uploads are sealed exactly as its other ciphertext is.
        self._key: VaultKey = store._key
        self.ttl, self.used_grace, self.max_pending = ttl, used_grace, max_pending

    async def add(self, owner_id: str, name: str, text: str, *, size: int, media_type: str) -> str:
        """Store a new upload sealed and return its id (`TooManyUploadsError` past the
        user's bound, `UserNotFoundError` for no such user). Expired uploads are swept first."""
        upload_id = new_id()
        name_blob, text_blob = seal(self._key, upload_id, owner_id, name, text)
        where = self._db.target.describe()

        async def work(session: AsyncSession) -> str:
            now = datetime.now(UTC)
            await key_check.verify(session, self._key, where, lock="share")
            if await session.get(UserRow, owner_id, with_for_update=True) is None:
                raise UserNotFoundError("no such user")
            await sweep(session, now, self.ttl, self.used_grace)
            pending = await session.scalar(
                select(func.count())
                .select_from(UploadRow)
                .where(UploadRow.owner_id == owner_id, UploadRow.used_at.is_(None))
            )
            if int(pending or 0) >= self.max_pending:
                raise TooManyUploadsError(
                    f"a user holds at most {self.max_pending} uploads no message has used"
                )
            session.add(
                UploadRow(
                    id=upload_id,
                    owner_id=owner_id,
                    name_ciphertext=name_blob,
                    text_ciphertext=text_blob,
                    size=size,
                    chars=len(text),
                    media_type=media_type,
                    created_at=now,
                    used_at=None,
                )
            )
            await session.flush()
            return upload_id

        return await self._db.write(work, what="storing an upload")

    async def take(self, owner_id: str, ids: Sequence[str]) -> dict[str, StoredUpload]:
        """The owner's live uploads among `ids`, opened, each marked used (if not yet). Ids
        that are unknown, expired, another user's, or that no longer open are left out."""
        wanted = sorted(set(ids))
        if not wanted:
            return {}

        async def work(session: AsyncSession) -> dict[str, StoredUpload]:
            now = datetime.now(UTC)
            rows = (
                await session.scalars(
                    select(UploadRow).where(
                        UploadRow.id.in_(wanted),
                        UploadRow.owner_id == owner_id,
                        _live(now, self.ttl, self.used_grace),
                    )
                )
            ).all()
            found: dict[str, StoredUpload] = {}
            for row in rows:
                try:
                    found[row.id] = open_sealed(self._key, row)
                except VaultEntryCorruptError:
                    continue  # sealed under another key (rotated) or altered: unknown
            fresh = [row.id for row in rows if row.id in found and row.used_at is None]
            if fresh:
                await session.execute(
                    update(UploadRow).where(UploadRow.id.in_(fresh)).values(used_at=now)
                )
            return found

        return await self._db.write(work, what="taking uploads")

    async def discard(self, owner_id: str, ids: Sequence[str]) -> int:
        """Delete the owner's uploads among `ids` (once their message is stored, or when the
        user removes one); returns how many went."""
        wanted = sorted(set(ids))
        if not wanted:
            return 0

        async def work(session: AsyncSession) -> int:
            result = await session.execute(
                delete(UploadRow).where(UploadRow.id.in_(wanted), UploadRow.owner_id == owner_id)
            )
            return int(getattr(result, "rowcount", 0) or 0)

        return await self._db.write(work, what="discarding uploads")

    async def sweep(self) -> int:
        """Delete every expired upload now; returns how many went."""
        now = datetime.now(UTC)
        return await self._db.write(
            lambda s: sweep(s, now, self.ttl, self.used_grace), what="sweeping uploads"
        )
