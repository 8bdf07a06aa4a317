"""Console session rows that are revoked or expired are deleted by the outbox worker's idle
polls, in bounded batches, while live sessions stay (issue 22 loose end)."""

from __future__ import annotations

from collections.abc import Callable

import sqlalchemy as sa
from fastapi.testclient import TestClient

from evalstop.service.app import create_app
from evalstop.service.store import Store
from evalstop.service.store import session as session_store
from evalstop.service.store.tables import console_sessions
from evalstop.service.worker import SWEEP_BATCH

from ._support import ADMIN, make_settings, wait_for
from .test_console import sign_in


def _dead_row(i: int, now: float, *, revoked: bool) -> dict[str, object]:
    return {"id_hash": f"{i:064x}", "tenant": None, "token_hash": "0" * 64, "name": "old",
            "csrf": "x", "created_at": now - 100, "expires_at": now + 3600 if revoked else now - 1,
            "revoked_at": now - 50 if revoked else None}


def _rows(store: Store) -> set[str]:
    with store.reading() as conn:
        return set(conn.execute(sa.select(console_sessions.c.id_hash)).scalars())


def test_an_idle_worker_sweeps_dead_sessions_and_keeps_live_ones(db_url: str) -> None:
    settings = make_settings(db_url, run_worker=True, session_sweep_s=0.2)
    with TestClient(create_app(settings)) as client:
        other = TestClient(client.app)  # a second cookie jar (no second lifespan)
        store = client.app.state.ctx.store  # type: ignore[attr-defined]
        sign_in(client, ADMIN, "stays")
        sign_in(other, ADMIN, "leaves")
        assert len(_rows(store)) == 2
        now = store.clock()
        with store.transaction() as conn:  # "leaves" signed out; three more dead rows
            conn.execute(console_sessions.update().where(console_sessions.c.name == "leaves")
                         .values(revoked_at=now))
            for i in range(3):
                conn.execute(console_sessions.insert().values(**_dead_row(i, now, revoked=i % 2 == 0)))
        stays = _names(store, "stays")
        assert len(stays) == 1 and len(_rows(store)) == 5
        wait_for(lambda: _rows(store) == stays, timeout_s=10, what="the sweep")
        assert client.get("/ui/jobs").status_code == 200  # the live session still works


def _names(store: Store, name: str) -> set[str]:
    with store.reading() as conn:
        return set(conn.execute(sa.select(console_sessions.c.id_hash)
                                .where(console_sessions.c.name == name)).scalars())


def test_one_sweep_deletes_a_bounded_batch(store_factory: Callable[..., Store]) -> None:
    store = store_factory()
    now = store.clock()
    with store.transaction() as conn:
        for i in range(7):
            conn.execute(console_sessions.insert().values(**_dead_row(i, now, revoked=i < 3)))
        live = {**_dead_row(99, now, revoked=False), "expires_at": now + 3600}
        conn.execute(console_sessions.insert().values(**live))
    assert session_store.sweep(store, now, 4) == 4
    assert len(_rows(store)) == 4
    assert session_store.sweep(store, now, 4) == 3
    assert _rows(store) == {live["id_hash"]}
    assert session_store.sweep(store, now, 4) == 0
    assert SWEEP_BATCH >= 100
