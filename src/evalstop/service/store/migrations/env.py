"""Alembic environment: always run by :func:`evalstop.service.store.migrate.upgrade` on a connection
it passes in (``config.attributes["connection"]``); there is no alembic.ini."""

from __future__ import annotations

from alembic import context

from evalstop.service.store.tables import metadata

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=metadata,
                  render_as_batch=connection.dialect.name == "sqlite", compare_type=True)
with context.begin_transaction():
    context.run_migrations()
