"""Issue 23 (item 3): a real tiny HF Trainer in remote mode obeys the ``rewind`` reply of a real
``evalstop serve`` over loopback: it loads the best checkpoint, applies the correction the
service names, and reports the next evals as the new attempt."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="needs pip install -e '.[hf]'")
transformers = pytest.importorskip("transformers", reason="needs pip install -e '.[hf]'")
httpx = pytest.importorskip("httpx", reason="needs pip install -e '.[service]'")
safetensors_torch = pytest.importorskip("safetensors.torch")

from test_int_hf import make_trainer  # noqa: E402
from test_int_trainer_rewind import LR, SCORES, Probe  # noqa: E402

from evalstop.integrations import EvalStopCallback, RemoteJob  # noqa: E402

ADMIN = "admin-token-for-the-rewind-tests"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Served:
    """``evalstop serve`` in a subprocess, with one tenant."""

    def __init__(self, tmp: Path) -> None:
        port = _free_port()
        self.url = f"http://127.0.0.1:{port}"
        argv = [sys.executable, "-m", "evalstop.cli", "serve", "--database-url", f"sqlite:///{tmp / 'e.db'}",
                "--port", str(port)]
        self.proc = subprocess.Popen(argv, env={**os.environ, "EVALSTOP_ADMIN_TOKEN": ADMIN},
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.http = httpx.Client(base_url=self.url, timeout=10)
        deadline = time.monotonic() + 60
        while not self._ready():
            assert self.proc.poll() is None, self.proc.stderr.read().decode()[-2000:]  # type: ignore[union-attr]
            assert time.monotonic() < deadline, "evalstop serve did not become ready"
            time.sleep(0.1)
        r = self.http.post("/v1/tenants", json={"name": "team-a"}, headers=self.auth(ADMIN))
        assert r.status_code == 201, r.text
        self.token = str(r.json()["token"])

    def _ready(self) -> bool:
        try:
            return self.http.get("/readyz").status_code == 200
        except httpx.HTTPError:
            return False

    def auth(self, token: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {token}"}

    def get(self, path: str) -> Any:
        r = self.http.get(path, headers=self.auth(self.token))
        assert r.status_code == 200, r.text
        return r.json()

    def close(self) -> None:
        self.http.close()
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    svc = Served(tmp_path)
    yield svc
    svc.close()


def test_a_remote_trainer_rewinds_when_the_service_says_so(served: Served, tmp_path: Path) -> None:
    payload = {"external_ref": "run-1", "target": "dry-run", "detector": "evalstop:k=2",
               "metric": "eval_gold", "on_detect": "rewind", "correction": "lr*=0.5"}
    r = served.http.post("/v1/jobs", json=payload, headers=served.auth(served.token))
    assert r.status_code == 201, r.text
    job_id = r.json()["id"]
    callback = EvalStopCallback("gold", remote=RemoteJob(served.url, job_id, token=served.token))
    trainer = make_trainer(tmp_path, SCORES, callback, learning_rate=LR, lr_scheduler_type="constant",
                           max_steps=24)
    trainer.remove_callback(callback)
    callback.bind(trainer)
    probe = Probe()
    trainer.add_callback(probe)
    with pytest.warns(UserWarning, match="rewound the run at step 10 .*checkpoint-6, correction lr\\*=0.5"):
        trainer.train()
    out = tmp_path / "out"
    best = safetensors_torch.load_file(str(out / "checkpoint-6" / "model.safetensors"))
    after = probe.seen[10]["weights"]  # right after the rewind, in the same evaluation
    assert all(torch.equal(after[k], v) for k, v in best.items())
    assert not all(torch.equal(probe.seen[8]["weights"][k], v) for k, v in best.items())
    assert probe.seen[8]["lr"] == LR and probe.seen[10]["lr"] == LR * 0.5
    assert set(probe.seen[-1]["lrs"][10:]) == {LR * 0.5}
    # the service's rule restarted from step 6: 0.55 (12), 0.65 (14, best), 0.6, 0.58 -> stop at 18
    assert trainer.state.global_step == 18 and callback.verdict.stop_step == 18
    assert callback.history.attempt == 1 and callback.rewinds[0]["lr"] == [LR, LR * 0.5]
    decisions = served.get(f"/v1/jobs/{job_id}/decisions")
    checkpoint = str((out / "checkpoint-6").resolve())
    assert [(d["source"], d["decision"], d["step"], d["best_step"], d["correction"]) for d in decisions] == [
        ("rewind-1", "rewind", 10, 6, "lr*=0.5"), ("detector", "stop", 18, 14, None)]
    assert decisions[0]["best_checkpoint_uri"] == checkpoint
    assert decisions[1]["best_checkpoint_uri"] == str((out / "checkpoint-14").resolve())
    steps = [s["step"] for s in served.get(f"/v1/jobs/{job_id}/scores")]
    assert steps == [2, 4, 6, 12, 14, 16, 18]  # 8 and 10 belonged to the first attempt


def test_a_rewind_the_trainer_cannot_do_stops_it_at_the_best(served: Served, tmp_path: Path) -> None:
    payload = {"external_ref": "run-2", "target": "dry-run", "detector": "evalstop:k=2",
               "metric": "eval_gold", "on_detect": "rewind", "correction": "kl_coef=0.5"}  # no beta
    r = served.http.post("/v1/jobs", json=payload, headers=served.auth(served.token))
    assert r.status_code == 201, r.text
    callback = EvalStopCallback("gold", remote=RemoteJob(served.url, r.json()["id"], token=served.token))
    trainer = make_trainer(tmp_path, SCORES, callback, learning_rate=LR, max_steps=24)
    with pytest.warns(UserWarning, match="cannot apply 'kl_coef'.*Stopping at the best checkpoint"):
        trainer.train()
    assert trainer.state.global_step == 10 and callback.rewinds == [] and callback.history.attempt == 0
