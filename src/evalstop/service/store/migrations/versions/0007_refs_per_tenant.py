"""An external reference is unique among one tenant's live jobs, not across tenants.

Across tenants, the index let one tenant register another's next job id first (squatting) and
told it, by a 409, which references others used. Ownership is now proven with the backend at
registration (docs/tenants.md, "Tenants are adversaries"). The upgrade only widens the index,
so it never fails; a downgrade stops and names the live jobs of different tenants that share a
reference, as migration 0002 does.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

LIVE = sa.text("state != 'stopped'")


def upgrade() -> None:
    op.drop_index("uq_jobs_live_ref", table_name="jobs")
    op.create_index("uq_jobs_live_ref", "jobs", ["tenant", "target", "external_ref"], unique=True,
                    sqlite_where=LIVE, postgresql_where=LIVE)


def downgrade() -> None:
    clashes = op.get_bind().execute(sa.text(
        "SELECT target, external_ref, COUNT(*) FROM jobs WHERE state != 'stopped' "
        "GROUP BY target, external_ref HAVING COUNT(*) > 1")).all()
    if clashes:
        listed = ", ".join(f"{t}:{r!r} ({n} jobs)" for t, r, n in clashes[:20])
        raise RuntimeError(f"downgrade of 0007: live jobs of several tenants share an external reference: "
                           f"{listed}. Mark all but one as state='stopped' first.")
    op.drop_index("uq_jobs_live_ref", table_name="jobs")
    op.create_index("uq_jobs_live_ref", "jobs", ["target", "external_ref"], unique=True,
                    sqlite_where=LIVE, postgresql_where=LIVE)
