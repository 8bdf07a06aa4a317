"""What differs between SQLite and PostgreSQL, in one object per database that
:func:`~.engine.open_store` picks once. Nothing outside the store asks which database it runs on.

- SQLite: one process, one writer. Writes go through the group committer; the ingest path's
  statements run on the driver connection (a SQLAlchemy ``execute`` cost ~40 us of CPU against
  ~7 us for the same statement on the sqlite3 cursor, and the group commit runs every unit on one
  thread); the transaction already holds the write lock (``BEGIN IMMEDIATE``), so the job row, its
  latest step and its decisions are read in ONE statement.
- PostgreSQL: replicas share the database (buckets, leader lock, ``SKIP LOCKED`` claims); a
  batch of scores is one ``COPY``; the job is locked ``FOR UPDATE`` and its state read after
  the lock is granted.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection

from .statements import JOB_STATE, LOCK_JOB, job_state
from .tables import jobs, tenants

#: The columns of a score row, in the order :meth:`Dialect.insert_scores` takes them.
SCORE_COLUMNS = ("job_id", "metric", "step", "value", "checkpoint_uri", "progress", "loss", "ts",
                 "received_at")


class Dialect:
    """The operations whose SQL differs by database."""

    name = ""
    #: writes run through the group committer (one durable commit for many requests)
    group_commit = False
    #: several processes (replicas) may share the database
    shared = False

    def read_ingest_job(self, conn: Connection, job_id: str, tenant: str | None) -> dict[str, Any] | None:
        raise NotImplementedError

    def insert_scores(self, conn: Connection, rows: Sequence[tuple[Any, ...]]) -> None:
        raise NotImplementedError

    def save_monitor(self, conn: Connection, job_id: str, state: dict[str, Any]) -> None:
        conn.execute(jobs.update().where(jobs.c.id == job_id).values(monitor_state=state))

    def claimable(self, query: sa.Select[Any]) -> sa.Select[Any]:
        """``query`` (one due outbox row) as a claim: as it is, or skipping rows others hold."""
        return query

    def now(self) -> sa.ColumnElement[Any]:
        """The database's clock in seconds (for state several replicas share)."""
        raise NotImplementedError

    def insert_ignore(self, table: sa.Table) -> Any:
        """INSERT that does nothing when the row exists."""
        raise NotImplementedError

    def commit_without_flush(self, conn: Connection) -> None:
        """Let this transaction commit without waiting for its log flush (where the database can)."""

    def try_session_lock(self, conn: Connection, key: int) -> bool:
        """Take the session-level lock ``key`` on ``conn`` if free (held until it closes)."""
        raise NotImplementedError


class Sqlite(Dialect):
    name = "sqlite"
    group_commit = True

    def __init__(self) -> None:
        dialect = sqlite.dialect()
        self._read = {scoped: _compile(_read_query(scoped), dialect) for scoped in (False, True)}
        self._insert = (f"INSERT INTO scores ({', '.join(SCORE_COLUMNS)}) "
                        f"VALUES ({', '.join('?' for _ in SCORE_COLUMNS)})")

    def read_ingest_job(self, conn: Connection, job_id: str, tenant: str | None) -> dict[str, Any] | None:
        sql, names, defaults = self._read[tenant is not None]
        given = {"job_id": job_id, "tenant": tenant}
        cursor = _raw(conn).execute(sql, [given[n] if n in given else defaults[n] for n in names])
        found = cursor.fetchone()
        return None if found is None else dict(zip((d[0] for d in cursor.description), found, strict=True))

    def insert_scores(self, conn: Connection, rows: Sequence[tuple[Any, ...]]) -> None:
        _raw(conn).executemany(self._insert, rows)

    def save_monitor(self, conn: Connection, job_id: str, state: dict[str, Any]) -> None:
        _raw(conn).execute("UPDATE jobs SET monitor_state = ? WHERE id = ?",
                           (json.dumps(state, allow_nan=False), job_id))

    def now(self) -> sa.ColumnElement[Any]:
        return sa.literal(time.time())  # one process: its clock is the only one

    def insert_ignore(self, table: sa.Table) -> Any:
        return sqlite.insert(table).on_conflict_do_nothing()

    def try_session_lock(self, conn: Connection, key: int) -> bool:
        return True  # one process: it always leads


class Postgres(Dialect):
    name = "postgresql"
    shared = True
    _copy = f"COPY scores ({', '.join(SCORE_COLUMNS)}) FROM STDIN"

    def read_ingest_job(self, conn: Connection, job_id: str, tenant: str | None) -> dict[str, Any] | None:
        params = {"job_id": job_id} if tenant is None else {"job_id": job_id, "tenant": tenant}
        found = conn.execute(LOCK_JOB[tenant is not None], params).mappings().first()
        if found is None:
            return None
        state = conn.execute(JOB_STATE, {"job_id": job_id, "metric": found["metric"]}).one()
        return {**found, **state._mapping}

    def insert_scores(self, conn: Connection, rows: Sequence[tuple[Any, ...]]) -> None:
        # COPY: one statement for the unit (executemany sends one INSERT per row, and the
        # server's per-statement work was most of a 100-score unit, by profile)
        raw = _raw(conn)
        with raw.cursor() as cursor, cursor.copy(self._copy) as copy:
            for r in rows:
                copy.write_row(r)

    def claimable(self, query: sa.Select[Any]) -> sa.Select[Any]:
        return query.with_for_update(skip_locked=True)

    def now(self) -> sa.ColumnElement[Any]:
        return sa.func.extract("epoch", sa.func.clock_timestamp())

    def insert_ignore(self, table: sa.Table) -> Any:
        return postgresql.insert(table).on_conflict_do_nothing()

    def commit_without_flush(self, conn: Connection) -> None:
        conn.execute(sa.text("SET LOCAL synchronous_commit = off"))

    def try_session_lock(self, conn: Connection, key: int) -> bool:
        return bool(conn.execute(sa.text("SELECT pg_try_advisory_lock(:k)"), {"k": key}).scalar())


def _read_query(scoped: bool) -> sa.Select[Any]:
    names = ("id", "metric", "detector", "state", "override", "shadow", "monitor_state")
    cols = [jobs.c[n] for n in names]
    state = job_state(jobs.c.id, jobs.c.metric)
    query = (sa.select(*cols, tenants.c.shadow.label("tenant_shadow"), *state)
             .join(tenants, tenants.c.name == jobs.c.tenant).where(jobs.c.id == sa.bindparam("job_id")))
    return query.where(jobs.c.tenant == sa.bindparam("tenant")) if scoped else query


def _compile(query: sa.Select[Any], dialect: Any) -> tuple[str, tuple[str, ...], dict[str, Any]]:
    compiled = query.compile(dialect=dialect)
    return compiled.string, tuple(compiled.positiontup or ()), dict(compiled.params)


def _raw(conn: Connection) -> Any:
    raw = conn.connection.driver_connection
    assert raw is not None
    return raw
