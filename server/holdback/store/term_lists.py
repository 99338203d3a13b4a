"""Term lists: named lists of sensitive or forbidden terms, stored sealed.

The rule: the terms are as sensitive as the values they protect (a list of client names is a
list of client names), so a list's terms are stored only as AES-256-GCM ciphertext with the
associated data `term-list:` + the list's name; a ciphertext moved to another list fails to
open. The name, kind and purpose are stored in the clear: they describe the list, not its
content, and must not themselves be sensitive.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import cast

from sqlalchemy import delete, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from holdback.errors import InvalidTokenError
from holdback.store.accounts import check_name
from holdback.store.crypto import VaultKey
from holdback.store.errors import InvalidRecordError, VaultEntryCorruptError
from holdback.store.records import TermList, TermPurpose
from holdback.store.schema import TERM_PURPOSES, TermListRow
from holdback.tokens import kind_label

MAX_TERMS = 100_000
MAX_TERM_CHARS = 1_000


def associated_data(name: str) -> bytes:
    return b"term-list:" + name.encode("utf-8")


def seal_terms(key: VaultKey, name: str, terms: Sequence[str]) -> bytes:
    plaintext = json.dumps(list(terms), ensure_ascii=False).encode("utf-8")
    return key.seal(plaintext, associated_data(name))


def open_terms(key: VaultKey, name: str, blob: bytes) -> tuple[str, ...]:
    what = f"term list {name!r}"
    plaintext = key.open(blob, associated_data(name), what=what)
    try:
        terms = json.loads(plaintext.decode("utf-8"))
    except ValueError:
        raise VaultEntryCorruptError(f"{what}: the decrypted list is malformed") from None
    if not isinstance(terms, list) or not all(isinstance(t, str) for t in terms):
        raise VaultEntryCorruptError(f"{what}: the decrypted list is malformed")
    return tuple(terms)


def check_list(name: str, kind: str, purpose: str, terms: Sequence[str]) -> list[str]:
    check_name(name, "term list")
    try:
        kind_label(kind)
    except InvalidTokenError:
        raise InvalidRecordError(
            f"term list {name!r} has a kind that cannot name a token"
        ) from None
    if len(kind) > 64:
        raise InvalidRecordError(f"term list {name!r}: a kind is at most 64 characters")
    if purpose not in TERM_PURPOSES:
        raise InvalidRecordError(f"a term list's purpose is one of {', '.join(TERM_PURPOSES)}")
    if isinstance(terms, str):
        raise InvalidRecordError(f"term list {name!r}: terms are a sequence of strings")
    checked = list(terms)
    if len(checked) > MAX_TERMS:
        raise InvalidRecordError(f"term list {name!r} has more than {MAX_TERMS} terms")
    for index, term in enumerate(checked):
        if not isinstance(term, str) or not term.strip():
            raise InvalidRecordError(f"term list {name!r}: term {index} is empty or not text")
        if len(term) > MAX_TERM_CHARS:
            raise InvalidRecordError(
                f"term list {name!r}: term {index} is longer than {MAX_TERM_CHARS} characters"
            )
    return checked


async def upsert(
    session: AsyncSession, key: VaultKey, name: str, kind: str, purpose: str, terms: list[str]
) -> None:
    now = datetime.now(UTC)
    blob = seal_terms(key, name, terms)
    row = await session.get(TermListRow, name, with_for_update=True)
    if row is None:
        session.add(
            TermListRow(
                name=name,
                kind=kind,
                purpose=purpose,
                terms_ciphertext=blob,
                created_at=now,
                updated_at=now,
            )
        )
    else:
        row.kind, row.purpose, row.terms_ciphertext, row.updated_at = kind, purpose, blob, now
    await session.flush()


async def load_all(session: AsyncSession, key: VaultKey) -> list[TermList]:
    rows = (await session.scalars(select(TermListRow).order_by(TermListRow.name))).all()
    return [
        TermList(
            name=row.name,
            kind=row.kind,
            purpose=cast(TermPurpose, row.purpose),
            terms=open_terms(key, row.name, bytes(row.terms_ciphertext)),
            updated_at=row.updated_at,
        )
        for row in rows
    ]


async def remove(session: AsyncSession, name: str) -> bool:
    result = await session.execute(delete(TermListRow).where(TermListRow.name == name))
    return bool(getattr(result, "rowcount", 0))


async def version(session: AsyncSession) -> tuple[int, str]:
    """How many lists there are and when the last changed: a cheap look for a change."""
    count, last = (
        await session.execute(select(func.count(), func.max(TermListRow.updated_at)))
    ).one()
    return int(count), last.isoformat() if last is not None else ""
