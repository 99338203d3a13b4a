"""A team: roles, groups, per-viewer reveal levels, shared conversations, and their trails.

The rules this revision keeps:
- `users.role` is `admin` or `member`. An existing database gets one admin, its oldest user
  (by `created_at`, then id), so whoever ran holdback alone until now can still administer it.
- Reveal levels (`reveal_levels`: the organisation's default, scope "", or a group's, scope
  the group's id) and never-restored kinds (`never_restore`) name kinds, never values.
- A conversation is shared (`shares`) with exactly one user or one group, once each.
- `reveal_events` says which token of which kind was shown to whom at which level, and
  `admin_events` what an admin did to which user, group or kind: never a value or a secret.
  Neither has foreign keys, so the trail outlives the users and conversations it names.
- `api_tokens.last_used_at`: when a token was last seen (to the minute).

A downgrade drops all of it: shares, groups and levels go, every user is who they were
before (no roles), and the trails are lost.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-15
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _ts() -> sa.DateTime:
    return sa.DateTime(timezone=True)


def _event_id() -> sa.Column[int]:
    return sa.Column(
        "id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True,
        nullable=False,
    )  # fmt: skip


def upgrade() -> None:
    with op.batch_alter_table("users") as batch:
        batch.add_column(sa.Column("role", sa.String(16), nullable=False, server_default="member"))
    op.execute(
        "UPDATE users SET role = 'admin' WHERE id = "
        "(SELECT id FROM users ORDER BY created_at, id LIMIT 1)"
    )
    with op.batch_alter_table("users") as batch:
        batch.create_check_constraint("ck_users_role", "role IN ('admin', 'member')")
    with op.batch_alter_table("api_tokens") as batch:
        batch.add_column(sa.Column("last_used_at", _ts(), nullable=True))

    op.create_table(
        "groups",
        sa.Column("id", sa.String(32), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("created_at", _ts(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_groups"),
        sa.UniqueConstraint("name", name="uq_groups_name"),
    )
    op.create_table(
        "group_members",
        sa.Column("group_id", sa.String(32), nullable=False),
        sa.Column("user_id", sa.String(32), nullable=False),
        sa.Column("created_at", _ts(), nullable=False),
        sa.ForeignKeyConstraint(
            ["group_id"], ["groups.id"], name="fk_group_members_group_id_groups",
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name="fk_group_members_user_id_users", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("group_id", "user_id", name="pk_group_members"),
    )  # fmt: skip
    op.create_index("ix_group_members_user_id", "group_members", ["user_id"])
    op.create_table(
        "reveal_levels",
        sa.Column("scope", sa.String(32), nullable=False),
        sa.Column("kind", sa.String(200), nullable=False),
        sa.Column("level", sa.String(16), nullable=False),
        sa.Column("updated_at", _ts(), nullable=False),
        sa.CheckConstraint("level IN ('plain', 'masked', 'label')", name="ck_reveal_levels_level"),
        sa.PrimaryKeyConstraint("scope", "kind", name="pk_reveal_levels"),
    )
    op.create_table(
        "never_restore",
        sa.Column("kind", sa.String(200), nullable=False),
        sa.Column("created_at", _ts(), nullable=False),
        sa.PrimaryKeyConstraint("kind", name="pk_never_restore"),
    )
    op.create_table(
        "shares",
        sa.Column("id", sa.String(32), nullable=False),
        sa.Column("conversation_id", sa.String(32), nullable=False),
        sa.Column("user_id", sa.String(32), nullable=True),
        sa.Column("group_id", sa.String(32), nullable=True),
        sa.Column("access", sa.String(8), nullable=False),
        sa.Column("created_at", _ts(), nullable=False),
        sa.CheckConstraint("access IN ('read', 'write')", name="ck_shares_access"),
        sa.CheckConstraint(
            "(user_id IS NULL) <> (group_id IS NULL)", name="ck_shares_one_grantee"
        ),
        sa.ForeignKeyConstraint(
            ["conversation_id"], ["conversations.id"],
            name="fk_shares_conversation_id_conversations", ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name="fk_shares_user_id_users", ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["group_id"], ["groups.id"], name="fk_shares_group_id_groups", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name="pk_shares"),
        sa.UniqueConstraint(
            "conversation_id", "user_id", name="uq_shares_conversation_id_user_id"
        ),
        sa.UniqueConstraint(
            "conversation_id", "group_id", name="uq_shares_conversation_id_group_id"
        ),
    )  # fmt: skip
    op.create_index("ix_shares_user_id", "shares", ["user_id"])
    op.create_index("ix_shares_group_id", "shares", ["group_id"])
    op.create_table(
        "reveal_events",
        _event_id(),
        sa.Column("viewer_id", sa.String(32), nullable=True),
        sa.Column("conversation_id", sa.String(32), nullable=True),
        sa.Column("message_id", sa.String(32), nullable=True),
        sa.Column("token", sa.String(100), nullable=False),
        sa.Column("kind", sa.String(200), nullable=False),
        sa.Column("level", sa.String(16), nullable=False),
        sa.Column("created_at", _ts(), nullable=False),
        sa.CheckConstraint("level IN ('plain', 'masked')", name="ck_reveal_events_level"),
        sa.PrimaryKeyConstraint("id", name="pk_reveal_events"),
    )
    op.create_index(
        "ix_reveal_events_conversation_id_created_at",
        "reveal_events",
        ["conversation_id", "created_at"],
    )
    op.create_index(
        "ix_reveal_events_viewer_id_created_at", "reveal_events", ["viewer_id", "created_at"]
    )
    op.create_index("ix_reveal_events_created_at", "reveal_events", ["created_at"])
    op.create_table(
        "admin_events",
        _event_id(),
        sa.Column("actor_id", sa.String(32), nullable=True),
        sa.Column("action", sa.String(64), nullable=False),
        sa.Column("target", sa.String(400), nullable=False),
        sa.Column("created_at", _ts(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_admin_events"),
    )
    op.create_index("ix_admin_events_created_at", "admin_events", ["created_at"])


def downgrade() -> None:
    op.drop_index("ix_admin_events_created_at", table_name="admin_events")
    op.drop_table("admin_events")
    for index in ("created_at", "viewer_id_created_at", "conversation_id_created_at"):
        op.drop_index(f"ix_reveal_events_{index}", table_name="reveal_events")
    op.drop_table("reveal_events")
    op.drop_index("ix_shares_group_id", table_name="shares")
    op.drop_index("ix_shares_user_id", table_name="shares")
    op.drop_table("shares")
    op.drop_table("never_restore")
    op.drop_table("reveal_levels")
    op.drop_index("ix_group_members_user_id", table_name="group_members")
    op.drop_table("group_members")
    op.drop_table("groups")
    with op.batch_alter_table("api_tokens") as batch:
        batch.drop_column("last_used_at")
    with op.batch_alter_table("users") as batch:
        batch.drop_constraint("ck_users_role", type_="check")
        batch.drop_column("role")
