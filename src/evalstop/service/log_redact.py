"""The service's log never carries a database statement's values.

SQLAlchemy's ``hide_parameters`` keeps bound parameters out of its messages, but a statement
whose values are rendered as literals (the single-score path), a driver error's DETAIL, or a
driver cursor's own error text can still hold a tenant's values or a token's hash. Whatever
logs a database error (``log.exception`` in the worker, a poller, uvicorn), :class:`DatabaseErrorFilter`
replaces the error and its traceback with its class and SQLSTATE before a handler formats it.
"""

from __future__ import annotations

import logging


def _is_database_error(exc: BaseException) -> bool:
    """A DB-API, SQLAlchemy or psycopg error (matched by module, so neither need be imported)."""
    for cls in type(exc).__mro__:
        module = cls.__module__ or ""
        if module.startswith(("sqlalchemy.", "psycopg", "sqlite3")) and issubclass(cls, Exception):
            return True
    return False


def describe(exc: BaseException) -> str:
    """``ClassName (SQLSTATE)`` of a database error, its original driver error first."""
    orig = getattr(exc, "orig", None) or exc
    code = getattr(orig, "sqlstate", None) or getattr(orig, "sqlite_errorname", None) or "-"
    return f"{type(orig).__name__} ({code})"


def _chain(exc: BaseException | None) -> list[BaseException]:
    seen: list[BaseException] = []
    while exc is not None and exc not in seen:
        seen.append(exc)
        exc = exc.__cause__ or exc.__context__
    return seen


class DatabaseErrorFilter(logging.Filter):
    """Turn a record whose exception (or any exception in its chain) is a database error into
    one line: the message, then ``database error: Class (SQLSTATE)``, with no traceback text and
    no argument that is itself such an error."""

    def filter(self, record: logging.LogRecord) -> bool:
        info = record.exc_info
        exc = info[1] if info else None
        if exc is not None:
            found = next((e for e in _chain(exc) if _is_database_error(e)), None)
            if found is not None:
                record.msg = f"{record.getMessage()}: database error: {describe(found)}"
                record.args = None
                record.exc_info, record.exc_text = None, None
                return True
        if isinstance(record.args, tuple) and any(
                isinstance(a, BaseException) and _is_database_error(a) for a in record.args):
            record.args = tuple(describe(a) if isinstance(a, BaseException) and _is_database_error(a)
                                else a for a in record.args)
        return True


def install(logger: logging.Logger | None = None) -> None:
    """Add the filter to every handler of ``logger`` (the root logger by default), so records
    of every library pass it, whichever logger they come from."""
    target = logger or logging.getLogger()
    for handler in target.handlers:
        if not any(isinstance(f, DatabaseErrorFilter) for f in handler.filters):
            handler.addFilter(DatabaseErrorFilter())


__all__ = ["DatabaseErrorFilter", "describe", "install"]
