"""An operator's change of a tenant's scope or quota applies to the tenant's next request on the
replica that made it, not ``policy_cache_s`` later (SQLite: no other replica to tell)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from evalstop.service.app import create_app

from ._support import ADMIN, Api, make_settings


@pytest.fixture
def slow_cache(sqlite_url: str) -> Iterator[Api]:
    """A policy cache that would keep a stale policy for an hour."""
    with TestClient(create_app(make_settings(sqlite_url, policy_cache_s=3600.0))) as client:
        yield Api(client)


def put(api: Api, path: str, body: dict[str, Any]) -> None:
    r = api.client.put(path, json=body, headers=api.as_(ADMIN))
    assert r.status_code == 200, r.text


def test_a_quota_change_applies_to_the_next_request(slow_cache: Api) -> None:
    api = slow_cache
    token = api.tenant("acme")
    job = api.job(token)
    assert api.post(token, job["id"], {"step": 1, "value": 0.5}).status_code == 200  # policy cached
    put(api, "/v1/tenants/acme/quota", {"quota": {"scores_per_s": 0.001, "burst": 1}})
    batch = {"scores": [{"step": 2, "value": 0.5}, {"step": 3, "value": 0.5}]}
    r = api.post(token, job["id"], batch)
    assert r.status_code == 429 and "Retry-After" in r.headers, r.text
    put(api, "/v1/tenants/acme/quota", {"quota": None})
    assert api.post(token, job["id"], batch).status_code == 200


def test_a_scope_change_applies_to_the_next_request(slow_cache: Api) -> None:
    api = slow_cache
    token = api.tenant("acme")
    job = api.job(token)
    score = {"step": 1, "value": 0.5, "checkpoint_uri": "s3://other/ckpt-1"}
    assert api.post(token, job["id"], score).status_code == 200  # no prefixes declared; cached
    put(api, "/v1/tenants/acme/scope", {"scope": {"checkpoint_prefixes": ["s3://acme/"]}})
    r = api.post(token, job["id"], {**score, "step": 2})
    assert r.status_code == 422 and "checkpoint prefixes" in r.json()["detail"], r.text
