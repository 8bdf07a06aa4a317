"""Issue 20, the service part: a job's eval cadence, the ``next_eval`` hint of the score reply,
and the optional per-eval ``score_stderr`` (stored, read back, passed to the rule)."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from evalstop.detectors import Eval, Monitor
from evalstop.service import fastpath

from ._support import Api
from .test_fastpath import ROUTE_ONLY, _post

ADAPTIVE = "adaptive:every=3,dense=1"


def _hint(r: Any) -> Any:
    assert r.status_code == 200, r.text
    return r.json()["next_eval"]


def test_the_reply_carries_the_monitors_hint(api_any_db: Api) -> None:
    api = api_any_db
    token = api.tenant("acme")
    job = api.job(token, cadence="adaptive:every=3", eval_interval=10)
    assert (job["cadence"], job["eval_interval"]) == (ADAPTIVE, 10)  # stored in its full form
    local = Monitor("evalstop:k=2", ADAPTIVE, 10)
    assert local.next_eval().to_dict() == {"after": 3, "step": 30, "elevated": False, "done": False}
    # the rise is sparse; the first decline is elevated evidence: the next opportunity is asked for
    seen = []
    for step, value in [(30, 0.5), (60, 0.7), (90, 0.6)]:
        hint = _hint(api.post(token, job["id"], {"step": step, "value": value}))
        local.observe(Eval(step, value))
        assert hint == local.next_eval().to_dict()
        seen.append((hint["after"], hint["step"], hint["elevated"]))
    assert seen == [(3, 60, False), (3, 90, False), (1, 100, True)]
    r = api.post(token, job["id"], {"step": 100, "value": 0.55})  # the second decline: k=2 fires
    assert r.json()["decision"] == "stop" and r.json()["next_eval"] is None  # decided: no hint
    got = api.client.get(f"/v1/jobs/{job['id']}", headers=api.as_(token)).json()
    assert (got["cadence"], got["eval_interval"]) == (ADAPTIVE, 10)


def test_default_cadence_and_a_batch_reply(api: Api) -> None:
    token = api.tenant("acme")
    job = api.job(token)
    assert (job["cadence"], job["eval_interval"]) == ("every:n=1", None)
    r = api.post(token, job["id"], {"scores": [{"step": 1, "value": 0.2}, {"step": 2, "value": 0.3}]})
    assert _hint(r) == {"after": 1, "step": None, "elevated": False, "done": False}
    r = api.post(token, job["id"], {"step": 3, "value": 0.25})
    assert _hint(r) == {"after": 1, "step": None, "elevated": True, "done": False}


def test_a_shadow_stop_says_done(api: Api) -> None:
    token = api.tenant("acme", shadow=True)
    job = api.job(token, cadence="every:2", eval_interval=5)
    for step, value in [(10, 0.5), (20, 0.4)]:
        api.post(token, job["id"], {"step": step, "value": value})
    r = api.post(token, job["id"], {"step": 30, "value": 0.3})
    body = r.json()
    assert body["decision"] == "continue" and body["shadow_stop"]  # recorded, not enforced
    assert body["next_eval"] == {"after": 2, "step": 40, "elevated": True, "done": True}


@pytest.mark.parametrize(("field", "value", "message"), [
    ("cadence", "often", "cadence: Unknown cadence 'often'"),
    ("cadence", "adaptive:every=2,dense=3", "'dense' parameter of Adaptive must be <= every=2. Got 3"),
    ("cadence", "every:0", "'n' parameter of Every"),
    ("cadence", "every:x", "'n' parameter of cadence 'every' must be an int. Got 'x'"),
    ("eval_interval", 0, "eval_interval"),
    ("eval_interval", 2.5, "eval_interval"),
    ("eval_interval", "10", "eval_interval"),
])
def test_a_bad_cadence_is_a_422_naming_it(api: Api, field: str, value: Any, message: str) -> None:
    token = api.tenant("acme")
    body = {"external_ref": "x-1", "target": "recording", field: value}
    r = api.client.post("/v1/jobs", json=body, headers=api.as_(token))
    assert r.status_code == 422 and message in r.text, r.text
    assert api.client.get("/v1/jobs", headers=api.as_(token)).json() == []  # nothing registered


def test_score_stderr_is_stored_and_reaches_the_rule(api_any_db: Api) -> None:
    """cusum reads an eval's own standard error as its noise: 0.02 drops are 20 standard errors."""
    api = api_any_db
    token = api.tenant("acme")
    curve = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.58, 0.56, 0.54]
    with_se, without = (api.job(token, detector="cusum:n_warmup_evals=1")["id"] for _ in range(2))
    local = Monitor("cusum:n_warmup_evals=1")
    stops = {}
    for job, se in ((with_se, 0.001), (without, None)):
        for step, value in enumerate(curve, start=1):
            extra = {} if se is None else {"score_stderr": se}
            body = api.post(token, job, {"step": step, "value": value, **extra}).json()
            if job == with_se:
                local.observe(Eval(step, value, stderr=se))
            if body["decision"] == "stop":
                stops[job] = body["stop_step"]
                break
    assert stops.get(with_se) == local.verdict.stop_step == 7
    assert stops.get(without) != 7  # unchanged where no stderr is given
    rows = api.client.get(f"/v1/jobs/{with_se}/scores", headers=api.as_(token)).json()
    assert [r["score_stderr"] for r in rows] == [0.001] * 7
    rows = api.client.get(f"/v1/jobs/{without}/scores", headers=api.as_(token)).json()
    assert {r["score_stderr"] for r in rows} == {None}


@pytest.mark.parametrize("bad", [-0.1, "0.1", True, math.inf])
def test_a_bad_score_stderr_is_refused_naming_it(api: Api, bad: Any) -> None:
    token = api.tenant("acme")
    job = api.job(token)["id"]
    for body in ({"step": 1, "value": 0.5, "score_stderr": bad},
                 {"scores": [{"step": 1, "value": 0.5}, {"step": 2, "value": 0.5, "score_stderr": bad}]}):
        r = api.client.post(f"/v1/jobs/{job}/scores", content=json.dumps(body),
                            headers=api.as_(token) | {"content-type": "application/json"})
        assert r.status_code in (400, 422) and ("score_stderr" in r.text or bad == math.inf), r.text
    rows = api.client.get(f"/v1/jobs/{job}/scores", headers=api.as_(token)).json()
    assert rows == []  # nothing of the batch is stored


def test_the_fast_lane_and_the_route_reply_byte_for_byte(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    original = fastpath.ingest_reply

    async def counting(ctx: Any, job_id: str, *args: Any) -> Any:
        calls.append(job_id)
        return await original(ctx, job_id, *args)

    monkeypatch.setattr(fastpath, "ingest_reply", counting)
    token = api.tenant("acme")
    fast, slow = (api.job(token, cadence=ADAPTIVE, eval_interval=7)["id"] for _ in range(2))
    bodies: list[Any] = [
        {"step": 7, "value": 0.5, "score_stderr": 0.01},
        {"scores": [{"step": 14, "value": 0.7}, {"step": 21, "value": 0.6, "score_stderr": 0.0}]},
        {"step": 28, "value": 0.4, "score_stderr": -1.0},  # 422 naming the field
        {"step": 28, "value": 0.55},  # the second decline: a stop, no hint
    ]
    replies = []
    for body in bodies:
        a = _post(api, token, fast, body, "application/json")
        b = _post(api, token, slow, body, ROUTE_ONLY)
        assert a.status_code == b.status_code
        assert a.content == b.content.replace(slow.encode(), fast.encode()), body
        replies.append(a.content)
    assert set(calls) == {fast}
    assert b'"next_eval":{"after":1,"step":28,"elevated":true,"done":false}' in replies[1]
    assert b'"next_eval":null,' in replies[-1]


def test_a_big_batch_stores_each_stderr(api_any_db: Api) -> None:
    """Over 50 scores PostgreSQL writes with COPY: the new column travels that way too."""
    api = api_any_db
    token = api.tenant("acme")
    job = api.job(token, detector="cusum")["id"]
    items = [{"step": s, "value": 0.01 * s, **({"score_stderr": 0.001 * s} if s % 2 else {})}
             for s in range(1, 121)]
    r = api.post(token, job, {"scores": items})
    assert r.status_code == 200 and r.json()["accepted"] == 120, r.text
    rows = api.client.get(f"/v1/jobs/{job}/scores?limit=1000", headers=api.as_(token)).json()
    assert [r["score_stderr"] for r in rows] == [0.001 * s if s % 2 else None for s in range(1, 121)]


@pytest.mark.parametrize(("cadence", "interval"), [
    (None, None), ("every:4", 5), ("adaptive:every=3,dense=1", 10), ("adaptive:every=2", None)])
def test_the_registration_reply_carries_the_first_hint(
    api: Api, cadence: str | None, interval: int | None,
) -> None:
    """A client can ask for its first eval: the reply to the registration carries the fresh
    monitor's hint, the same field the score replies carry (issue 20 loose end)."""
    token = api.tenant("acme")
    body: dict[str, Any] = {} if cadence is None else {"cadence": cadence, "eval_interval": interval}
    job = api.job(token, **body)
    fresh = Monitor("evalstop:k=2", cadence or "every:1", interval)
    assert job["next_eval"] == fresh.next_eval().to_dict()
    assert job["next_eval"]["step"] == (None if interval is None else fresh.cadence.first * interval)
    assert "next_eval" not in api.client.get(f"/v1/jobs/{job['id']}", headers=api.as_(token)).json()
