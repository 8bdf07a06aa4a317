"""The durable store: SQLAlchemy Core tables, and an engine set up the same way for SQLite and
PostgreSQL.

SQLite runs in WAL mode with ``synchronous=FULL`` by default (every acknowledged commit survives
power loss) and a busy timeout; :meth:`Store.transaction` begins ``IMMEDIATE`` so a transaction
that will write takes the write lock up front instead of failing on upgrade (reads begin
deferred and, in WAL mode, never wait for a writer). On PostgreSQL, writers to one job
serialise on ``SELECT ... FOR UPDATE`` of the job row.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from .commit import GroupCommitter

T = TypeVar("T")

metadata = sa.MetaData()

tenants = sa.Table(
    "tenants",
    metadata,
    sa.Column("name", sa.String(64), primary_key=True),
    sa.Column("token_hash", sa.String(64), nullable=False, unique=True),
    sa.Column("shadow", sa.Boolean, nullable=False, default=False),
    sa.Column("created_at", sa.Float, nullable=False),
    #: what the tenant may act on (:class:`~evalstop.service.scopes.TenantScope`); NULL = nothing
    sa.Column("scope", sa.JSON, nullable=True),
    #: rate limit and size quota overrides (:class:`~evalstop.service.fairness.Quota`); NULL = defaults
    sa.Column("quota", sa.JSON, nullable=True),
)

#: Each tenant's token bucket where replicas share it (PostgreSQL; ``fairness.SharedTokenBuckets``):
#: the tokens left at ``at`` (seconds, the database's clock).
tenant_buckets = sa.Table(
    "tenant_buckets",
    metadata,
    sa.Column("tenant", sa.String(64), sa.ForeignKey("tenants.name"), primary_key=True),
    sa.Column("tokens", sa.Float, nullable=False),
    sa.Column("at", sa.Float, nullable=False),
)

jobs = sa.Table(
    "jobs",
    metadata,
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
    sa.Column("shadow", sa.Boolean, nullable=False, default=False),
    sa.Column("override", sa.String(16), nullable=True),
    #: running -> stopping (a stop is in the outbox) -> stopped (reconciled) | stop_failed
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("last_step", sa.BigInteger, nullable=True),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("stopped_at", sa.Float, nullable=True),
    #: The job's Monitor (``Monitor.to_json()``): its rule state, best eval and checkpoint.
    #: NULL: rebuilt once from the stored scores (service/monitoring.py).
    sa.Column("monitor_state", sa.JSON(none_as_null=True), nullable=True),
    # an external reference belongs to one live job only (stopped jobs release it)
    sa.Index("uq_jobs_live_ref", "target", "external_ref", unique=True,
             sqlite_where=sa.text("state != 'stopped'"), postgresql_where=sa.text("state != 'stopped'")),
)

scores = sa.Table(
    "scores",
    metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True),
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

decisions = sa.Table(
    "decisions",
    metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True),
    sa.Column("job_id", sa.String(32), sa.ForeignKey("jobs.id"), nullable=False),
    #: "detector" (the rule fired) or "override" (stop_now): at most one of each per job.
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

outbox = sa.Table(
    "outbox",
    metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True),
    sa.Column("decision_id", sa.BigInteger, sa.ForeignKey("decisions.id"), nullable=False, unique=True),
    sa.Column("job_id", sa.String(32), sa.ForeignKey("jobs.id"), nullable=False),
    #: pin -> signal -> grace -> hard_stop -> reconcile -> done | failed
    sa.Column("phase", sa.String(16), nullable=False),
    sa.Column("attempts", sa.Integer, nullable=False, default=0),
    sa.Column("next_attempt_at", sa.Float, nullable=False),
    sa.Column("lease_until", sa.Float, nullable=True),
    sa.Column("lease_owner", sa.String(32), nullable=True),
    #: fencing token: bumped by every claim; a worker's writes carry the value it claimed with
    sa.Column("lease_epoch", sa.BigInteger, nullable=False, default=0, server_default="0"),
    sa.Column("signalled_at", sa.Float, nullable=True),
    sa.Column("last_error", sa.String(1000), nullable=True),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("delivered_at", sa.Float, nullable=True),
    sa.Index("ix_outbox_due", "phase", "next_attempt_at"),
)


#: Who changed a job by hand (overrides, stop retries), from the API or the console: one row per
#: accepted change, written in the change's own transaction.
audit = sa.Table(
    "audit",
    metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True),
    sa.Column("job_id", sa.String(32), sa.ForeignKey("jobs.id"), nullable=False, index=True),
    #: the authenticated caller: "operator" or "tenant:NAME" (tenant names hold no ':')
    sa.Column("principal", sa.String(80), nullable=False),
    #: the name the person gave at console sign-in (self-declared), else the principal
    sa.Column("actor", sa.String(200), nullable=False),
    #: "stop_now" | "never_stop" | "resume" | "retry_stop"
    sa.Column("action", sa.String(32), nullable=False),
    sa.Column("reason", sa.String(1000), nullable=False),
    sa.Column("channel", sa.String(16), nullable=False),  # "api" | "console"
    sa.Column("created_at", sa.Float, nullable=False),
)

#: The delivery history of each outbox row: every phase it entered and every failed attempt.
delivery_events = sa.Table(
    "delivery_events",
    metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True),
    sa.Column("outbox_id", sa.BigInteger, sa.ForeignKey("outbox.id"), nullable=False),
    sa.Column("job_id", sa.String(32), sa.ForeignKey("jobs.id"), nullable=False, index=True),
    sa.Column("phase", sa.String(16), nullable=False),
    sa.Column("attempts", sa.Integer, nullable=False),
    sa.Column("error", sa.String(1000), nullable=True),
    sa.Column("created_at", sa.Float, nullable=False),
)

@dataclass(frozen=True)
class Limits:
    """Input limits the domain layer enforces (from the settings)."""

    max_batch: int = 1000
    max_step: int = 10**12
    max_history: int = 100_000
    #: A batch is written in units of at most this many scores (see ``ingest.ingest_scores``).
    ingest_chunk: int = 100


class Store:
    """An engine plus the limits that go with it. Create with :func:`open_store`."""

    def __init__(
        self, engine: Engine, limits: Limits | None = None, clock: Any = time.time, group_commit: bool = True
    ) -> None:
        self.engine = engine
        self.limits = limits or Limits()
        self.clock = clock
        self.is_sqlite = engine.dialect.name == "sqlite"
        self._group_conn: Connection | None = None  # the committer's own connection, kept open
        self.committer = GroupCommitter(self._group_transaction) if group_commit and self.is_sqlite else None

    @contextmanager
    def transaction(self) -> Iterator[Connection]:
        """One transaction: committed on success, rolled back on any exception."""
        with self.engine.connect() as conn:
            conn.execution_options(evalstop_writes=True)
            with conn.begin():
                yield conn

    @contextmanager
    def _group_transaction(self) -> Iterator[Connection]:
        """A commit group's transaction, on one connection the committer thread keeps (a pool
        checkout per group showed in the profile); reopened if it was closed or invalidated."""
        conn = self._group_conn
        if conn is None or conn.closed or conn.invalidated:
            conn = self._group_conn = self.engine.connect()
            conn.execution_options(evalstop_writes=True)
        with conn.begin():
            yield conn

    def write(self, unit: Callable[[Connection], T]) -> T:
        """Run ``unit(conn)`` in a write transaction and return its result once committed: in a
        commit group on SQLite (see :mod:`evalstop.service.commit`), alone on PostgreSQL."""
        if self.committer is not None:
            return self.committer.run(unit)
        with self.transaction() as conn:
            return unit(conn)

    async def write_async(self, unit: Callable[[Connection], T]) -> T:
        """:meth:`write` for an event loop. With group commit the loop waits for the commit
        without a thread of its own (no thread-pool hop per request); else in a thread."""
        if self.committer is not None:
            return await asyncio.wrap_future(self.committer.submit(unit))
        return await asyncio.to_thread(self.write, unit)

    def create_schema(self) -> None:
        """Create or migrate the schema to the current revision (:mod:`.migrate`)."""
        from .migrate import upgrade

        upgrade(self.engine)

    def ping(self) -> None:
        with self.engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))

    def dispose(self) -> None:
        if self.committer is not None:
            self.committer.close()
        if self._group_conn is not None:
            self._group_conn.close()
            self._group_conn = None
        self.engine.dispose()


def open_store(
    url: str, *, synchronous: str = "FULL", limits: Limits | None = None, group_commit: bool = True,
    migrate: bool = True,
) -> Store:
    """Build the engine for ``url`` (SQLite pragmas included) and create or migrate the schema
    (``migrate=False``: leave it as it is; see :func:`.migrate.require_head`)."""
    if url.startswith("postgresql:"):
        url = "postgresql+psycopg:" + url.removeprefix("postgresql:")
    if url.startswith("sqlite"):
        engine = sa.create_engine(url, connect_args={"timeout": 30, "check_same_thread": False})
        _configure_sqlite(engine, synchronous)
    else:
        engine = sa.create_engine(url, pool_size=10, max_overflow=20, pool_pre_ping=True)
    store = Store(engine, limits, group_commit=group_commit)
    if migrate:
        store.create_schema()
    return store


def _configure_sqlite(engine: Engine, synchronous: str) -> None:
    if synchronous not in ("FULL", "NORMAL"):
        raise ValueError(f"synchronous must be 'FULL' or 'NORMAL'. Got {synchronous!r} instead.")

    @sa.event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # let SQLAlchemy's "begin" hook issue BEGIN itself
        cursor = dbapi_conn.cursor()
        for pragma in ("journal_mode=WAL", f"synchronous={synchronous}", "busy_timeout=30000",
                       "foreign_keys=ON"):
            cursor.execute(f"PRAGMA {pragma}")
        cursor.close()

    @sa.event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        # a transaction that writes takes the lock up front; reads stay deferred (WAL: never blocked)
        writes = conn.get_execution_options().get("evalstop_writes", False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if writes else "BEGIN")
