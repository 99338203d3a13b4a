"""Users can be disabled and API tokens revoked, and both are remembered.

The rule this revision keeps: a credential that was taken away never works again by itself.
`users.disabled_at` set: the user cannot sign in, and none of their sessions or API tokens
names them. `api_tokens.revoked_at` set: the token names nobody, for good; the row stays so
that `holdback token list` can show it.

A downgrade cannot keep either state, so it keeps the rule the hard way instead: revoked
tokens are deleted, and a disabled user loses their sessions, their tokens and their password
hash (nobody can sign in as them until a password is set again).

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-08
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("users") as batch:
        batch.add_column(sa.Column("disabled_at", sa.DateTime(timezone=True), nullable=True))
    with op.batch_alter_table("api_tokens") as batch:
        batch.add_column(sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    conn = op.get_bind()
    disabled = "SELECT id FROM users WHERE disabled_at IS NOT NULL"
    conn.execute(sa.text("DELETE FROM api_tokens WHERE revoked_at IS NOT NULL"))
    conn.execute(sa.text(f"DELETE FROM api_tokens WHERE user_id IN ({disabled})"))
    conn.execute(sa.text(f"DELETE FROM auth_sessions WHERE user_id IN ({disabled})"))
    conn.execute(sa.text("UPDATE users SET password_hash = NULL WHERE disabled_at IS NOT NULL"))
    with op.batch_alter_table("api_tokens") as batch:
        batch.drop_column("revoked_at")
    with op.batch_alter_table("users") as batch:
        batch.drop_column("disabled_at")
