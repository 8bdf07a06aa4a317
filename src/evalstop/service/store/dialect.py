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

import select
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any, NamedTuple, TypeVar

import sqlalchemy as sa
from psycopg import ClientCursor, pq
from psycopg.errors import FeatureNotSupported, InvalidSqlStatementName, LockNotAvailable
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.dialects.postgresql.asyncpg import dialect as asyncpg_dialect
from sqlalchemy.engine import Connection

from ..errors import InvalidInput
from ..score import ScoreIn
from .commit import RunAlone
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

    def run_group(
        self, conn: Connection, units: Sequence[Callable[[Connection], Any]]
    ) -> list[tuple[Any, BaseException | None]]:
        """Run several queued units on ``conn`` and return each one's result or exception. Here
        one after the other, each in its own transaction; :meth:`Postgres.run_group` commits
        them together."""
        outcomes: list[tuple[Any, BaseException | None]] = []
        for unit in units:
            try:
                outcomes.append((self.run_unit(conn, unit), None))
            except BaseException as exc:  # each unit its own answer, whatever it raised
                outcomes.append((None, exc))
        return outcomes

    def stale(self, conn: Connection) -> bool:
        """Whether ``conn``, kept open between units (:class:`~.commit.WriterThreads`), should be
        replaced before the next: what the pool's checkout check does (:mod:`.engine`)."""
        return False

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

    def notify(self, conn: Connection, channel: str, payload: str) -> None:
        """Tell the other processes on this database ``payload`` on ``channel`` when the caller's
        transaction commits (:mod:`.notify`); nothing where there are none (SQLite)."""


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
    (docs/service-performance.md, "Round trips"): ``BEGIN``, the job's lock and its state in one message;
    then the new scores and the monitor in one statement (a data-modifying CTE) and ``COMMIT``
    in a second. For that the transaction is this class's, not SQLAlchemy's (:meth:`run_unit`,
    :class:`_Tx`): the connection runs in autocommit, and ``BEGIN``, the held-back write and
    ``COMMIT`` ride along with the next statement, all sent as one simple-protocol message
    (one ``send`` each way; psycopg's pipeline sent each statement apart). The statements are
    prepared once per connection (:attr:`PREPARED`), so each call is an ``EXECUTE`` with its
    values rendered as SQL literals (:meth:`_Tx.render`: libpq's own quoting for text). A
    single score is two messages to the server (docs/service-performance.md, "Round trips")."""

    name = "postgresql"
    shared = True
    #: a batch larger than this is sent with COPY (one statement whatever its size)
    copy_from = 50
    _copy = f"COPY scores ({', '.join(SCORE_COLUMNS)}) FROM STDIN"

    def __init__(self) -> None:
        numbered = asyncpg_dialect()  # type: ignore[no-untyped-call]  # only its $n parameter style
        lock = {scoped: _compile(ingest_job(scoped, lock=True), numbered) for scoped in (False, True)}
        state = _compile(JOB_STATE, numbered)
        columns, n = ", ".join(SCORE_COLUMNS), len(SCORE_COLUMNS)
        insert = f"INSERT INTO scores ({columns}) VALUES ({', '.join(f'${i + 1}' for i in range(n))})"
        #: name -> statement, prepared on each connection before its first ingest
        self.PREPARED = {
            "evalstop_lock": lock[False].sql, "evalstop_lock_scoped": lock[True].sql,
            "evalstop_state": state.sql, "evalstop_score": insert,
            "evalstop_score_monitor": f"WITH new AS ({insert}) UPDATE jobs SET monitor_state = "
                                      f"${n + 1}::json WHERE id = ${n + 2}",
            "evalstop_monitor": "UPDATE jobs SET monitor_state = $1::json WHERE id = $2",
        }
        for scoped, name in ((False, "evalstop_lock"), (True, "evalstop_lock_scoped")):
            # in a group (run_group) a job another transaction holds is not waited for
            nowait = lock[scoped].sql.replace("FOR UPDATE OF jobs", "FOR UPDATE OF jobs NOWAIT")
            assert nowait.count("NOWAIT") == 1, lock[scoped].sql
            self.PREPARED[f"{name}_nowait"] = nowait
        self._lock = {
            (scoped, nowait): (_execute(name + ("_nowait" if nowait else ""), lock[scoped]), lock[scoped])
            for scoped, name in ((False, "evalstop_lock"), (True, "evalstop_lock_scoped"))
            for nowait in (False, True)}
        self._state = (_execute("evalstop_state", state), state)
        self._rows = f"INSERT INTO scores ({columns}) VALUES "
        self._row = "(" + ", ".join("%s" for _ in SCORE_COLUMNS) + ")"
        self._prepared: weakref.WeakSet[Any] = weakref.WeakSet()  # driver connections done

    def run_unit(self, conn: Connection, unit: Callable[[Connection], T]) -> T:
        """``unit(conn)`` in a transaction of our own: the driver connection in autocommit, and
        ``BEGIN``, the unit's held-back write and ``COMMIT`` sent with the statements around
        them (:class:`_Tx`). A statement the unit sends through SQLAlchemy sends what is owed
        first (:func:`owed_first`, an engine hook). Rolled back if the unit or the commit raises."""
        with self._transaction(conn):
            return unit(conn)

    def run_group(
        self, conn: Connection, units: Sequence[Callable[[Connection], Any]]
    ) -> list[tuple[Any, BaseException | None]]:
        """Several queued units in ONE transaction, each in a savepoint (as SQLite's commit group
        does): a unit that raises is rolled back alone and gets its exception; the others commit
        together, one ``COMMIT`` and one message for the group's held-back writes, and nobody's
        result stands unless that commit succeeds. A unit's savepoint, its lock and its state
        read go in one message with the writes of the unit before it, which its reads then see.
        Groups form only when units queue up (:class:`~.commit.WriterThreads`), so a burst costs
        fewer messages and commits per score, not more. A job row another transaction holds is
        not waited for inside a group (``NOWAIT``: two replicas' groups can never wait for each
        other); that unit's outcome is :class:`~.commit.RunAlone`, and it runs again alone
        after the group is answered, where it waits as usual."""
        outcomes: list[tuple[Any, BaseException | None]] = []
        try:
            with self._transaction(conn) as tx:
                tx.group = True
                for unit in units:
                    carried = len(tx.owed)  # the units before this one's writes, sent with its first message
                    start = tx.sent + carried  # where this unit's SAVEPOINT is in what is sent
                    tx.owe("SAVEPOINT evalstop_unit")
                    try:
                        outcomes.append((unit(conn), None))
                        tx.owe("RELEASE evalstop_unit")
                    except Exception as exc:
                        lock_held = isinstance(getattr(exc, "orig", None), LockNotAvailable)
                        if carried and not lock_held and isinstance(exc, sa.exc.DBAPIError):
                            # the server refused a message that also carried earlier units'
                            # writes, and which statement it refused is not known: the whole
                            # group fails (nobody has been answered)
                            raise
                        if tx.sent > start:  # the savepoint is on the server: undo what followed it
                            tx.owed = ["ROLLBACK TO evalstop_unit", "RELEASE evalstop_unit"]
                        else:  # nothing of this unit was sent
                            del tx.owed[start - tx.sent:]
                        outcomes.append((None, RunAlone() if lock_held else exc))
        except Exception as exc:  # the commit failed: none of the group's writes is durable
            return [(None, exc) for _ in units]
        return outcomes

    @contextmanager
    def _transaction(self, conn: Connection) -> Iterator[_Tx]:
        raw = _raw(conn)
        raw.autocommit = True
        tx = _Tx(ClientCursor(raw))
        info = conn.info  # not readable any more once SQLAlchemy has invalidated the connection
        info[_TX] = tx
        try:
            if raw not in self._prepared:  # once per connection (a session's prepared statements)
                try:
                    with _wrapped(conn), raw.pipeline():
                        for name, sql in self.PREPARED.items():
                            raw.execute(f"PREPARE {name} AS {sql}")
                except Exception:  # some may exist now: this session can never prepare them again
                    conn.invalidate()
                    raise
                self._prepared.add(raw)
            yield tx
            if tx.begun or len(tx.owed) > 1:
                with _wrapped(conn):
                    tx.send("COMMIT")
                tx.begun = False
        except sa.exc.DBAPIError as exc:
            if isinstance(exc.orig, InvalidSqlStatementName | FeatureNotSupported):
                # the session lost its prepared statements (a pooler in transaction mode), or a
                # migration changed a column they return ("cached plan must not change result
                # type"): this unit fails (503); a new connection prepares them afresh
                conn.invalidate()
            raise
        finally:
            info.pop(_TX, None)
            tx.cur.close()
            if tx.begun and not raw.closed:
                with suppress(Exception):  # a broken connection: the pool discards it
                    raw.execute("ROLLBACK")
            with suppress(Exception):  # not while in a transaction (then the pool discards it)
                raw.autocommit = False

    def stale(self, conn: Connection) -> bool:
        """The server closed it (a restart, ``pg_terminate_backend``, an idle timeout): its
        goodbye made the idle socket readable, or the driver knows it is closed."""
        raw = _raw(conn)
        return bool(raw.closed or readable(raw.fileno()))

    def read_ingest_job(self, conn: Connection, job_id: str, tenant: str | None) -> dict[str, Any] | None:
        tx = conn.info.get(_TX)
        assert tx is not None, "PostgreSQL ingest runs in Store.write"
        given = {"job_id": job_id, "tenant": tenant}
        (lock_sql, lock), (state_sql, state) = self._lock[tenant is not None, tx.group], self._state
        mogrify = tx.render
        with _wrapped(conn):
            cur = tx.send(mogrify(lock_sql, [given.get(p, lock.defaults.get(p)) for p in lock.params]),
                          mogrify(state_sql, [given.get(p, state.defaults.get(p)) for p in state.params]))
            found = cur.fetchone()
            cur.nextset()
            if found is None:
                return None
            # the names come from the compiled statement: reading the cursor's description built
            # one driver object per column per request (a tenth of the CPU, by profile)
            job = dict(zip(lock.columns, found, strict=True))
            job.update(zip(state.columns, cur.fetchone(), strict=True))
        return job

    def write_scores(
        self, conn: Connection, rows: Sequence[tuple[Any, ...]], job_id: str, state: str | None
    ) -> None:
        tx = conn.info.get(_TX)
        assert tx is not None, "PostgreSQL ingest runs in Store.write"
        if len(rows) > self.copy_from:
            owed_first(conn)
            # COPY: one statement for the unit (executemany sends one INSERT per row, and the
            # server's per-statement work was most of a 100-score unit, by profile)
            with _wrapped(conn), tx.cur.copy(self._copy) as copy:
                for r in rows:
                    copy.write_row(r)
            rows = ()
        mogrify = tx.render
        if len(rows) == 1:
            params = list(rows[0]) + ([] if state is None else [state, job_id])
            name = "evalstop_score" if state is None else "evalstop_score_monitor"
            tx.owe(mogrify(f"EXECUTE {name}({', '.join('%s' for _ in params)})", params))
            return
        if rows:  # more than one row, up to copy_from: one INSERT with the values in its text
            tx.owe(mogrify(self._rows + ", ".join(self._row for _ in rows), [v for r in rows for v in r]))
        if state is not None:
            tx.owe(mogrify("EXECUTE evalstop_monitor(%s, %s)", [state, job_id]))

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

    def notify(self, conn: Connection, channel: str, payload: str) -> None:
        conn.execute(sa.text("SELECT pg_notify(:c, :p)"), {"c": channel, "p": payload})


#: The key of a PostgreSQL unit's :class:`_Tx` in its connection's ``info``.
_TX = "evalstop_tx"


class _Tx:
    """A PostgreSQL unit's transaction: the statements it owes the server (``BEGIN`` until it
    is sent, and the writes held back by :meth:`Postgres.write_scores`), each already rendered
    with its values, to be sent together with the next statement as ONE simple-protocol
    message on the unit's ``ClientCursor``."""

    __slots__ = ("begun", "cur", "escape", "group", "owed", "sent")

    def __init__(self, cur: Any) -> None:
        self.cur = cur
        self.escape = pq.Escaping(cur.connection.pgconn).escape_literal
        self.begun = False
        self.owed = ["BEGIN"]
        self.sent = 0  # statements of ``owed`` sent so far
        self.group = False  # the transaction runs several units (Postgres.run_group)

    def render(self, sql: str, values: Sequence[Any]) -> str:
        """``sql`` with each ``%s`` replaced by the SQL literal of its value: text quoted by
        libpq (``PQescapeLiteral``, right for the connection's encoding and settings), numbers
        as Python writes them (a float's ``repr`` reads back exactly), NaN and infinities as
        PostgreSQL spells them. Any other type is a bug here, so it raises. (psycopg's
        ``ClientCursor.mogrify`` did the same through its adapters, a tenth of a single score's
        CPU by profile.)"""
        return sql % tuple(_literal(v, self.escape) for v in values)

    def owe(self, sql: str) -> None:
        self.owed.append(sql)

    def send(self, *sql: str) -> Any:
        """Send what is owed, then ``sql``, in one message; return the cursor at the first
        result of ``sql``."""
        owed, self.owed = self.owed, []
        self.sent += len(owed)
        self.begun = True  # from here a ROLLBACK is due if anything fails (harmless if not begun)
        self.cur.execute("; ".join([*owed, *sql]))
        for _ in owed:
            self.cur.nextset()
        return self.cur


_FLOAT_WORDS = {"nan": "'NaN'::float8", "inf": "'Infinity'::float8", "-inf": "'-Infinity'::float8"}


def _literal(value: Any, escape: Callable[[bytes], bytes]) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        text = repr(value)
        return _FLOAT_WORDS.get(text, text) if value or text[0] != "-" else "'-0'::float8"  # keeps its sign
    if isinstance(value, str):
        if "\x00" in value:  # libpq's quoting would end the text there
            raise InvalidInput(f"text must not contain a NUL character. Got {value[:80]!r}.")
        return escape(value.encode()).decode()
    raise TypeError(f"no SQL literal for a {type(value).__name__}: {value!r}")


def readable(fd: int) -> bool:
    """Whether ``fd`` has something to read now (``poll``: any descriptor number, unlike select)."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(0))


def owed_first(conn: Connection) -> None:
    """Send what a PostgreSQL unit owes (its ``BEGIN``, held-back writes) before a statement
    that does not carry it: SQLAlchemy's (an engine hook, :func:`~.engine.open_store`), or COPY."""
    tx = conn.info.get(_TX)
    if tx is not None and tx.owed:
        with _wrapped(conn):
            tx.send()


def _execute(name: str, statement: _Compiled) -> str:
    """``EXECUTE name(%s, ...)``: a prepared statement's call, its values to be rendered."""
    return f"EXECUTE {name}({', '.join('%s' for _ in statement.params)})"


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
