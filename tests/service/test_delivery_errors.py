"""A delivery error shown to a tenant names only what the tenant gave or owns (issue 22 loose
end): what a backend says (an HTTP error body, Slurm's stderr) may name another tenant's job,
account or user, so it goes to the service log, never into the job's deliveries or history."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from fastapi.testclient import TestClient

from evalstop.service.adapters._base import AdapterError
from evalstop.service.adapters._slurm import Result, classify
from evalstop.service.app import create_app

from ._support import ADMIN, Api, make_settings

LEAK = "Account=alice-private UserId=alice(1001) JobName=alices-secret-run"


class Ray(BaseHTTPRequestHandler):
    """A loopback stand-in for the Ray dashboard whose stop fails with a body naming another
    tenant's account (as a backend's error text may)."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *_: Any) -> None:
        pass

    def do_POST(self) -> None:
        data = f"internal error: {LEAK}".encode()
        self.send_response(500)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def ray_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Ray)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_backends_words_reach_the_log_but_never_the_tenant(
    sqlite_url: str, ray_url: str, caplog: pytest.LogCaptureFixture,
) -> None:
    settings = make_settings(sqlite_url, worker_max_attempts=2,
                             adapter_settings={"ray": {"address": ray_url, "timeout_s": 5.0}})
    with TestClient(create_app(settings)) as client:
        api = Api(client)
        scope = {"ray": {"job_id_prefixes": ["rs_m"]}}
        r = client.post("/v1/tenants", json={"name": "mallory", "scope": scope}, headers=api.as_(ADMIN))
        token = r.json()["token"]
        r = client.post("/v1/jobs", json={"external_ref": "rs_m_1", "target": "ray", "grace_period_s": 0},
                        headers=api.as_(token))
        assert r.status_code == 201, r.text
        job_id = r.json()["id"]
        r = client.put(f"/v1/jobs/{job_id}/override", json={"override": "stop_now"}, headers=api.as_(token))
        assert r.status_code == 200, r.text
        with caplog.at_level(logging.WARNING, logger="evalstop.service.worker"):
            for _ in range(2):  # two attempts; the retry's backoff is 0.01-0.05 s in tests
                api.ctx.worker.run_once()
                threading.Event().wait(0.1)
        job = client.get(f"/v1/jobs/{job_id}", headers=api.as_(token)).json()
        history = client.get(f"/v1/jobs/{job_id}/delivery-history", headers=api.as_(token)).json()
        assert job["state"] == "stop_failed", job
        shown = " ".join([job["deliveries"][0]["last_error"] or "", *(h["error"] or "" for h in history)])
        assert "HTTP 500" in shown and "rs_m_1" in shown  # what failed, in the tenant's own terms
        for private in ("alice", "Account", "alices-secret-run"):
            assert private not in shown
        page = client.get(f"/v1/jobs/{job_id}", headers=api.as_(token)).text
        assert "alice" not in page
    assert LEAK in caplog.text  # the operator still sees what Ray said


@pytest.mark.parametrize(("stderr", "shown"), [
    (f"scontrol: error: {LEAK}\n", ""),
    ("scancel: error: Kill job error on job id 5: Access/permission denied\n", ""),
    ("scontrol: error: Unable to contact slurm controller (connect failure)\n",
     "(Unable to contact slurm controller)"),
])
def test_slurms_stderr_is_detail_not_message(stderr: str, shown: str) -> None:
    with pytest.raises(AdapterError) as err:
        classify("slurm pin for job j1", Result(1, "", stderr))
    assert str(err.value) == f"slurm pin for job j1: exit 1{' ' + shown if shown else ''}"
    assert err.value.detail == stderr.strip()
