"""The decoded-monitor memo of ingest (``service/monitoring.py``, ``MEMO``): a kept monitor is
served only while the job's stored text is the text it was kept with, and it always equals that
text decoded. Checked after every request of runs that go through a decision, a rewind (the
monitor is written twice), a shadow rewind, an attempt's stale scores, a write rolled back after
the monitor changed, and another writer of the job's monitor."""

from __future__ import annotations

import json
from typing import Any

import pytest
import sqlalchemy as sa

from evalstop.detectors import Monitor
from evalstop.service import ingest
from evalstop.service.monitoring import MEMO, MonitorMemo
from evalstop.service.store import DatabaseUnavailable
from evalstop.service.store.tables import jobs

from ._support import Api

REWIND = {"on_detect": "rewind", "correction": "kl_coef*=2"}


def _stored(api: Api, job_id: str) -> str:
    with api.ctx.store.reading() as conn:
        text = conn.execute(sa.select(sa.cast(jobs.c.monitor_state, sa.Text))
                            .where(jobs.c.id == job_id)).scalar_one()
    return str(text)


def _consistent(api: Api, job_id: str) -> bool:
    """The invariant: a kept monitor whose text is the stored one equals that text decoded.
    Returns whether such an entry is there (it would be served next)."""
    kept = MEMO.kept(job_id)
    text = _stored(api, job_id)
    if kept is None or kept[0] != text:
        return False
    assert kept[1].to_json() == json.loads(text), "the memo would serve a monitor that is not the stored one"
    return True


def _post(api: Api, token: str, job_id: str, step: int, value: float, **extra: Any) -> dict[str, Any]:
    r = api.post(token, job_id, {"step": step, "value": value, "checkpoint_uri": f"s3://c/{step}", **extra})
    assert r.status_code == 200, r.text
    assert _consistent(api, job_id) or r.json()["decided_now"] or r.json()["decision"] == "rewind"
    return dict(r.json())


def test_a_kept_monitor_is_the_stored_one_through_a_rewind_and_a_stop(api_any_db: Api) -> None:
    api = api_any_db
    token = api.tenant("acme")
    job = api.job(token, **REWIND)["id"]
    hits = MEMO.hits
    for step, value in ((1, 0.5), (2, 0.7), (3, 0.6)):
        _post(api, token, job, step, value)
    assert MEMO.hits >= hits + 2  # served from the memo: the steps after the first
    reply = _post(api, token, job, 4, 0.5)  # the rewind: the monitor is written twice
    assert reply["decision"] == "rewind" and reply["attempt"] == 1
    assert _consistent(api, job)  # kept after its second write, as rewound
    for step, value in ((3, 0.8), (4, 0.75)):
        assert _post(api, token, job, step, value, attempt=1)["decision"] == "continue"
    late = _post(api, token, job, 5, 0.1, attempt=0)  # stale: answered with the rewind
    assert (late["decision"], late["accepted"]) == ("rewind", 0)
    _consistent(api, job)
    stop = _post(api, token, job, 5, 0.7, attempt=1)  # the second decline after the rewind
    assert stop["decision"] == "stop" and stop["decided_now"]
    after = _post(api, token, job, 6, 0.6, attempt=1)
    stored = Monitor.from_json(_stored(api, job))
    assert (after["decision"], after["n_evals"]) == ("stop", stored.n_evals + stored.n_ignored)


def test_a_shadow_rewind_keeps_the_monitor_as_stored(api_any_db: Api) -> None:
    api = api_any_db
    token = api.tenant("shady")
    job = api.job(token, shadow=True, **REWIND)["id"]
    for step, value in ((1, 0.5), (2, 0.7), (3, 0.6), (4, 0.5), (5, 0.4), (6, 0.9)):
        _post(api, token, job, step, value)
        _consistent(api, job)


def test_a_write_rolled_back_after_the_monitor_changed_leaves_nothing_to_serve(
    api_any_db: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    api = api_any_db
    token = api.tenant("acme")
    job = api.job(token)["id"]
    _post(api, token, job, 1, 0.5)
    _post(api, token, job, 2, 0.7)
    assert _consistent(api, job)
    before = _stored(api, job)

    def failing_decision(*_: Any, **__: Any) -> int:  # the score and the monitor are written, then this
        raise DatabaseUnavailable("INSERT", {}, Exception("connection lost"))

    monkeypatch.setattr(ingest, "decide_stop", failing_decision)
    for step, value in ((3, 0.6), (4, 0.5)):  # k=2: step 4 fires the rule, and its decision fails
        api.post(token, job, {"step": step, "value": value})
    assert _stored(api, job) != before  # step 3 went in
    fired = _stored(api, job)
    r = api.post(token, job, {"step": 4, "value": 0.5})
    assert r.status_code == 503
    assert _stored(api, job) == fired  # rolled back
    assert not _consistent(api, job)  # the monitor that saw step 4 is not kept
    monkeypatch.undo()
    reply = _post(api, token, job, 4, 0.5)  # decoded from the stored text: fires now, decides
    assert reply["decision"] == "stop" and reply["decided_now"]


def test_another_writer_of_the_monitor_is_seen(api_any_db: Api) -> None:
    """What a second replica (or any other writer) stores is read, not the monitor kept here."""
    api = api_any_db
    token = api.tenant("acme")
    job = api.job(token)["id"]
    _post(api, token, job, 1, 0.5)
    assert _consistent(api, job)
    other = Monitor.from_json(_stored(api, job))
    other.observe_many([ingest.ScoreIn(step=2, value=0.9).to_eval()])  # as another replica would
    with api.ctx.store.transaction() as conn:
        conn.execute(jobs.update().where(jobs.c.id == job).values(monitor_state=other.to_json()))
    reply = _post(api, token, job, 3, 0.8)
    assert (reply["n_evals"], reply["best_step"]) == (3, 2)  # the other writer's eval counts


def test_the_memo_keeps_the_most_recent_monitors_within_its_size() -> None:
    memo = MonitorMemo(max_chars=100)
    monitor = Monitor("evalstop:k=2")
    memo.keep("a", "evalstop:k=2", "x" * 40, monitor)
    memo.keep("b", "evalstop:k=2", "y" * 40, monitor)
    assert memo.take("a", "evalstop:k=2", "x" * 40) is monitor  # taken: gone from the memo
    memo.keep("a", "evalstop:k=2", "x" * 40, monitor)  # now "b" is the least recently used
    memo.keep("c", "evalstop:k=2", "z" * 40, monitor)
    assert memo.kept("b") is None and memo.kept("a") is not None and memo.kept("c") is not None
    memo.keep("d", "evalstop:k=2", "w" * 101, monitor)  # larger than the whole memo: not kept
    assert memo.kept("d") is None and memo.kept("a") is not None
    assert memo.take("a", "evalstop:k=3", "x" * 40) is None  # another detector spec: decoded anew
    assert memo.take("c", "evalstop:k=2", "z" * 39) is None and memo.kept("c") is None
