"""The HTTP API end to end, in process (TestClient): register, post, decide, enforce, read."""

from __future__ import annotations

from typing import Any

import pytest

from evalstop.service import domain
from evalstop.service.schemas import TenantOut

from ._support import ADMIN, Api

DECLINING = [(1, 0.50), (2, 0.61), (3, 0.58), (4, 0.57), (5, 0.40)]  # k=2 fires at step 4


def post_curve(api: Api, token: str, job_id: str, curve: list[tuple[int, float]]) -> list[dict[str, Any]]:
    replies = []
    for step, value in curve:
        r = api.post(token, job_id, {"step": step, "value": value, "checkpoint_uri": f"s3://ckpt/{step}"})
        assert r.status_code == 200, r.text
        replies.append(r.json())
    return replies


def test_register_post_decide_and_enforce(api_any_db: Api) -> None:
    api = api_any_db
    token = api.tenant("acme")
    job = api.job(token, external_ref="raysubmit_1", grace_period_s=0, gpus=8, expected_duration_s=7200)
    assert (job["state"], job["detector"], job["tenant"]) == ("running", "evalstop", "acme")
    replies = post_curve(api, token, job["id"], DECLINING)
    assert [r["decision"] for r in replies] == ["continue"] * 3 + ["stop", "stop"]
    assert [r["decided_now"] for r in replies] == [False, False, False, True, False]
    fired = replies[3]
    assert (fired["stop_step"], fired["best_step"], fired["best_score"]) == (4, 2, 0.61)
    assert fired["best_checkpoint_uri"] == "s3://ckpt/2"
    assert "2 consecutive declines" in fired["reason"]
    assert api.ctx.worker.run_once() == 1
    calls = [(c["call"], c["ref"], c["effect"]) for c in api.adapter().calls]
    assert calls == [("pin_checkpoint", "raysubmit_1", True), ("signal", "raysubmit_1", True)]
    assert api.adapter().calls[0]["checkpoint_uri"] == "s3://ckpt/2"
    got = api.client.get(f"/v1/jobs/{job['id']}", headers=api.as_(token)).json()
    assert (got["state"], got["n_evals"], got["last_step"]) == ("stopped", 5, 5)
    assert got["deliveries"][0]["phase"] == "done"
    metrics = api.client.get("/metrics").text
    assert "evalstop_scores_ingested_total 5.0" in metrics
    assert 'evalstop_stops_enforced_total{target="recording"} 1.0' in metrics
    assert "evalstop_gpu_hours_reclaimed_total 15." in metrics  # 8 GPUs x ~2 h left


def test_batch_gets_the_same_decision_as_singles(api: Api) -> None:
    token = api.tenant("acme")
    job = api.job(token)
    body = {"scores": [{"step": s, "value": v} for s, v in DECLINING]}
    reply = api.post(token, job["id"], body).json()
    assert (reply["accepted"], reply["decision"], reply["stop_step"], reply["n_evals"]) == (5, "stop", 4, 5)
    again = api.post(token, job["id"], body).json()
    assert (again["accepted"], again["duplicates"], again["decided_now"]) == (0, 5, False)
    decisions = api.client.get(f"/v1/jobs/{job['id']}/decisions", headers=api.as_(token)).json()
    assert len(decisions) == 1
    assert decisions[0]["step"] == 4 and decisions[0]["enforced"] and decisions[0]["n_evals"] == 5


def test_scores_are_listed_in_step_order_with_paging(api: Api) -> None:
    token = api.tenant("acme")
    job = api.job(token, detector="never")
    post_curve(api, token, job["id"], DECLINING)
    api.post(token, job["id"], {"step": 1, "value": 3.5, "metric": "loss"})
    url = f"/v1/jobs/{job['id']}/scores"
    rows = api.client.get(url, params={"after_step": 2, "limit": 2}, headers=api.as_(token)).json()
    assert [(r["step"], r["value"]) for r in rows] == [(3, 0.58), (4, 0.57)]
    loss = api.client.get(url, params={"metric": "loss"}, headers=api.as_(token)).json()
    assert [(r["step"], r["value"]) for r in loss] == [(1, 3.5)]


def test_mode_min_is_injected_and_a_conflicting_spec_is_refused(api: Api) -> None:
    token = api.tenant("acme")
    job = api.job(token, mode="min", metric="val_loss")
    assert job["detector"] == "evalstop:mode=min"
    reply = api.post(token, job["id"], {"scores": [{"step": s, "value": v} for s, v in
                                                   [(1, 1.0), (2, 0.8), (3, 0.9), (4, 0.95)]]}).json()
    assert (reply["decision"], reply["best_step"]) == ("stop", 2)
    r = api.client.post("/v1/jobs", json={"external_ref": "x", "target": "recording", "mode": "min",
                                          "detector": "evalstop:mode=max"}, headers=api.as_(token))
    assert r.status_code == 422 and "mode=max" in r.json()["detail"]


@pytest.mark.parametrize(("spec", "fragment"), [("nope", "Unknown detector 'nope'"),
                                                 ("evalstop:k=0", "'k' parameter of KDeclines"),
                                                 ("evalstop:zz=1", "Unknown parameter 'zz'")])
def test_bad_detector_spec_is_422_naming_it(api: Api, spec: str, fragment: str) -> None:
    token = api.tenant("acme")
    r = api.client.post("/v1/jobs", json={"external_ref": "x", "target": "recording", "detector": spec},
                        headers=api.as_(token))
    assert r.status_code == 422 and fragment in r.json()["detail"]


def test_unknown_target_is_422(api: Api) -> None:
    token = api.tenant("acme")
    r = api.client.post("/v1/jobs", json={"external_ref": "x", "target": "nomad"}, headers=api.as_(token))
    assert r.status_code == 422 and "'nomad'" in r.json()["detail"]


def test_job_shadow_mode_records_but_never_enqueues(api: Api) -> None:
    token = api.tenant("acme")
    job = api.job(token, shadow=True)
    replies = post_curve(api, token, job["id"], DECLINING)
    assert replies[3]["decided_now"] and replies[3]["shadow_stop"]
    assert replies[-1]["decision"] == "continue" and replies[-1]["state"] == "running"
    assert "shadow mode" in replies[3]["reason"]
    assert api.ctx.worker.run_once() == 0 and api.adapter().calls == []
    (decision,) = api.client.get(f"/v1/jobs/{job['id']}/decisions", headers=api.as_(token)).json()
    assert decision["shadow"] and not decision["enforced"]


def test_tenant_shadow_mode_is_operator_only_and_applies_to_its_jobs(api: Api) -> None:
    token = api.tenant("acme")
    r = api.client.put("/v1/tenants/acme/shadow", json={"enabled": True}, headers=api.as_(token))
    assert r.status_code == 403
    r = api.client.put("/v1/tenants/acme/shadow", json={"enabled": True}, headers=api.as_(ADMIN))
    assert r.status_code == 200 and r.json()["shadow"] is True
    assert [r.json()] == api.client.get("/v1/tenants", headers=api.as_(ADMIN)).json()  # the whole tenant
    # the domain's reply is the response model's whole shape, not {name, shadow} under its name
    done = domain.set_tenant_shadow(api.ctx.store, "acme", True)
    assert set(done) == set(TenantOut.model_fields) and done["created_at"] > 0
    job = api.job(token)
    replies = post_curve(api, token, job["id"], DECLINING)
    assert replies[-1]["shadow_stop"] and replies[-1]["decision"] == "continue"
    assert api.ctx.worker.run_once() == 0


def test_never_stop_override_suppresses_and_clearing_lets_the_rule_decide(api: Api) -> None:
    token = api.tenant("acme")
    job = api.job(token)
    url = f"/v1/jobs/{job['id']}/override"
    assert api.client.put(url, json={"override": "never_stop"}, headers=api.as_(token)).status_code == 200
    replies = post_curve(api, token, job["id"], DECLINING)
    assert replies[-1]["decision"] == "continue" and "never_stop" in replies[-1]["reason"]
    assert api.client.put(url, json={"override": None}, headers=api.as_(token)).json()["override"] is None
    reply = api.post(token, job["id"], {"step": 6, "value": 0.3}).json()
    assert reply["decided_now"] and reply["decision"] == "stop"


def test_stop_now_override_is_enforced_once_even_in_shadow(api_any_db: Api) -> None:
    api = api_any_db
    token = api.tenant("acme")
    job = api.job(token, shadow=True, grace_period_s=0)
    post_curve(api, token, job["id"], DECLINING[:2])
    url = f"/v1/jobs/{job['id']}/override"
    for _ in range(2):
        r = api.client.put(url, json={"override": "stop_now"}, headers=api.as_(ADMIN))
        assert r.status_code == 200 and r.json()["state"] == "stopping"
    (decision,) = api.client.get(f"/v1/jobs/{job['id']}/decisions", headers=api.as_(ADMIN)).json()
    assert (decision["source"], decision["enforced"], decision["best_checkpoint_uri"]) == (
        "override", True, "s3://ckpt/2")
    assert "operator" in decision["reason"]
    api.ctx.worker.run_once()
    assert api.adapter().effects("signal", "ext-1") == 1
    r = api.client.put(url, json={"override": "never_stop"}, headers=api.as_(token))
    assert r.status_code == 409 and "already stopped" in r.json()["detail"]


def test_health_and_readiness(api: Api) -> None:
    assert api.client.get("/healthz").json() == {"status": "ok"}
    ready = api.client.get("/readyz")
    assert ready.status_code == 200 and ready.json()["checks"] == {"database": "ok"}
