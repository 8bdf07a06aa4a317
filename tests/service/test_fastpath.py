"""The fast lane for POST /v1/jobs/{id}/scores answers exactly as the FastAPI route does, and
stands aside (the route answers) for anything but the ordinary case."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from evalstop.service import fastpath
from evalstop.service.app import create_app
from evalstop.service.store import open_store

from ._support import ADMIN, Api, make_settings

# application/...+json is JSON to FastAPI but not to the fast lane: the route answers it.
ROUTE_ONLY = "application/vnd.evalstop+json"
BODIES: list[Any] = [
    {"step": 1, "value": 0.5, "checkpoint_uri": "s3://c/1"},
    {"scores": [{"step": 2, "value": 0.7, "checkpoint_uri": "s3://c/2"}, {"step": 3, "value": 0.6}]},
    {"step": 3, "value": 0.6},  # a duplicate: a no-op
    {"step": 3, "value": 0.9},  # a changed value: 409
    {"step": 2, "value": 0.1},  # out of order: 409
    {"step": 4, "value": 0.5},  # the second decline: k=2 fires, the stop is decided
    {"step": 5, "value": float("nan")},  # not JSON: both lanes refuse it the same way
    {"step": -1, "value": 0.5},  # 422 naming the field
    {"step": 5, "value": 0.4, "extra": 1},  # unknown field: 422
    {"scores": []},  # nothing to store: 422
]


@pytest.fixture
def lane_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []
    original = fastpath.ingest_reply

    async def counting(ctx: Any, job_id: str, *args: Any) -> Any:
        calls.append(job_id)
        return await original(ctx, job_id, *args)

    monkeypatch.setattr(fastpath, "ingest_reply", counting)
    return calls


def _post(api: Api, token: str, job_id: str, body: Any, content_type: str) -> Any:
    data = json.dumps(body)  # allows NaN, as a careless client would send it
    headers = api.as_(token) | {"content-type": content_type}
    return api.client.post(f"/v1/jobs/{job_id}/scores", content=data, headers=headers)


def test_the_fast_lane_and_the_route_give_the_same_replies(api: Api, lane_calls: list[str]) -> None:
    token = api.tenant("acme")
    fast, slow = api.job(token)["id"], api.job(token)["id"]
    for body in BODIES:
        a = _post(api, token, fast, body, "application/json")
        b = _post(api, token, slow, body, ROUTE_ONLY)
        assert (a.status_code, a.headers["content-type"]) == (b.status_code, b.headers["content-type"])
        expected = b.json() | {"job_id": fast} if b.status_code == 200 else b.json()
        assert a.json() == expected, body
    assert set(lane_calls) == {fast}  # the lane answered the ordinary requests of one job only
    for job in (fast, slow):
        decisions = api.client.get(f"/v1/jobs/{job}/decisions", headers=api.as_(token)).json()
        assert [d["step"] for d in decisions] == [4]


def test_unknown_or_missing_tokens_and_other_tenants_get_the_routes_answers(
    api: Api, lane_calls: list[str]
) -> None:
    acme, other = api.tenant("acme"), api.tenant("other")
    job = api.job(acme)["id"]
    replies = []
    for token in ("", "not-a-token"):  # the route answers the first, the lane the unknown token
        r = _post(api, token, job, {"step": 1, "value": 0.5}, "application/json")
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
        replies.append(r.json())
    assert replies[0] == replies[1]
    api.ctx.forget_all()  # other's token not known to the replica: the lane looks it up itself
    for _ in range(2):
        r = _post(api, other, job, {"step": 1, "value": 0.5}, "application/json")
        assert r.status_code == 404 and r.json() == {"detail": f"Job {job!r} not found."}
    assert lane_calls == [job, job]


def test_an_operator_is_served_by_the_lane(api: Api, lane_calls: list[str]) -> None:
    job = api.job(api.tenant("acme"))["id"]
    r = _post(api, ADMIN, job, {"step": 1, "value": 0.5}, "application/json")
    assert r.status_code == 200 and r.json()["accepted"] == 1 and lane_calls == [job]


def test_a_cancelled_submission_never_runs(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'c.db'}")
    assert store.committer is not None
    started, gate, ran = threading.Event(), threading.Event(), []
    first = store.committer.submit(lambda conn: started.set() or gate.wait(5))  # holds the committer
    assert started.wait(5)
    second = store.committer.submit(lambda conn: ran.append(1))
    assert second.cancel()
    gate.set()
    assert first.result(5) is True and ran == []
    store.dispose()


def test_write_async_without_group_commit_runs_in_a_thread(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'n.db'}", group_commit=False)
    assert store.committer is None
    assert asyncio.run(store.write_async(lambda conn: threading.current_thread().name)) != "MainThread"
    store.dispose()


def test_the_fast_lane_can_be_turned_off_and_the_route_answers_alone(
    sqlite_url: str, lane_calls: list[str]
) -> None:
    """``fast_path=False`` (EVALSTOP_FAST_PATH=false): every score goes through the route, with the
    same replies; ``bench/fastpath_cost.py`` compares the two."""
    with TestClient(create_app(make_settings(sqlite_url, fast_path=False))) as client:
        api = Api(client)
        token = api.tenant("acme")
        job = api.job(token)["id"]
        replies = [_post(api, token, job, body, "application/json") for body in BODIES[:6]]
    assert [r.status_code for r in replies] == [200, 200, 200, 409, 409, 200]
    assert replies[-1].json()["decision"] == "stop"
    assert lane_calls == []
