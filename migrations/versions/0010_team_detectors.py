"""A team's own detectors kept in the database: pattern sets and people lists, stored sealed.

The rules this revision keeps:
- `team_detectors` holds each pattern set (`source` `patterns`: the TOML text of
  `docs/detectors.md`) and each people list (`people`: its CSV text) whole, as AES-256-GCM
  ciphertext sealed like the vault, with the source and the name as associated data: a
  ciphertext moved to another row fails to open. People's names are as sensitive as the values
  they protect, and a pattern set's examples, context words and even its regexes may quote a
  real identifier or client, so the whole definition is sealed, not only its examples.
- What is in the clear describes the entry, never its content: its name, its source and when
  it was made and last changed. The name must not itself be sensitive (as a term list's).

A downgrade drops the table: the sets and lists kept there are lost (files given with
`--patterns` and `--people` are not in the database and stay as they are).

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-18
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | Sequence[str] | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _ts() -> sa.DateTime:
    return sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "team_detectors",
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("definition_ciphertext", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", _ts(), nullable=False),
        sa.Column("updated_at", _ts(), nullable=False),
        sa.CheckConstraint("source IN ('patterns', 'people')", name="ck_team_detectors_source"),
        sa.PrimaryKeyConstraint("source", "name", name="pk_team_detectors"),
    )


def downgrade() -> None:
    op.drop_table("team_detectors")
