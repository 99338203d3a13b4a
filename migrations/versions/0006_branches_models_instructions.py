"""Branching conversations, the model of each reply, and instructions.

The rules this revision keeps:
- Messages form a tree: `messages.parent_id` is the message a message follows (None for a
  conversation's first). An existing conversation becomes one branch: each message's parent
  is the one before it by `seq`. `seq` still orders a conversation's messages as written.
- `conversations.current_leaf` is the last message of the branch shown (None: the last
  message by `seq`, which is the only branch an existing conversation has).
- `messages.model` is the model a reply was asked of; `conversations.model` the model its
  next reply goes to (None: the server's default).
- `conversations.system_prompt` is tokenized text, like every stored message.
- `users.instructions_ciphertext` is a user's custom instructions, sealed like the vault
  (AES-GCM, the user's id as associated data): they may hold values and no conversation's
  vault owns them until a message uses them.

A downgrade keeps each conversation's current branch (the path to its current leaf) and
deletes every other branch, then drops the columns: instructions and system prompts are lost.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-16
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_ID = 32  # `store.schema.ID_LENGTH`


def upgrade() -> None:
    with op.batch_alter_table("messages") as batch:
        batch.add_column(sa.Column("parent_id", sa.String(_ID), nullable=True))
        batch.add_column(sa.Column("model", sa.String(200), nullable=True))
    with op.batch_alter_table("conversations") as batch:
        batch.add_column(sa.Column("current_leaf", sa.String(_ID), nullable=True))
        batch.add_column(sa.Column("system_prompt", sa.Text(), nullable=True))
        batch.add_column(sa.Column("model", sa.String(200), nullable=True))
    with op.batch_alter_table("users") as batch:
        batch.add_column(sa.Column("instructions_ciphertext", sa.LargeBinary(), nullable=True))
    op.execute(
        sa.text(
            "UPDATE messages SET parent_id = (SELECT p.id FROM messages p"
            " WHERE p.conversation_id = messages.conversation_id AND p.seq < messages.seq"
            " ORDER BY p.seq DESC LIMIT 1)"
        )
    )


def downgrade() -> None:
    conn = op.get_bind()
    rows = conn.execute(
        sa.text(
            "SELECT m.id, m.conversation_id, m.parent_id, m.seq, c.current_leaf"
            " FROM messages m JOIN conversations c ON c.id = m.conversation_id"
        )
    ).all()
    parents: dict[str, str | None] = {}
    by_conversation: dict[str, list[tuple[int, str]]] = {}
    leaves: dict[str, str | None] = {}
    for message_id, conversation_id, parent_id, seq, leaf in rows:
        parents[message_id] = parent_id
        by_conversation.setdefault(conversation_id, []).append((seq, message_id))
        leaves[conversation_id] = leaf
    doomed: list[str] = []
    for conversation_id, messages in by_conversation.items():
        leaf = leaves[conversation_id] or max(messages)[1]
        kept: set[str] = set()
        at: str | None = leaf
        while at is not None and at not in kept:
            kept.add(at)
            at = parents.get(at)
        doomed += [m for _, m in messages if m not in kept]
    for start in range(0, len(doomed), 500):
        batch = doomed[start : start + 500]
        params = {f"m{i}": m for i, m in enumerate(batch)}
        names = ", ".join(f":m{i}" for i in range(len(batch)))
        for table in ("reply_checkpoints", "message_spellings"):
            conn.execute(sa.text(f"DELETE FROM {table} WHERE message_id IN ({names})"), params)
        conn.execute(sa.text(f"DELETE FROM messages WHERE id IN ({names})"), params)
    with op.batch_alter_table("users") as batch:
        batch.drop_column("instructions_ciphertext")
    with op.batch_alter_table("conversations") as batch:
        batch.drop_column("model")
        batch.drop_column("system_prompt")
        batch.drop_column("current_leaf")
    with op.batch_alter_table("messages") as batch:
        batch.drop_column("model")
        batch.drop_column("parent_id")
