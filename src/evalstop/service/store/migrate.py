"""Bring a database to the current schema with Alembic, at service start-up.

- an empty database: ``create_all`` of :data:`~.store.metadata`, stamped ``head`` (the upgrade
  test checks that the migrations build exactly that schema);
- a database of the release before migrations (tables, no ``alembic_version``): stamped
  ``0001`` (that schema), then upgraded;
- otherwise: upgraded to ``head`` (a no-op when it is there).

Replicas starting together on PostgreSQL take a transaction-scoped advisory lock first, so one
migrates and the others find it done. Adding a migration: see docs/service.md.
"""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from .tables import metadata

SCRIPTS = Path(__file__).with_name("migrations")
BASELINE = "0001"
MIGRATE_LOCK = int.from_bytes(b"evalmigr", "big") & 0x7FFF_FFFF_FFFF_FFFF


def alembic_config(conn: Connection) -> object:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(SCRIPTS))
    config.attributes["connection"] = conn
    return config


def upgrade(engine: Engine) -> None:
    """Migrate ``engine``'s database to the head revision (see the module docstring)."""
    from alembic import command

    with engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": MIGRATE_LOCK})
        tables = set(sa.inspect(conn).get_table_names())
        config = alembic_config(conn)
        if not tables & set(metadata.tables):
            metadata.create_all(conn)
            command.stamp(config, "head")  # type: ignore[arg-type]
            return
        if "alembic_version" not in tables:
            command.stamp(config, BASELINE)  # type: ignore[arg-type]
        command.upgrade(config, "head")  # type: ignore[arg-type]


class SchemaNotCurrent(RuntimeError):
    """The database is not at this release's schema and this process may not migrate it."""


def current_revision(engine: Engine) -> str | None:
    """The database's Alembic revision; None for an empty database or one before migrations."""
    with engine.connect() as conn:
        if "alembic_version" not in sa.inspect(conn).get_table_names():
            return None
        return conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar()


def require_head(engine: Engine) -> None:
    """Raise :class:`SchemaNotCurrent`, naming both revisions, unless the schema is at head."""
    found, head = current_revision(engine), head_revision()
    if found != head:
        raise SchemaNotCurrent(f"the database schema is at revision {found or 'none'}, this release needs "
                               f"{head}: run the migration job (evalstop serve --migrate-only) first")


def head_revision() -> str:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    config = Config()
    config.set_main_option("script_location", str(SCRIPTS))
    return str(ScriptDirectory.from_config(config).get_current_head())
