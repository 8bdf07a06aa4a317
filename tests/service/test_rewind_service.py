"""Rewind instead of stop in the service (issue 23, item 3): the policy per job with a tenant
default, the ``rewind`` score reply, attempts, and the decision log."""

from __future__ import annotations

import json
from typing import Any

import sqlalchemy as sa
from fastapi.testclient import TestClient

from evalstop.detectors import Monitor
from evalstop.service.app import create_app
from evalstop.service.store.tables import jobs, rewound_scores

from ._support import ADMIN, Api, make_settings

REWIND = {"on_detect": "rewind", "correction": "kl_coef*=2"}


def _steps(api: Api, token: str, job_id: str, *pairs: tuple[int, float], attempt: int | None = None) -> Any:
    last = None
    for step, value in pairs:
        body: dict[str, Any] = {"step": step, "value": value, "checkpoint_uri": f"s3://c/{step}"}
        if attempt is not None:
            body["attempt"] = attempt
        last = api.post(token, job_id, body)
        assert last.status_code == 200, last.text
    return last.json()


def _monitor(api: Api, job_id: str) -> Monitor:
    with api.ctx.store.reading() as conn:
        state = conn.execute(sa.select(jobs.c.monitor_state).where(jobs.c.id == job_id)).scalar_one()
    return Monitor.from_json(state if isinstance(state, dict) else json.loads(state))


def test_a_detection_rewinds_then_the_next_one_stops(api_any_db: Api) -> None:
    api = api_any_db
    token = api.tenant("acme")
    job = api.job(token, **REWIND)
    assert job["on_detect"] == {"on_detect": "rewind", "max_rewinds": 1, "correction": "kl_coef*=2"}
    reply = _steps(api, token, job["id"], (1, 0.5), (2, 0.7), (3, 0.6))
    assert (reply["decision"], reply["attempt"], reply["rewind"]) == ("continue", 0, None)
    reply = _steps(api, token, job["id"], (4, 0.5))  # k=2: the second decline fires the rule
    assert reply["decision"] == "rewind" and reply["decided_now"] and reply["state"] == "running"
    assert reply["attempt"] == 1
    assert reply["rewind"] == {"number": 1, "attempt": 1, "step": 4, "to_step": 2, "checkpoint_uri": "s3://c/2",
                               "correction": "kl_coef*=2", "reason": reply["rewind"]["reason"],
                               "resubmit": False}
    # the new attempt continues from step 2: steps 3 and 4 again, with other values, are new evals
    reply = _steps(api, token, job["id"], (3, 0.8), (4, 0.75), attempt=1)
    assert (reply["decision"], reply["accepted"], reply["best_step"]) == ("continue", 1, 3)
    # a late post of the first attempt is not stored; its reply repeats the rewind
    late = _steps(api, token, job["id"], (5, 0.1), attempt=0)
    assert (late["decision"], late["accepted"], late["duplicates"]) == ("rewind", 0, 1)
    assert late["rewind"]["checkpoint_uri"] == "s3://c/2"
    # a duplicate of the new attempt is a no-op, as always
    again = _steps(api, token, job["id"], (4, 0.75), attempt=1)
    assert (again["decision"], again["duplicates"]) == ("continue", 1)
    reply = _steps(api, token, job["id"], (5, 0.7), attempt=1)  # the rewind is used up: a stop
    got = (reply["decision"], reply["state"], reply["stop_step"], reply["best_step"])
    assert got == ("stop", "stopping", 5, 3)
    assert reply["best_checkpoint_uri"] == "s3://c/3"

    scores = api.client.get(f"/v1/jobs/{job['id']}/scores", headers=api.as_(token)).json()
    assert [(s["step"], s["value"]) for s in scores] == [(1, 0.5), (2, 0.7), (3, 0.8), (4, 0.75), (5, 0.7)]
    with api.ctx.store.reading() as conn:
        r = rewound_scores.c
        moved = conn.execute(sa.select(r.step, r.value, r.attempt).where(r.job_id == job["id"])
                             .order_by(r.step)).all()
    assert [tuple(m) for m in moved] == [(3, 0.6, 0), (4, 0.5, 0)]
    decisions = api.client.get(f"/v1/jobs/{job['id']}/decisions", headers=api.as_(token)).json()
    assert [(d["source"], d["decision"], d["step"], d["best_step"], d["best_checkpoint_uri"], d["correction"])
            for d in decisions] == [("rewind-1", "rewind", 4, 2, "s3://c/2", "kl_coef*=2"),
                                    ("detector", "stop", 5, 3, "s3://c/3", None)]
    log = _monitor(api, job["id"]).log
    assert [e["event"] for e in log] == ["detect", "rewind", "detect", "stop"]
    assert log[1]["checkpoint"] == "s3://c/2" and log[1]["correction"] == "kl_coef*=2"
    states = api.client.get(f"/v1/jobs/{job['id']}", headers=api.as_(token)).json()
    assert states["state"] == "stopping" and len(states["deliveries"]) == 1  # one stop, no resubmission


def test_a_score_of_a_later_attempt_is_refused(api: Api) -> None:
    token = api.tenant("acme")
    job = api.job(token, **REWIND)
    r = api.post(token, job["id"], {"step": 1, "value": 0.5, "attempt": 1})
    assert r.status_code == 409 and "scores[0].attempt 1" in r.json()["detail"]


def test_the_tenant_default_policy(api: Api) -> None:
    token, other = api.tenant("acme"), api.tenant("beta")
    policy = {"on_detect": "rewind", "max_rewinds": 2, "correction": "lr*=0.5"}
    r = api.client.put("/v1/tenants/acme/on_detect", json={"on_detect": policy}, headers=api.as_(token))
    assert r.status_code == 403
    r = api.client.put("/v1/tenants/acme/on_detect", json={"on_detect": policy}, headers=api.as_(ADMIN))
    assert r.status_code == 200 and r.json()["on_detect"] == policy
    assert api.client.get("/v1/tenants/acme/on_detect", headers=api.as_(token)).json()["on_detect"] == policy
    assert api.client.get("/v1/tenants/acme/on_detect", headers=api.as_(other)).status_code == 404
    assert api.job(token)["on_detect"] == policy  # the job names none: the tenant's default
    assert api.job(token, correction="kl_coef=0.1")["on_detect"] == {**policy, "correction": "kl_coef=0.1"}
    reset = api.job(token, correction="ref=best,kl_coef*=2")["on_detect"]  # the reference reset
    assert reset == {**policy, "correction": "ref=best,kl_coef*=2"}
    assert api.job(token, on_detect="stop")["on_detect"] == {"on_detect": "stop", "max_rewinds": 2,
                                                             "correction": ""}
    assert api.job(other)["on_detect"] == {"on_detect": "stop", "max_rewinds": 1, "correction": ""}
    too_many = {**policy, "max_rewinds": 9}
    r = api.client.put("/v1/tenants/acme/on_detect", json={"on_detect": too_many}, headers=api.as_(ADMIN))
    assert r.status_code == 422 and "max_rewinds: 9 is over the service's limit of 3" in r.text


def test_bad_policies_are_422_naming_the_parameter_and_value(api: Api) -> None:
    token = api.tenant("acme")
    cases = [({"on_detect": "rewind", "correction": "temp=2"}, "'temp=2'"),
             ({"on_detect": "rewind", "correction": "ref=init"}, "'ref=init'"),
             ({"on_detect": "rewind", "max_rewinds": 4, "correction": "lr*=0.5"}, "max_rewinds: 4"),
             ({"on_detect": "rewind"}, "'correction' parameter"),
             ({"on_detect": "stop", "correction": "lr*=0.5"}, "'correction' parameter"),
             ({"on_detect": "pause"}, "on_detect")]
    for body, named in cases:
        payload = {"external_ref": "x-1", "target": "recording", **body}
        r = api.client.post("/v1/jobs", json=payload, headers=api.as_(token))
        assert r.status_code == 422 and named in r.text, (body, r.text)
    assert api.client.get("/v1/jobs", headers=api.as_(token)).json() == []  # nothing registered


def test_a_shadow_job_records_the_rewind_and_goes_on(api: Api) -> None:
    token = api.tenant("acme")
    job = api.job(token, shadow=True, **REWIND)
    reply = _steps(api, token, job["id"], (1, 0.5), (2, 0.7), (3, 0.6), (4, 0.5))
    assert (reply["decision"], reply["decided_now"], reply["attempt"]) == ("continue", True, 0)
    assert "rewind recorded, not enforced" in reply["reason"]
    decisions = api.client.get(f"/v1/jobs/{job['id']}/decisions", headers=api.as_(token)).json()
    assert [(d["decision"], d["shadow"], d["enforced"]) for d in decisions] == [("rewind", True, False)]


def test_the_fast_lane_and_the_route_give_the_same_rewind_replies(api: Api) -> None:
    token = api.tenant("acme")
    fast, slow = api.job(token, **REWIND)["id"], api.job(token, **REWIND)["id"]
    bodies: list[Any] = [{"step": 1, "value": 0.5, "checkpoint_uri": "s3://c/1"},
                         {"scores": [{"step": 2, "value": 0.7, "checkpoint_uri": "s3://c/2"},
                                     {"step": 3, "value": 0.6}, {"step": 4, "value": 0.5}]},  # rewind
                         {"step": 3, "value": 0.9, "attempt": 1}, {"step": 5, "value": 0.2, "attempt": 0},
                         {"step": 4, "value": 0.9, "attempt": 2}, {"step": 4, "value": 0.8, "attempt": 1},
                         {"step": 5, "value": 0.7}]
    replies = []
    for body in bodies:
        a = api.client.post(f"/v1/jobs/{fast}/scores", json=body, headers=api.as_(token))
        b = api.client.post(f"/v1/jobs/{slow}/scores", content=json.dumps(body),
                            headers=api.as_(token) | {"content-type": "application/vnd.evalstop+json"})
        assert a.status_code == b.status_code, body
        assert a.json() == (b.json() | {"job_id": fast} if b.status_code == 200 else b.json()), body
        replies.append(a.json().get("decision"))
    assert replies == ["continue", "rewind", "continue", "rewind", None, "continue", "stop"]


def test_a_batch_written_in_units_does_not_start_the_next_attempt(sqlite_url: str) -> None:
    """On SQLite a batch is written in units (here of 2): the scores after the detection, in
    later units, belong to the rewound attempt, as they would in one unit."""
    with TestClient(create_app(make_settings(sqlite_url, ingest_chunk=2))) as client:
        api = Api(client)
        token = api.tenant("acme")
        job = api.job(token, **REWIND)
        batch = {"scores": [{"step": s, "value": v, "checkpoint_uri": f"s3://c/{s}"}
                            for s, v in [(1, 0.5), (2, 0.7), (3, 0.6), (4, 0.5), (5, 0.9), (6, 0.95)]]}
        reply = api.post(token, job["id"], batch).json()
        got = (reply["decision"], reply["accepted"], reply["duplicates"], reply["attempt"])
        assert got == ("rewind", 4, 2, 1)
        assert reply["rewind"]["to_step"] == 2 and reply["best_step"] == 2
        scores = api.client.get(f"/v1/jobs/{job['id']}/scores", headers=api.as_(token)).json()
        assert [s["step"] for s in scores] == [1, 2]
        assert _steps(api, token, job["id"], (3, 0.8), attempt=1)["decision"] == "continue"
