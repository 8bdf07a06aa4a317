"""Alembic migrations of the service schema (see docs/service.md, "Schema migrations")."""
