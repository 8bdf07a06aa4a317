"""The engine and its transactions, set up the same way for SQLite and PostgreSQL: the one place
that decides which database this is (:func:`open_store` picks the :mod:`.dialect`).

SQLite runs in WAL mode with ``synchronous=FULL`` by default (every acknowledged commit survives
power loss) and a busy timeout; :meth:`Store.transaction` begins ``IMMEDIATE`` so a transaction
that will write takes the write lock up front instead of failing on upgrade (reads begin
deferred and, in WAL mode, never wait for a writer). On PostgreSQL, writers to one job
serialise on ``SELECT ... FOR UPDATE`` of the job row.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DataError, OperationalError, SQLAlchemyError

from .commit import GroupCommitter, WriterThreads
from .dialect import Dialect, Postgres, Sqlite, owed_first, readable
from .migrate import upgrade

T = TypeVar("T")
#: The handle of an open transaction, as layers above the store pass it back into store functions.
Conn = Connection
#: The database is unreachable or refused the operation (the service answers 503, retry later).
DatabaseUnavailable = OperationalError
#: The database refused a value: too long for its column, out of range (the service answers 422).
ValueDoesNotFit = DataError
#: Any error of the database layer (a URL that parses but a database that will not open, say).
DatabaseError = SQLAlchemyError

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
        self, engine: Engine, dialect: Dialect, limits: Limits | None = None, clock: Any = time.time,
        group_commit: bool = True, db_threads: int = 4,
    ) -> None:
        self.engine = engine
        self.dialect = dialect
        self.limits = limits or Limits()
        self.clock = clock
        self._group_conn: Connection | None = None  # the committer's own connection, kept open
        use_group = group_commit and dialect.group_commit
        self.committer = GroupCommitter(self._group_transaction) if use_group else None
        # started on first use
        self.writers = WriterThreads(self._connect_writer, dialect.run_unit, dialect.stale, db_threads,
                                     group=dialect.run_group)

    @property
    def shared(self) -> bool:
        """True when several processes (replicas) may share this database (PostgreSQL)."""
        return self.dialect.shared

    @contextmanager
    def reading(self) -> Iterator[Connection]:
        """A connection for reads (no write lock taken on SQLite)."""
        with self.engine.connect() as conn:
            yield conn

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

    def _connect_writer(self) -> Connection:
        conn = self.engine.connect()
        conn.execution_options(evalstop_writes=True)
        return conn

    def write(self, unit: Callable[[Connection], T]) -> T:
        """Run ``unit(conn)`` in a write transaction and return its result once committed: in a
        commit group on SQLite (see :mod:`evalstop.service.commit`), alone on PostgreSQL."""
        if self.committer is not None:
            return self.committer.run(unit)
        with self._connect_writer() as conn:
            return self.dialect.run_unit(conn, unit)

    async def write_async(self, unit: Callable[[Connection], T]) -> T:
        """:meth:`write` for an event loop, which waits for the commit without a thread of its
        own: in the next commit group (SQLite), or on one of the store's writer threads."""
        if self.committer is not None:
            return await self.committer.submit_async(unit)
        return await self.writers.submit_async(unit)

    def create_schema(self) -> None:
        """Create or migrate the schema to the current revision (:mod:`.migrate`)."""
        upgrade(self.engine)

    def ping(self) -> None:
        with self.engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))

    def dispose(self) -> None:
        if self.committer is not None:
            self.committer.close()
        self.writers.close()
        if self._group_conn is not None:
            self._group_conn.close()
            self._group_conn = None
        self.engine.dispose()


def _json_loads(text: str) -> Any:
    """A stored JSON column's value; one nested too deep for the decoder (stored before the
    service bounded it) reads as a note instead of failing every read of its table."""
    try:
        return json.loads(text)
    except RecursionError:
        return {"unreadable": "nested too deep to read; not shown"}


#: Every engine: an error never carries a statement's parameters (SQLAlchemy puts them in its
#: exception messages, which end up in logs: a tenant's values, a token's hash), and JSON
#: columns read with :func:`_json_loads`.
ENGINE_OPTIONS: dict[str, Any] = {"hide_parameters": True, "json_deserializer": _json_loads}


def _without_row_values(context: Any) -> None:
    """Drop PostgreSQL's DETAIL from an error's text: for a constraint it repeats the row or the
    key ("Failing row contains (...)"), i.e. the statement's values, and the text of an error
    ends up in logs. The detail stays readable as ``exc.orig.diag.message_detail``."""
    for exc in (context.original_exception, context.sqlalchemy_exception):
        text = exc.args[0] if exc is not None and exc.args else None
        if isinstance(text, str) and "\nDETAIL:" in text:
            exc.args = (text.partition("\nDETAIL:")[0], *exc.args[1:])


def open_store(
    url: str, *, synchronous: str = "FULL", limits: Limits | None = None, group_commit: bool = True,
    migrate: bool = True, db_threads: int = 4,
) -> Store:
    """Build the engine for ``url`` (SQLite pragmas included), pick its dialect, and create or
    migrate the tables (``migrate=False``: leave them as they are; see :func:`.migrate.require_head`)."""
    if url.startswith("postgresql:"):
        url = "postgresql+psycopg:" + url.removeprefix("postgresql:")
    dialect: Dialect
    if url.startswith("sqlite"):
        engine = sa.create_engine(url, connect_args={"timeout": 30, "check_same_thread": False},
                                  **ENGINE_OPTIONS)
        _configure_sqlite(engine, synchronous)
        dialect = Sqlite()
    else:
        # psycopg's own statement preparing is off: on any rollback it sends DEALLOCATE ALL,
        # which would drop the ingest's statements too, prepared once per connection
        # (dialect.Postgres.PREPARED)
        # client_encoding: the ingest's literals are UTF-8 text (dialect._literal); pool_size:
        # each writer thread keeps a connection (WriterThreads), and reads need their own
        engine = sa.create_engine(url, pool_size=10 + db_threads, max_overflow=20, pool_use_lifo=True,
                                  connect_args={"prepare_threshold": None, "client_encoding": "utf8"},
                                  **ENGINE_OPTIONS)
        _check_on_checkout(engine)
        _send_owed_first(engine)
        sa.event.listen(engine, "handle_error", _without_row_values)
        dialect = Postgres()
    store = Store(engine, dialect, limits, group_commit=group_commit, db_threads=db_threads)
    if migrate:
        store.create_schema()
    return store


def sqlite_file(database_url: str) -> Path | None:
    """The file of a SQLite database URL; None for another database or an in-memory one."""
    url = sa.engine.make_url(database_url)
    if url.get_backend_name() != "sqlite" or url.database in (None, "", ":memory:"):
        return None
    return Path(str(url.database))


def _check_on_checkout(engine: Engine) -> None:
    """A pooled connection the server has closed (a database restart, an idle timeout) is
    replaced when it is checked out, as the pool's pre-ping would, without a round trip per
    checkout: the server's goodbye (an error message, then end of file) makes the idle socket
    readable, so a readable socket, or one the driver knows is closed, gets the real ping, and
    a failed ping discards the connection (the pool then opens a new one). The pre-ping's round
    trip was one of five per single score (docs/service-performance.md, "Round trips"). What this misses, a
    peer that vanished without a word (no FIN), the pre-ping would only have caught after a TCP
    timeout as well."""

    @sa.event.listens_for(engine, "checkout")
    def _alive(dbapi_conn: Any, _record: Any, _proxy: Any) -> None:
        if dbapi_conn.closed:  # a broken connection is closed too
            raise sa.exc.DisconnectionError("the database connection is closed")
        if not readable(dbapi_conn.fileno()):
            return  # nothing from the server while idle: the connection is open
        try:
            engine.dialect.do_ping(dbapi_conn)
        except engine.dialect.loaded_dbapi.Error as exc:
            raise sa.exc.DisconnectionError(f"the database connection failed its ping: {exc}") from exc


def _send_owed_first(engine: Engine) -> None:
    """A statement sent through SQLAlchemy inside a PostgreSQL write unit first sends what the
    unit owes the server, its ``BEGIN`` and a held-back write (:meth:`.dialect.Postgres.run_unit`)."""

    @sa.event.listens_for(engine, "before_cursor_execute")
    def _owed(conn: Connection, *_: Any) -> None:
        owed_first(conn)


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
        # a transaction that writes takes the lock up front; reads stay deferred (WAL: never blocked).
        # On the driver connection: through SQLAlchemy's execute this was a third of the commit
        # group's own CPU per group (by profile); its error is raised as SQLAlchemy would raise it
        # (``OperationalError`` for a database that stays locked: the service answers 503).
        sql = "BEGIN IMMEDIATE" if conn.get_execution_options().get("evalstop_writes", False) else "BEGIN"
        raw = conn.connection.driver_connection
        assert raw is not None
        try:
            raw.execute(sql)
        except sqlite3.Error as exc:
            raise sa.exc.DBAPIError.instance(sql, None, exc, sqlite3.Error) from exc
