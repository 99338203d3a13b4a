"""The frames of replies in flight, for the other processes on one PostgreSQL.

The rules this revision keeps: `reply_frames` holds each released frame of a reply as its
process released it, tokenized (never an original value), numbered as its viewers' frames
are; rows go some minutes after their reply (`store/reply_frames.py`). No foreign keys: a
frame outlives nothing it names for long. A downgrade drops the table.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-17
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | Sequence[str] | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "reply_frames",
        sa.Column("message_id", sa.String(32), primary_key=True),
        sa.Column("seq", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("conversation_id", sa.String(32), nullable=False),
        sa.Column("frame", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index(op.f("ix_reply_frames_created_at"), "reply_frames", ["created_at"])


def downgrade() -> None:
    op.drop_index(op.f("ix_reply_frames_created_at"), table_name="reply_frames")
    op.drop_table("reply_frames")
