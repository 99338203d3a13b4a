"""A team's own detectors kept in the database: pattern sets (TOML) and people lists (CSV).

The rule: a definition is stored whole, as the text a file would hold, and only as AES-256-GCM
ciphertext with the associated data `team-detector:` + its source + `:` + its name (a
ciphertext moved to another row fails to open). People's names are as sensitive as the values
they protect, and a pattern set's examples, context words and regexes may quote a real
identifier or client, so the whole definition is sealed. The name, the source and the times are
in the clear: they describe the entry, not its content, and the name must not itself be
sensitive. This module only keeps the text; whether it is a usable set or list is decided by the
same loaders as the files' before it is saved (`app/team_detectors.py`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal, cast

from sqlalchemy import delete, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from holdback.store.accounts import check_name
from holdback.store.crypto import VaultKey
from holdback.store.errors import InvalidRecordError, VaultEntryCorruptError
from holdback.store.schema import TEAM_SOURCES, TeamDetectorRow

TeamSource = Literal["patterns", "people"]
MAX_TEXT_CHARS = 16 * 1024 * 1024  # 200,000 people of about 80 characters each
_WHAT = {"patterns": "pattern set", "people": "people list"}


@dataclass(frozen=True, slots=True)
class TeamDetector:
    """One stored pattern set or people list: its text, opened."""

    source: TeamSource
    name: str
    text: str  # the TOML or CSV, as a file would hold it
    updated_at: datetime

    def __repr__(self) -> str:  # never show the definition
        return (
            f"TeamDetector(source={self.source!r}, name={self.name!r}, "
            f"text=<{len(self.text)} characters>)"
        )


def what(source: str) -> str:
    """How an entry of `source` is named in sentences: `pattern set`, `people list`."""
    return _WHAT.get(source, "team detector")


def associated_data(source: str, name: str) -> bytes:
    return b"team-detector:" + source.encode("ascii") + b":" + name.encode("utf-8")


def seal_text(key: VaultKey, source: str, name: str, text: str) -> bytes:
    return key.seal(text.encode("utf-8"), associated_data(source, name))


def open_text(key: VaultKey, source: str, name: str, blob: bytes) -> str:
    label = f"{what(source)} {name!r}"
    plaintext = key.open(blob, associated_data(source, name), what=label)
    try:
        return plaintext.decode("utf-8")
    except UnicodeDecodeError:
        raise VaultEntryCorruptError(f"{label}: the decrypted text is malformed") from None


def check(source: str, name: str, text: str) -> None:
    """The entry's shape (its content is the loaders' to judge); messages name no content."""
    if source not in TEAM_SOURCES:
        raise InvalidRecordError(f"a team detector's source is one of {', '.join(TEAM_SOURCES)}")
    check_name(name, what(source))
    if not isinstance(text, str):
        raise InvalidRecordError(f"{what(source)} {name!r}: the definition must be text")
    if len(text) > MAX_TEXT_CHARS:
        raise InvalidRecordError(
            f"{what(source)} {name!r} is longer than {MAX_TEXT_CHARS} characters"
        )


async def upsert(session: AsyncSession, key: VaultKey, source: str, name: str, text: str) -> None:
    now = datetime.now(UTC)
    blob = seal_text(key, source, name, text)
    row = await session.get(TeamDetectorRow, (source, name), with_for_update=True)
    if row is None:
        session.add(
            TeamDetectorRow(
                source=source,
                name=name,
                definition_ciphertext=blob,
                created_at=now,
                updated_at=now,
            )
        )
    else:
        row.definition_ciphertext, row.updated_at = blob, now
    await session.flush()


def _opened(key: VaultKey, row: TeamDetectorRow) -> TeamDetector:
    return TeamDetector(
        source=cast(TeamSource, row.source),
        name=row.name,
        text=open_text(key, row.source, row.name, bytes(row.definition_ciphertext)),
        updated_at=row.updated_at,
    )


async def load_all(
    session: AsyncSession, key: VaultKey, source: str | None = None
) -> list[TeamDetector]:
    """Every stored entry (of one source, if given), by source then name."""
    query = select(TeamDetectorRow).order_by(TeamDetectorRow.source, TeamDetectorRow.name)
    if source is not None:
        query = query.where(TeamDetectorRow.source == source)
    return [_opened(key, row) for row in (await session.scalars(query)).all()]


async def load_one(
    session: AsyncSession, key: VaultKey, source: str, name: str
) -> TeamDetector | None:
    row = await session.get(TeamDetectorRow, (source, name))
    return _opened(key, row) if row is not None else None


async def remove(session: AsyncSession, source: str, name: str) -> bool:
    result = await session.execute(
        delete(TeamDetectorRow).where(
            (TeamDetectorRow.source == source) & (TeamDetectorRow.name == name)
        )
    )
    return bool(getattr(result, "rowcount", 0))


async def version(session: AsyncSession) -> tuple[int, str]:
    """How many entries there are and when the last changed: a cheap look for a change."""
    count, last = (
        await session.execute(select(func.count(), func.max(TeamDetectorRow.updated_at)))
    ).one()
    return int(count), last.isoformat() if last is not None else ""


async def reseal_all(session: AsyncSession, old: VaultKey, new: VaultKey) -> int:
    """Open every entry with `old` and seal it with `new` (the vault key's rotation)."""
    rows = (await session.scalars(select(TeamDetectorRow))).all()
    for row in rows:
        text = open_text(old, row.source, row.name, bytes(row.definition_ciphertext))
        row.definition_ciphertext = seal_text(new, row.source, row.name, text)
    await session.flush()
    return len(rows)
