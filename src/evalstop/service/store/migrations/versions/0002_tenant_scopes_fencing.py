"""Tenant scopes and quotas, one live job per external reference, outbox fencing.

An old database may hold two live jobs with the same (target, external_ref) - the very thing
the new unique index forbids. The upgrade then stops and names them: which job really owns the
reference is for the operator to say (set the other's ``state`` to ``stopped``).

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

LIVE = sa.text("state != 'stopped'")


def upgrade() -> None:
    clashes = op.get_bind().execute(sa.text(
        "SELECT target, external_ref, COUNT(*) FROM jobs WHERE state != 'stopped' "
        "GROUP BY target, external_ref HAVING COUNT(*) > 1")).all()
    if clashes:
        listed = ", ".join(f"{t}:{r!r} ({n} jobs)" for t, r, n in clashes[:20])
        raise RuntimeError(f"migration 0002: live jobs share an external reference: {listed}. Mark all but "
                           f"the owner's as state='stopped', then start the service again.")
    with op.batch_alter_table("tenants") as batch:
        batch.add_column(sa.Column("scope", sa.JSON, nullable=True))
        batch.add_column(sa.Column("quota", sa.JSON, nullable=True))
    with op.batch_alter_table("outbox") as batch:
        batch.add_column(sa.Column("lease_epoch", sa.BigInteger, nullable=False, server_default="0"))
    op.create_index("uq_jobs_live_ref", "jobs", ["target", "external_ref"], unique=True,
                    sqlite_where=LIVE, postgresql_where=LIVE)


def downgrade() -> None:
    op.drop_index("uq_jobs_live_ref", table_name="jobs")
    with op.batch_alter_table("outbox") as batch:
        batch.drop_column("lease_epoch")
    with op.batch_alter_table("tenants") as batch:
        batch.drop_column("quota")
        batch.drop_column("scope")
