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

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any, NamedTuple, TypeVar

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.dialects.postgresql.psycopg import dialect as psycopg_dialect
from sqlalchemy.engine import Connection

from ..score import ScoreIn
from .statements import JOB_STATE, ingest_job

T = TypeVar("T")

#: The columns of a score row, in the order :meth:`Dialect.insert_scores` takes them: the job,
#: every field of :class:`ScoreIn` (``metric`` resolved), and when it was received.
SCORE_COLUMNS = ("job_id", *ScoreIn.model_fields, "received_at")


class Dialect:
    """The operations whose SQL differs by database."""

    name = ""
    #: writes run through the group committer (one durable commit for many requests)
    group_commit = False
    #: several processes (replicas) may share the database
    shared = False

    def run_unit(self, conn: Connection, unit: Callable[[Connection], T]) -> T:
        """Run ``unit(conn)`` in one write transaction on ``conn`` (fresh from the pool) and
        return its result once committed; rolled back if it raises."""
        with conn.begin():
            return unit(conn)

    def read_ingest_job(self, conn: Connection, job_id: str, tenant: str | None) -> dict[str, Any] | None:
        raise NotImplementedError

    def write_scores(
        self, conn: Connection, rows: Sequence[tuple[Any, ...]], job_id: str, state: str | None
    ) -> None:
        """Insert the score ``rows`` (:data:`SCORE_COLUMNS`) and, unless ``state`` is None, write
        the job's monitor state (JSON text, stored as it is: ingest reads it back as text and
        compares), in the caller's transaction."""
        raise NotImplementedError

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
        self._read = {scoped: _compile(ingest_job(scoped, lock=False), dialect) for scoped in (False, True)}
        self._insert = (f"INSERT INTO scores ({', '.join(SCORE_COLUMNS)}) "
                        f"VALUES ({', '.join('?' for _ in SCORE_COLUMNS)})")

    def read_ingest_job(self, conn: Connection, job_id: str, tenant: str | None) -> dict[str, Any] | None:
        read = self._read[tenant is not None]
        given = {"job_id": job_id, "tenant": tenant}
        found = _raw(conn).execute(read.sql, [given[n] if n in given else read.defaults[n]
                                             for n in read.params]).fetchone()
        return None if found is None else dict(zip(read.columns, found, strict=True))

    def write_scores(
        self, conn: Connection, rows: Sequence[tuple[Any, ...]], job_id: str, state: str | None
    ) -> None:
        raw = _raw(conn)
        if rows:
            raw.executemany(self._insert, rows)
        if state is not None:
            raw.execute("UPDATE jobs SET monitor_state = ? WHERE id = ?", (state, job_id))

    def now(self) -> sa.ColumnElement[Any]:
        return sa.literal(time.time())  # one process: its clock is the only one

    def insert_ignore(self, table: sa.Table) -> Any:
        return sqlite.insert(table).on_conflict_do_nothing()

    def try_session_lock(self, conn: Connection, key: int) -> bool:
        return True  # one process: it always leads


class Postgres(Dialect):
    """The ingest path runs on the driver connection in TWO round trips for a single score
    (docs/service.md, "Round trips"): ``BEGIN``, the job's lock and its state in one pipeline;
    then the new scores and the monitor in one statement (a data-modifying CTE) with ``COMMIT``
    in a second pipeline. For that the transaction is this class's, not SQLAlchemy's
    (:meth:`run_unit`, :class:`_Tx`): the connection runs in autocommit and ``BEGIN``, the
    deferred write and ``COMMIT`` ride along with the next statement. Eight round trips before
    issue 21, four after its second pass."""

    name = "postgresql"
    shared = True
    #: a batch larger than this is sent with COPY (one statement whatever its size)
    copy_from = 50
    _copy = f"COPY scores ({', '.join(SCORE_COLUMNS)}) FROM STDIN"

    def __init__(self) -> None:
        dialect = psycopg_dialect()  # type: ignore[no-untyped-call]
        self._lock = {scoped: _compile(ingest_job(scoped, lock=True), dialect) for scoped in (False, True)}
        self._state = _compile(JOB_STATE, dialect)
        self._row = "(" + ", ".join("%s" for _ in SCORE_COLUMNS) + ")"
        self._insert = f"INSERT INTO scores ({', '.join(SCORE_COLUMNS)}) VALUES "
        self._update = "UPDATE jobs SET monitor_state = %s::json WHERE id = %s"

    def run_unit(self, conn: Connection, unit: Callable[[Connection], T]) -> T:
        """``unit(conn)`` in a transaction of our own: the driver connection in autocommit, and
        ``BEGIN``, the unit's deferred write and ``COMMIT`` sent with the statements around them
        (:class:`_Tx`). A statement the unit sends through SQLAlchemy sends what is owed first
        (:func:`owed_first`, an engine hook). Rolled back if the unit or the commit raises."""
        raw = _raw(conn)
        tx = _Tx()
        conn.info[_TX] = tx
        raw.autocommit = True
        try:
            result = unit(conn)
            if tx.begun:
                with _wrapped(conn), raw.pipeline():
                    tx.send(raw)
                    raw.execute("COMMIT")
                tx.begun = False
            return result
        finally:
            del conn.info[_TX]
            if tx.begun and not raw.closed:
                with suppress(Exception):  # a broken connection: the pool discards it
                    raw.execute("ROLLBACK")
            with suppress(Exception):  # not while in a transaction (then the pool discards it)
                raw.autocommit = False

    def read_ingest_job(self, conn: Connection, job_id: str, tenant: str | None) -> dict[str, Any] | None:
        raw = _raw(conn)
        given = {"job_id": job_id, "tenant": tenant}
        lock, state = self._lock[tenant is not None], self._state
        tx = conn.info.get(_TX)
        with _wrapped(conn), raw.cursor() as locked, raw.cursor() as read:
            with raw.pipeline():
                if tx is not None:
                    tx.send(raw)
                locked.execute(lock.sql, {**lock.defaults, **given})
                read.execute(state.sql, {**state.defaults, **given})
            found = locked.fetchone()
            if found is None:
                return None
            # the names come from the compiled statement: reading the cursor's description built
            # one driver object per column per request (a tenth of the CPU, by profile)
            job = dict(zip(lock.columns, found, strict=True))
            job.update(zip(state.columns, read.fetchone(), strict=True))
        return job

    def write_scores(
        self, conn: Connection, rows: Sequence[tuple[Any, ...]], job_id: str, state: str | None
    ) -> None:
        raw = _raw(conn)
        tx = conn.info.get(_TX)
        if len(rows) > self.copy_from:
            if tx is not None:
                owed_first(conn)
            # COPY: one statement for the unit (executemany sends one INSERT per row, and the
            # server's per-statement work was most of a 100-score unit, by profile)
            with _wrapped(conn), raw.cursor() as cursor, cursor.copy(self._copy) as copy:
                for r in rows:
                    copy.write_row(r)
            rows = ()
        sql, params = "", []
        if rows:
            sql = self._insert + ", ".join(self._row for _ in rows)
            params = [v for r in rows for v in r]
        if state is not None:
            update = (self._update, [state, job_id])
            sql = f"WITH new AS ({sql}) {update[0]}" if sql else update[0]
            params += update[1]
        if sql and tx is not None:
            if tx.write is not None:  # one held back already goes first (the rewind path writes twice)
                owed_first(conn)
            tx.owe(sql, params)  # sent with the next statement, or with COMMIT
        elif sql:
            with _wrapped(conn), raw.cursor() as cursor:
                cursor.execute(sql, params)

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


#: The key of a PostgreSQL unit's :class:`_Tx` in its connection's ``info``.
_TX = "evalstop_tx"


class _Tx:
    """What a PostgreSQL unit owes the server: its ``BEGIN`` (until ``begun``) and a write held
    back to go with the next statement (:meth:`Postgres.write_scores`). Only one write is held
    back: a second one first sends the one before."""

    __slots__ = ("begun", "write")

    def __init__(self) -> None:
        self.begun = False
        self.write: tuple[str, list[Any]] | None = None

    def owe(self, sql: str, params: list[Any]) -> None:
        assert self.write is None, "send the held-back write first (owed_first)"
        self.write = (sql, params)

    def send(self, raw: Any) -> None:
        """Queue what is owed on ``raw`` (inside its pipeline)."""
        if not self.begun:
            raw.execute("BEGIN")
            self.begun = True
        if self.write is not None:
            sql, params = self.write
            self.write = None
            raw.execute(sql, params)


def owed_first(conn: Connection) -> None:
    """Send what a PostgreSQL unit owes (its ``BEGIN``, a held-back write) before a statement
    that does not carry it: SQLAlchemy's (an engine hook, :func:`~.engine.open_store`), or COPY."""
    tx = conn.info.get(_TX)
    if tx is not None and (not tx.begun or tx.write is not None):
        raw = _raw(conn)
        with _wrapped(conn), raw.pipeline():
            tx.send(raw)


class _Compiled(NamedTuple):
    """A statement compiled once for the driver: its SQL, its parameters' names in order
    (positional drivers), their defaults, and the names of its result columns."""

    sql: str
    params: tuple[str, ...]
    defaults: dict[str, Any]
    columns: tuple[str, ...]


def _compile(query: sa.Select[Any], dialect: Any) -> _Compiled:
    compiled = query.compile(dialect=dialect)
    return _Compiled(compiled.string, tuple(compiled.positiontup or ()), dict(compiled.params),
                     tuple(str(c.key) for c in query.selected_columns))


@contextmanager
def _wrapped(conn: Connection) -> Iterator[None]:
    """The driver's errors as SQLAlchemy raises them (``OperationalError``: the service answers
    503), so a statement on the driver connection fails as it would through SQLAlchemy."""
    dbapi = conn.dialect.dbapi
    assert dbapi is not None
    try:
        yield
    except dbapi.Error as exc:
        raise sa.exc.DBAPIError.instance(None, None, exc, dbapi.Error) from exc


def _raw(conn: Connection) -> Any:
    raw = conn.connection.driver_connection
    assert raw is not None
    return raw
