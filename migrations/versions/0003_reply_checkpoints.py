"""Replies are saved as they stream: `reply_checkpoints` holds what a reply released so far.

The rule this revision keeps: text a user has seen is not lost when the server dies. While a
reply streams, its screened, tokenized text is appended to this table (a row per changed
channel: where the stored value is cut, and the text from there on); the final write of the
reply replaces the rows with the message's text. Rows hold tokenized text only, like
`messages`.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "reply_checkpoints",
        sa.Column("message_id", sa.String(32), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False, autoincrement=False),
        sa.Column("conversation_id", sa.String(32), nullable=False),
        sa.Column("part", sa.String(64), nullable=False),
        sa.Column("start", sa.Integer(), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("seq >= 1", name="ck_reply_checkpoints_seq_positive"),
        sa.CheckConstraint("start >= 0", name="ck_reply_checkpoints_start_not_negative"),
        sa.ForeignKeyConstraint(
            ["message_id"],
            ["messages.id"],
            name="fk_reply_checkpoints_message_id_messages",
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["conversation_id"],
            ["conversations.id"],
            name="fk_reply_checkpoints_conversation_id_conversations",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("message_id", "seq", name="pk_reply_checkpoints"),
    )
    op.create_index(
        "ix_reply_checkpoints_conversation_id", "reply_checkpoints", ["conversation_id"]
    )


def downgrade() -> None:
    # A reply cut off by a crash keeps what its checkpoints saved: folded into its message.
    messages = sa.table(
        "messages", sa.column("id", sa.String()), sa.column("text", sa.Text()),
        sa.column("parts", sa.JSON()),
    )  # fmt: skip
    checkpoints = sa.table(
        "reply_checkpoints", sa.column("message_id", sa.String()), sa.column("seq", sa.Integer()),
        sa.column("part", sa.String()), sa.column("start", sa.Integer()),
        sa.column("text", sa.Text()),
    )  # fmt: skip
    conn = op.get_bind()
    rows = conn.execute(
        sa.select(
            checkpoints.c.message_id, checkpoints.c.part, checkpoints.c.start,
            checkpoints.c.text, messages.c.text.label("base"), messages.c.parts,
        )
        .select_from(checkpoints.join(messages, messages.c.id == checkpoints.c.message_id))
        .order_by(checkpoints.c.message_id, checkpoints.c.seq)
    ).all()  # fmt: skip
    folded: dict[str, dict[str, str]] = {}
    for message_id, part, start, text, base, parts in rows:
        values = folded.setdefault(message_id, {"": base, **dict(parts or {})})
        values[part] = values.get(part, "")[:start] + text
    for message_id, values in folded.items():
        text = values.pop("")
        conn.execute(
            sa.update(messages).where(messages.c.id == message_id).values(text=text, parts=values)
        )
    op.drop_index("ix_reply_checkpoints_conversation_id", table_name="reply_checkpoints")
    op.drop_table("reply_checkpoints")
