"""A rotated or revoked token is refused by every replica at once, not after a cache's time
limit: the change is pushed (PostgreSQL ``LISTEN``/``NOTIFY``, service/revocation.py), and a
replica that lost the channel falls back to ``token_cache_s``."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from evalstop.service.app import create_app
from evalstop.service.context import TokenCache
from evalstop.service.store import metadata, open_store
from evalstop.service.store.notify import APPLICATION_NAME

from ._support import ADMIN, Api, make_settings, wait_for

PUSH_BOUND_S = 0.2  # what the issue asks: the other replica refuses within 200 ms
CACHE_S = 5.0  # token_cache_s: far longer than the bound, so only the push can meet it
_STEPS = itertools.count()


@pytest.fixture
def pg_replicas(postgres_url: str) -> Iterator[tuple[Api, Api]]:
    settings = make_settings(postgres_url, token_cache_s=CACHE_S, policy_cache_s=CACHE_S)
    with TestClient(create_app(settings)) as a, TestClient(create_app(settings)) as b:
        for api in (a, b):
            watch = api.app.state.ctx.watch  # type: ignore[attr-defined]
            assert watch is not None
            wait_for(watch.listening.is_set, 10, "the replica to listen")
        yield Api(a), Api(b)
    store = open_store(postgres_url)
    metadata.drop_all(store.engine)
    store.dispose()


def _score(api: Api, token: str, job_id: str) -> int:
    return int(api.post(token, job_id, {"step": next(_STEPS), "value": 0.5}).status_code)


def _token_call(api: Api, token: str, name: str, action: str, **body: Any) -> Any:
    r = api.client.post(f"/v1/tenants/{name}/token/{action}", json=body, headers=api.as_(token))
    assert r.status_code == 200, r.text
    return r.json()


def _first_refusal(api: Api, token: str, job_id: str, give_up_s: float) -> tuple[float, int]:
    """Poll every 10 ms: the clock (``time.time``) when the first refused request was sent, and
    how many were accepted before it."""
    accepted, started = 0, time.monotonic()
    while time.monotonic() - started < give_up_s:
        sent = time.time()
        if _score(api, token, job_id) == 401:
            return sent, accepted
        accepted += 1
        time.sleep(0.01)
    raise AssertionError(f"still accepted {give_up_s} s later")


def _cached_on_both(replicas: tuple[Api, Api], name: str = "alice") -> tuple[str, str]:
    """A new tenant's token and a job of its, the token cached on both replicas."""
    token = replicas[0].tenant(name)
    job_id = replicas[0].job(token)["id"]
    for api in replicas:
        assert _score(api, token, job_id) == 200
    return token, job_id


def test_a_token_revoked_on_one_replica_is_refused_by_the_other_within_200_ms(
    pg_replicas: tuple[Api, Api]
) -> None:
    a, b = pg_replicas
    delays = []
    for n in range(5):  # five revocations, each measured (run with -s to see them)
        token, job_id = _cached_on_both(pg_replicas, f"tenant-{n}")
        _token_call(a, ADMIN, f"tenant-{n}", "revoke", reason="leaked")
        acknowledged = time.time()
        refused_at, accepted = _first_refusal(b, token, job_id, CACHE_S)
        delays.append(refused_at - acknowledged)
        assert delays[-1] <= PUSH_BOUND_S, (delays, accepted)
        assert _score(a, token, job_id) == 401 and _score(b, token, job_id) == 401
    print(f"revocation to refusal on the other replica: {[round(d * 1000) for d in delays]} ms")


def test_an_old_token_in_its_grace_is_refused_by_every_replica_when_the_grace_ends(
    pg_replicas: tuple[Api, Api]
) -> None:
    a, b = pg_replicas
    old, job_id = _cached_on_both(pg_replicas)  # trusted for CACHE_S
    rotated = _token_call(a, ADMIN, "alice", "rotate", grace_s=1.0)
    until = rotated["previous_valid_until"]
    assert _score(b, old, job_id) == 200 and _score(b, rotated["token"], job_id) == 200
    refused_at, accepted = _first_refusal(b, old, job_id, CACHE_S)
    assert accepted > 0 and until - 0.05 <= refused_at <= until + PUSH_BOUND_S, (refused_at - until, accepted)
    assert _score(a, old, job_id) == 401 and _score(b, rotated["token"], job_id) == 200


def test_a_replica_that_lost_the_channel_listens_again_and_forgets_what_it_missed(
    pg_replicas: tuple[Api, Api], postgres_url: str
) -> None:
    a, b = pg_replicas
    token, job_id = _cached_on_both(pg_replicas)
    watch = b.ctx.watch
    store = open_store(postgres_url, migrate=False)
    try:
        with store.transaction() as conn:  # the server drops both replicas' listening connections
            ended = conn.execute(sa.text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                                         "WHERE application_name = :n"), {"n": APPLICATION_NAME}).all()
        assert len(ended) >= 2  # both replicas' (and any other app's left on this server by an earlier test)
    finally:
        store.dispose()
    wait_for(lambda: watch.connects >= 2 and watch.listening.is_set(), 10, "the watch to listen again")
    assert b.ctx.tokens.get(token) is None  # dropped on reconnection: a change may have been missed
    assert _score(b, token, job_id) == 200  # cached again
    _token_call(a, ADMIN, "alice", "revoke")
    acknowledged = time.time()
    refused_at, _ = _first_refusal(b, token, job_id, CACHE_S)
    assert refused_at - acknowledged <= PUSH_BOUND_S


def test_a_scope_change_reaches_the_other_replica_at_once(pg_replicas: tuple[Api, Api]) -> None:
    a, b = pg_replicas
    a.tenant("alice")
    assert b.ctx.policies.get("alice").limits is not None  # cached on b
    r = a.client.put("/v1/tenants/alice/quota", json={"quota": {"scores_per_s": 3, "burst": 3}},
                     headers=a.as_(ADMIN))
    assert r.status_code == 200, r.text
    wait_for(lambda: b.ctx.policies.cached("alice") is None, PUSH_BOUND_S * 5, "b to drop the policy")
    assert b.ctx.policies.get("alice").limits.burst == 3


def test_a_revoked_token_is_refused_at_once_on_a_single_replica(db_url: str) -> None:
    with TestClient(create_app(make_settings(db_url, token_cache_s=CACHE_S))) as client:
        api = Api(client)
        token = api.tenant("alice")
        job_id = api.job(token)["id"]
        assert _score(api, token, job_id) == 200
        _token_call(api, token, "alice", "revoke")
        assert _score(api, token, job_id) == 401


def test_a_lookup_that_began_before_a_change_is_not_cached() -> None:
    cache = TokenCache(ttl_s=60)
    before = time.monotonic()  # a request reads the database here ...
    cache.forget_tenant("alice")  # ... the token is revoked while it reads ...
    cache.put("tok", "alice", before)  # ... and the (stale) answer comes back
    assert cache.get("tok") is None
    cache.put("tok", "alice", time.monotonic())
    assert cache.get("tok") == "alice"
    cache.put("grace", "alice", time.monotonic(), valid_for_s=0.0)  # a grace that ends now
    assert cache.get("grace") is None
