"""Adaptive eval cadence: each job's cadence policy and eval interval, and each score's
optional standard error.

Existing jobs get ``every:n=1`` (every eval, the cadence they ran under) and no interval; existing
scores get no standard error.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("cadence", sa.String(200), nullable=False, server_default="every:n=1"))
        batch.add_column(sa.Column("eval_interval", sa.BigInteger, nullable=True))
    with op.batch_alter_table("scores") as batch:
        batch.add_column(sa.Column("score_stderr", sa.Float, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("scores") as batch:
        batch.drop_column("score_stderr")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("eval_interval")
        batch.drop_column("cadence")
