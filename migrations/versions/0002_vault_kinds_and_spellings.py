"""Vault entries keep their detector kind; user messages keep their own spellings, sealed.

The rule this revision keeps: a value always finds its token again, so the vault stores what
it knows instead of rebuilding it from a token's label.

- `vault_entries.detector_kind`: the kind a value was found as (`client-names`), next to the
  token's label in `kind` (`CLIENT_NAMES`), which cannot give it back. Existing rows get the
  best guess: the kind of a sensitive term list whose label it is (a term file's kind is
  stored with its list), else the label in lower case (exact for every built-in detector).
  The normalized form needs no migration: it has always been sealed with the value, and is
  now read from there instead of being made again.
- `message_spellings`: a user message's own spellings of values its vault spells otherwise,
  sealed under the vault key, so the message reads back exactly as typed.

Revision ID: 0002
Revises: 0001
Create Date: 2025-12-06
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

RESERVED = "reserved"  # the kind of a reservation row (no label is lower case)


def _label(kind: str) -> str | None:
    """A kind's token label, as holdback made it when this revision was written."""
    upper = kind.translate(
        str.maketrans("abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ")
    )
    label = re.sub(r"[^A-Z0-9]+", "_", upper).strip("_")
    if label and label[0].isdigit():
        label = "K_" + label
    return label if label and re.match(r"[A-Z][A-Z0-9_]*\Z", label) else None


def upgrade() -> None:
    with op.batch_alter_table("vault_entries") as batch:
        batch.add_column(sa.Column("detector_kind", sa.String(200), nullable=True))
    conn = op.get_bind()
    conn.execute(sa.text("UPDATE vault_entries SET detector_kind = lower(kind)"))
    kinds = conn.execute(
        sa.text("SELECT DISTINCT kind FROM term_lists WHERE purpose = 'sensitive' ORDER BY kind")
    ).scalars()
    claimed: set[str] = set()
    for kind in kinds:
        label = _label(kind)
        if label is None or label in claimed or kind == label.lower():
            continue
        claimed.add(label)  # two lists with one label: the first one's kind, by name
        conn.execute(
            sa.text(
                "UPDATE vault_entries SET detector_kind = :kind"
                " WHERE kind = :label AND kind <> :reserved"
            ),
            {"kind": kind, "label": label, "reserved": RESERVED},
        )
    op.create_table(
        "message_spellings",
        sa.Column("message_id", sa.String(32), nullable=False),
        sa.Column("conversation_id", sa.String(32), nullable=False),
        sa.Column("spellings_ciphertext", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["message_id"],
            ["messages.id"],
            name="fk_message_spellings_message_id_messages",
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["conversation_id"],
            ["conversations.id"],
            name="fk_message_spellings_conversation_id_conversations",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("message_id", name="pk_message_spellings"),
    )
    op.create_index(
        "ix_message_spellings_conversation_id", "message_spellings", ["conversation_id"]
    )


def downgrade() -> None:
    op.drop_index("ix_message_spellings_conversation_id", table_name="message_spellings")
    op.drop_table("message_spellings")
    with op.batch_alter_table("vault_entries") as batch:
        batch.drop_column("detector_kind")
