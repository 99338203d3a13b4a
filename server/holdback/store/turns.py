"""The conversation writes, one implementation: a chat turn in as few round trips as its
guarantees allow, and the single-purpose writes made of the same statements.

Every user message is read and written through here, so each step is one transaction of a
few prebuilt Core statements (one shape each, in SQLAlchemy's compiled cache; rows of a table
go in one batch), run by a `Runner` (`runner.py`). `add_message`, `update_message`,
`rename_conversation` and `record_audit` are `add`, `change`, `rename` and `audit` here, so a
turn writes exactly the rows they write. The rules:

- The checks of what is stored are the caller's, before the transaction; a failure anywhere
  rolls the whole step back.
- A conversation is visible only to its owner: another user's conversation is "not found".
- A write's first statement updates the conversation row (its `updated_at`, and the title
  when given); `audit`, which leaves `updated_at`, locks it instead (`vault.lock`). On
  PostgreSQL that takes the row's `FOR NO KEY UPDATE` lock, the lock `vault.lock` takes;
  SQLite already holds the write lock (`BEGIN IMMEDIATE`). Locking first and then reading,
  in a later statement, is what lets the read see every message committed by writers that
  held the lock before: `seq` is the last one + 1, and the unique `(conversation_id, seq)`
  turns any writer that slipped past into a retried conflict. The current leaf comes back
  from that UPDATE (`RETURNING`), as the lock leaves it. Locks are taken conversation first,
  message second, as everywhere else.
- Stored text is tokenized text, as given; audit rows hold kinds and counts only. A user
  message's own spellings of its values (`spellings.py`) are sealed in the same transaction,
  after the key check every sealing write verifies.
- A reply cut off mid-stream reads back as far as its checkpoints saved it
  (`chat_reads.history`), in the history the model is given too; a reply's final write (and
  any write of a message's text) deletes its checkpoints in the same transaction.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import cast

from sqlalchemy import Table, Update, bindparam, delete, select, update

from holdback.store import chat_reads, key_check, spellings, vault
from holdback.store.accounts import new_id
from holdback.store.conversations import path_to
from holdback.store.crypto import VaultKey
from holdback.store.errors import (
    ConversationNotFoundError,
    MessageNotFoundError,
    UserNotFoundError,
)
from holdback.store.records import (
    Conversation,
    Message,
    MessageStatus,
    Spellings,
    Turn,
)
from holdback.store.runner import Runner, insert_rows
from holdback.store.schema import (
    AuditEventRow,
    ConversationRow,
    MessageRow,
    MessageSpellingRow,
    ReplyCheckpointRow,
    RevealEventRow,
    UserRow,
)

_users = cast(Table, UserRow.__table__)
_conversations = cast(Table, ConversationRow.__table__)
_messages = cast(Table, MessageRow.__table__)
_audit = cast(Table, AuditEventRow.__table__)
_spellings = cast(Table, MessageSpellingRow.__table__)
_checkpoints = cast(Table, ReplyCheckpointRow.__table__)
_reveals = cast(Table, RevealEventRow.__table__)

_INSERT_MESSAGE = insert_rows(_messages)
_INSERT_CONVERSATION = insert_rows(_conversations)
_INSERT_AUDIT = insert_rows(_audit)
_INSERT_SPELLINGS = insert_rows(_spellings)
_INSERT_REVEALS = insert_rows(_reveals)
_USER_EXISTS = select(_users.c.id).where(_users.c.id == bindparam("owner_id"))
_CONVERSATION_OF = select(_messages.c.conversation_id).where(_messages.c.id == bindparam("b_id"))


@functools.cache
def _touch(title: bool, owner: bool, leaf: bool) -> Update:
    """The conversation's lock: an UPDATE, which gives back (with `leaf`) the row's current
    leaf as the lock leaves it, the latest committed. One shape per flags."""
    statement = update(_conversations).where(_conversations.c.id == bindparam("b_id"))
    if owner:
        statement = statement.where(_conversations.c.owner_id == bindparam("b_owner"))
    values = {"updated_at": bindparam("b_now", type_=_conversations.c.updated_at.type)}
    if title:
        values["title"] = bindparam("b_title", type_=_conversations.c.title.type)
    statement = statement.values(values)
    return statement.returning(_conversations.c.current_leaf) if leaf else statement


@functools.cache
def _store(columns: tuple[str, ...]) -> Update:
    """The UPDATE of a message's `columns` (and `updated_at`): one shape per set of columns."""
    return (
        update(_messages)
        .where(
            _messages.c.id == bindparam("b_id"),
            _messages.c.conversation_id == bindparam("b_conversation"),
        )
        .values(
            {
                name: bindparam(f"b_{name}", type_=_messages.c[name].type)
                for name in (*columns, "updated_at")
            }
        )
    )


_SET_LEAF = (
    update(_conversations)
    .where(_conversations.c.id == bindparam("b_id"))
    .values(current_leaf=bindparam("b_leaf", type_=_conversations.c.current_leaf.type))
)
AFTER_LEAF = "after the current leaf"  # `begin`'s default parent: the branch shown
_FORGET_CHECKPOINTS = delete(_checkpoints).where(_checkpoints.c.message_id == bindparam("b_id"))


def _values(message: Message) -> dict[str, object]:
    return {
        "id": message.id,
        "conversation_id": message.conversation_id,
        "seq": message.seq,
        "role": message.role,
        "text": message.text,
        "parts": message.parts,
        "status": message.status,
        "finish_reason": message.finish_reason,
        "meta": message.meta,
        "created_at": message.created_at,
        "updated_at": message.updated_at,
        "parent_id": message.parent_id,
        "model": message.model,
    }


def _lock_and_touch(
    run: Runner,
    conversation_id: str,
    now: datetime,
    *,
    title: str | None = None,
    owner_id: str | None = None,
    leaf: bool = False,
) -> str | None:
    """Lock the conversation by updating it (`updated_at`, the title if given); the current
    leaf (if `leaf`). `ConversationNotFoundError` if there is no such conversation (of
    `owner_id`, if given)."""
    params: dict[str, object] = {"b_id": conversation_id, "b_now": now}
    if title is not None:
        params["b_title"] = title
    if owner_id is not None:
        params["b_owner"] = owner_id
    statement = _touch(title is not None, owner_id is not None, leaf)
    if leaf:
        rows = run.rows(statement, params)
        found = len(rows) == 1
    else:
        found = run.count(statement, params) == 1
    if not found:
        raise ConversationNotFoundError(f"conversation {conversation_id} does not exist")
    current: str | None = rows[0].current_leaf if leaf else None
    return current


def _audit_row(
    conversation_id: str, message_id: str | None, action: str, counts: dict[str, int], now: datetime
) -> dict[str, object]:
    return {
        "conversation_id": conversation_id,
        "message_id": message_id,
        "action": action,
        "counts": counts,
        "created_at": now,
    }


def _as_stored(meta: Mapping[str, object]) -> dict[str, object]:
    """Meta as it reads back from the JSON column, so a record returned equals what
    `history` gives."""
    stored: dict[str, object] = json.loads(json.dumps(dict(meta)))
    return stored


def create(
    run: Runner, owner_id: str, title: str, conversation_id: str | None = None
) -> Conversation:
    """A new conversation of `owner_id` (checked by the caller: the title), with the id
    given (`new_id()`) or a new one."""
    if not run.rows(_USER_EXISTS, {"owner_id": owner_id}):
        raise UserNotFoundError(f"user {owner_id} does not exist")
    now = datetime.now(UTC)
    conversation = Conversation(
        id=conversation_id or new_id(), owner_id=owner_id, title=title, created_at=now,
        updated_at=now,
    )  # fmt: skip
    row = {
        "id": conversation.id,
        "owner_id": owner_id,
        "title": title,
        "created_at": now,
        "updated_at": now,
        "current_leaf": None,
        "system_prompt": None,
        "model": None,
    }
    run.many(_INSERT_CONVERSATION, [row])
    return conversation


def _end_of_shown(messages: Sequence[Message], leaf: str | None) -> str | None:
    """The last message of the branch shown (the path to the current leaf), if any."""
    branch = path_to(messages, leaf)
    return branch[-1].id if branch else None


def _next_seq(messages: Sequence[Message]) -> int:
    return max((m.seq for m in messages), default=0) + 1


def begin(
    run: Runner,
    conversation_id: str,
    text: str | None,
    meta: Mapping[str, object],
    *,
    title: str | None,
    owner_id: str | None,
    masked: dict[str, int],
    typed: Spellings,
    key: VaultKey,
    where: str,
    parent: str | None = AFTER_LEAF,
    model: str | None = None,
    reply_meta: Mapping[str, object] | None = None,
) -> Turn:
    """Add the user message `text` (with title, "masked" audit and its own spellings `typed`,
    if any, sealed with `key`) after `parent`, and the reply's placeholder after it; with
    `text` None, only the placeholder, after `parent` (a regenerated or continued reply).
    `parent` defaults to the current leaf; it must be a message of the conversation, or None
    (a new first message). The placeholder becomes the current leaf. `Turn.history` is the
    branch the model reads: the path to the placeholder's parent."""
    if typed:
        key_check.verify_in(run, key, where, lock="share")
    now = datetime.now(UTC)
    leaf = _lock_and_touch(run, conversation_id, now, title=title, owner_id=owner_id, leaf=True)
    messages = chat_reads.history(run, conversation_id)
    if parent == AFTER_LEAF:
        parent = _end_of_shown(messages, leaf)
    elif parent is not None and not any(m.id == parent for m in messages):
        raise MessageNotFoundError(f"message {parent} is not in conversation {conversation_id}")
    if text is None and parent is None:
        raise MessageNotFoundError("a reply needs a message to follow")
    branch = path_to(messages, parent) if parent is not None else []
    seq = _next_seq(messages)
    user: Message | None = None
    if text is not None:
        user = Message(new_id(), conversation_id, seq, "user", text, {}, "complete", None,
                       _as_stored(meta), now, now, parent_id=parent)  # fmt: skip
        branch.append(user)
        parent, seq = user.id, seq + 1
    assistant = Message(new_id(), conversation_id, seq, "assistant", "", {}, "incomplete", None,
                        _as_stored(reply_meta or {}), now, now, parent_id=parent,
                        model=model)  # fmt: skip
    written = [assistant] if user is None else [user, assistant]
    run.many(_INSERT_MESSAGE, [_values(m) for m in written])
    run.run(_SET_LEAF, {"b_id": conversation_id, "b_leaf": assistant.id})
    if user is None:
        return Turn(user=None, assistant=assistant, history=branch)
    if masked:
        run.many(_INSERT_AUDIT, [_audit_row(conversation_id, user.id, "masked", masked, now)])
    if typed:
        row = {
            "message_id": user.id,
            "conversation_id": conversation_id,
            "spellings_ciphertext": spellings.seal(key, conversation_id, user.id, typed),
            "created_at": now,
        }
        run.many(_INSERT_SPELLINGS, [row])
    return Turn(user=user, assistant=assistant, history=branch)


def _write_message(
    run: Runner,
    conversation_id: str,
    message_id: str,
    values: Mapping[str, object],
    now: datetime,
    *,
    forget: bool,
) -> None:
    """Store `values` (columns of `messages`) in the message, and delete its checkpoints if
    `forget`; the conversation is locked already."""
    params = {f"b_{name}": value for name, value in values.items()}
    params.update(b_id=message_id, b_conversation=conversation_id, b_updated_at=now)
    if run.count(_store(tuple(sorted(values))), params) != 1:
        raise MessageNotFoundError(f"message {message_id} is not in conversation {conversation_id}")
    if forget:
        run.run(_FORGET_CHECKPOINTS, {"b_id": message_id})


def finish(
    run: Runner,
    conversation_id: str,
    message_id: str,
    values: Mapping[str, object],
    audits: Sequence[tuple[str, dict[str, int]]],
    *,
    checkpointed: bool = True,
    reveals: Sequence[tuple[str, str, str, str]] = (),
) -> None:
    """Store the reply's final text, parts, status and finish reason, and its audit events
    (those with counts); the checkpoints saved while it streamed go (if it may have any:
    `checkpointed`); the values it showed, `reveals` (viewer, token, kind, level), are
    audited with it."""
    now = datetime.now(UTC)
    _lock_and_touch(run, conversation_id, now)
    _write_message(run, conversation_id, message_id, values, now, forget=checkpointed)
    rows = [
        _audit_row(conversation_id, message_id, action, counts, now)
        for action, counts in audits
        if counts
    ]
    run.many(_INSERT_AUDIT, rows)
    run.many(
        _INSERT_REVEALS,
        [
            {"viewer_id": viewer, "conversation_id": conversation_id, "message_id": message_id,
             "token": token, "kind": kind, "level": level, "created_at": now}
            for viewer, token, kind, level in reveals
        ],
    )  # fmt: skip


# -- the single-purpose writes ------------------------------------------------------------------


def add(
    run: Runner,
    conversation_id: str,
    role: str,
    text: str,
    *,
    parts: Mapping[str, str],
    status: str,
    finish_reason: str | None,
    meta: Mapping[str, object],
) -> Message:
    """`add_message`: a message at the end of the branch shown, which it then ends."""
    now = datetime.now(UTC)
    leaf = _lock_and_touch(run, conversation_id, now, leaf=True)
    messages = chat_reads.history(run, conversation_id)
    message = Message(new_id(), conversation_id, _next_seq(messages), role, text, dict(parts),
                      cast(MessageStatus, status), finish_reason, _as_stored(meta), now, now,
                      parent_id=_end_of_shown(messages, leaf))  # fmt: skip
    run.many(_INSERT_MESSAGE, [_values(message)])
    run.run(_SET_LEAF, {"b_id": conversation_id, "b_leaf": message.id})
    return message


def change(run: Runner, message_id: str, values: Mapping[str, object]) -> None:
    """`update_message`: store `values` in the message, in whichever conversation; a new
    text or parts replace what a reply saved as it streamed (its checkpoints go)."""
    rows = run.rows(_CONVERSATION_OF, {"b_id": message_id})
    if not rows:
        raise MessageNotFoundError(f"message {message_id} does not exist")
    conversation_id = rows[0].conversation_id
    now = datetime.now(UTC)
    _lock_and_touch(run, conversation_id, now)
    forget = "text" in values or "parts" in values
    _write_message(run, conversation_id, message_id, values, now, forget=forget)


def rename(run: Runner, conversation_id: str, owner_id: str, title: str) -> bool:
    """`rename_conversation`: False if the owner has no such conversation."""
    params = {"b_id": conversation_id, "b_now": datetime.now(UTC), "b_title": title,
              "b_owner": owner_id}  # fmt: skip
    return run.count(_touch(True, True, False), params) == 1


def audit(
    run: Runner,
    conversation_id: str,
    message_id: str | None,
    action: str,
    counts: dict[str, int],
) -> None:
    """`record_audit`: one event, of the conversation or of one of its messages (its
    `updated_at` stays)."""
    vault.lock(run, conversation_id)
    if message_id is not None:
        rows = run.rows(_CONVERSATION_OF, {"b_id": message_id})
        if not rows or rows[0].conversation_id != conversation_id:
            raise MessageNotFoundError(
                f"message {message_id} is not in conversation {conversation_id}"
            )
    row = _audit_row(conversation_id, message_id, action, counts, datetime.now(UTC))
    run.many(_INSERT_AUDIT, [row])
