"""The service attacked by a hostile tenant (issue 9). Each test is one attack that worked against
the service before this change (commit f76c283) and is refused now. Enforcement-time ownership
checks against the real Slurm and Ray are in tests/enforce (test_enforce_slurm.py, test_enforce_ray.py).
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import itertools
import json
import os
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from evalstop.detectors import REGISTRY
from evalstop.service import tokens
from evalstop.service.adapters._base import JobRef, NotOwned
from evalstop.service.adapters._common import PIN_MARKER
from evalstop.service.adapters._slurm import check_slurm_owner
from evalstop.service.adapters._webhook import verify_signature
from evalstop.service.app import create_app
from evalstop.service.store import jobs, service_secrets, tenants
from evalstop.testbed.slurm_cluster import SlurmCluster, missing, private_cluster

from ._support import ADMIN, Api, make_settings, wait_for

SECRET = "attack-test-secret"


class Backend(BaseHTTPRequestHandler):
    """A loopback stand-in for the Ray dashboard and a webhook receiver: records every request.
    Ray answers GET /api/jobs/{id} with the job's metadata (404 when unknown) and POST .../stop."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *_: Any) -> None:
        pass

    def _reply(self, code: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        state = self.server.state  # type: ignore[attr-defined]
        state["requests"].append(("GET", self.path, dict(self.headers)))
        ray_id = self.path.removeprefix("/api/jobs/")
        if ray_id in state["ray_jobs"]:
            self._reply(200, {"status": "RUNNING", "metadata": state["ray_jobs"][ray_id]})
        else:
            self._reply(404, {})

    def do_POST(self) -> None:
        state = self.server.state  # type: ignore[attr-defined]
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        state["requests"].append(("POST", self.path, dict(self.headers)))
        if self.path.startswith("/hook"):
            ok = verify_signature(SECRET, self.headers["X-EvalStop-Timestamp"], body,
                                  self.headers["X-EvalStop-Signature"])
            msg = json.loads(body)
            state["hook"].append((msg["action"], msg["checkpoint_uri"], self.headers["Idempotency-Key"], ok))
            return self._reply(200, {"stopped": msg["action"] in ("signal", "hard_stop", "status")})
        self._reply(404, {})


@pytest.fixture
def backend() -> Iterator[tuple[str, dict[str, Any]]]:
    state: dict[str, Any] = {"requests": [], "ray_jobs": {}, "hook": []}
    server = ThreadingHTTPServer(("127.0.0.1", 0), Backend)
    server.state = state  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", state
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def svc(sqlite_url: str, backend: tuple[str, dict[str, Any]]) -> Iterator[Api]:
    url, _ = backend
    settings = make_settings(sqlite_url, adapter_settings={
        "ray": {"address": url, "timeout_s": 5.0}, "kubernetes": {"api_url": url, "verify": False},
        "webhook": {"url": f"{url}/hook/default", "secret": SECRET, "timeout_s": 5.0}})
    with TestClient(create_app(settings)) as client:
        yield Api(client)


def tenant(api: Api, name: str, scope: dict[str, Any] | None = None, **body: Any) -> str:
    r = api.client.post("/v1/tenants", json={"name": name, "scope": scope, **body}, headers=api.as_(ADMIN))
    assert r.status_code == 201, r.text
    return str(r.json()["token"])


def register(api: Api, token: str, **body: Any) -> Any:
    payload = {"detector": "evalstop:k=2", "grace_period_s": 0, **body}
    return api.client.post("/v1/jobs", json=payload, headers=api.as_(token))


def stop_now(api: Api, token: str, job_id: str) -> None:
    r = api.client.put(f"/v1/jobs/{job_id}/override", json={"override": "stop_now"}, headers=api.as_(token))
    assert r.status_code == 200, r.text


def run_worker(api: Api, rounds: int = 5) -> None:
    for _ in range(rounds):
        api.ctx.worker.run_once()


RAY = {"ray": {"job_id_prefixes": ["raysubmit_"]}}


# -- 1. acting on another tenant's job ------------------------------------------------------------
def test_a_tenant_without_a_scope_cannot_register_backend_jobs(svc: Api) -> None:
    token = tenant(svc, "mallory")
    r = register(svc, token, target="ray", external_ref="raysubmit_victim")
    assert r.status_code == 422 and "has no ray scope" in r.json()["detail"]


def test_a_reference_outside_the_scope_is_refused(svc: Api) -> None:
    token = tenant(svc, "mallory", {"ray": {"job_id_prefixes": ["raysubmit_mallory_"]},
                                    "kubernetes": {"namespaces": ["team-m"]}})
    r = register(svc, token, target="ray", external_ref="raysubmit_alice_1")
    assert r.status_code == 422 and "outside tenant 'mallory'" in r.json()["detail"]
    r = register(svc, token, target="kubernetes", external_ref="team-a/train")
    assert r.status_code == 422 and "namespace 'team-a'" in r.json()["detail"]


def test_an_external_reference_belongs_to_one_live_job_of_a_tenant(svc: Api) -> None:
    alice, mallory = tenant(svc, "alice", RAY), tenant(svc, "mallory", RAY)
    job = register(svc, alice, target="ray", external_ref="raysubmit_A1").json()
    again = register(svc, alice, target="ray", external_ref="raysubmit_A1")
    assert again.status_code == 409 and f"your live job {job['id']}" in again.json()["detail"]
    # per tenant (issue 22): the overlapping scope the operator declared lets mallory register it
    # too, and her reply says nothing of alice's job
    r = register(svc, mallory, target="ray", external_ref="raysubmit_A1")
    assert r.status_code == 201 and job["id"] not in r.text


def test_the_live_reference_rule_is_a_database_constraint(svc: Api) -> None:
    alice = tenant(svc, "alice", RAY)
    job = register(svc, alice, target="ray", external_ref="raysubmit_A1").json()
    copied = ("tenant", "name", "external_ref", "target", "target_options", "detector", "metric", "mode",
              "grace_period_s", "gpus", "shadow", "state", "created_at")
    row = {**{c: job[c] for c in copied}, "id": "f" * 32}
    with pytest.raises(sa.exc.IntegrityError), svc.ctx.store.transaction() as conn:
        conn.execute(jobs.insert().values(**row))  # a race past the check: the index refuses it
    with svc.ctx.store.transaction() as conn:  # a stopped job releases its reference
        conn.execute(jobs.update().where(jobs.c.id == job["id"]).values(state="stopped"))
    assert register(svc, alice, target="ray", external_ref="raysubmit_A1").status_code == 201


@pytest.mark.parametrize("url", [
    "http://hooks.example/alice-evil/x",  # a prefix of the string, not of the path
    "http://hooks.example@evil.example/alice/x",  # credentials that move the host
    "http://hooks.example:81/alice/x",
    "http://hooks.example/alice/../bob/x",
    "http://hooks.example/alice/%2e%2e/bob",
])
def test_webhook_urls_must_lie_under_a_declared_prefix(svc: Api, url: str) -> None:
    token = tenant(svc, "alice", {"webhook": {"url_prefixes": ["http://hooks.example/alice"]}})
    r = register(svc, token, target="webhook", external_ref="w1", target_options={"url": url})
    assert r.status_code == 422 and "outside tenant 'alice'" in r.json()["detail"]
    ok = register(svc, token, target="webhook", external_ref="w2",
                  target_options={"url": "http://hooks.example/alice/x"})
    assert ok.status_code == 201


def test_the_adapter_checks_ownership_with_the_backend(svc: Api, backend: tuple[str, dict[str, Any]]) -> None:
    """By the time of the stop, Ray says the id is a job submitted with alice's metadata (mallory's
    ended and the id was submitted again): mallory's stop is never sent."""
    _, state = backend
    state["ray_jobs"]["raysubmit_X"] = {"team": "mallory"}
    token = tenant(svc, "mallory", {"ray": {"metadata": {"team": "mallory"}}})
    job = register(svc, token, target="ray", external_ref="raysubmit_X").json()
    state["ray_jobs"]["raysubmit_X"] = {"team": "alice"}
    stop_now(svc, token, job["id"])
    run_worker(svc)
    assert not [r for r in state["requests"] if r[0] == "POST"]  # no stop reached Ray
    got = svc.client.get(f"/v1/jobs/{job['id']}", headers=svc.as_(token)).json()
    assert got["state"] == "stop_failed" and "NotOwned" in got["deliveries"][0]["last_error"]


# -- issue 22, items 4 and 8: a prefix is a boundary, an empty entry is refused ---------------------
def test_a_ray_prefix_is_matched_on_whole_segments(svc: Api) -> None:
    """'raysubmit_pa' must not cover 'raysubmit_pab_1', another tenant's id, at registration or stop."""
    tenant(svc, "alice", {"ray": {"job_id_prefixes": ["raysubmit_pab_"]}})
    mallory = tenant(svc, "mallory", {"ray": {"job_id_prefixes": ["raysubmit_pa"]}})
    r = register(svc, mallory, target="ray", external_ref="raysubmit_pab_1")
    assert r.status_code == 422 and "outside tenant 'mallory'" in r.json()["detail"]
    for own in ("raysubmit_pa", "raysubmit_pa_1", "raysubmit_pa-2", "raysubmit_pa.3"):
        assert register(svc, mallory, target="ray", external_ref=own).status_code == 201, own
    ray = svc.ctx.adapters.get("ray")
    stored = {"ray": {"job_id_prefixes": ["raysubmit_pa"]}}
    with pytest.raises(NotOwned, match="raysubmit_pab_1"):  # the adapter checks the same boundary
        ray.check_owner(JobRef("j", "mallory", "raysubmit_pab_1", scope=stored))
    ray.check_owner(JobRef("j", "mallory", "raysubmit_pa_1", scope=stored))


@pytest.mark.parametrize(("scope", "field"), [
    ({"ray": {"job_id_prefixes": [""]}}, "job_id_prefixes"),
    ({"ray": {"job_id_prefixes": ["  "]}}, "job_id_prefixes"),
    ({"ray": {"metadata": {"": "alpha"}}}, "metadata"),
    ({"checkpoint_prefixes": [""]}, "checkpoint_prefixes"),
    ({"checkpoint_prefixes": ["/"]}, "checkpoint_prefixes"),  # the whole filesystem
    ({"checkpoint_prefixes": ["s3://"]}, "checkpoint_prefixes"),  # every bucket
    ({"kubernetes": {"namespaces": [""]}}, "namespaces"),
    ({"kubernetes": {"namespaces": ["team-a"], "labels": {" ": "a"}}}, "labels"),
    ({"slurm": {"accounts": [""]}}, "accounts"),
    ({"slurm": {"users": [" "]}}, "users"),
    ({"slurm": {"partitions": ["gpu", "\t"]}}, "partitions"),
    ({"webhook": {"url_prefixes": [""]}}, "url_prefixes"),
    ({"webhook": {"url_prefixes": ["http://"]}}, "url_prefixes"),  # no host
])
def test_an_empty_scope_entry_is_refused(svc: Api, scope: dict[str, Any], field: str) -> None:
    r = svc.client.post("/v1/tenants", json={"name": "mallory", "scope": scope}, headers=svc.as_(ADMIN))
    assert r.status_code == 422, r.text
    assert any(field in e["loc"] for e in r.json()["detail"]), r.text
    tenant(svc, "alice")
    r = svc.client.put("/v1/tenants/alice/scope", json={"scope": scope}, headers=svc.as_(ADMIN))
    assert r.status_code == 422 and any(field in e["loc"] for e in r.json()["detail"]), r.text


def test_a_stored_scope_with_an_empty_entry_matches_nothing(svc: Api) -> None:
    """A scope stored before entries were checked still loads, and its empty entries cover nothing."""
    token = tenant(svc, "mallory")
    legacy = {"ray": {"job_id_prefixes": [""]}, "slurm": {"accounts": [""]}, "checkpoint_prefixes": [""]}
    with svc.ctx.store.transaction() as conn:
        conn.execute(tenants.update().where(tenants.c.name == "mallory").values(scope=legacy))
    listed = svc.client.get("/v1/tenants", headers=svc.as_(ADMIN))
    assert listed.status_code == 200 and listed.json()[0]["scope"]["ray"]["job_id_prefixes"] == [""]
    r = register(svc, token, target="ray", external_ref="raysubmit_alice_1")
    assert r.status_code == 422 and "job_id_prefixes" in r.json()["detail"]
    with pytest.raises(NotOwned):
        svc.ctx.adapters.get("ray").check_owner(JobRef("j", "mallory", "raysubmit_alice_1", scope=legacy))
    with pytest.raises(NotOwned, match="the account of Slurm job 1 is outside"):  # no account is not ''s
        check_slurm_owner(JobRef("j", "mallory", "1", scope=legacy), [{"account": "", "user": "u",
                                                                        "partition": "p"}])


# -- issue 22, item 3: a rule's cost is bounded --------------------------------------------------
@pytest.mark.parametrize(("spec", "param"), [
    ("mann-kendall:min_window=3,max_window=1000000,alpha=1e-12", "max_window=1000000"),
    ("slaq:window=100000", "window=100000"),
])
def test_a_rule_parameter_that_sizes_its_state_is_bounded(tmp_path: Path, spec: str, param: str) -> None:
    """A million-eval window made every POST rewrite megabytes of rule state (issue 22, item 3)."""
    with TestClient(create_app(make_settings(f"sqlite:///{tmp_path / 'a.db'}"))) as client:
        api = Api(client)
        token = api.tenant("mallory")
        r = client.post("/v1/jobs", json={"external_ref": "m1", "target": "recording", "detector": spec},
                        headers=api.as_(token))
        assert r.status_code == 422, r.text
        assert param in r.json()["detail"] and "limit of 256" in r.json()["detail"]
        assert api.job(token, detector="mann-kendall:max_window=256")["detector"]  # at the limit: fine
    raised = make_settings(f"sqlite:///{tmp_path / 'b.db'}", rule_max_window=10**6)
    with TestClient(create_app(raised)) as client:
        api = Api(client)  # an operator may raise the limit
        assert api.job(api.tenant("trusted"), detector=spec)["id"]


def test_every_parameter_that_sizes_a_rules_state_is_declared() -> None:
    """The bound is complete: raising any int parameter that grows ``state_window`` must be in the
    rule's ``size_params`` (a new windowed rule cannot slip past ``rule_max_window``)."""
    for cls in REGISTRY.values():
        base = cls()
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            value = getattr(base, f.name)
            if type(value) is not int or f.name in cls.size_params:
                continue
            try:
                bigger = cls(**{f.name: value * 4 + 8})
            except ValueError:
                continue
            assert bigger.state_window == base.state_window, f"{cls.name}.{f.name} sizes the state"
        for name in cls.size_params:
            assert cls(**{name: getattr(base, name) * 4 + 8}).state_window > base.state_window


# -- 2. pins in another tenant's directory --------------------------------------------------------
@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    alice, mallory = tmp_path / "alice", tmp_path / "mallory"
    (alice / "ckpt-1").mkdir(parents=True)
    mallory.mkdir()
    return alice, mallory


def mallory_job(svc: Api, mallory: Path) -> tuple[str, str]:
    token = tenant(svc, "mallory", {**RAY, "checkpoint_prefixes": [f"file://{mallory}"]})
    job = register(svc, token, target="ray", external_ref=f"raysubmit_{os.urandom(4).hex()}").json()
    return token, job["id"]


@pytest.mark.parametrize("uri", [
    "file://{alice}/ckpt-1",
    "file://{mallory}/../alice/ckpt-1",
    "file://{mallory}/%2e%2e/alice/ckpt-1",
    "{mallory}/../alice/ckpt-1",
    "file://{mallory}-evil/x",
])
def test_checkpoints_outside_the_roots_are_refused(svc: Api, dirs: tuple[Path, Path], uri: str) -> None:
    alice, mallory = dirs
    token, job_id = mallory_job(svc, mallory)
    uri = uri.format(alice=alice, mallory=mallory)
    r = svc.post(token, job_id, {"step": 1, "value": 0.5, "checkpoint_uri": uri})
    assert r.status_code == 422 and "checkpoint_uri" in r.json()["detail"]


def stop_with_checkpoint(svc: Api, token: str, job_id: str, uri: str, swap: Any = None) -> None:
    assert svc.post(token, job_id, {"step": 1, "value": 0.9, "checkpoint_uri": uri}).status_code == 200
    stop_now(svc, token, job_id)
    if swap is not None:
        swap()
    run_worker(svc)
    assert svc.client.get(f"/v1/jobs/{job_id}", headers=svc.as_(token)).json()["state"] == "stopped"


def test_a_symlink_under_the_root_does_not_carry_the_pin_out(svc: Api, dirs: tuple[Path, Path]) -> None:
    alice, mallory = dirs
    (mallory / "link").symlink_to(alice / "ckpt-1")
    token, job_id = mallory_job(svc, mallory)
    stop_with_checkpoint(svc, token, job_id, f"file://{mallory}/link")
    assert not (alice / "ckpt-1" / PIN_MARKER).exists()  # refused; the stop itself went through


def test_a_symlink_swapped_in_after_the_check_is_refused(svc: Api, dirs: tuple[Path, Path]) -> None:
    alice, mallory = dirs
    (mallory / "run" / "ckpt").mkdir(parents=True)
    token, job_id = mallory_job(svc, mallory)

    def swap() -> None:  # after ingest accepted the URI, before the worker pins
        (mallory / "run" / "ckpt").rmdir()
        (mallory / "run").rmdir()
        (mallory / "run").symlink_to(alice)

    stop_with_checkpoint(svc, token, job_id, f"file://{mallory}/run/ckpt-1", swap=None)
    job2 = register(svc, token, target="ray", external_ref="raysubmit_two").json()["id"]
    stop_with_checkpoint(svc, token, job2, f"file://{mallory}/run/ckpt", swap=swap)
    assert not (alice / "ckpt-1" / PIN_MARKER).exists() and not list(alice.glob(f"*{PIN_MARKER}"))


def test_a_checkpoint_inside_the_roots_is_pinned(svc: Api, dirs: tuple[Path, Path]) -> None:
    _, mallory = dirs
    (mallory / "ckpt-9").mkdir()
    token, job_id = mallory_job(svc, mallory)
    stop_with_checkpoint(svc, token, job_id, f"file://{mallory}/ckpt-9")
    assert json.loads((mallory / "ckpt-9" / PIN_MARKER).read_text())["job_id"] == job_id


# -- 3. fairness ----------------------------------------------------------------------------------
def test_a_tenant_over_its_rate_gets_429_and_others_are_served(svc: Api) -> None:
    heavy = tenant(svc, "heavy", quota={"scores_per_s": 10, "burst": 20})
    light = tenant(svc, "light")
    hj, lj = svc.job(heavy)["id"], svc.job(light)["id"]
    too_big = svc.post(heavy, hj, {"scores": [{"step": s, "value": 0.5} for s in range(100, 130)]})
    assert too_big.status_code == 429 and "burst of 20" in too_big.json()["detail"]
    assert svc.post(heavy, hj, {"scores": [{"step": s, "value": 0.5} for s in range(20)]}).status_code == 200
    r = svc.post(heavy, hj, {"scores": [{"step": s, "value": 0.5} for s in range(20, 25)]})
    assert r.status_code == 429 and int(r.headers["Retry-After"]) >= 1 and "10 scores/s" in r.json()["detail"]
    assert svc.post(light, lj, {"step": 1, "value": 0.5}).status_code == 200


def test_a_flooding_tenant_is_refused_before_its_body_is_parsed(
    svc: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Own attack: 429s that still parse and validate 1,000 scores each cost the server as much
    as accepted ones. Once the bucket is empty the fast path answers before parsing."""
    from evalstop.service import fastpath

    heavy = tenant(svc, "heavy", quota={"scores_per_s": 1, "burst": 5})
    job_id = svc.job(heavy)["id"]
    first = svc.post(heavy, job_id, {"scores": [{"step": s, "value": 0.5} for s in range(5)]})
    assert first.status_code == 200
    parsed: list[bytes] = []
    original = fastpath.ScoresFastPath._parse

    def counting(self: Any, body: bytes) -> Any:
        parsed.append(body)
        return original(self, body)

    monkeypatch.setattr(fastpath.ScoresFastPath, "_parse", counting)
    r = svc.post(heavy, job_id, {"scores": [{"step": s, "value": 0.5} for s in range(5, 1005)]})
    assert r.status_code == 429 and r.headers["Retry-After"] == "1" and parsed == []


def test_live_job_quota(svc: Api) -> None:
    token = tenant(svc, "small", quota={"max_live_jobs": 2})
    svc.job(token), svc.job(token)
    body = {"external_ref": "x9", "target": "recording"}
    r = svc.client.post("/v1/jobs", json=body, headers=svc.as_(token))
    assert r.status_code == 429 and "max_live_jobs=2" in r.json()["detail"] and "Retry-After" in r.headers


# -- 4. stops that could never be delivered -------------------------------------------------------
@pytest.mark.parametrize("uri", ["file:///data/ckpt/модель-é/step-30", "s3://b/ck\r\nX-Injected: 1"])
def test_any_checkpoint_uri_is_delivered_with_one_ascii_key(
    svc: Api, backend: tuple[str, dict[str, Any]], uri: str
) -> None:
    url, state = backend
    token = tenant(svc, "alice", {"webhook": {"url_prefixes": [f"{url}/hook"]}})
    job = register(svc, token, target="webhook", external_ref="w1").json()
    assert svc.post(token, job["id"], {"step": 1, "value": 0.9, "checkpoint_uri": uri}).status_code == 200
    stop_now(svc, token, job["id"])
    run_worker(svc)
    assert svc.client.get(f"/v1/jobs/{job['id']}", headers=svc.as_(token)).json()["state"] == "stopped"
    pins = [h for h in state["hook"] if h[0] == "pin"]
    assert pins and {p[1] for p in pins} == {uri} and all(p[3] for p in pins)  # URI intact, signed
    assert len({p[2] for p in pins}) == 1 and pins[0][2].isascii()  # one key for the pin
    assert all("X-Injected" not in r[2] for r in state["requests"])


# -- 5. a 500, and loose types --------------------------------------------------------------------
@pytest.mark.parametrize("body", [b"[" * 400_000, b"{\"step\": 1, \"value\": ", b"\xff\xfe"])
def test_bad_json_gets_the_routes_answer_with_or_without_a_token(api: Api, body: bytes) -> None:
    token = api.tenant("t1")
    job_id = api.job(token)["id"]
    url, headers = f"/v1/jobs/{job_id}/scores", {"Content-Type": "application/json"}
    known = api.client.post(url, content=body, headers={**headers, **api.as_(token)})
    unknown = api.client.post(url, content=body, headers={**headers, **api.as_("es_not-a-token")})
    # the route parses the body before it looks at the token: the same answer either way, never a 500
    assert (known.status_code, known.json()) == (unknown.status_code, unknown.json())
    assert known.status_code == (400 if body.startswith(b"[[") else 422)


@pytest.mark.parametrize("value", ["0.5", True, False, None, [0.5], {"v": 1}])
def test_value_is_a_json_number_only(api: Api, value: Any) -> None:
    token = api.tenant("t1")
    job_id = api.job(token)["id"]
    for body in ({"step": 1, "value": value}, {"scores": [{"step": 1, "value": value}]}):
        r = api.post(token, job_id, body)
        assert r.status_code == 422 and r.json()["detail"][0]["loc"][-1] == "value", r.text
    assert api.post(token, job_id, {"step": 1, "value": 1}).status_code == 200  # an int is a number


# -- issue 22, items 5, 6 and 7: token rotation and revocation; console sessions ------------------
# (docs/tenants.md, "Tokens: rotation and revocation", and docs/console.md, "Sign-in")
TOKEN_BOUND_S = 1.0  # token_cache_s in these tests: the documented bound on refusing an old token


@pytest.fixture
def replicas(db_url: str) -> Iterator[tuple[Api, Api]]:
    """Two replicas of one service on one database (SQLite file or PostgreSQL)."""
    settings = make_settings(db_url, token_cache_s=TOKEN_BOUND_S)
    with TestClient(create_app(settings)) as a, TestClient(create_app(settings)) as b:
        yield Api(a), Api(b)


def _token_call(api: Api, token: str, name: str, action: str, **body: Any) -> Any:
    return api.client.post(f"/v1/tenants/{name}/token/{action}", json=body, headers=api.as_(token))


_STEPS = itertools.count()  # every score in this section at a new, higher step


def _score_status(api: Api, token: str, job_id: str) -> int:
    return int(api.post(token, job_id, {"step": next(_STEPS), "value": 0.5}).status_code)


def _refused_within(api: Api, token: str, job_id: str, bound_s: float) -> float:
    """Seconds from now to the sending of the first request ``api`` refuses ``token`` in (401),
    polling; fails past ``bound_s`` + slack. Measured at the send, not at the reply: on a loaded
    machine one request can take a second, which says nothing about the cache's bound."""
    started = time.monotonic()
    while True:
        sent = time.monotonic()
        if _score_status(api, token, job_id) == 401:
            return sent - started
        assert time.monotonic() - started < bound_s + 2.0, "the old token is still accepted past the bound"
        time.sleep(0.05)


def test_a_rotated_or_revoked_token_is_refused_by_every_replica_within_the_bound(
    replicas: tuple[Api, Api]
) -> None:
    a, b = replicas
    old = tenant(a, "alice")
    job_id = a.job(old)["id"]
    for api in (a, b):  # each replica has the token in its cache
        assert _score_status(api, old, job_id) == 200
    rotated = _token_call(a, old, "alice", "rotate", reason="leaked in a log")  # the tenant itself
    assert rotated.status_code == 200, rotated.text
    new = rotated.json()["token"]
    assert new != old and rotated.json()["previous_valid_until"] is None
    assert _score_status(a, old, job_id) == 401  # the replica that rotated: at once
    assert _refused_within(b, old, job_id, TOKEN_BOUND_S) <= TOKEN_BOUND_S + 0.5
    assert _score_status(a, new, job_id) == 200 and _score_status(b, new, job_id) == 200
    revoked = _token_call(b, ADMIN, "alice", "revoke", reason="offboarded")  # the operator
    assert revoked.status_code == 200, revoked.text
    assert _score_status(b, new, job_id) == 401
    assert _refused_within(a, new, job_id, TOKEN_BOUND_S) <= TOKEN_BOUND_S + 0.5
    assert a.client.get("/v1/jobs", headers=a.as_(new)).status_code == 401  # every route, not just scores
    trail = a.client.get("/v1/tenants/alice/token/audit", headers=a.as_(ADMIN)).json()
    assert [(t["action"], t["principal"], t["reason"]) for t in trail] == [
        ("rotate", "tenant:alice", "leaked in a log"), ("revoke", "operator", "offboarded")]


def test_a_tenant_rotates_or_revokes_only_its_own_token(svc: Api) -> None:
    alice, mallory = tenant(svc, "alice"), tenant(svc, "mallory")
    for action in ("rotate", "revoke"):
        r = _token_call(svc, mallory, "alice", action)
        assert r.status_code == 403 and "cannot" in r.json()["detail"], r.text
    assert svc.client.get("/v1/tenants/alice/token/audit", headers=svc.as_(mallory)).status_code == 403
    assert svc.client.get("/v1/jobs", headers=svc.as_(alice)).status_code == 200
    assert _token_call(svc, ADMIN, "nobody", "rotate").status_code == 404
    r = _token_call(svc, ADMIN, "alice", "rotate", grace_s=-1)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][-1] == "grace_s"
    assert _token_call(svc, mallory, "mallory", "revoke").status_code == 200  # its own: yes
    assert _token_call(svc, mallory, "mallory", "rotate").status_code == 401  # and then it is out


def test_a_rotation_grace_keeps_the_old_token_until_it_ends(svc: Api) -> None:
    old = tenant(svc, "alice")
    job_id = svc.job(old)["id"]
    clock = {"now": svc.ctx.store.clock()}
    svc.ctx.store.clock = lambda: clock["now"]
    svc.ctx.tokens.ttl_s = 0.0  # every request asks the database: the grace, not the cache, decides
    r = _token_call(svc, ADMIN, "alice", "rotate", grace_s=60)
    new = r.json()["token"]
    assert r.json()["previous_valid_until"] == clock["now"] + 60
    assert _score_status(svc, old, job_id) == 200 and _score_status(svc, new, job_id) == 200
    clock["now"] += 61
    assert _score_status(svc, old, job_id) == 401 and _score_status(svc, new, job_id) == 200


def test_a_cached_token_costs_no_database_read_per_score(
    svc: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = tenant(svc, "alice")
    job_id = svc.job(token)["id"]
    lookups: list[str] = []
    original = tokens.owner
    monkeypatch.setattr(tokens, "owner", lambda store, t: lookups.append(t) or original(store, t))
    for _ in range(30):
        assert _score_status(svc, token, job_id) == 200
    assert len(lookups) <= 1  # the job registration cached it; at most one re-check per token_cache_s


def _console_sign_in(client: TestClient, token: str) -> Any:
    page = client.get("/ui/login")
    csrf = page.text.split('name="csrf" value="', 1)[1].split('"', 1)[0]
    return client.post("/ui/login", data={"token": token, "name": "", "csrf": csrf}, follow_redirects=False)


def _signed_in(client: TestClient) -> bool:
    return client.get("/ui/jobs", follow_redirects=False).status_code == 200


def test_rotating_or_revoking_a_token_ends_its_console_sessions_on_every_replica(
    replicas: tuple[Api, Api]
) -> None:
    a, b = replicas
    old = tenant(a, "alice")
    assert _console_sign_in(a.client, old).status_code == 303
    cookie = a.client.cookies["evalstop_session"]
    with TestClient(b.client.app) as other:  # the same cookie on the other replica
        other.cookies.set("evalstop_session", cookie)
        assert _signed_in(a.client) and _signed_in(other)
        new = _token_call(a, ADMIN, "alice", "rotate", grace_s=300).json()["token"]
        assert not _signed_in(a.client) and not _signed_in(other)  # at once: the session row says so
        assert _console_sign_in(other, old).status_code == 401  # an old token in its grace: not here
        other.cookies.clear()
        assert _console_sign_in(other, new).status_code == 303 and _signed_in(other)
        _token_call(b, new, "alice", "revoke")
        assert not _signed_in(other)


def _main_cookie_mac(admin: str, payload: str) -> str:
    """The MAC a cookie carried before: HMAC-SHA256 keyed by a function of the admin token alone."""
    key = hmac.new(admin.encode(), b"evalstop console session v1", hashlib.sha256).digest()
    mac = hmac.new(key, payload.encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(mac).decode().rstrip("=")


def test_a_console_cookie_says_nothing_about_the_admin_token(tmp_path: Path) -> None:
    urls = [f"sqlite:///{tmp_path / name}.db" for name in ("one", "two")]
    with TestClient(create_app(make_settings(urls[0]))) as one, \
            TestClient(create_app(make_settings(urls[1]))) as two:
        assert _console_sign_in(one, ADMIN).status_code == 303
        cookie = one.cookies["evalstop_session"]
        payload, mac = cookie.split(".")
        assert mac != _main_cookie_mac(ADMIN, payload)  # guessing the admin token offline: no oracle
        two.cookies.set("evalstop_session", cookie)  # the same admin token, another database
        assert not _signed_in(two)
        keys = []
        for url in urls:
            engine = sa.create_engine(url)
            with engine.connect() as conn:
                keys.append(conn.execute(sa.select(service_secrets.c.value)).scalar_one())
            engine.dispose()
        assert keys[0] != keys[1] and all(len(bytes.fromhex(k)) == 32 for k in keys)
        assert ADMIN not in cookie and len(payload) >= 43  # a random id of 256 bits, nothing else


def test_a_copied_cookie_is_refused_after_sign_out_and_its_form_is_not_applied(svc: Api) -> None:
    token = tenant(svc, "alice")
    job = svc.job(token)
    c = svc.client
    assert _console_sign_in(c, token).status_code == 303
    copied = c.cookies["evalstop_session"]
    page = c.get(f"/ui/jobs/{job['id']}").text
    csrf = page.split('name="csrf" value="', 1)[1].split('"', 1)[0]
    assert c.post("/ui/logout", data={"csrf": csrf}, follow_redirects=False).status_code == 303
    with TestClient(c.app) as thief:
        thief.cookies.set("evalstop_session", copied)
        assert thief.get("/ui/jobs", follow_redirects=False).headers.get("location") == "/ui/login"
        r = thief.post(f"/ui/jobs/{job['id']}/override",
                       data={"action": "never_stop", "reason": "replayed", "csrf": csrf})
        assert r.status_code == 401
    after = c.get(f"/v1/jobs/{job['id']}", headers=svc.as_(token)).json()
    assert after["override"] is None
    assert c.get(f"/v1/jobs/{job['id']}/audit", headers=svc.as_(token)).json() == []


def test_an_operator_session_ends_where_the_admin_token_changed(sqlite_url: str) -> None:
    with TestClient(create_app(make_settings(sqlite_url))) as one, \
            TestClient(create_app(make_settings(sqlite_url))) as same, \
            TestClient(create_app(make_settings(sqlite_url, admin_token="a-new-admin-token"))) as rotated:
        assert _console_sign_in(one, ADMIN).status_code == 303
        for other in (same, rotated):
            other.cookies.set("evalstop_session", one.cookies["evalstop_session"])
        assert _signed_in(same)  # one database, one key: every replica accepts the session
        assert not _signed_in(rotated)  # a replica restarted with a new admin token does not


# -- issue 22, item 1: a slow receiver delays only its own tenant's stops (s22a) -------------------
class SlowHook(BaseHTTPRequestHandler):
    """A webhook receiver: under ``/slow`` it answers after ``state["delay_s"]`` (or as soon as the
    test ends); elsewhere at once. Records when each signal arrived, by external reference."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *_: Any) -> None:
        pass

    def do_POST(self) -> None:
        state = self.server.state  # type: ignore[attr-defined]
        msg = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        if msg["action"] == "signal":
            state["signalled"].setdefault(msg["external_ref"], time.monotonic())
        if self.path.startswith("/slow"):
            state["done"].wait(state["delay_s"])
        data = json.dumps({"stopped": msg["action"] != "pin"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def slow_hook() -> Iterator[tuple[str, dict[str, Any]]]:
    state: dict[str, Any] = {"signalled": {}, "delay_s": 6.0, "done": threading.Event()}
    server = ThreadingHTTPServer(("127.0.0.1", 0), SlowHook)
    server.daemon_threads = True
    server.state = state  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", state
    finally:
        state["done"].set()
        server.shutdown()
        server.server_close()


def test_a_hanging_receiver_delays_only_its_own_tenants_stops(
    sqlite_url: str, slow_hook: tuple[str, dict[str, Any]],
) -> None:
    """Tenant S's receiver answers after 6 s (the adapter gives up after 5 s) and S stops 4 jobs;
    another tenant's stop, asked for afterwards, still reaches its own receiver within 1 s."""
    url, state = slow_hook
    settings = make_settings(sqlite_url, run_worker=True, worker_poll_s=0.05, adapter_settings={
        "webhook": {"url": f"{url}/fast/default", "secret": SECRET, "timeout_s": 5.0}})
    with TestClient(create_app(settings)) as client:
        api = Api(client)
        slow = tenant(api, "slow", {"webhook": {"url_prefixes": [f"{url}/slow"]}})
        other = tenant(api, "other", {"webhook": {"url_prefixes": [f"{url}/fast"]}})
        for i in range(4):
            job = register(api, slow, target="webhook", external_ref=f"s{i}",
                           target_options={"url": f"{url}/slow/{i}"})
            stop_now(api, slow, job.json()["id"])
        wait_for(lambda: len(state["signalled"]) >= 2, 5.0, "the slow tenant's receiver to hang")
        job = register(api, other, target="webhook", external_ref="o1",
                       target_options={"url": f"{url}/fast/o"})
        asked = time.monotonic()
        stop_now(api, other, job.json()["id"])
        wait_for(lambda: "o1" in state["signalled"], 3.0, "the other tenant's stop to reach its receiver")
        assert state["signalled"]["o1"] - asked <= 1.0
        assert sorted(state["signalled"]) == ["o1", "s0", "s1"]  # S holds its 2 threads, no more
        wait_for(lambda: api.client.get(f"/v1/jobs/{job.json()['id']}", headers=api.as_(other))
                 .json()["state"] == "stopped", 3.0, "the other tenant's job to be stopped")
        state["done"].set()  # let the hanging requests end, so shutdown need not wait for them


# -- issue 22, item 2: references without squatting (s22a) -----------------------------------------
TRAIN = "#!/bin/bash\nsleep 600\n"


@pytest.fixture(scope="module")
def slurm() -> Iterator[SlurmCluster]:
    """A real single-node Slurm (the enforcement tests' one), any account accepted."""
    if reason := missing():
        pytest.skip(reason)
    with private_cluster("evs-attack-slurm-") as cluster:
        yield cluster


@pytest.fixture
def slurm_svc(sqlite_url: str, slurm: SlurmCluster) -> Iterator[Api]:
    settings = make_settings(sqlite_url, adapter_settings={"slurm": {"slurm_conf": str(slurm.conf)}})
    with TestClient(create_app(settings)) as client:
        yield Api(client)


def sbatch(slurm: SlurmCluster, account: str) -> str:
    script = slurm.root / "train.sh"
    script.write_text(TRAIN)
    return slurm.sbatch(script, f"--account={account}")


def test_mallory_cannot_squat_alices_next_slurm_job(slurm: SlurmCluster, slurm_svc: Api) -> None:
    """The issue's attack: mallory registers the id Slurm will give alice's next job. Slurm does
    not know it yet, so nothing shows it is mallory's: 422. Alice submits, registers, and her job
    is stopped; mallory still cannot register it, and learns nothing of alice from the reply."""
    svc = slurm_svc
    alice = tenant(svc, "alice", {"slurm": {"accounts": ["alice"]}})
    mallory = tenant(svc, "mallory", {"slurm": {"accounts": ["mallory"]}})
    next_id = str(int(sbatch(slurm, "mallory")) + 1)
    squat = register(svc, mallory, target="slurm", external_ref=next_id)
    assert squat.status_code == 422 and "does not know job" in squat.json()["detail"], squat.text
    assert sbatch(slurm, "alice") == next_id
    job = register(svc, alice, target="slurm", external_ref=next_id)
    assert job.status_code == 201, job.text
    for spelled in (next_id, f"0{next_id}", f" {next_id}"):
        late = register(svc, mallory, target="slurm", external_ref=spelled)
        assert late.status_code == 422 and "account of Slurm job" in late.json()["detail"]
        assert "alice" not in late.text  # what Slurm says about alice's job stays with alice
    again = register(svc, alice, target="slurm", external_ref=f"0{next_id}")  # one job, however spelled
    assert again.status_code == 409 and job.json()["id"] in again.text
    stop_now(svc, alice, job.json()["id"])

    def stopped() -> bool:
        svc.ctx.worker.run_once()
        got = svc.client.get(f"/v1/jobs/{job.json()['id']}", headers=svc.as_(alice)).json()
        return bool(got["state"] == "stopped")

    wait_for(stopped, 30.0, "alice's Slurm job to be stopped")
    state = slurm.run("squeue", "--noheader", "--states=all", "--jobs", next_id, "--format=%T").stdout.split()
    assert state in ([], ["CANCELLED"])


def test_a_squatted_ray_id_neither_blocks_nor_stops_alices_job(
    svc: Api, backend: tuple[str, dict[str, Any]],
) -> None:
    """Both scopes cover ``raysubmit_`` and are told apart by submission metadata. Mallory registers
    an id before Ray knows it (allowed: a Ray id may be registered before its submission, as the
    testbed does). Alice then submits it and registers it too; mallory's stop never reaches Ray,
    alice's does. With metadata alone (no prefix), the unknown id is refused outright."""
    _, state = backend

    def scope(team: str, **more: Any) -> dict[str, Any]:
        return {"ray": {"metadata": {"team": team}, **more}}

    alice = tenant(svc, "alice", scope("alice", job_id_prefixes=["raysubmit_"]))
    mallory = tenant(svc, "mallory", scope("mallory", job_id_prefixes=["raysubmit_"]))
    squat = register(svc, mallory, target="ray", external_ref="raysubmit_nightly")
    assert squat.status_code == 201, squat.text
    state["ray_jobs"]["raysubmit_nightly"] = {"team": "alice"}  # alice's ray job submit
    job = register(svc, alice, target="ray", external_ref="raysubmit_nightly")
    assert job.status_code == 201, job.text
    late = register(svc, tenant(svc, "eve", scope("eve", job_id_prefixes=["raysubmit_"])), target="ray",
                    external_ref="raysubmit_nightly")  # once Ray knows the job, its metadata decides
    assert late.status_code == 422 and "'team'" in late.json()["detail"] and "alice" not in late.text
    stop_now(svc, mallory, squat.json()["id"])
    run_worker(svc)
    assert not [r for r in state["requests"] if r[0] == "POST"]  # mallory's stop: refused, nothing sent
    stop_now(svc, alice, job.json()["id"])
    run_worker(svc)
    assert ("POST", "/api/jobs/raysubmit_nightly/stop") in [r[:2] for r in state["requests"]]
    bare = tenant(svc, "bare", scope("bare"))
    refused = register(svc, bare, target="ray", external_ref="raysubmit_later")
    assert refused.status_code == 422 and "Ray does not know job" in refused.json()["detail"]


@pytest.mark.parametrize("target", ["webhook", "dry-run"])
def test_a_free_text_reference_is_per_tenant(
    svc: Api, backend: tuple[str, dict[str, Any]], target: str,
) -> None:
    """Mallory registers ``nightly-train`` first; alice's own ``nightly-train`` is still hers."""
    url, _ = backend
    hooks = {"webhook": {"url_prefixes": [f"{url}/hook"]}}
    mallory, alice = tenant(svc, "mallory", hooks), tenant(svc, "alice", hooks)
    assert register(svc, mallory, target=target, external_ref="nightly-train").status_code == 201
    job = register(svc, alice, target=target, external_ref="nightly-train")
    assert job.status_code == 201, job.text
    stop_now(svc, alice, job.json()["id"])
    run_worker(svc)
    got = svc.client.get(f"/v1/jobs/{job.json()['id']}", headers=svc.as_(alice)).json()
    assert got["state"] == "stopped"


def test_a_409_never_tells_a_tenant_what_others_registered(svc: Api) -> None:
    """A reference another tenant uses gets exactly the reply of a free one; a 409 speaks only of
    the caller's own live job."""
    alice, mallory = tenant(svc, "alice"), tenant(svc, "mallory")
    assert register(svc, alice, target="dry-run", external_ref="alice-secret-run").status_code == 201
    used = register(svc, mallory, target="dry-run", external_ref="alice-secret-run")
    free = register(svc, mallory, target="dry-run", external_ref="nobody-has-this")
    assert used.status_code == free.status_code == 201
    again = register(svc, mallory, target="dry-run", external_ref="alice-secret-run")
    assert again.status_code == 409 and used.json()["id"] in again.json()["detail"]


# -- issue 22, item 3: a rule's work is charged to its tenant (s22a) -------------------------------
@pytest.mark.parametrize(("ms_per_score", "admitted"), [(1e-6, 1), (1e6, 5)])
def test_rule_work_is_charged_to_the_tenants_bucket(db_url: str, ms_per_score: float, admitted: int) -> None:
    """A score's token covers ``rule_ms_per_score`` of its rule's CPU; beyond it the tenant owes
    more tokens, taken after the request. With a tiny allowance any rule work puts the bucket
    into debt (the next score is 429, whose wait covers the debt); with a large one the same
    five scores all pass. Another tenant is not charged for it. On SQLite (the bucket in memory)
    and PostgreSQL (the shared bucket: the debt sits on the replica's lease)."""
    settings = make_settings(db_url, rule_ms_per_score=ms_per_score)
    with TestClient(create_app(settings)) as client:
        api = Api(client)
        heavy = tenant(api, "heavy", quota={"scores_per_s": 1, "burst": 50})
        light = tenant(api, "light", quota={"scores_per_s": 1, "burst": 50})
        job = api.job(heavy, target="dry-run", detector="mann-kendall:max_window=256")
        codes = [api.post(heavy, job["id"], {"step": s, "value": 0.5 + 0.01 * s}).status_code
                 for s in range(5)]
        assert codes == [200] * admitted + [429] * (5 - admitted)
        first = api.post(light, api.job(light, target="dry-run")["id"], {"step": 0, "value": 0.5})
        assert first.status_code == 200 and "rule_cpu_s" not in first.json()
