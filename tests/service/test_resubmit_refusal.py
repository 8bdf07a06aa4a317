"""A Slurm job whose rewind would resubmit it is refused at registration when the slurm adapter
has no user to resubmit the tenant's jobs as, not after its running job was stopped."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from evalstop.service.app import create_app

from ._support import Api, make_settings

SCOPE = {"slurm": {"accounts": ["alpha"]}}
ApiFor = Callable[[dict[str, Any]], Api]


@pytest.fixture
def api_for(sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[ApiFor]:
    """The service with the slurm adapter's settings given. No Slurm runs here: the backend's
    ownership check (tested against a real Slurm in tests/enforce) is waved through."""
    clients: list[TestClient] = []

    def make(slurm: dict[str, Any]) -> Api:
        client = TestClient(create_app(make_settings(sqlite_url, adapter_settings={"slurm": slurm})))
        clients.append(client.__enter__())
        api = Api(client)
        monkeypatch.setattr(api.ctx.adapters, "check_registration", lambda target, ref: None)
        return api

    yield make
    for client in clients:
        client.__exit__(None, None, None)


def register(api: Api, token: str, **body: Any) -> Any:
    payload = {"external_ref": "12", "target": "slurm", "on_detect": "rewind", "correction": "lr*=0.5",
               "resubmit": {"script": "#!/bin/bash\nrun {checkpoint}"}, **body}
    return api.client.post("/v1/jobs", json=payload, headers=api.as_(token))


REST = {"rest_url": "http://127.0.0.1:9", "user": "evalstop", "token": "t"}


@pytest.mark.parametrize("slurm", [{"submit_as": {"other": "nobody"}},
                                   {**REST, "submit_as": {"other": {"user": "nobody", "token": "x"}}}],
                         ids=["cli", "slurmrestd"])
def test_an_unmapped_tenant_is_refused_naming_the_setting(api_for: ApiFor, slurm: dict[str, Any]) -> None:
    api = api_for(slurm)
    token = api.tenant("acme", scope=SCOPE)
    r = register(api, token)
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert detail.startswith("resubmit: tenant 'acme' has no Slurm user to resubmit as")
    assert "'submit_as' setting" in detail and "\n" not in detail
    assert api.client.get("/v1/jobs", headers=api.as_(token)).json() == []  # nothing registered


@pytest.mark.parametrize("slurm", [{"submit_as": {"acme": "acme"}}, {"submit_as_service_user": True}])
def test_a_mapped_tenant_or_the_service_user_registers(api_for: ApiFor, slurm: dict[str, Any]) -> None:
    api = api_for(slurm)
    token = api.tenant("acme", scope=SCOPE)
    r = register(api, token)
    assert r.status_code == 201, r.text


def test_jobs_that_never_resubmit_are_not_asked(api_for: ApiFor) -> None:
    api = api_for({})
    token = api.tenant("acme", scope=SCOPE)
    assert register(api, token, resubmit=None).status_code == 201  # a rewind in place
    assert register(api, token, external_ref="13", resubmit=None, on_detect="stop",
                    correction=None).status_code == 201
