"""Token rotation and revocation, server-side console sessions, a random console signing secret.

Revision ID: 0008
Revises: 0007 (the lead re-chains this session's migrations at merge)
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tenants") as batch:
        batch.add_column(sa.Column("previous_token_hash", sa.String(64), nullable=True))
        batch.add_column(sa.Column("previous_valid_until", sa.Float, nullable=True))
        batch.add_column(sa.Column("token_revoked_at", sa.Float, nullable=True))
    op.create_index("ix_tenants_previous_token_hash", "tenants", ["previous_token_hash"])
    op.create_table(
        "token_events",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True,
                  autoincrement=True),
        sa.Column("tenant", sa.String(64), sa.ForeignKey("tenants.name"), nullable=False),
        sa.Column("action", sa.String(16), nullable=False),
        sa.Column("principal", sa.String(80), nullable=False),
        sa.Column("actor", sa.String(200), nullable=False),
        sa.Column("reason", sa.String(1000), nullable=False),
        sa.Column("channel", sa.String(16), nullable=False),
        sa.Column("grace_s", sa.Float, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.create_index("ix_token_events_tenant", "token_events", ["tenant"])
    op.create_table(
        "console_sessions",
        sa.Column("id_hash", sa.String(64), primary_key=True),
        sa.Column("tenant", sa.String(64), nullable=True),
        sa.Column("token_hash", sa.String(64), nullable=False),
        sa.Column("name", sa.String(80), nullable=False),
        sa.Column("csrf", sa.String(64), nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("expires_at", sa.Float, nullable=False),
        sa.Column("revoked_at", sa.Float, nullable=True),
    )
    op.create_index("ix_console_sessions_tenant", "console_sessions", ["tenant"])
    op.create_index("ix_console_sessions_expires_at", "console_sessions", ["expires_at"])
    op.create_table(
        "service_secrets",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("value", sa.String(128), nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("service_secrets")
    op.drop_index("ix_console_sessions_expires_at", "console_sessions")
    op.drop_index("ix_console_sessions_tenant", "console_sessions")
    op.drop_table("console_sessions")
    op.drop_index("ix_token_events_tenant", "token_events")
    op.drop_table("token_events")
    op.drop_index("ix_tenants_previous_token_hash", "tenants")
    with op.batch_alter_table("tenants") as batch:
        batch.drop_column("token_revoked_at")
        batch.drop_column("previous_valid_until")
        batch.drop_column("previous_token_hash")
