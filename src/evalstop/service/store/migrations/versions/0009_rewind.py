"""Rewind instead of stop: each job's and each tenant's on-detect policy, a job's
resubmission template, the correction of a rewind decision, the attempt a score belongs to, and
the scores a rewind discarded.

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tenants") as batch:
        batch.add_column(sa.Column("on_detect", sa.JSON(none_as_null=True), nullable=True))
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("on_detect", sa.JSON(none_as_null=True), nullable=True))
        batch.add_column(sa.Column("resubmit", sa.JSON(none_as_null=True), nullable=True))
    with op.batch_alter_table("decisions") as batch:
        batch.add_column(sa.Column("correction", sa.String(500), nullable=True))
        batch.add_column(sa.Column("new_ref", sa.String(500), nullable=True))
    with op.batch_alter_table("scores") as batch:
        batch.add_column(sa.Column("attempt", sa.Integer, nullable=True))
    op.create_table(
        "rewound_scores",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True,
                  autoincrement=True),
        sa.Column("job_id", sa.String(32), sa.ForeignKey("jobs.id"), nullable=False, index=True),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("metric", sa.String(200), nullable=False),
        sa.Column("step", sa.BigInteger, nullable=False),
        sa.Column("value", sa.Float, nullable=False),
        sa.Column("checkpoint_uri", sa.String(2000), nullable=True),
        sa.Column("score_stderr", sa.Float, nullable=True),
        sa.Column("received_at", sa.Float, nullable=False),
        sa.Column("rewound_at", sa.Float, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("rewound_scores")
    with op.batch_alter_table("scores") as batch:
        batch.drop_column("attempt")
    with op.batch_alter_table("decisions") as batch:
        batch.drop_column("new_ref")
        batch.drop_column("correction")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("resubmit")
        batch.drop_column("on_detect")
    with op.batch_alter_table("tenants") as batch:
        batch.drop_column("on_detect")
