"""Fuzz the API from its own OpenAPI document (schemathesis): no input may cause a 5xx.

Operator routes are called with the admin token, job routes with a tenant's token and that
tenant's real job id, so generated bodies reach the domain layer, not only the 404 path.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

schemathesis = pytest.importorskip("schemathesis", reason="schemathesis is in the dev extra")

from fastapi.testclient import TestClient  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from schemathesis.checks import not_a_server_error  # noqa: E402

from evalstop.service.app import create_app  # noqa: E402
from evalstop.service.store import metadata, open_store  # noqa: E402

from ._support import ADMIN, Api, make_settings  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def fuzz_env(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    """The fuzzed service on SQLite and on PostgreSQL (where NUL in text, or a value longer than
    its column, is refused by the database itself: the service must answer 4xx first)."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('fuzz') / 'evalstop.db'}"
    else:
        url = request.getfixturevalue("postgres_url")
    app = create_app(make_settings(url, max_body_bytes=65536, max_batch=50))
    with TestClient(app) as client:
        api = Api(client)
        token = api.tenant("fuzz")
        job = api.job(token)
        yield {"app": app, "token": token, "job_id": job["id"]}
    if request.param == "postgresql":
        store = open_store(url)
        metadata.drop_all(store.engine)
        store.dispose()


def test_no_input_causes_a_server_error(fuzz_env: dict[str, Any]) -> None:
    schema = schemathesis.openapi.from_asgi("/openapi.json", fuzz_env["app"])
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 12
    for operation in operations:
        _fuzz(operation, fuzz_env)


def _fuzz(operation: Any, env: dict[str, Any]) -> None:
    token = ADMIN if "/tenants" in operation.path else env["token"]

    @settings(max_examples=40, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(case=operation.as_strategy())
    def check(case: Any) -> None:
        if case.path_parameters and "job_id" in case.path_parameters:
            case.path_parameters["job_id"] = env["job_id"]
        case.call_and_validate(headers={"Authorization": f"Bearer {token}"}, checks=[not_a_server_error])

    check()
