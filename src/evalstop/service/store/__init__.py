"""The service's persistence: every table, query and SQLite/PostgreSQL difference lives in this
package, and nothing outside it imports SQLAlchemy or a database driver
(``tests/service/test_layers.py`` checks both).

- :mod:`.tables` (the schema), :mod:`.engine` (:func:`open_store`, :class:`Store`, transactions),
  :mod:`.dialect` (what differs by database, picked once by :func:`open_store`), :mod:`.commit`
  (SQLite's group commit), :mod:`.migrate` and ``migrations/`` (Alembic);
- one module per aggregate: :mod:`.job`, :mod:`.score` (new scores and the job's monitor state,
  written together), :mod:`.decision`, :mod:`.trail` (audit), :mod:`.tenant`, :mod:`.bucket`,
  :mod:`.delivery` (the outbox), :mod:`.session` (console sessions, shared secrets), and the
  read models :mod:`.report` and :mod:`.listing`;
  :mod:`.lock` (a session lock for one leader); :mod:`.statements` (the hot path's prebuilt SQL).
"""

from __future__ import annotations

from .engine import (
    Conn,
    DatabaseError,
    DatabaseUnavailable,
    Limits,
    Store,
    ValueDoesNotFit,
    open_store,
    sqlite_file,
)
from .tables import (
    audit,
    console_sessions,
    decisions,
    delivery_events,
    jobs,
    metadata,
    outbox,
    scores,
    service_secrets,
    tenant_buckets,
    tenants,
    token_events,
)

__all__ = [
    "Conn", "DatabaseError", "DatabaseUnavailable", "Limits", "Store", "ValueDoesNotFit", "audit",
    "console_sessions",
    "decisions", "delivery_events", "jobs", "metadata", "open_store", "outbox", "scores",
    "service_secrets", "sqlite_file", "tenant_buckets", "tenants", "token_events",
]
