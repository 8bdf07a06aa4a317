"""Token buckets shared by replicas: one row per tenant, so R replicas admit a tenant's rate once,
not R times.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tenant_buckets",
        sa.Column("tenant", sa.String(64), sa.ForeignKey("tenants.name"), primary_key=True),
        sa.Column("tokens", sa.Float, nullable=False),
        sa.Column("at", sa.Float, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("tenant_buckets")
