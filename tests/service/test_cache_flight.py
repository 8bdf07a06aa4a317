"""The token and policy caches under concurrent first requests and near expiry: one database read
per token in flight, reads ahead of expiry for an entry in use, and never an answer older than
a change this replica heard; and the heap frozen once the app has started."""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from evalstop.service import context, tokens
from evalstop.service.app import create_app
from evalstop.service.context import PolicyCache, TokenCache
from evalstop.service.fairness import Limits as FairLimits
from evalstop.service.flight import SingleFlight
from evalstop.service.store import Store, open_store

from ._support import Api, make_settings, wait_for


class SlowReads:
    """``tokens.owner`` and ``tenant_policy`` counted, each answer held back until ``release``
    is set (the read itself is done first: what it saw is what the database said then)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.release = threading.Event()
        self.lock = threading.Lock()
        self.reads = {"token": 0, "policy": 0}
        owner, policy = tokens.owner, context.tenant_policy

        def held(kind: str, read: Any) -> Any:
            def counted(store: Store, key: str) -> Any:
                with self.lock:
                    self.reads[kind] += 1
                found = read(store, key)
                self.release.wait(10)
                return found
            return counted

        counted_owner, counted_policy = held("token", owner), held("policy", policy)
        monkeypatch.setattr(tokens, "owner", counted_owner)
        monkeypatch.setattr(context, "tenant_policy", counted_policy)


@pytest.fixture
def app_api(sqlite_url: str) -> Iterator[Api]:
    with TestClient(create_app(make_settings(sqlite_url))) as client:
        yield Api(client)


def _concurrently(n: int, call: Any) -> list[Any]:
    with ThreadPoolExecutor(n) as pool:
        futures = [pool.submit(call) for _ in range(n)]
        return [f.result(timeout=30) for f in futures]


def test_eight_concurrent_first_lookups_of_a_token_read_the_database_once(
    app_api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = app_api.tenant("alice")
    cache = TokenCache(ttl_s=60)  # a replica that has not seen the token
    reads = SlowReads(monkeypatch)
    timer = threading.Timer(0.3, reads.release.set)  # all 8 are waiting by then
    timer.start()
    assert _concurrently(8, lambda: cache.load(app_api.ctx.store, token)) == ["alice"] * 8
    assert reads.reads["token"] == 1
    assert cache.get(token) == "alice"


def test_eight_concurrent_first_policy_reads_of_a_tenant_read_the_database_once(
    app_api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    app_api.tenant("alice", quota={"scores_per_s": 7, "burst": 9})
    policies = PolicyCache(app_api.ctx.store, FairLimits(100.0, 100, 10), ttl_s=60)
    reads = SlowReads(monkeypatch)
    threading.Timer(0.3, reads.release.set).start()
    got = _concurrently(8, lambda: policies.load("alice"))
    assert reads.reads["policy"] == 1 and {p.limits.burst for p in got} == {9}


def test_a_caller_that_joins_a_read_begun_before_a_revocation_reads_again(
    app_api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = app_api.tenant("alice")
    store = app_api.ctx.store
    cache = TokenCache(ttl_s=60)
    reads = SlowReads(monkeypatch)
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(cache.load, store, token)
        wait_for(lambda: reads.reads["token"] == 1, 10, "the first read to start")
        tokens.revoke(store, "alice", tokens.Actor(None), reason="test")  # committed meanwhile ...
        cache.forget_tenant("alice")  # ... and heard (as the watch or the route does)
        second = pool.submit(cache.load, store, token)  # joins the read begun before the change
        time.sleep(0.2)
        reads.release.set()
        assert first.result(10) == "alice"  # raced the revocation, as any read in flight may
        assert second.result(10) is None  # but a caller that came after it is refused
    assert reads.reads["token"] == 2 and cache.get(token) is None


def test_a_token_in_use_near_its_expiry_is_read_again_ahead_of_it(app_api: Api) -> None:
    token = app_api.tenant("alice")
    store = app_api.ctx.store
    cache = TokenCache(ttl_s=0.6, store=store, ahead_s=0.5)
    assert cache.load(store, token) == "alice"
    first_until = cache._by_hash[next(iter(cache._by_hash))][1]
    time.sleep(0.2)  # inside the last 0.5 s of its 0.6 s
    assert cache.get(token) == "alice"  # answered from the cache, and a read queued
    wait_for(lambda: cache._by_hash[next(iter(cache._by_hash))][1] > first_until, 5, "the read ahead")
    time.sleep(0.5)  # past the first entry's end: the refreshed one still holds
    assert cache.get(token) == "alice"


def test_a_revoked_token_is_not_brought_back_by_a_read_ahead(app_api: Api) -> None:
    token = app_api.tenant("alice")
    store = app_api.ctx.store
    cache = TokenCache(ttl_s=0.6, store=store, ahead_s=0.6)  # every get reads ahead
    assert cache.load(store, token) == "alice"
    tokens.revoke(store, "alice", tokens.Actor(None), reason="test")
    cache.forget_tenant("alice")
    assert cache.get(token) is None
    time.sleep(0.3)
    assert cache.get(token) is None and cache.load(store, token) is None


def test_a_policy_in_use_near_its_expiry_is_read_again_ahead_of_it(app_api: Api) -> None:
    app_api.tenant("alice")
    policies = PolicyCache(app_api.ctx.store, FairLimits(100.0, 100, 10), ttl_s=0.6, ahead_s=0.5)
    policies.load("alice")
    read_at = policies._items["alice"][1]
    time.sleep(0.2)
    assert policies.cached("alice") is not None
    wait_for(lambda: policies._items["alice"][1] > read_at, 5, "the read ahead")
    time.sleep(0.5)
    assert policies.cached("alice") is not None


def test_single_flight_shares_an_error_and_forgets_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    flight: SingleFlight[int] = SingleFlight()
    started, release = threading.Event(), threading.Event()
    calls = []

    def failing() -> int:
        calls.append(1)
        started.set()
        release.wait(5)
        raise OSError("database gone")

    with ThreadPoolExecutor(3) as pool:
        leader = pool.submit(flight.do, "k", failing)
        started.wait(5)
        joiners = [pool.submit(flight.do, "k", failing) for _ in range(2)]
        time.sleep(0.1)
        release.set()
        for f in [leader, *joiners]:
            with pytest.raises(OSError, match="database gone"):
                f.result(5)
    assert len(calls) == 1
    assert flight.do("k", lambda: 5) == (5, False)  # nothing left in flight


def test_the_heap_is_frozen_once_the_app_has_started_and_thawed_when_it_stops(sqlite_url: str) -> None:
    gc.unfreeze()
    assert gc.get_freeze_count() == 0
    with TestClient(create_app(make_settings(sqlite_url))):
        frozen = gc.get_freeze_count()
        assert frozen > 10_000  # the app, its routes and models, the store's engine
    assert gc.get_freeze_count() == 0


def test_the_store_is_used_for_reads_ahead_only_when_the_service_built_the_cache(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'x.db'}")
    try:
        assert TokenCache().store is None  # no store: entries only expire
        assert TokenCache(store=store).ahead_s == pytest.approx(1.0)  # a fifth of 5 s
    finally:
        store.dispose()
