"""The ORM mapping of holdback's tables. The schema itself is made only by the migrations.

The rules: stored text is the tokenized text the model saw; an original value exists only as
ciphertext (`vault_entries.value_ciphertext`, `term_lists.terms_ciphertext`,
`team_detectors.definition_ciphertext`, `message_spellings.spellings_ciphertext`,
`uploads.name_ciphertext` and `text_ciphertext`) and as a keyed hash that cannot be
reversed (`vault_entries.value_hash`). Audit rows hold kinds and counts, never values; reveal
and admin events hold tokens, kinds and names, never values. Everything a conversation owns
goes when it goes (`ON DELETE CASCADE`).
Uniqueness that concurrent writers rely on is enforced by the database, not by the code:
a message's position in its conversation, a token in its vault, a value's hash per kind.

This module must match `migrations/versions/`; a test compares them.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any, ClassVar

from sqlalchemy import (
    JSON,
    BigInteger,
    CheckConstraint,
    DateTime,
    Dialect,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

ID_LENGTH = 32
MESSAGE_STATUSES = ("complete", "incomplete", "blocked")
TERM_PURPOSES = ("sensitive", "forbidden")
TEAM_SOURCES = ("patterns", "people")  # a team detector's source (migration 0010)
AUDIT_ACTIONS = ("masked", "redacted", "blocked")
ROLES = ("admin", "member")
REVEAL_LEVELS = ("plain", "masked", "label")
RECORDED_LEVELS = ("plain", "masked")  # a reveal event is a value shown, whole or in part
SHARE_ACCESS = ("read", "write")
DEFAULT_SCOPE = ""  # `reveal_levels.scope` of the organisation's default levels
CHANNEL_RE = re.compile(r"[A-Za-z0-9_.:-]{1,64}\Z")  # a part's name (`reasoning`)


class UTCDateTime(TypeDecorator[datetime]):
    """Timestamps stored in UTC and always read back timezone-aware (SQLite keeps no zone)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetimes are not stored; use an aware UTC datetime")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _in(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map: ClassVar[dict[Any, Any]] = {datetime: UTCDateTime()}


class StoreSetting(Base):
    """Facts about the database itself, such as the vault key check."""

    __tablename__ = "store_settings"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(Text)


class UserRow(Base):
    """A user. One whose `disabled_at` is set cannot sign in, and no credential of theirs
    (session or API token) names them while it stays set. `role` is `admin` or `member`
    (migration 0005); the first user, and the `--auth none` user, are admins."""

    __tablename__ = "users"
    __table_args__ = (CheckConstraint(_in("role", ROLES), name="role"),)

    id: Mapped[str] = mapped_column(String(ID_LENGTH), primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    password_hash: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime]
    disabled_at: Mapped[datetime | None]
    # No Python-side default: rows written as older revisions wrote them (no role) must work.
    role: Mapped[str] = mapped_column(String(16), server_default="member")
    # Migration 0006: custom instructions, sealed (AAD: the user's id); they may hold values.
    instructions_ciphertext: Mapped[bytes | None] = mapped_column(LargeBinary)


class SessionRow(Base):
    """A login session; only the SHA-256 of its secret is stored."""

    __tablename__ = "auth_sessions"

    secret_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    created_at: Mapped[datetime]
    expires_at: Mapped[datetime] = mapped_column(index=True)


class ApiTokenRow(Base):
    """An API token; only the SHA-256 of the token text is stored. A token whose
    `revoked_at` is set names nobody, for good (the row stays, so it can be listed)."""

    __tablename__ = "api_tokens"

    id: Mapped[str] = mapped_column(String(ID_LENGTH), primary_key=True)
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(200))
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime]
    revoked_at: Mapped[datetime | None]
    last_used_at: Mapped[datetime | None]  # migration 0005; touched at most once a minute


class ConversationRow(Base):
    __tablename__ = "conversations"
    __table_args__ = (Index(None, "owner_id", "updated_at"),)

    id: Mapped[str] = mapped_column(String(ID_LENGTH), primary_key=True)
    owner_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    title: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]
    # Migration 0006: the branch shown, tokenized system prompt, the model of the next reply.
    current_leaf: Mapped[str | None] = mapped_column(String(ID_LENGTH))
    system_prompt: Mapped[str | None] = mapped_column(Text)
    model: Mapped[str | None] = mapped_column(String(200))


class MessageRow(Base):
    """A message. `text` and every part are tokenized text; `seq` orders the conversation."""

    __tablename__ = "messages"
    __table_args__ = (
        UniqueConstraint("conversation_id", "seq"),
        CheckConstraint(_in("status", MESSAGE_STATUSES), name="status"),
        CheckConstraint("seq >= 1", name="seq_positive"),
    )

    id: Mapped[str] = mapped_column(String(ID_LENGTH), primary_key=True)
    conversation_id: Mapped[str] = mapped_column(ForeignKey("conversations.id", ondelete="CASCADE"))
    seq: Mapped[int] = mapped_column(Integer)
    role: Mapped[str] = mapped_column(String(32))
    text: Mapped[str] = mapped_column(Text)
    parts: Mapped[dict[str, str]] = mapped_column(JSON)
    status: Mapped[str] = mapped_column(String(16))
    finish_reason: Mapped[str | None] = mapped_column(String(64))
    meta: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]
    # Migration 0006: the message this one follows (a tree), and the model a reply was asked of.
    parent_id: Mapped[str | None] = mapped_column(String(ID_LENGTH))
    model: Mapped[str | None] = mapped_column(String(200))


class VaultEntryRow(Base):
    """One original value of a conversation: its token, its ciphertext and its keyed hash.

    `kind` is the token's kind label (`CLIENT_NAMES`), which numbers the tokens and keys the
    hash; `detector_kind` is the kind the value was found as (`client-names`), which the label
    cannot give back. holdback always writes it (migration 0002 filled it in for older rows);
    a row written without it is read with the best guess, the label in lower case. The
    ciphertext seals the value and its normalized form.

    A row of kind `reserved` is a reserved id instead (see `store/vault.py`): the token it
    keeps from ever being assigned, sealing the id itself.
    """

    __tablename__ = "vault_entries"
    __table_args__ = (
        UniqueConstraint("conversation_id", "kind", "value_hash"),
        CheckConstraint("number >= 1", name="number_positive"),
    )

    conversation_id: Mapped[str] = mapped_column(
        ForeignKey("conversations.id", ondelete="CASCADE"), primary_key=True
    )
    token: Mapped[str] = mapped_column(String(100), primary_key=True)
    kind: Mapped[str] = mapped_column(String(64))
    detector_kind: Mapped[str | None] = mapped_column(String(200))
    number: Mapped[int] = mapped_column(Integer)
    value_hash: Mapped[bytes] = mapped_column(LargeBinary(32))
    value_ciphertext: Mapped[bytes] = mapped_column(LargeBinary)
    created_at: Mapped[datetime]


class MessageSpellingRow(Base):
    """A user message's own spellings of values its vault spells otherwise, sealed (AAD: the
    conversation and the message), so the message reads back exactly as it was typed."""

    __tablename__ = "message_spellings"

    message_id: Mapped[str] = mapped_column(
        ForeignKey("messages.id", ondelete="CASCADE"), primary_key=True
    )
    conversation_id: Mapped[str] = mapped_column(
        ForeignKey("conversations.id", ondelete="CASCADE"), index=True
    )
    spellings_ciphertext: Mapped[bytes] = mapped_column(LargeBinary)
    created_at: Mapped[datetime]


class ReplyCheckpointRow(Base):
    """A piece of a reply saved while it streams: tokenized text, like the message it belongs to.

    The message's `text` (`part` "") or one of its parts (`part` the channel) reads as the
    stored value cut at `start`, then `text`; a message's rows apply in `seq` order. Only a
    reply that has not been stored whole has rows: `finish_reply` writes the final text and
    deletes them in the same transaction, so a reply cut off by a crash reads back as far as
    its last checkpoint.
    """

    __tablename__ = "reply_checkpoints"
    __table_args__ = (
        CheckConstraint("seq >= 1", name="seq_positive"),
        CheckConstraint("start >= 0", name="start_not_negative"),
    )

    message_id: Mapped[str] = mapped_column(
        ForeignKey("messages.id", ondelete="CASCADE"), primary_key=True
    )
    seq: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    conversation_id: Mapped[str] = mapped_column(
        ForeignKey("conversations.id", ondelete="CASCADE"), index=True
    )
    part: Mapped[str] = mapped_column(String(64))
    start: Mapped[int] = mapped_column(Integer)
    text: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime]


class TermListRow(Base):
    """A named list of sensitive or forbidden terms; the terms are sealed (AAD: the name)."""

    __tablename__ = "term_lists"
    __table_args__ = (CheckConstraint(_in("purpose", TERM_PURPOSES), name="purpose"),)

    name: Mapped[str] = mapped_column(String(200), primary_key=True)
    kind: Mapped[str] = mapped_column(String(64))
    purpose: Mapped[str] = mapped_column(String(16))
    terms_ciphertext: Mapped[bytes] = mapped_column(LargeBinary)
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]


class TeamDetectorRow(Base):
    """A team's pattern set (TOML) or people list (CSV), whole and sealed (AAD: the source and
    the name); migration 0010, `store/team_detectors.py`."""

    __tablename__ = "team_detectors"
    __table_args__ = (CheckConstraint(_in("source", TEAM_SOURCES), name="source"),)

    source: Mapped[str] = mapped_column(String(16), primary_key=True)
    name: Mapped[str] = mapped_column(String(200), primary_key=True)
    definition_ciphertext: Mapped[bytes] = mapped_column(LargeBinary)
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]


class AuditEventRow(Base):
    """Which kinds were masked, redacted or blocked, and how many of each. Never values."""

    __tablename__ = "audit_events"
    __table_args__ = (CheckConstraint(_in("action", AUDIT_ACTIONS), name="action"),)

    id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer(), "sqlite"), primary_key=True, autoincrement=True
    )
    conversation_id: Mapped[str] = mapped_column(
        ForeignKey("conversations.id", ondelete="CASCADE"), index=True
    )
    message_id: Mapped[str | None] = mapped_column(
        ForeignKey("messages.id", ondelete="SET NULL"), index=True
    )
    action: Mapped[str] = mapped_column(String(16))
    counts: Mapped[dict[str, int]] = mapped_column(JSON)
    created_at: Mapped[datetime]


# The team (migration 0005): groups, reveal levels, shares, and who was shown what.


class GroupRow(Base):
    """A named set of users; reveal levels and shares can be given to a group."""

    __tablename__ = "groups"

    id: Mapped[str] = mapped_column(String(ID_LENGTH), primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    created_at: Mapped[datetime]


class GroupMemberRow(Base):
    __tablename__ = "group_members"

    group_id: Mapped[str] = mapped_column(
        ForeignKey("groups.id", ondelete="CASCADE"), primary_key=True
    )
    user_id: Mapped[str] = mapped_column(
        ForeignKey("users.id", ondelete="CASCADE"), primary_key=True, index=True
    )
    created_at: Mapped[datetime]


class RevealLevelRow(Base):
    """How much of a kind's values a viewer who is not the owner is shown: the organisation's
    default (`scope` "") or a group's (`scope` the group's id; deleted with the group)."""

    __tablename__ = "reveal_levels"
    __table_args__ = (CheckConstraint(_in("level", REVEAL_LEVELS), name="level"),)

    scope: Mapped[str] = mapped_column(String(ID_LENGTH), primary_key=True)
    kind: Mapped[str] = mapped_column(String(200), primary_key=True)
    level: Mapped[str] = mapped_column(String(16))
    updated_at: Mapped[datetime]


class NeverRestoreRow(Base):
    """A kind whose values are shown plain to nobody, the owner included."""

    __tablename__ = "never_restore"

    kind: Mapped[str] = mapped_column(String(200), primary_key=True)
    created_at: Mapped[datetime]


class ShareRow(Base):
    """A conversation shared by its owner with one user or one group, to read or to write."""

    __tablename__ = "shares"
    __table_args__ = (
        UniqueConstraint("conversation_id", "user_id"),
        UniqueConstraint("conversation_id", "group_id"),
        CheckConstraint(_in("access", SHARE_ACCESS), name="access"),
        CheckConstraint("(user_id IS NULL) <> (group_id IS NULL)", name="one_grantee"),
    )

    id: Mapped[str] = mapped_column(String(ID_LENGTH), primary_key=True)
    conversation_id: Mapped[str] = mapped_column(ForeignKey("conversations.id", ondelete="CASCADE"))
    user_id: Mapped[str | None] = mapped_column(
        ForeignKey("users.id", ondelete="CASCADE"), index=True
    )
    group_id: Mapped[str | None] = mapped_column(
        ForeignKey("groups.id", ondelete="CASCADE"), index=True
    )
    access: Mapped[str] = mapped_column(String(8))
    created_at: Mapped[datetime]


_EVENT_ID = BigInteger().with_variant(Integer(), "sqlite")


class RevealEventRow(Base):
    """A value shown to a viewer, whole (`plain`) or in part (`masked`): its token and kind,
    never the value. No foreign keys: the trail outlives the users and conversations it names.
    """

    __tablename__ = "reveal_events"
    __table_args__ = (
        CheckConstraint(_in("level", RECORDED_LEVELS), name="level"),
        Index(None, "conversation_id", "created_at"),
        Index(None, "viewer_id", "created_at"),
    )

    id: Mapped[int] = mapped_column(_EVENT_ID, primary_key=True, autoincrement=True)
    viewer_id: Mapped[str | None] = mapped_column(String(ID_LENGTH))
    conversation_id: Mapped[str | None] = mapped_column(String(ID_LENGTH))
    message_id: Mapped[str | None] = mapped_column(String(ID_LENGTH))
    token: Mapped[str] = mapped_column(String(100))
    kind: Mapped[str] = mapped_column(String(200))
    level: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[datetime] = mapped_column(index=True)


class AdminEventRow(Base):
    """What an admin did (`action`) to what (`target`: a user, group or kind by name), never a
    secret or a value. No foreign key: the trail outlives the actor."""

    __tablename__ = "admin_events"

    id: Mapped[int] = mapped_column(_EVENT_ID, primary_key=True, autoincrement=True)
    actor_id: Mapped[str | None] = mapped_column(String(ID_LENGTH))
    action: Mapped[str] = mapped_column(String(64))
    target: Mapped[str] = mapped_column(String(400))
    created_at: Mapped[datetime] = mapped_column(index=True)


class UploadRow(Base):
    """A document a user uploaded that no message has used yet (migration 0007). Its name and
    extracted text may hold values: both are sealed (AAD: the upload's id and its owner, see
    `store/uploads.py`). Size, characters, media type and times describe the file only."""

    __tablename__ = "uploads"
    __table_args__ = (
        Index(None, "owner_id", "created_at"),
        CheckConstraint("size >= 0", name="size_not_negative"),
        CheckConstraint("chars >= 0", name="chars_not_negative"),
    )

    id: Mapped[str] = mapped_column(String(ID_LENGTH), primary_key=True)
    owner_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    name_ciphertext: Mapped[bytes] = mapped_column(LargeBinary)
    text_ciphertext: Mapped[bytes] = mapped_column(LargeBinary)
    size: Mapped[int] = mapped_column(Integer)  # bytes of the file as uploaded
    chars: Mapped[int] = mapped_column(Integer)  # characters of its extracted text
    media_type: Mapped[str] = mapped_column(String(100))
    created_at: Mapped[datetime] = mapped_column(index=True)
    used_at: Mapped[datetime | None]  # when a message first took it


class ReplyFrameRow(Base):
    """A released frame of a reply in flight, tokenized, for the other processes on one
    PostgreSQL (migration 0009, `store/reply_frames.py`): never an original value."""

    __tablename__ = "reply_frames"
    __table_args__ = (Index(None, "created_at"),)

    message_id: Mapped[str] = mapped_column(String(ID_LENGTH), primary_key=True)
    seq: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    conversation_id: Mapped[str] = mapped_column(String(ID_LENGTH))
    frame: Mapped[str] = mapped_column(Text)  # the frame's JSON, tokenized
    created_at: Mapped[datetime]


# A cluster (migration 0008): several processes on one database coordinate through these rows.

HOLDER_LENGTH = 300  # a lease holder's name: host (up to 253) ":" pid ":" a random part


class ReplyLeaseRow(Base):
    """The one reply in flight in a conversation, cluster-wide: held by `holder` until
    `expires_at` unless renewed (`store/leases.py`). `message_id` names the reply's placeholder
    (None until its holder names it). No foreign keys: a lease may come before the first write
    that creates its conversation, and it is coordination state, not a record."""

    __tablename__ = "reply_leases"

    conversation_id: Mapped[str] = mapped_column(String(ID_LENGTH), primary_key=True)
    message_id: Mapped[str | None] = mapped_column(String(ID_LENGTH))
    holder: Mapped[str] = mapped_column(String(HOLDER_LENGTH))
    expires_at: Mapped[datetime] = mapped_column(index=True)


class RateBucketRow(Base):
    """A user's token bucket for the rate limit, shared by every process: `tokens` left as of
    `updated_at` (it refills from then on). No foreign key: it is a counter."""

    __tablename__ = "rate_buckets"

    user_id: Mapped[str] = mapped_column(String(ID_LENGTH), primary_key=True)
    tokens: Mapped[float]
    updated_at: Mapped[datetime]
