"""Helpers shared by the service tests."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from typing import Any

from fastapi.testclient import TestClient

from evalstop.service.settings import ServiceSettings
from evalstop.testing.recording import RecordingAdapter

ADMIN = "admin-secret-token-for-tests"
RECORDING_PLUGIN = {"recording": "evalstop.testing.recording:RecordingAdapter"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def make_settings(url: str, **extra: Any) -> ServiceSettings:
    values: dict[str, Any] = {
        "database_url": url, "admin_token": ADMIN, "run_worker": False,
        "adapter_plugins": RECORDING_PLUGIN, "backoff_base_s": 0.01, "backoff_max_s": 0.05,
    }
    values.update(extra)
    return ServiceSettings(**values)


class Api:
    """A TestClient with helpers: create a tenant, register a job, post scores."""

    def __init__(self, client: TestClient) -> None:
        self.client = client
        self.ctx = client.app.state.ctx  # type: ignore[attr-defined]
        self._refs = 0

    def as_(self, token: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {token}"}

    def tenant(self, name: str, **body: Any) -> str:
        r = self.client.post("/v1/tenants", json={"name": name, **body}, headers=self.as_(ADMIN))
        assert r.status_code == 201, r.text
        return str(r.json()["token"])

    def job(self, token: str, **body: Any) -> dict[str, Any]:
        self._refs += 1  # a fresh reference per job (one live job per reference): ext-1, ext-2, ...
        payload = {"external_ref": f"ext-{self._refs}", "target": "recording", "detector": "evalstop:k=2",
                   **body}
        r = self.client.post("/v1/jobs", json=payload, headers=self.as_(token))
        assert r.status_code == 201, r.text
        return dict(r.json())

    def post(self, token: str, job_id: str, body: Any) -> Any:
        return self.client.post(f"/v1/jobs/{job_id}/scores", json=body, headers=self.as_(token))

    def adapter(self) -> RecordingAdapter:
        adapter = self.ctx.adapters.get("recording")
        assert isinstance(adapter, RecordingAdapter)
        return adapter


def wait_for(predicate: Callable[[], bool], timeout_s: float = 20.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
