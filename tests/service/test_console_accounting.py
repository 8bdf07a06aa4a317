"""What the savings reports count (issue 22, console items 1 and 11), through the HTTP API and
the console's pages in process: a released job is not reclaimed, a shadow job stopped by hand is
counted once, and a delivered stop's history shows its pin phase."""

from __future__ import annotations

from typing import Any

import pytest

from ._support import ADMIN, Api
from .test_console import sign_in
from .test_controls import DECLINING, failed_stop, scores


def by_tenant(api: Api, report: str) -> dict[str, Any]:
    got = api.client.get(f"/v1/reports/{report}", headers=api.as_(ADMIN)).json()
    return {t["tenant"]: t for t in got}


def test_a_released_job_is_not_reclaimed_and_shows_as_released(api_any_db: Api) -> None:
    api = api_any_db
    token, job = failed_stop(api)
    job_id = job["id"]
    r = api.client.post(f"/v1/jobs/{job_id}/release", json={"reason": "killed it with scancel"},
                        headers=api.as_(token))
    assert r.status_code == 200 and r.json()["state"] == "stopped"
    got = by_tenant(api, "reclaimed")["acme"]
    assert (got["stopped_jobs"], got["gpu_hours"], got["series"], got["released_jobs"]) == (0, 0.0, [], 1)
    sign_in(api.client, ADMIN, "ops")
    listed = api.client.get("/ui/jobs", params={"partial": "rows"}).text
    assert f'data-job-id="{job_id}" class="state-released"' in listed
    assert job_id not in api.client.get("/ui/jobs", params={"partial": "rows", "state": "stopped"}).text
    assert job_id in api.client.get("/ui/jobs", params={"partial": "rows", "state": "released"}).text
    page = api.client.get(f"/ui/jobs/{job_id}").text
    assert 'id="job-state">released<' in page and "killed it with scancel" in page
    assert 'id="released-note"' in page
    savings = api.client.get("/ui/savings").text
    assert 'class="n-released">1<' in savings


def test_a_delivered_stop_is_reclaimed_and_its_history_starts_with_the_pin(api_any_db: Api) -> None:
    api = api_any_db
    token = api.tenant("acme")
    job = api.job(token, gpus=2, expected_duration_s=36_000, grace_period_s=0)
    api.post(token, job["id"], scores(DECLINING))
    api.ctx.worker.run_once()
    history = api.client.get(f"/v1/jobs/{job['id']}/delivery-history", headers=api.as_(token)).json()
    assert [h["phase"] for h in history] == ["queued", "pin", "signal", "reconcile", "done"]
    assert next(c["call"] for c in api.adapter().calls) == "pin_checkpoint"
    got = by_tenant(api, "reclaimed")["acme"]
    assert (got["stopped_jobs"], got["released_jobs"]) == (1, 0)
    assert got["gpu_hours"] == pytest.approx(20.0, abs=0.01)


def test_a_shadow_job_stopped_by_hand_is_counted_once_in_reclaimed(api_any_db: Api) -> None:
    api = api_any_db
    token = api.tenant("acme", shadow=True)
    kept = api.job(token, gpus=4, expected_duration_s=36_000, grace_period_s=0)
    stopped = api.job(token, gpus=8, expected_duration_s=36_000, grace_period_s=0)
    for job in (kept, stopped):
        api.post(token, job["id"], scores(DECLINING))  # the rule fires: shadow decisions
    r = api.client.put(f"/v1/jobs/{stopped['id']}/override", json={"override": "stop_now", "reason": "x"},
                       headers=api.as_(token))
    assert r.status_code == 200
    api.ctx.worker.run_once()
    shadow = by_tenant(api, "shadow")["acme"]
    assert [j["job_id"] for j in shadow["jobs"]] == [kept["id"]]
    assert (shadow["would_stop_jobs"], shadow["reclaimed_jobs"]) == (1, 1)
    assert shadow["gpu_hours"] == pytest.approx(40.0, abs=0.01)
    reclaimed = by_tenant(api, "reclaimed")["acme"]
    assert [j["job_id"] for j in reclaimed["jobs"]] == [stopped["id"]]
    assert reclaimed["gpu_hours"] == pytest.approx(80.0, abs=0.01)


def test_the_api_says_a_job_was_released_beside_its_stopped_state(api_any_db: Api) -> None:
    api = api_any_db
    token = api.tenant("acme", shadow=True)
    released, delivered = (api.job(token, grace_period_s=0, expected_duration_s=36_000) for _ in range(2))
    for job in (released, delivered):
        api.post(token, job["id"], scores(DECLINING))  # shadow decisions
    api.adapter().fail_next("pin_checkpoint", 1, retryable=False)
    for job in (released, delivered):
        r = api.client.put(f"/v1/jobs/{job['id']}/override", json={"override": "stop_now", "reason": "x"},
                           headers=api.as_(token))
        assert r.status_code == 200
        api.ctx.worker.run_once()
    r = api.client.post(f"/v1/jobs/{released['id']}/release", json={"reason": "scancel"},
                        headers=api.as_(token))
    assert (r.json()["state"], r.json()["released"]) == ("stopped", True)
    for job, flag in ((released, True), (delivered, False)):
        got = api.client.get(f"/v1/jobs/{job['id']}", headers=api.as_(token)).json()
        assert (got["state"], got["released"]) == ("stopped", flag)
    listed = {j["id"]: j["released"] for j in api.client.get("/v1/jobs", headers=api.as_(token)).json()}
    assert listed == {released["id"]: True, delivered["id"]: False}
    shadow = by_tenant(api, "shadow")["acme"]
    assert [(j["job_id"], j["state"], j["released"]) for j in shadow["jobs"]] == [
        (released["id"], "stopped", True)]
    assert shadow["reclaimed_jobs"] == 1
    reclaimed = by_tenant(api, "reclaimed")["acme"]
    assert [(j["job_id"], j["released"]) for j in reclaimed["jobs"]] == [(delivered["id"], False)]
    assert reclaimed["released_jobs"] == 1
    fresh = api.job(token)
    assert api.client.get(f"/v1/jobs/{fresh['id']}", headers=api.as_(token)).json()["released"] is False
