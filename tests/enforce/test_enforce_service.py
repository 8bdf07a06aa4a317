"""End to end through the service core: a trainer_state.json poller feeds the real ingest, the
detector fires, and the service worker stops the job through the webhook adapter."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="needs the service extra: pip install -e '.[service]'")

from enforce_http import serve
from test_enforce_webhook import SECRET, Receiver, ReceiverHandler

from evalstop.service import domain
from evalstop.service.context import ServiceContext
from evalstop.service.ingest import ScoreIn, ingest_scores
from evalstop.service.pull import ScoreRecord, make_poller
from evalstop.service.settings import ServiceSettings

CURVE = [(100, 0.50), (200, 0.61), (300, 0.58), (400, 0.57), (500, 0.40)]  # k=2 fires at step 400


def save_checkpoint(out: Path, step: int, upto: int) -> None:
    history = [{"step": s, "epoch": s / 100, "eval_accuracy": v} for s, v in CURVE if s <= upto]
    ckpt = out / f"checkpoint-{step}"
    ckpt.mkdir(parents=True)
    (ckpt / "trainer_state.json").write_text(json.dumps({"global_step": step, "log_history": history}))


def test_pulled_scores_trigger_a_pinned_webhook_stop(tmp_path: Path) -> None:
    receiver = Receiver()
    with serve(ReceiverHandler, receiver) as url:
        settings = ServiceSettings(database_url=f"sqlite:///{tmp_path / 'evalstop.db'}", run_worker=False,
                                   adapter_settings={"webhook": {"url": url, "secret": SECRET}},
                                   backoff_base_s=0.01, backoff_max_s=0.05)
        ctx = ServiceContext.build(settings)
        scope = {"webhook": {"url_prefixes": [url]}, "checkpoint_prefixes": [f"file://{tmp_path}/run"]}
        domain.create_tenant(ctx.store, "acme", scope=scope)
        spec = domain.JobSpec(external_ref="j1", target="webhook", detector="evalstop:k=2",
                              metric="eval_accuracy", grace_period_s=0)
        job_id = domain.register_job(ctx.store, "acme", spec, ctx.adapters.check,
                                     target_settings={"url": url})["id"]
        decisions: list[str] = []

        def sink(key: str, records: Sequence[ScoreRecord]) -> None:
            items = [ScoreIn(step=r.step, value=r.value, checkpoint_uri=r.checkpoint_uri, ts=r.ts,
                             metric=r.metric) for r in records]
            decisions.append(ingest_scores(ctx.store, key, "acme", items).decision)

        out = tmp_path / "run"
        poller = make_poller("trainer_state", sink, paths={job_id: out}, metric="eval_accuracy")
        for step, _ in CURVE[:4]:  # the Trainer saves, the poller polls
            save_checkpoint(out, step, step)
            poller.poll()
        assert decisions == ["continue", "continue", "continue", "stop"]
        assert ctx.worker.run_once() == 1
    verbs = [(a, uri) for a, _, uri in receiver.log]
    assert verbs[:2] == [("pin", str(out / "checkpoint-200")), ("signal", None)]  # the best, pinned first
    assert domain.get_job(ctx.store, job_id, "acme")["state"] == "stopped"
