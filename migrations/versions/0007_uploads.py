"""Uploads: documents a user has brought in and no message has used yet, stored sealed.

The rules this revision keeps:
- An upload's file name and extracted text may hold values, so both are stored only as
  AES-256-GCM ciphertext (`name_ciphertext`, `text_ciphertext`), sealed like the vault with
  the upload's id and its owner as associated data: a ciphertext moved to another row or
  another user fails to open.
- What is in the clear describes the file, never its content: its size in bytes, the number
  of characters extracted, its media type, and when it was uploaded and first used.
- An upload belongs to one user and goes with them (`ON DELETE CASCADE`).
- Uploads are short-lived: unused ones expire (24 hours), used ones go soon after their
  message is stored (`store/uploads.py` sweeps them).

A downgrade drops the table: pending uploads are lost (no message depends on them; a message
that used one holds its text, tokenized, like typed text).

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-17
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | Sequence[str] | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_ID = 32  # `store.schema.ID_LENGTH`


def _ts() -> sa.DateTime:
    return sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "uploads",
        sa.Column("id", sa.String(_ID), nullable=False),
        sa.Column("owner_id", sa.String(_ID), nullable=False),
        sa.Column("name_ciphertext", sa.LargeBinary(), nullable=False),
        sa.Column("text_ciphertext", sa.LargeBinary(), nullable=False),
        sa.Column("size", sa.Integer(), nullable=False),
        sa.Column("chars", sa.Integer(), nullable=False),
        sa.Column("media_type", sa.String(100), nullable=False),
        sa.Column("created_at", _ts(), nullable=False),
        sa.Column("used_at", _ts(), nullable=True),
        sa.CheckConstraint("size >= 0", name="ck_uploads_size_not_negative"),
        sa.CheckConstraint("chars >= 0", name="ck_uploads_chars_not_negative"),
        sa.ForeignKeyConstraint(
            ["owner_id"], ["users.id"], name="fk_uploads_owner_id_users", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name="pk_uploads"),
    )
    op.create_index("ix_uploads_owner_id_created_at", "uploads", ["owner_id", "created_at"])
    op.create_index("ix_uploads_created_at", "uploads", ["created_at"])


def downgrade() -> None:
    op.drop_index("ix_uploads_created_at", table_name="uploads")
    op.drop_index("ix_uploads_owner_id_created_at", table_name="uploads")
    op.drop_table("uploads")
