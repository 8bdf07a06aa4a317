"""Schema migrations: a database made by the release before migrations (commit f76c283, its DDL
frozen in tests/service/data) upgrades to head, keeps its data and equals the current metadata;
so does an empty database built by the migrations alone."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from evalstop.service import domain
from evalstop.service.ingest import ScoreIn
from evalstop.service.store import metadata, open_store
from evalstop.service.store.migrate import alembic_config, head_revision

DATA = Path(__file__).with_name("data")


def old_database(url: str) -> sa.Engine:
    engine = sa.create_engine(url.replace("postgresql:", "postgresql+psycopg:", 1)
                              if url.startswith("postgresql:") else url)
    text = (DATA / f"schema_f76c283_{engine.dialect.name}.sql").read_text()
    sql = "\n".join(line for line in text.splitlines() if not line.startswith("--"))
    with engine.begin() as conn:
        conn.exec_driver_sql("DROP TABLE IF EXISTS alembic_version")
        for statement in sql.split(";"):
            if statement.strip():
                conn.exec_driver_sql(statement)
        conn.execute(sa.text("INSERT INTO tenants VALUES ('acme', 'h', false, 1.0)"))
        conn.execute(sa.text(
            "INSERT INTO jobs (id, tenant, name, external_ref, target, target_options, detector, metric, "
            "mode, grace_period_s, gpus, shadow, state, created_at) VALUES (:id, 'acme', 'j', :ref, "
            "'recording', '{}', 'evalstop:k=2', 'score', 'max', 0, 1, false, :state, 1.0)"),
            [{"id": "a" * 32, "ref": "r1", "state": "running"},
             {"id": "b" * 32, "ref": "r1", "state": "stopped"}])
        conn.execute(sa.text("INSERT INTO scores (job_id, metric, step, value, received_at) "
                             "VALUES (:j, 'score', 1, 0.5, 1.0)"), {"j": "a" * 32})
    return engine


def differences(engine: sa.Engine) -> list[object]:
    with engine.connect() as conn:
        return list(compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), metadata))


def test_a_database_of_the_previous_release_upgrades_to_head(db_url: str) -> None:
    engine = old_database(db_url)
    store = open_store(db_url)  # migrates at start-up
    try:
        assert differences(engine) == []
        with engine.connect() as conn:
            version = conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar()
        assert version == head_revision()
        result = domain.ingest_scores(store, "a" * 32, "acme", [ScoreIn(step=2, value=0.6)])  # old data ok
        assert (result.accepted, result.n_evals) == (1, 2)
        open_store(db_url).dispose()  # a second start (another replica) finds it done
    finally:
        store.dispose()
        engine.dispose()


def test_live_jobs_sharing_a_reference_stop_the_upgrade_with_their_names(db_url: str) -> None:
    engine = old_database(db_url)
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE jobs SET state = 'running'"))
    with pytest.raises(RuntimeError, match="recording:'r1' \\(2 jobs\\)"):
        open_store(db_url)
    found = sa.MetaData()
    found.reflect(engine)
    found.drop_all(engine)  # nothing left for the fixture's clean-up to migrate
    engine.dispose()


def test_the_migrations_alone_build_the_current_schema(db_url: str) -> None:
    engine = sa.create_engine(db_url.replace("postgresql:", "postgresql+psycopg:", 1)
                              if db_url.startswith("postgresql:") else db_url)
    with engine.begin() as conn:
        conn.exec_driver_sql("DROP TABLE IF EXISTS alembic_version")
        command.upgrade(alembic_config(conn), "head")  # type: ignore[arg-type]
    assert differences(engine) == []
    engine.dispose()
