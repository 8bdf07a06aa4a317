"""A database error is logged by class and SQLSTATE, never with the statement's values, whatever
logs it (``log.exception`` in the worker, a poller, uvicorn)."""

from __future__ import annotations

import io
import logging
import sqlite3

import pytest
import sqlalchemy as sa

from evalstop.service import log_redact

SECRET = "tok-5ecret-value"


def _logger(name: str) -> tuple[logging.Logger, io.StringIO]:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    logger = logging.getLogger(name)
    logger.handlers[:] = [handler]
    logger.propagate = False
    log_redact.install(logger)
    return logger, out


def _literal_statement_error() -> sa.exc.DBAPIError:
    """A real SQLAlchemy error from a statement whose value is rendered as a literal (as the
    single-score path does), so ``hide_parameters`` cannot hide it."""
    engine = sa.create_engine("sqlite://", hide_parameters=True)
    with engine.connect() as conn, pytest.raises(sa.exc.DBAPIError) as info:
        conn.exec_driver_sql(f"INSERT INTO missing_table VALUES ('{SECRET}')")
    return info.value


def test_an_exception_logged_with_its_traceback_keeps_only_class_and_sqlstate() -> None:
    logger, out = _logger("evalstop.test.redact.exc")
    exc = _literal_statement_error()
    assert SECRET in str(exc)  # the unfiltered text would carry the value
    try:
        raise RuntimeError("delivery pass failed") from exc
    except RuntimeError:
        logger.exception("outbox row %d: delivery pass failed", 7)
    text = out.getvalue()
    assert SECRET not in text
    assert "outbox row 7: delivery pass failed: database error: OperationalError (" in text
    assert "Traceback" not in text


def test_an_error_passed_as_an_argument_is_described_not_printed() -> None:
    logger, out = _logger("evalstop.test.redact.arg")
    logger.error("poller failed: %s", _literal_statement_error())
    assert SECRET not in out.getvalue() and "OperationalError" in out.getvalue()


def test_other_records_are_left_alone() -> None:
    logger, out = _logger("evalstop.test.redact.other")
    try:
        raise ValueError(SECRET)
    except ValueError:
        logger.exception("not a database error")
    assert SECRET in out.getvalue() and "Traceback" in out.getvalue()
    plain = sqlite3.OperationalError("x")
    assert log_redact.describe(plain) == "OperationalError (-)"
