"""Tenancy and security: tokens hashed, another tenant's job is a 404, operators see all, no
secret in logs."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from ._support import ADMIN, Api


def test_another_tenants_job_answers_404_on_every_route(api: Api) -> None:
    alice, bob = api.tenant("alice"), api.tenant("bob")
    job = api.job(alice)
    api.post(alice, job["id"], {"step": 1, "value": 0.5})
    base = f"/v1/jobs/{job['id']}"
    c, as_bob = api.client, api.as_(bob)
    responses = [
        c.get(base, headers=as_bob), c.get(f"{base}/scores", headers=as_bob),
        c.get(f"{base}/decisions", headers=as_bob),
        c.post(f"{base}/scores", json={"step": 2, "value": 0.1}, headers=as_bob),
        c.put(f"{base}/override", json={"override": "stop_now"}, headers=as_bob),
        c.put(f"{base}/shadow", json={"enabled": True}, headers=as_bob),
    ]
    assert [r.status_code for r in responses] == [404] * 6
    assert all(r.json() == {"detail": f"Job {job['id']!r} not found."} for r in responses)
    assert c.get("/v1/jobs", headers=as_bob).json() == []
    got = c.get(base, headers=api.as_(alice)).json()
    assert (got["state"], got["override"], got["shadow"], got["n_evals"]) == ("running", None, False, 1)


def test_operator_sees_every_tenant_and_registers_for_one(api: Api) -> None:
    alice, bob = api.tenant("alice"), api.tenant("bob")
    api.job(alice), api.job(bob)
    jobs = api.client.get("/v1/jobs", headers=api.as_(ADMIN)).json()
    assert sorted(j["tenant"] for j in jobs) == ["alice", "bob"]
    body = {"external_ref": "x", "target": "recording"}
    r = api.client.post("/v1/jobs", json=body, headers=api.as_(ADMIN))
    assert r.status_code == 422 and "operators must name the tenant" in r.text
    r = api.client.post("/v1/jobs", json={**body, "tenant": "bob"}, headers=api.as_(ADMIN))
    assert r.status_code == 201 and r.json()["tenant"] == "bob"
    r = api.client.post("/v1/jobs", json={**body, "tenant": "bob"}, headers=api.as_(alice))
    assert r.status_code == 403 and "tenant 'alice' cannot register jobs for tenant 'bob'" in r.text
    tenants = api.client.get("/v1/tenants", headers=api.as_(ADMIN)).json()
    assert [t["name"] for t in tenants] == ["alice", "bob"]


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic x"},
                                     {"Authorization": "Bearer "}])
def test_missing_or_bad_token_is_401(api: Api, headers: dict[str, str]) -> None:
    r = api.client.get("/v1/jobs", headers=headers)
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"


def test_tenants_cannot_do_operator_things(api: Api) -> None:
    alice = api.tenant("alice")
    assert api.client.post("/v1/tenants", json={"name": "eve"}, headers=api.as_(alice)).status_code == 403
    assert api.client.get("/v1/tenants", headers=api.as_(alice)).status_code == 403
    r = api.client.post("/v1/tenants", json={"name": "alice"}, headers=api.as_(ADMIN))
    assert r.status_code == 409 and "'alice' already exists" in r.text


def test_tokens_are_stored_hashed_and_never_logged(
    api: Api, sqlite_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    alice = api.tenant("alice")
    job = api.job(alice)
    api.post(alice, job["id"], {"step": 1, "value": 0.5})
    api.client.get("/v1/jobs", headers=api.as_("Bearer-guess-" + alice[::-1]))
    db_bytes = b"".join(p.read_bytes() for p in Path(sqlite_url.removeprefix("sqlite:///")).parent.iterdir())
    assert alice.encode() not in db_bytes and ADMIN.encode() not in db_bytes
    assert alice not in caplog.text and ADMIN not in caplog.text
    assert ADMIN not in repr(api.ctx.settings) and ADMIN not in str(api.ctx.settings.model_dump())
