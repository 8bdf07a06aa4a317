"""Audit trail, delivery history, stop retry and the savings reports, through the HTTP API."""

from __future__ import annotations

import time
from typing import Any

import pytest

from evalstop.service.reports import gpu_hours_saved

from ._support import ADMIN, Api

DECLINING = [(1, 0.50), (2, 0.61), (3, 0.58), (4, 0.57)]  # k=2 fires at step 4


def scores(curve: list[tuple[int, float]]) -> dict[str, list[dict[str, float]]]:
    return {"scores": [{"step": s, "value": v} for s, v in curve]}


def test_overrides_through_the_api_are_audited(api: Api) -> None:
    token = api.tenant("acme")
    job = api.job(token)
    url = f"/v1/jobs/{job['id']}"
    assert api.client.put(f"{url}/override", json={"override": "never_stop", "reason": "eval is broken"},
                          headers=api.as_(token)).status_code == 200
    cleared = api.client.put(f"{url}/override", json={"override": None}, headers=api.as_(ADMIN))
    assert cleared.status_code == 200
    r = api.client.put(f"{url}/override", json={"override": "stop_now", "reason": "x" * 1001},
                       headers=api.as_(token))
    assert r.status_code == 422  # refused: not recorded
    trail = api.client.get(f"{url}/audit", headers=api.as_(token)).json()
    assert [(a["principal"], a["action"], a["reason"], a["channel"]) for a in trail] == [
        ("tenant:acme", "never_stop", "eval is broken", "api"), ("operator", "resume", "", "api")]
    other = api.tenant("other")
    assert api.client.get(f"{url}/audit", headers=api.as_(other)).status_code == 404


def failed_stop(api: Api) -> tuple[str, dict[str, Any]]:
    """A tenant's token and its job whose stop failed for good (a permanent pin error)."""
    token = api.tenant("acme")
    job = api.job(token, grace_period_s=0)
    api.adapter().fail_next("pin_checkpoint", 1, retryable=False)
    api.post(token, job["id"], scores(DECLINING))
    api.ctx.worker.run_once()
    return token, job


def test_a_failed_stop_has_its_errors_in_the_history_and_can_be_retried(api_any_db: Api) -> None:
    api = api_any_db
    token, job = failed_stop(api)
    url = f"/v1/jobs/{job['id']}"
    assert api.client.get(url, headers=api.as_(token)).json()["state"] == "stop_failed"
    other = api.tenant("other")
    assert api.client.post(f"{url}/retry-stop", json={}, headers=api.as_(other)).status_code == 404
    r = api.client.post(f"{url}/retry-stop", json={"reason": "adapter fixed"}, headers=api.as_(token))
    assert r.status_code == 200 and r.json()["state"] == "stopping"
    again = api.client.post(f"{url}/retry-stop", json={}, headers=api.as_(token))
    assert again.status_code == 409 and "stop_failed" in again.json()["detail"]
    api.ctx.worker.run_once()
    assert api.client.get(url, headers=api.as_(token)).json()["state"] == "stopped"
    history = api.client.get(f"{url}/delivery-history", headers=api.as_(token)).json()
    phases = [h["phase"] for h in history]
    assert phases == ["queued", "pin", "failed", "retry", "pin", "signal", "reconcile", "done"]
    assert "in pin: AdapterError" in history[2]["error"]
    trail = api.client.get(f"{url}/audit", headers=api.as_(token)).json()
    assert [(a["action"], a["reason"]) for a in trail] == [("retry_stop", "adapter fixed")]


def test_retryable_errors_show_each_attempt(api: Api) -> None:
    token = api.tenant("acme")
    job = api.job(token, grace_period_s=0)
    api.adapter().fail_next("signal", 2)
    api.post(token, job["id"], scores(DECLINING))
    for _ in range(50):
        api.ctx.worker.run_once()
        if api.client.get(f"/v1/jobs/{job['id']}", headers=api.as_(token)).json()["state"] == "stopped":
            break
        time.sleep(0.02)  # backoff is 0.01-0.05 s in the test settings
    history = api.client.get(f"/v1/jobs/{job['id']}/delivery-history", headers=api.as_(token)).json()
    errors = [(h["phase"], h["attempts"]) for h in history if h["error"]]
    assert errors == [("signal", 1), ("signal", 2)]
    assert [h["phase"] for h in history][-1] == "done"


def test_gpu_hours_saved_definitions() -> None:
    assert gpu_hours_saved(8, 0.0, 7200.0, 3600.0, None) == (8.0, "expected_duration")
    assert gpu_hours_saved(8, 0.0, 3600.0, 7200.0, None) == (0.0, "expected_duration")  # past its end
    assert gpu_hours_saved(2, 0.0, None, 1000.0, 1000.0 + 1800.0) == (1.0, "lower_bound")
    assert gpu_hours_saved(2, 0.0, None, 1000.0, None) == (0.0, "lower_bound")


def test_shadow_and_reclaimed_reports_are_scoped_per_tenant(api_any_db: Api) -> None:
    api = api_any_db
    shadowed = api.tenant("shadowed", shadow=True)
    live = api.tenant("live")
    a = api.job(shadowed, gpus=4, expected_duration_s=36_000)
    b = api.job(shadowed, gpus=2)
    c = api.job(live, gpus=8, expected_duration_s=36_000, grace_period_s=0)
    for job, token in ((a, shadowed), (b, shadowed), (c, live)):
        api.post(token, job["id"], scores(DECLINING))
    api.post(shadowed, b["id"], {"step": 5, "value": 0.1})  # seen running after the shadow decision
    api.ctx.worker.run_once()
    report = {t["tenant"]: t for t in api.client.get("/v1/reports/shadow", headers=api.as_(ADMIN)).json()}
    assert set(report) == {"live", "shadowed"}
    assert (report["shadowed"]["would_stop_jobs"], report["live"]["would_stop_jobs"]) == (2, 0)
    jobs = {j["job_id"]: j for j in report["shadowed"]["jobs"]}
    assert jobs[a["id"]]["basis"] == "expected_duration"
    assert jobs[a["id"]]["gpu_hours"] == pytest.approx(40.0, abs=0.01)  # 4 GPUs x ~10 h left
    assert jobs[b["id"]]["basis"] == "lower_bound" and jobs[b["id"]]["gpu_hours"] >= 0
    assert report["shadowed"]["lower_bound_jobs"] == 1
    assert report["shadowed"]["gpu_hours"] == pytest.approx(sum(j["gpu_hours"] for j in jobs.values()))
    own = api.client.get("/v1/reports/shadow", headers=api.as_(live)).json()
    assert [t["tenant"] for t in own] == ["live"]
    got = api.client.get("/v1/reports/reclaimed", headers=api.as_(ADMIN)).json()
    reclaimed = {t["tenant"]: t for t in got}
    assert reclaimed["live"]["stopped_jobs"] == 1 and reclaimed["shadowed"]["stopped_jobs"] == 0
    assert reclaimed["live"]["gpu_hours"] == pytest.approx(80.0, abs=0.01)
    assert [p["gpu_hours"] for p in reclaimed["live"]["series"]] == [reclaimed["live"]["gpu_hours"]]


def test_a_job_whose_stop_failed_can_be_released_and_its_reference_reused(api_any_db: Api) -> None:
    api = api_any_db
    token, job = failed_stop(api)
    url = f"/v1/jobs/{job['id']}"
    again = {"external_ref": job["external_ref"], "target": "recording"}
    taken = api.client.post("/v1/jobs", json=again, headers=api.as_(token))
    assert taken.status_code == 409  # a stop_failed job still holds its reference
    other = api.tenant("other")
    assert api.client.post(f"{url}/release", json={}, headers=api.as_(other)).status_code == 404
    r = api.client.post(f"{url}/release", json={"reason": "killed by hand"}, headers=api.as_(token))
    assert r.status_code == 200 and r.json()["state"] == "stopped"
    twice = api.client.post(f"{url}/release", json={}, headers=api.as_(token))
    assert twice.status_code == 409 and "stop_failed" in twice.json()["detail"]
    assert api.client.post("/v1/jobs", json=again, headers=api.as_(token)).status_code == 201
    trail = api.client.get(f"{url}/audit", headers=api.as_(token)).json()
    assert [(a["action"], a["reason"]) for a in trail] == [("release", "killed by hand")]


def test_a_shadow_rewind_is_counted_apart_from_would_have_stopped(api_any_db: Api) -> None:
    """A shadow job under a rewind policy: its rule's shadow decision is a rewind, not a stop,
    so it is in ``would_rewind_jobs``/``rewinds`` and not in ``would_stop_jobs`` or the GPU-hours."""
    api = api_any_db
    token = api.tenant("acme", shadow=True)
    stop = api.job(token, gpus=4, expected_duration_s=36_000)
    rewind = api.job(token, gpus=4, expected_duration_s=36_000, on_detect="rewind", correction="kl_coef*=2")
    for job in (stop, rewind):
        api.post(token, job["id"], scores(DECLINING))
    (decision,) = api.client.get(f"/v1/jobs/{rewind['id']}/decisions", headers=api.as_(token)).json()
    assert (decision["decision"], decision["shadow"]) == ("rewind", True)
    (report,) = api.client.get("/v1/reports/shadow", headers=api.as_(token)).json()
    assert [j["job_id"] for j in report["jobs"]] == [stop["id"]] and report["would_stop_jobs"] == 1
    assert report["gpu_hours"] == pytest.approx(40.0, abs=0.01)  # the stop's 4 GPUs x ~10 h, not 80
    assert report["would_rewind_jobs"] == 1
    (entry,) = report["rewinds"]
    assert (entry["job_id"], entry["step"], entry["state"]) == (rewind["id"], 4, "running")
