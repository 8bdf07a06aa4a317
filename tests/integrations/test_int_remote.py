"""Remote mode against the real EvalStop service, served by uvicorn over loopback HTTP."""

from __future__ import annotations

import math
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi", reason="needs pip install -e '.[service]'")
uvicorn = pytest.importorskip("uvicorn", reason="needs pip install -e '.[service]'")
httpx = pytest.importorskip("httpx", reason="needs pip install -e '.[service]'")
service_app = pytest.importorskip("evalstop.service.app", reason="the EvalStop service is not in this tree")

from evalstop.detectors import Eval, KDeclines  # noqa: E402
from evalstop.integrations import RemoteJob  # noqa: E402
from evalstop.integrations._remote import RemoteHistory  # noqa: E402
from evalstop.service.settings import ServiceSettings  # noqa: E402

ADMIN = "admin-token-for-integration-tests"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Service:
    """The real service app in a uvicorn thread, plus the admin calls a platform would make."""

    def __init__(self, tmp: Path) -> None:
        settings = ServiceSettings(database_url=f"sqlite:///{tmp / 'evalstop.db'}", admin_token=ADMIN,
                                   run_worker=False)
        self.url = f"http://127.0.0.1:{free_port()}"
        port = int(self.url.rsplit(":", 1)[1])
        config = uvicorn.Config(service_app.create_app(settings), host="127.0.0.1", port=port,
                                log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert time.monotonic() < deadline, "the service did not start"
            time.sleep(0.05)
        self.http = httpx.Client(base_url=self.url, timeout=10)
        r = self.http.post("/v1/tenants", json={"name": "team-a"}, headers=self._auth(ADMIN))
        assert r.status_code == 201, r.text
        self.token = str(r.json()["token"])

    def _auth(self, token: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {token}"}

    def job(self, **body: Any) -> str:
        payload = {"external_ref": "run-1", "target": "dry-run", "detector": "evalstop:k=2", **body}
        r = self.http.post("/v1/jobs", json=payload, headers=self._auth(self.token))
        assert r.status_code == 201, r.text
        return str(r.json()["id"])

    def get(self, path: str) -> Any:
        r = self.http.get(path, headers=self._auth(ADMIN))
        assert r.status_code == 200, r.text
        return r.json()

    def close(self) -> None:
        self.http.close()
        self.server.should_exit = True
        self.thread.join(timeout=10)


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    svc = Service(tmp_path)
    yield svc
    svc.close()


def test_remote_history_follows_the_service_decision(service: Service) -> None:
    job_id = service.job(metric="gold")
    history = RemoteHistory(RemoteJob(service.url, job_id, token=service.token), "gold", lambda s: f"ck-{s}")
    scores = [0.2, 0.4, math.nan, 0.6, 0.5, 0.45, 0.7]
    fired = []
    for step, score in enumerate(scores, start=1):
        history.add(Eval(step, score))
        fired.append(history.fired_now)
    local = KDeclines(k=2).evaluate([Eval(s, v) for s, v in enumerate(scores, start=1)])
    assert fired == [False, False, False, False, False, True, True]  # the stop is final: step 7 not sent
    assert (history.verdict.stop_step, history.verdict.best_step) == (local.stop_step, local.best_step)
    assert history.verdict.n_invalid == 1 and len(history.evals) == 6
    stored = service.get(f"/v1/jobs/{job_id}/scores")
    assert [s["step"] for s in stored] == [1, 2, 4, 5, 6]  # NaN never sent
    assert service.get(f"/v1/jobs/{job_id}")["state"] != "running"
    decision = service.get(f"/v1/jobs/{job_id}/decisions")[-1]
    assert decision["best_checkpoint_uri"] == "ck-4" and decision["best_step"] == 4


def test_unreachable_service_warns_and_continues() -> None:
    history = RemoteHistory(RemoteJob(f"http://127.0.0.1:{free_port()}", "job-x", timeout_s=2))
    with pytest.warns(UserWarning, match="the job continues"):
        verdict = history.add(Eval(1, 0.5))
    assert verdict is not None and not verdict.stopped and history.n_failed == 1


def test_remote_job_validation() -> None:
    with pytest.raises(ValueError, match="'url' parameter of RemoteJob"):
        RemoteJob("localhost:8000", "j")
    with pytest.raises(ValueError, match="'timeout_s' parameter of RemoteJob"):
        RemoteJob("http://x", "j", timeout_s=0)
    assert "secret" not in repr(RemoteJob("http://x", "j", token="secret"))


def test_hf_trainer_obeys_the_service(service: Service, tmp_path: Path) -> None:
    pytest.importorskip("transformers", reason="needs pip install -e '.[hf]'")
    from test_int_hf import RISE_THEN_FALL, make_trainer

    from evalstop.integrations import EvalStopCallback

    job_id = service.job(metric="eval_gold")
    callback = EvalStopCallback("eval_gold", remote=RemoteJob(service.url, job_id, token=service.token))
    trainer = make_trainer(tmp_path, RISE_THEN_FALL, callback, save_strategy="no")
    trainer.train()
    out = tmp_path / "out"
    assert trainer.state.global_step == 10
    assert trainer.state.best_model_checkpoint == str(out / "checkpoint-6")
    decision = service.get(f"/v1/jobs/{job_id}/decisions")[-1]
    assert decision["best_step"] == 6
    assert decision["best_checkpoint_uri"] == str((out / "checkpoint-6").resolve())
    assert Path(decision["best_checkpoint_uri"]).is_dir()
    with pytest.raises(ValueError, match="not both"):
        EvalStopCallback("eval_gold", "evalstop", remote=RemoteJob(service.url, job_id))


def test_the_remote_client_follows_the_registrations_first_hint(service: Service) -> None:
    job = RemoteJob.register(service.url, token=service.token, external_ref="run-h", target="dry-run",
                             detector="evalstop:k=2", cadence="every:4", eval_interval=25)
    assert job.first_eval == {"after": 4, "step": 100, "elevated": False, "done": False}
    history = RemoteHistory(job)
    first = history.next_eval()
    assert first is not None and (first.after, first.step) == (4, 100)  # before any score
    history.add(Eval(100, 0.5))
    after = history.next_eval()
    assert after is not None and after.step == 200  # then each reply's hint
    plain = RemoteHistory(RemoteJob(service.url, job.job_id, token=service.token))
    assert plain.next_eval() is None  # no registration hint given: as before
    with pytest.raises(ValueError, match=r"HTTP 422.*cadence"):
        RemoteJob.register(service.url, token=service.token, external_ref="run-x", target="dry-run",
                           cadence="sometimes")
