"""The monitors aggregate: each job's ``Monitor`` state, a JSON value on its row."""

from __future__ import annotations

from typing import Any

from sqlalchemy.engine import Connection

from .engine import Store


def save(store: Store, conn: Connection, job_id: str, state: dict[str, Any]) -> None:
    """Write the monitor state back to the job row (inside the caller's transaction)."""
    store.dialect.save_monitor(conn, job_id, state)
