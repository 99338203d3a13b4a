"""The records the store hands out: plain frozen dataclasses, never ORM instances.

The rule: what leaves the store is a snapshot that cannot be mutated into the database by
accident and carries no session. Text fields hold tokenized text; the only records that
carry original values are the vault's (`StoredVault` from `Store.load_vault` and
`Store.open_conversation`, `VaultUpdate.taken` and `.entries`) and a user message's own
spellings (`Store.load_spellings`), which never persist, and whose `repr` shows no value.
A vault entry comes out as it went in: its detector kind and normalized form are the ones
stored with it, never rebuilt from its token.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from holdback.reveal import Level
from holdback.vault import VaultEntry

MessageStatus = Literal["complete", "incomplete", "blocked"]
TermPurpose = Literal["sensitive", "forbidden"]
AuditAction = Literal["masked", "redacted", "blocked"]
Role = Literal["admin", "member"]
ShareAccess = Literal["read", "write"]
Access = Literal["owner", "write", "read"]


@dataclass(frozen=True, slots=True)
class User:
    id: str
    name: str
    password_hash: str | None
    created_at: datetime
    disabled_at: datetime | None = None  # set: no sign-in, and no credential names them
    role: str = "member"  # "admin" or "member"

    @property
    def disabled(self) -> bool:
        return self.disabled_at is not None

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"


@dataclass(frozen=True, slots=True)
class ApiToken:
    """An API token as it is listed: never its text, which only its creator ever saw."""

    id: str
    user_id: str
    user_name: str
    name: str
    created_at: datetime
    revoked_at: datetime | None
    user_disabled: bool
    last_used_at: datetime | None = None  # to the minute (`Store.touch_api_token`)

    @property
    def active(self) -> bool:
        return self.revoked_at is None and not self.user_disabled


@dataclass(frozen=True, slots=True)
class Conversation:
    id: str
    owner_id: str
    title: str
    created_at: datetime
    updated_at: datetime
    current_leaf: str | None = None  # the last message of the branch shown (None: by seq)
    system_prompt: str | None = None  # tokenized
    model: str | None = None  # the model of its next reply (None: the server's default)


@dataclass(frozen=True, slots=True)
class Message:
    id: str
    conversation_id: str
    seq: int  # 1, 2, 3… in the order the messages were added to the conversation
    role: str
    text: str
    parts: dict[str, str]  # channel -> tokenized text (e.g. "reasoning")
    status: MessageStatus
    finish_reason: str | None
    meta: dict[str, object]
    created_at: datetime
    updated_at: datetime
    parent_id: str | None = None  # the message this one follows (None: the first)
    model: str | None = None  # the model a reply was asked of


@dataclass(frozen=True, slots=True)
class Turn:
    """What `Store.begin_reply` wrote and read: a user message (None for a regenerated or
    continued reply) and the reply's placeholder.

    `history` is the branch the model reads: the path from the conversation's first message
    to the placeholder's parent (`user`, if any); `assistant` is the placeholder (empty text,
    status "incomplete", `parent_id` set) that `finish_reply` completes.
    """

    user: Message | None
    assistant: Message
    history: list[Message]


@dataclass(frozen=True, slots=True)
class VaultItem:
    """A value to pseudonymize: its detector kind, the value, and its normalized form.

    Values with the same kind label and normalized form share one token.
    """

    kind: str
    value: str
    normalized: str

    def __repr__(self) -> str:
        return f"VaultItem(kind={self.kind!r}, value=<{len(self.value)} chars>)"


class StoredVault(dict[str, str]):
    """A conversation's vault as stored: its `entries`, and its `reserved` ids.

    `entries` are `holdback.vault.VaultEntry` records (token, detector kind, value as first
    seen, normalized form), ordered by kind label and number; `holdback.vault.Vault(stored)`
    is built from them and from `reserved`, without re-deriving anything. As a mapping it is
    token `<KIND_N>` -> value, for reading. `reserved` holds the ids the conversation's text
    spelled before any value had them, canonical (`EMAIL_1`); they are never assigned and are
    not tokens, so they are neither keys nor entries.
    """

    __slots__ = ("entries", "reserved")

    def __init__(
        self, entries: Iterable[VaultEntry] = (), reserved: frozenset[str] = frozenset()
    ) -> None:
        self.entries: tuple[VaultEntry, ...] = tuple(entries)
        super().__init__((e.token, e.value) for e in self.entries)
        self.reserved = reserved

    def __repr__(self) -> str:  # never show the values
        return f"StoredVault({len(self)} tokens, {len(self.reserved)} reserved)"


@dataclass(frozen=True, slots=True)
class VaultUpdate:
    """What `Store.update_vault` did, in one transaction.

    - `tokens`: the token of each item, in order (what `assign_tokens` returns);
    - `reserved`: every id asked for that is reserved now (canonical `EMAIL_1`, reserved by
      this call or before);
    - `taken`: the ids asked for that already were tokens (another writer gave them to a value
      first), token -> value, unless they are among `tokens`. Such an id cannot be reserved;
      the caller adds these to its vault, so the spelling is neutralized instead;
    - `entries`: token -> `VaultEntry` as stored, for every token in `tokens` and `taken`. A
      value another writer stored first keeps that writer's spelling and kind; the caller's
      vault must hold these, not the items it sent.
    """

    tokens: list[str]
    reserved: frozenset[str]
    taken: dict[str, str]
    entries: Mapping[str, VaultEntry] = field(default_factory=dict)

    def __repr__(self) -> str:  # never show the values
        return (
            f"VaultUpdate(tokens={self.tokens!r}, reserved={sorted(self.reserved)!r}, "
            f"taken={sorted(self.taken)!r})"
        )


class Spellings(dict[int, str]):
    """A user message's own spellings of values the vault spells otherwise: index of the span
    in the message's `meta["masked"]` -> the text as typed. Sealed in the database."""

    __slots__ = ()

    def __repr__(self) -> str:  # never show the values
        return f"Spellings({sorted(self)!r})"


@dataclass(frozen=True, slots=True)
class TermList:
    name: str
    kind: str
    purpose: TermPurpose
    terms: tuple[str, ...]
    updated_at: datetime

    def __repr__(self) -> str:
        return (
            f"TermList(name={self.name!r}, kind={self.kind!r}, purpose={self.purpose!r}, "
            f"terms=<{len(self.terms)} terms>)"
        )


@dataclass(frozen=True, slots=True)
class AuditEvent:
    id: int
    conversation_id: str
    message_id: str | None
    action: AuditAction
    counts: dict[str, int]  # kind label -> how many
    created_at: datetime


@dataclass(frozen=True, slots=True)
class Group:
    id: str
    name: str
    created_at: datetime
    members: tuple[str, ...] = ()  # user names, sorted


@dataclass(frozen=True, slots=True)
class LevelSetting:
    """One reveal level as set: for the organisation (`group` None) or a group (its name)."""

    group: str | None
    kind: str
    level: Level
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class Share:
    """A conversation shared with one user or one group (by name; the other is None)."""

    id: str
    conversation_id: str
    user: str | None
    group: str | None
    access: ShareAccess
    created_at: datetime


@dataclass(frozen=True, slots=True)
class SharedConversation:
    """A conversation someone else owns that a viewer may open, and how (`write` beats `read`
    when the viewer has it both directly and through a group)."""

    conversation: Conversation
    owner: str  # the owner's name
    access: ShareAccess


@dataclass(frozen=True, slots=True)
class RevealEvent:
    """A value shown to a viewer at `plain` or `masked`: its token and kind, never the value."""

    id: int
    viewer_id: str | None
    conversation_id: str | None
    message_id: str | None
    token: str
    kind: str
    level: Level
    created_at: datetime


@dataclass(frozen=True, slots=True)
class AdminEvent:
    """What an admin did (`action`, e.g. `group.create`) to what (`target`, by name)."""

    id: int
    actor_id: str | None
    action: str
    target: str
    created_at: datetime
