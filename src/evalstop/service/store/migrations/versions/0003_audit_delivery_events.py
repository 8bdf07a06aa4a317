"""Operator console: the audit trail of manual changes and each stop's delivery history.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

ID = sa.BigInteger().with_variant(sa.Integer, "sqlite")


def upgrade() -> None:
    op.create_table(
        "audit",
        sa.Column("id", ID, primary_key=True, autoincrement=True),
        sa.Column("job_id", sa.String(32), sa.ForeignKey("jobs.id"), nullable=False),
        sa.Column("principal", sa.String(80), nullable=False),
        sa.Column("actor", sa.String(200), nullable=False),
        sa.Column("action", sa.String(32), nullable=False),
        sa.Column("reason", sa.String(1000), nullable=False),
        sa.Column("channel", sa.String(16), nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.create_index("ix_audit_job_id", "audit", ["job_id"])
    op.create_table(
        "delivery_events",
        sa.Column("id", ID, primary_key=True, autoincrement=True),
        sa.Column("outbox_id", sa.BigInteger, sa.ForeignKey("outbox.id"), nullable=False),
        sa.Column("job_id", sa.String(32), sa.ForeignKey("jobs.id"), nullable=False),
        sa.Column("phase", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("error", sa.String(1000), nullable=True),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.create_index("ix_delivery_events_job_id", "delivery_events", ["job_id"])


def downgrade() -> None:
    op.drop_index("ix_delivery_events_job_id", table_name="delivery_events")
    op.drop_table("delivery_events")
    op.drop_index("ix_audit_job_id", table_name="audit")
    op.drop_table("audit")
