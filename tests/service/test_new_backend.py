"""Adding a backend is one file: the backend below (its adapter, its scope section, its reference
rules, its resubmission naming) lives in this test module only, is registered through the
public registry (``evalstop.service.adapters.register``), and a job on it is registered, checked
against the tenant's scope over HTTP, rewound and resubmitted by the worker, with no file of
the service changed for it."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar

import pytest
from fastapi.testclient import TestClient
from pydantic import Field

from evalstop.service import adapters, domain, scopes
from evalstop.service.adapters import Backend, EnforcementAdapter, Entry, JobRef, NotOwned, ScopeSection
from evalstop.service.app import create_app
from evalstop.service.errors import InvalidInput

from ._support import ADMIN, Api, make_settings


class QueueScope(ScopeSection):
    queues: list[Entry] = Field(min_length=1)


class QueueBackend(Backend):
    """Jobs are ``<queue>/<number>``; a tenant owns whole queues; attempt N is ``<ref>.N``."""

    scope = QueueScope
    resubmit_text = "command"
    resubmit_fields = frozenset({"priority"})

    def canonical_ref(self, ref: str) -> str:
        queue, sep, number = ref.strip().partition("/")
        if not (sep and queue and number.isdigit()):
            raise InvalidInput(f"external_ref: a 'queue/number'. Got {ref!r}.")
        return f"{queue}/{int(number)}"

    def check_reference(
        self, tenant: str, section: Any, ref: str, options: Mapping[str, Any], settings: Mapping[str, Any]
    ) -> None:
        if ref.partition("/")[0] not in section.queues:
            raise InvalidInput(f"external_ref: queue of {ref!r} is outside tenant {tenant!r}'s scope.")

    def check_template(self, template: Mapping[str, Any], section: Any, tenant: str) -> dict[str, Any]:
        priority = template.get("priority", 0)
        if not isinstance(priority, int) or not 0 <= priority <= 9:
            raise InvalidInput(f"resubmit.priority must be an int in [0, 9]. Got {priority!r}.")
        return {"priority": priority}


BACKEND = QueueBackend()


class QueueAdapter(EnforcementAdapter):
    """An in-memory queue system: which jobs run, and what was submitted."""

    name = "queue"
    running: ClassVar[set[str]] = set()
    submitted: ClassVar[list[tuple[str, str, int]]] = []

    def __init__(self, settings: Mapping[str, Any]) -> None:
        self.settings = dict(settings)

    def check_owner(self, job: JobRef, *, must_exist: bool = False) -> None:
        queues = ((job.scope or {}).get("queue") or {}).get("queues") or []
        if job.scope is not None and job.external_ref.partition("/")[0] not in queues:
            raise NotOwned(f"job {job.job_id}: queue of {job.external_ref!r} is not the tenant's")

    def pin_checkpoint(self, job: JobRef, checkpoint_uri: str | None) -> None:
        pass

    def signal(self, job: JobRef) -> None:
        self.running.discard(job.external_ref)

    def hard_stop(self, job: JobRef) -> None:
        self.running.discard(job.external_ref)

    def is_stopped(self, job: JobRef) -> bool:
        return job.external_ref not in self.running

    def resubmit(self, job: JobRef, template: Mapping[str, Any], text: str, number: int) -> str:
        new_ref = f"{job.external_ref.partition('.')[0]}.{number}"
        if new_ref not in self.running:  # idempotent: a repeat finds the attempt submitted before
            self.running.add(new_ref)
            self.submitted.append((new_ref, text, int(template["priority"])))
        return new_ref


@pytest.fixture
def queue_api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Api]:
    monkeypatch.setattr(adapters, "ADAPTERS", dict(adapters.ADAPTERS))  # registered for this test only
    adapters.register("queue", f"{__name__}:QueueAdapter")
    QueueAdapter.running, QueueAdapter.submitted = {"q-alpha/7"}, []
    app = create_app(make_settings(f"sqlite:///{tmp_path / 'q.db'}"))
    with TestClient(app) as client:
        yield Api(client)


def test_a_backend_in_one_file_registers_scope_checks_and_resubmits(queue_api: Api) -> None:
    api = queue_api
    assert scopes.sections()["queue"] is QueueScope
    token = api.tenant("acme", scope={"queue": {"queues": ["q-alpha"]}})
    bad = api.client.post("/v1/tenants", json={"name": "empty", "scope": {"queue": {"queues": [" "]}}},
                          headers=api.as_(ADMIN))
    assert bad.status_code == 422 and ["body", "scope", "queue", "queues", 0] in [e["loc"][:5] for e in
                                                                                   bad.json()["detail"]]
    listed = api.client.get("/v1/tenants", headers=api.as_(ADMIN)).json()
    assert listed[0]["scope"]["queue"] == {"queues": ["q-alpha"]}
    body = {"target": "queue", "detector": "evalstop:k=2", "on_detect": "rewind", "correction": "lr*=0.5",
            "resubmit": {"command": "train --from {checkpoint}", "priority": 3}}
    outside = api.client.post("/v1/jobs", json={**body, "external_ref": "q-beta/1"}, headers=api.as_(token))
    assert outside.status_code == 422 and "outside tenant 'acme'" in outside.json()["detail"]
    misspelt = api.client.post("/v1/jobs", json={**body, "external_ref": "q-alpha"}, headers=api.as_(token))
    assert misspelt.status_code == 422 and "'queue/number'" in misspelt.json()["detail"]
    wrong = api.client.post("/v1/jobs", json={**body, "external_ref": "q-alpha/7",
                                              "resubmit": {"command": "x", "priority": 12}},
                            headers=api.as_(token))
    assert wrong.status_code == 422 and "resubmit.priority" in wrong.json()["detail"]

    r = api.client.post("/v1/jobs", json={**body, "external_ref": " q-alpha/007"}, headers=api.as_(token))
    assert r.status_code == 201, r.text
    job = r.json()
    assert job["external_ref"] == "q-alpha/7"  # the backend's own spelling
    curve = [(1, 0.5), (2, 0.7), (3, 0.6), (4, 0.5)]  # k=2 fires at step 4; the best is step 2
    scores = [{"step": s, "value": v, **({"checkpoint_uri": "/ckpt/2"} if s == 2 else {})} for s, v in curve]
    reply = api.post(token, job["id"], {"scores": scores}).json()
    assert reply["decision"] == "rewind" and reply["rewind"]["resubmit"]
    for _ in range(20):
        api.ctx.worker.run_once()
        moved = domain.get_job(api.ctx.store, job["id"], "acme")
        if moved["external_ref"] != "q-alpha/7":
            break
    assert (moved["external_ref"], moved["state"]) == ("q-alpha/7.1", "running")
    assert QueueAdapter.submitted == [("q-alpha/7.1", "train --from /ckpt/2", 3)]
    assert "q-alpha/7" not in QueueAdapter.running  # the first attempt was stopped


def test_a_name_is_registered_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(adapters, "ADAPTERS", dict(adapters.ADAPTERS))
    with pytest.raises(ValueError, match="backend 'ray' is already registered"):
        adapters.register("ray", f"{__name__}:QueueAdapter")
    with pytest.raises(ValueError, match=r"factory 'module:attr'\. Got 'queue', 'nocolon'"):
        adapters.register("queue", "nocolon")
    assert adapters.backend("nothing") is None
    plain = adapters.backend("dry-run")  # a module without BACKEND: no section, no resubmission
    assert plain is not None and plain.scope is None and plain.resubmit_text == ""
