"""The schema of the last release without migrations (commit f76c283).

A database created by that release has these tables and no ``alembic_version``; it is stamped
with this revision and upgraded from here.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

BIGID = sa.BigInteger().with_variant(sa.Integer, "sqlite")


def upgrade() -> None:
    op.create_table(
        "tenants",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("token_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("shadow", sa.Boolean, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.create_table(
        "jobs",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("tenant", sa.String(64), sa.ForeignKey("tenants.name"), nullable=False, index=True),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("external_ref", sa.String(500), nullable=False),
        sa.Column("target", sa.String(64), nullable=False),
        sa.Column("target_options", sa.JSON, nullable=False),
        sa.Column("detector", sa.String(500), nullable=False),
        sa.Column("metric", sa.String(200), nullable=False),
        sa.Column("mode", sa.String(3), nullable=False),
        sa.Column("grace_period_s", sa.Float, nullable=False),
        sa.Column("gpus", sa.Integer, nullable=False),
        sa.Column("expected_duration_s", sa.Float, nullable=True),
        sa.Column("shadow", sa.Boolean, nullable=False),
        sa.Column("override", sa.String(16), nullable=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("last_step", sa.BigInteger, nullable=True),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("stopped_at", sa.Float, nullable=True),
    )
    op.create_table(
        "scores",
        sa.Column("id", BIGID, primary_key=True, autoincrement=True),
        sa.Column("job_id", sa.String(32), sa.ForeignKey("jobs.id"), nullable=False),
        sa.Column("metric", sa.String(200), nullable=False),
        sa.Column("step", sa.BigInteger, nullable=False),
        sa.Column("value", sa.Float, nullable=False),
        sa.Column("checkpoint_uri", sa.String(2000), nullable=True),
        sa.Column("progress", sa.Float, nullable=True),
        sa.Column("loss", sa.Float, nullable=True),
        sa.Column("ts", sa.Float, nullable=True),
        sa.Column("received_at", sa.Float, nullable=False),
        sa.UniqueConstraint("job_id", "metric", "step", name="uq_scores_job_metric_step"),
    )
    op.create_table(
        "decisions",
        sa.Column("id", BIGID, primary_key=True, autoincrement=True),
        sa.Column("job_id", sa.String(32), sa.ForeignKey("jobs.id"), nullable=False),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("decision", sa.String(16), nullable=False),
        sa.Column("shadow", sa.Boolean, nullable=False),
        sa.Column("enforced", sa.Boolean, nullable=False),
        sa.Column("reason", sa.String(1000), nullable=False),
        sa.Column("detector", sa.String(500), nullable=False),
        sa.Column("step", sa.BigInteger, nullable=True),
        sa.Column("n_evals", sa.Integer, nullable=False),
        sa.Column("best_step", sa.BigInteger, nullable=True),
        sa.Column("best_score", sa.Float, nullable=True),
        sa.Column("best_checkpoint_uri", sa.String(2000), nullable=True),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.UniqueConstraint("job_id", "source", name="uq_decisions_job_source"),
    )
    op.create_table(
        "outbox",
        sa.Column("id", BIGID, primary_key=True, autoincrement=True),
        sa.Column("decision_id", sa.BigInteger, sa.ForeignKey("decisions.id"), nullable=False, unique=True),
        sa.Column("job_id", sa.String(32), sa.ForeignKey("jobs.id"), nullable=False),
        sa.Column("phase", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("next_attempt_at", sa.Float, nullable=False),
        sa.Column("lease_until", sa.Float, nullable=True),
        sa.Column("lease_owner", sa.String(32), nullable=True),
        sa.Column("signalled_at", sa.Float, nullable=True),
        sa.Column("last_error", sa.String(1000), nullable=True),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("delivered_at", sa.Float, nullable=True),
        sa.Index("ix_outbox_due", "phase", "next_attempt_at"),
    )


def downgrade() -> None:
    for table in ("outbox", "decisions", "scores", "jobs", "tenants"):
        op.drop_table(table)
