"""Bad input: each case gets a clear 4xx naming the problem, nothing is half-written, and the
service keeps serving."""

from __future__ import annotations

import json

import pytest

from ._support import ADMIN, Api

BATCH_1001 = json.dumps({"scores": [{"step": i, "value": 0.5} for i in range(1001)]})


@pytest.mark.parametrize(("body", "status", "names"), [
    ('{"step": 7, "value": NaN}', 422, "value"),
    ('{"step": 7, "value": Infinity}', 422, "value"),
    ('{"step": 7, "value": -Infinity}', 422, "value"),
    ('{"step": -1, "value": 0.5}', 422, "step"),
    ('{"step": 1e30, "value": 0.5}', 422, "step"),
    ('{"step": 7.5, "value": 0.5}', 422, "step"),
    ('{"step": "7", "value": 0.5}', 422, "step"),
    ('{"step": 10000000000000, "value": 0.5}', 422, "scores[0].step"),
    ('{"step": 7}', 422, "value"),
    ('{"step": 7, "value": 0.5, "colour": "red"}', 422, "colour"),
    ('{"step": 7, "value": 0.5, "progress": 1.5}', 422, "progress"),
    ('{"step": 7, "value": ', 422, "JSON decode error"),
    ("[1, 2]", 422, "dictionary"),
    ('{"scores": []}', 422, "at least one score"),
    ('{"scores": [{"step": 7, "value": 0.5}, {"step": 8, "value": NaN}]}', 422, "value"),
    (BATCH_1001, 413, "at most 1000 scores"),
    ('{"step": 3, "value": 0.9}', 409, "step 3 of metric 'score' already has value 0.3"),
    ('{"step": 2, "value": 0.2}', 409, "out of order"),
    ('{"scores": [{"step": 7, "value": 0.5}, {"step": 3, "value": 0.1}]}', 409, "scores[1]: step 3"),
    ('{"scores": [{"step": 7, "value": 0.5}, {"step": 7, "value": 0.6}]}', 409, "scores[1]: step 7"),
])
def test_refused_with_a_message_naming_the_problem_and_nothing_written(
    api: Api, body: str, status: int, names: str
) -> None:
    token = api.tenant("acme")
    job = api.job(token)
    assert api.post(token, job["id"], {"scores": [{"step": 1, "value": 0.1}, {"step": 3, "value": 0.3}]}
                    ).status_code == 200
    headers = {**api.as_(token), "content-type": "application/json"}
    r = api.client.post(f"/v1/jobs/{job['id']}/scores", content=body, headers=headers)
    assert r.status_code == status, r.text
    assert names in r.text
    rows = api.client.get(f"/v1/jobs/{job['id']}/scores", headers=api.as_(token)).json()
    assert [(s["step"], s["value"]) for s in rows] == [(1, 0.1), (3, 0.3)]
    # and the service keeps serving
    ok = api.post(token, job["id"], {"step": 9, "value": 0.2})
    assert ok.status_code == 200 and ok.json()["accepted"] == 1


def test_oversized_body_is_413_with_or_without_content_length(api: Api) -> None:
    token = api.tenant("acme")
    job = api.job(token)
    big = b'{"scores": [' + b",".join([b'{"step": 1, "value": 0.5}'] * 60_000) + b"]}"
    url = f"/v1/jobs/{job['id']}/scores"
    headers = {**api.as_(token), "content-type": "application/json"}
    r = api.client.post(url, content=big, headers=headers)
    assert r.status_code == 413 and "larger than 1048576 bytes" in r.text

    def chunks() -> object:
        for i in range(0, len(big), 65536):
            yield big[i:i + 65536]

    r = api.client.post(url, content=chunks(), headers=headers)  # type: ignore[arg-type]
    assert r.status_code == 413
    assert api.client.get("/healthz").status_code == 200


def test_unknown_job_is_404(api: Api) -> None:
    token = api.tenant("acme")
    r = api.post(token, "0" * 32, {"step": 1, "value": 0.5})
    assert r.status_code == 404 and "'00000000000000000000000000000000' not found" in r.text


@pytest.mark.parametrize(("field", "value"), [("grace_period_s", -1), ("gpus", 0), ("mode", "up"),
                                              ("target", "bad name!"), ("external_ref", "")])
def test_bad_registration_is_422_naming_the_field(api: Api, field: str, value: object) -> None:
    token = api.tenant("acme")
    body = {"external_ref": "x", "target": "recording", field: value}
    r = api.client.post("/v1/jobs", json=body, headers=api.as_(token))
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", field]


@pytest.mark.parametrize("content_type", [None, "application/x-www-form-urlencoded", "text/plain"])
def test_a_body_that_is_not_json_is_415_saying_so(api: Api, content_type: str | None) -> None:
    headers = api.as_(ADMIN) | ({"content-type": content_type} if content_type else {})
    r = api.client.post("/v1/tenants", content='{"name": "acme"}', headers=headers)
    assert r.status_code == 415 and "Content-Type: application/json" in r.json()["detail"]
