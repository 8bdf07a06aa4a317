"""The Ray engine: each job is one Ray job on the private head (:func:`.cluster.start_ray`),
submitted through the Jobs API with ``entrypoint_resources={"slot": 1}``.

The reference is the submission id ``<arm>-<job>``, chosen before the submission (so the job is
registered with the service first). Ray's own start and end times (ms) are the job's times; a
job is over when Ray reports SUCCEEDED, STOPPED or FAILED. The service stops it through the Ray
Jobs adapter (``POST /api/jobs/{id}/stop``: SIGTERM, SIGKILL after ``RAY_JOB_STOP_WAIT_TIME_S``).
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

from .cluster import SLOT, Proc, api, start_ray, stop
from .engine import Status

TERMINAL = frozenset({"SUCCEEDED", "STOPPED", "FAILED"})
POLL_S = 0.1


class RayEngine:
    target = "ray"
    clock_s = 0.001

    def __init__(self, head: Proc) -> None:
        self.head = head
        self.slots = int(head.info["slots"])
        self._api = api(head.info["address"], head.info["token"])

    @classmethod
    def start(cls, root: Path, slots: int) -> RayEngine:
        return cls(start_ray(root, slots))

    def adapter_settings(self) -> dict[str, Any]:
        return {"ray": {"address": self.head.info["address"], "token": self.head.info["token"]}}

    def tenant_scope(self, arm: str) -> dict[str, Any]:
        return {"ray": {"job_id_prefixes": [f"{arm}-"], "metadata": {"evalstop_arm": arm}}}

    def submit(
        self, arm: str, name: str, argv: list[str], job_dir: Path, register: Callable[[str], None]
    ) -> str:
        sid = f"{arm}-{name}"
        register(sid)
        resp = self._api.post(
            "/api/jobs/",
            json={
                "entrypoint": shlex.join(argv),
                "submission_id": sid,
                "entrypoint_resources": {SLOT: 1},
                "metadata": {"evalstop_arm": arm},
            },
        )
        if resp.status_code >= 400:
            raise RuntimeError(f"Ray refused job {sid}: {resp.status_code} {resp.text[:500]}")
        return sid

    def poll(self, refs: Collection[str]) -> dict[str, Status] | None:
        import httpx

        try:
            resp = self._api.get("/api/jobs/")
        except httpx.TransportError:  # a busy dashboard: poll again (the arm's timeout bounds it)
            return None
        if resp.status_code >= 500:
            return None
        resp.raise_for_status()
        by_sid = {j.get("submission_id"): j for j in resp.json()}
        return {ref: _status(by_sid[ref]) for ref in refs if ref in by_sid}

    def warm_up(self, argv: list[str], timeout_s: float = 180.0) -> float:
        started = time.time()
        body = {"entrypoint": shlex.join(argv), "entrypoint_resources": {SLOT: 1}}
        resp = self._api.post("/api/jobs/", json=body)
        # The jobs API answers before the job agent is up: a submission then fails with 500 "No
        # available agent" (seen at load 20). The warm-up is the first job: retry it until then.
        while resp.status_code >= 500 and time.time() - started < timeout_s:
            time.sleep(1.0)
            resp = self._api.post("/api/jobs/", json=body)
        if resp.status_code >= 400:
            raise RuntimeError(f"Ray refused the warm-up job: {resp.status_code} {resp.text[:500]}")
        sid = resp.json()["submission_id"]
        while time.time() - started < timeout_s:
            status = self._api.get(f"/api/jobs/{sid}").json().get("status")
            if status == "SUCCEEDED":
                return time.time() - started
            if status in TERMINAL:
                logs = self._api.get(f"/api/jobs/{sid}/logs").json().get("logs", "")
                raise RuntimeError(f"the warm-up job ended {status}: {logs[-2000:]}")
            time.sleep(POLL_S)
        raise TimeoutError(f"the warm-up job did not finish in {timeout_s} s")

    def close(self) -> None:
        self._api.close()
        stop(self.head)


def _status(info: dict[str, Any]) -> Status:
    state = str(info.get("status"))
    return Status(state, state in TERMINAL, _ms(info.get("start_time")), _ms(info.get("end_time")))


def _ms(value: Any) -> float | None:
    """A Ray time in ms since the epoch as seconds (None when Ray has none)."""
    return value / 1000 if isinstance(value, (int, float)) and value > 0 else None
