"""A cluster: reply leases and shared rate buckets, for several server processes on one database.

The rules this revision keeps:
- `reply_leases` holds at most one row per conversation (its primary key): the one reply in
  flight in that conversation, cluster-wide. `holder` names the process running it
  (`host:pid:random`), `message_id` the reply's placeholder (None until the holder names it),
  `expires_at` (UTC) when the lease lapses unless its holder renews it. A lapsed lease is
  taken over, and its reply closed, by whichever process notices first (`store/leases.py`).
- `rate_buckets` holds one token bucket per user (`tokens` left, as of `updated_at`), shared
  by every process, so the per-user rate limit holds across the cluster.
- Neither table has foreign keys: a lease may be taken for a conversation its reply's first
  write creates, and both rows are coordination state, not records; a lease names no value,
  only ids, a process name and a time.

A downgrade drops both tables: leases in flight are forgotten (a reply still running keeps
streaming, unguarded across processes) and every bucket starts full again.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-19
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | Sequence[str] | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_ID = 32  # `store.schema.ID_LENGTH`
_HOLDER = 300  # `store.schema.HOLDER_LENGTH`: a host name (up to 253), a pid and a random part


def _ts() -> sa.DateTime:
    return sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "reply_leases",
        sa.Column("conversation_id", sa.String(_ID), nullable=False),
        sa.Column("message_id", sa.String(_ID), nullable=True),
        sa.Column("holder", sa.String(_HOLDER), nullable=False),
        sa.Column("expires_at", _ts(), nullable=False),
        sa.PrimaryKeyConstraint("conversation_id", name="pk_reply_leases"),
    )
    op.create_index("ix_reply_leases_expires_at", "reply_leases", ["expires_at"])
    op.create_table(
        "rate_buckets",
        sa.Column("user_id", sa.String(_ID), nullable=False),
        sa.Column("tokens", sa.Double(), nullable=False),
        sa.Column("updated_at", _ts(), nullable=False),
        sa.PrimaryKeyConstraint("user_id", name="pk_rate_buckets"),
    )


def downgrade() -> None:
    op.drop_table("rate_buckets")
    op.drop_index("ix_reply_leases_expires_at", table_name="reply_leases")
    op.drop_table("reply_leases")
