"""Issue 20's must-show: ``evalstop replay --cadence adaptive`` on bank runs, the same curves
pushed live through a real ``evalstop serve`` (a subprocess, HTTP over loopback) following the
``next_eval`` hints of its replies, and the HF callback on a real tiny Trainer (local, and remote
through that server) all ask for the same evals and reach the same decision."""

from __future__ import annotations

import csv
import io
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

httpx = pytest.importorskip("httpx", reason="needs pip install -e '.[service]'")
pytest.importorskip("fastapi", reason="needs pip install -e '.[service]'")
pytest.importorskip("transformers", reason="needs pip install -e '.[hf]'")

from test_int_hf_cadence import train  # noqa: E402

from evalstop.detectors import DEFAULT_SPEC, Eval, Monitor, parse_cadence, watch  # noqa: E402
from evalstop.integrations import EvalStopCallback, RemoteJob  # noqa: E402
from evalstop.integrations._remote import RemoteHistory  # noqa: E402
from evalstop.workloads.bank import build_bank  # noqa: E402

ADMIN = "admin-token-for-the-three-way-test"
CADENCE = "adaptive"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Serve:
    """``evalstop serve`` as its own process on a SQLite file, and a tenant's client."""

    def __init__(self, tmp: Path) -> None:
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.log = tmp / "serve.log"
        env = {**os.environ, "EVALSTOP_ADMIN_TOKEN": ADMIN}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "evalstop.cli", "serve", "--database-url", f"sqlite:///{tmp / 'e.db'}",
             "--port", str(port), "--log-level", "warning"],
            env=env, stdout=self.log.open("wb"), stderr=subprocess.STDOUT)
        self.http = httpx.Client(base_url=self.url, timeout=10)
        deadline = time.monotonic() + 60
        while True:
            assert self.proc.poll() is None, self.log.read_text()
            try:
                if self.http.get("/healthz").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "evalstop serve did not start"
            time.sleep(0.1)
        r = self.http.post("/v1/tenants", json={"name": "team-a"}, headers=_auth(ADMIN))
        assert r.status_code == 201, r.text
        self.token = str(r.json()["token"])
        self.refs = 0

    def job(self, **body: Any) -> dict[str, Any]:
        self.refs += 1
        payload = {"external_ref": f"run-{self.refs}", "target": "dry-run", "metric": "gold", **body}
        r = self.http.post("/v1/jobs", json=payload, headers=_auth(self.token))
        assert r.status_code == 201, r.text
        return dict(r.json())

    def post(self, job_id: str, body: dict[str, Any]) -> dict[str, Any]:
        r = self.http.post(f"/v1/jobs/{job_id}/scores", json=body,
                           headers=_auth(self.token))
        assert r.status_code == 200, r.text
        return dict(r.json())

    def close(self) -> None:
        self.http.close()
        self.proc.terminate()
        self.proc.wait(20)


@pytest.fixture(scope="module")
def serve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serve]:
    server = Serve(tmp_path_factory.mktemp("serve"))
    yield server
    server.close()


def _runs() -> list[Any]:
    """One run of every bank family (hacking, borderline and healthy; 10 to 40 evals)."""
    return build_bank(0, 1)


def _replay(tmp: Path, curves: dict[str, list[float]]) -> dict[str, dict[str, str]]:
    """``evalstop replay CURVES.csv --cadence adaptive``, as a user runs it; rows by job."""
    text = io.StringIO()
    writer = csv.writer(text)
    writer.writerow(["job_id", "step", "score", "progress"])
    for job, curve in curves.items():
        for i, score in enumerate(curve):
            writer.writerow([job, i + 1, repr(score), repr((i + 1) / len(curve))])
    path = tmp / "curves.csv"
    path.write_text(text.getvalue())
    done = subprocess.run([sys.executable, "-m", "evalstop.cli", "replay", str(path), "--cadence", CADENCE],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return {row["job_id"]: row for row in csv.DictReader(io.StringIO(done.stdout))}


def _push(serve: Serve, curve: list[float]) -> tuple[list[int], dict[str, Any]]:
    """Post to a job registered with the cadence only the evals its replies ask for: the first at
    the cadence's first opportunity, each next one at the reply's ``next_eval.step``."""
    job = serve.job(cadence=CADENCE, eval_interval=1)
    n, step, posted = len(curve), parse_cadence(job["cadence"]).first, []
    reply: dict[str, Any] = {}
    while step <= n:
        reply = serve.post(job["id"], {"step": step, "value": curve[step - 1], "progress": step / n})
        posted.append(step)
        hint = reply["next_eval"]
        if hint is None or hint["done"]:
            break
        step = hint["step"]
    return posted, reply


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _asked(curve: list[float]) -> list[int]:
    """The steps (1-based rows) of the evals the library's monitor asks for under the cadence."""
    n = len(curve)
    monitor = Monitor(DEFAULT_SPEC, parse_cadence(CADENCE))
    return [i + 1 for i in watch(monitor, [Eval(i + 1, s, (i + 1) / n) for i, s in enumerate(curve)])]


def _decision(stopped: Any, stop_step: Any, best_step: Any) -> tuple[bool, int | None, int | None]:
    def num(x: Any) -> int | None:
        return None if x in (None, "") else int(x)

    return (stopped in (True, "True", "true", "1"), num(stop_step), num(best_step))


def test_replay_serve_and_the_hf_callback_ask_for_the_same_evals(serve: Serve, tmp_path: Path) -> None:
    runs = _runs()
    curves = {r.job_id: [ev.score for ev in r.evals] for r in runs}
    replayed = _replay(tmp_path, curves)
    for job_id, curve in curves.items():
        asked = _asked(curve)
        row = replayed[job_id]
        expected = _decision(row["stopped"], row["stop_step"], row["best_step"])
        assert int(row["evals_used"]) == len(asked), job_id
        posted, reply = _push(serve, curve)
        assert posted == asked, job_id  # the service asked for exactly the evals replay used
        assert _decision(reply["decision"] == "stop", reply["stop_step"] if reply["decision"] == "stop"
                         else None, reply["best_step"]) == expected, job_id
    stops = [_decision(r["stopped"], None, None)[0] for r in replayed.values()]
    assert any(stops) and not all(stops)  # stops and runs to the end are both compared
    assert any(int(r["evals_used"]) < len(curves[j]) / 2 + 1 for j, r in replayed.items())

    # the HF callback on a real Trainer, on a hacking run: local, then through the service
    job_id = next(r.job_id for r in runs if r.truth.label == "hacking")
    curve = curves[job_id]
    asked = _asked(curve)
    expected = _decision(*(replayed[job_id][k] for k in ("stopped", "stop_step", "best_step")))
    local = EvalStopCallback("gold", cadence=CADENCE)
    train(tmp_path / "local", curve, local, eval_steps=3)
    assert [ev.step for ev in local.history.evals] == asked
    assert (local.verdict.stopped, local.verdict.stop_step, local.verdict.best_step) == expected
    job = serve.job(cadence=CADENCE, eval_interval=1)
    remote = EvalStopCallback("gold", remote=RemoteJob(serve.url, job["id"], token=serve.token))
    trainer = train(tmp_path / "remote", curve, remote, eval_steps=3)  # no cadence: the replies lead
    assert [ev.step for ev in remote.history.evals] == asked
    v = remote.verdict
    assert (v.stopped, v.stop_step, v.best_step) == expected
    assert v.stopped and trainer.state.global_step == v.stop_step  # stopped where the service decided
    stored = serve.http.get(f"/v1/jobs/{job['id']}/scores", headers=_auth(serve.token))
    assert [s["step"] for s in stored.json()] == asked


def test_the_remote_client_returns_the_hint_and_sends_the_stderr(serve: Serve) -> None:
    job = serve.job(cadence="adaptive:every=2", eval_interval=50, detector="evalstop:k=2")
    history = RemoteHistory(RemoteJob(serve.url, job["id"], token=serve.token))
    assert history.next_eval() is None  # no reply yet
    history.add(Eval(100, 0.5, stderr=0.01))
    hint = history.next_eval()
    assert hint is not None and (hint.after, hint.step, hint.elevated, hint.done) == (2, 200, False, False)
    history.add(Eval(200, 0.4))
    hint = history.next_eval()
    assert hint is not None and (hint.after, hint.step, hint.elevated) == (1, 250, True)
    verdict = history.add(Eval(250, 0.3))
    assert verdict is not None and verdict.stopped and history.fired_now and history.next_eval() is None
    assert (verdict.stop_step, verdict.best_step, verdict.best_index) == (250, 100, None)
    stored = serve.http.get(f"/v1/jobs/{job['id']}/scores", headers=_auth(serve.token)).json()
    assert [s["score_stderr"] for s in stored] == [0.01, None, None]
