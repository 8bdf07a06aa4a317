"""Pull ingest inside the service: a ``--pull-config`` trainer_state poller feeds the real app's
ingest (operator scope) until the detector stops the job; bad config files exit 2 naming the key."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from evalstop.cli import main
from evalstop.service.app import create_app
from evalstop.service.errors import NotFound
from evalstop.service.pull import ScoreRecord
from evalstop.service.pull.serve import IngestSink

from ._support import ADMIN, RECORDING_PLUGIN, Api, free_port, make_settings, wait_for

CURVE = [(100, 0.50), (200, 0.61), (300, 0.58), (400, 0.57), (500, 0.40)]  # k=2 fires at step 400


def save(out: Path, upto: int) -> None:
    """What the HF Trainer does at a save: a checkpoint dir, and trainer_state.json rewritten."""
    history = [{"step": s, "epoch": s / 100, "eval_accuracy": v} for s, v in CURVE if s <= upto]
    (out / f"checkpoint-{upto}").mkdir(parents=True)
    (out / "trainer_state.json").write_text(json.dumps({"global_step": upto, "log_history": history}))


def write_config(path: Path, body: str) -> Path:
    path.write_text(body)
    return path


def test_pulled_trainer_state_stops_the_job_at_its_best_checkpoint(tmp_path: Path, sqlite_url: str) -> None:
    with TestClient(create_app(make_settings(sqlite_url))) as client:  # the operator registers the job
        api = Api(client)
        token = api.tenant("acme")
        job_id = api.job(token, metric="eval_accuracy", grace_period_s=0)["id"]
    out = tmp_path / "run"
    config = write_config(tmp_path / "pull.toml", f"""
interval_s = 0.05
[[poller]]
job_id = "{job_id}"
kind = "trainer_state"
path = "{out}"
metric = "accuracy"
""")
    with TestClient(create_app(make_settings(sqlite_url, pull_config=config))) as client:
        api = Api(client)
        for step, _ in CURVE[:4]:
            save(out, step)
            wait_for(lambda s=step: api.client.get(f"/v1/jobs/{job_id}", headers=api.as_(token))
                     .json()["last_step"] == s, 10, f"step {step} to be pulled")
        decisions = api.client.get(f"/v1/jobs/{job_id}/decisions", headers=api.as_(token)).json()
    assert [(d["decision"], d["step"], d["best_step"]) for d in decisions] == [("stop", 400, 200)]
    assert decisions[0]["best_checkpoint_uri"] == str(out / "checkpoint-200")
    assert list((tmp_path / "evalstop-pull").glob("trainer_state-*.json"))  # a restart does not resend


def serve(tmp: Path, *extra: str) -> tuple[subprocess.Popen[bytes], str]:
    """``evalstop serve`` on loopback; returns once /healthz answers."""
    port, log = free_port(), (tmp / "server.log").open("ab")
    env = {**os.environ, "EVALSTOP_ADMIN_TOKEN": ADMIN,
           "EVALSTOP_ADAPTER_PLUGINS": json.dumps(RECORDING_PLUGIN)}
    proc = subprocess.Popen([sys.executable, "-m", "evalstop.cli", "serve", "--database-url",
                             f"sqlite:///{tmp / 'evalstop.db'}", "--port", str(port), "--no-worker", *extra],
                            env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"

    def up() -> bool:
        assert proc.poll() is None, (tmp / "server.log").read_text()
        try:
            return httpx.get(base + "/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    wait_for(up, 30, "the server to answer /healthz")
    return proc, base


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(15) in (0, -signal.SIGTERM)  # uvicorn re-raises the signal after a clean shutdown


def test_evalstop_serve_runs_the_pull_config(tmp_path: Path) -> None:
    admin = {"Authorization": f"Bearer {ADMIN}"}
    proc, base = serve(tmp_path)  # register first: the config names the job by its service id
    try:
        token = httpx.post(base + "/v1/tenants", json={"name": "acme"}, headers=admin).json()["token"]
        job = {"external_ref": "j1", "target": "recording", "detector": "evalstop:k=2",
               "metric": "eval_accuracy", "grace_period_s": 0}
        tenant = {"Authorization": f"Bearer {token}"}
        job_id = httpx.post(base + "/v1/jobs", json=job, headers=tenant).json()["id"]
    finally:
        stop(proc)
    out = tmp_path / "run"
    for step, _ in CURVE[:4]:
        save(out, step)
    config = write_config(tmp_path / "pull.toml", f"""
interval_s = 0.1
[[poller]]
job_id = "{job_id}"
kind = "trainer_state"
path = "{out / 'trainer_state.json'}"
metric = "eval_accuracy"
""")
    proc, base = serve(tmp_path, "--pull-config", str(config))
    try:
        def decided() -> bool:
            return bool(httpx.get(f"{base}/v1/jobs/{job_id}/decisions", headers=admin).json())

        wait_for(decided, 10, "the pulled scores to be decided")
        decisions = httpx.get(f"{base}/v1/jobs/{job_id}/decisions", headers=admin).json()
    finally:
        stop(proc)
    assert [(d["decision"], d["best_checkpoint_uri"]) for d in decisions] == [
        ("stop", str(out / "checkpoint-200"))]


def test_sink_retries_unknown_jobs_and_drops_refused_scores(api: Api) -> None:
    token = api.tenant("acme")
    job_id = api.job(token, metric="eval_accuracy")["id"]
    sink = IngestSink(api.ctx.store)
    with pytest.raises(NotFound):  # not registered (yet): the poller keeps the records
        sink("no-such-job", [ScoreRecord(1, 0.5, "eval_accuracy")])
    sink(job_id, [ScoreRecord(1, 0.5, "eval_accuracy"), ScoreRecord(2, 0.6, "eval_accuracy")])
    sink(job_id, [ScoreRecord(2, 0.9, "eval_accuracy"), ScoreRecord(3, 0.7, "eval_accuracy")])  # 2 changed
    scores = api.client.get(f"/v1/jobs/{job_id}/scores", headers=api.as_(token)).json()
    assert [(s["step"], s["value"]) for s in scores] == [(1, 0.5), (2, 0.6), (3, 0.7)]


GOOD = '[[poller]]\njob_id = "j"\nkind = "trainer_state"\npath = "x"\nmetric = "m"'


@pytest.mark.parametrize(("body", "named"), [
    ("interval = 5\n" + GOOD, "'interval'"),
    ('cursor_dir = 1\n' + GOOD, "cursor_dir"),
    ("poller = [1]", "[[poller]] #1"),
    ('[[poller]]\njob_id = "j"\nkind = "wandb"\npath = "x"\nmetric = "m"', "'kind'"),
    ('[[poller]]\njob_id = "j"\nkind = "trainer_state"\npath = "x"', "'metric'"),
    ('[[poller]]\njob_id = "j"\nkind = "trainer_state"\npath = "x"\nmetric = "m"\ncolour = 1', "'colour'"),
    ('[[poller]]\njob_id = "j"\nkind = "tensorboard"\npath = "x"\ntag = "t"', "'logdir'"),
    ('[[poller]]\nkind = "mlflow"\nrun_id = "r"\nmetric = "m"', "'job_id'"),
])
def test_bad_pull_config_exits_2_naming_the_key(
    tmp_path: Path, sqlite_url: str, capsys: pytest.CaptureFixture[str], body: str, named: str,
) -> None:
    config = write_config(tmp_path / "pull.toml", body)
    assert main(["serve", "--database-url", sqlite_url, "--pull-config", str(config)]) == 2
    err = capsys.readouterr().err
    assert "pull.toml" in err and named in err, err
    assert not (tmp_path / "evalstop.db").exists()  # refused before anything was opened
