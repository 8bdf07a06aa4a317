"""The Ray engine: each job is one Ray job, submitted through the Jobs API with
``entrypoint_resources={"slot": width}``, on the private head (:func:`.ray_head.start_ray`) or on
an existing cluster (:func:`.cluster.connect_ray`, ``--ray-address``).

The reference is the submission id ``<arm>-<run id>-<job>``, chosen before the submission (so
the job is registered with the service first); the run id keeps runs on a shared cluster apart,
and the arm's tenant may touch only its own prefix. Ray's own start and end times (ms) are the
job's times; a job is over when Ray reports SUCCEEDED, STOPPED or FAILED. The service stops it
through the Ray Jobs adapter (``POST /api/jobs/{id}/stop``: SIGTERM, SIGKILL after
``RAY_JOB_STOP_WAIT_TIME_S``). On an existing cluster, ``close()`` stops this run's jobs that
are still running and nothing else.
"""

from __future__ import annotations

import contextlib
import shlex
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import replace
from pathlib import Path
from typing import Any

from .cluster import SLOT, Proc, api, connect_ray, stop
from .engine import Status
from .ray_head import start_ray

TERMINAL = frozenset({"SUCCEEDED", "STOPPED", "FAILED"})
#: The name Ray gives a submission's supervisor actor (ray.dashboard.modules.job.common).
SUPERVISOR = "_ray_internal_job_actor_{}"
POLL_S = 0.1


class RayEngine:
    target = "ray"
    clock_s = 0.001

    def __init__(self, head: Proc, run_id: str = "") -> None:
        self.head = head
        self.slots = int(head.info["slots"])
        self.run_id = run_id
        self._local = threading.local()  # one client per thread: the two arms poll at once
        self._clients: list[Any] = []
        self._lock = threading.Lock()

    @classmethod
    def start(cls, root: Path, slots: int, run_id: str = "") -> RayEngine:
        return cls(start_ray(root, slots), run_id)

    @classmethod
    def connect(cls, address: str, slots: int, run_id: str = "") -> RayEngine:
        return cls(connect_ray(address, slots), run_id)

    @property
    def _api(self) -> Any:
        client = getattr(self._local, "client", None)
        if client is None:
            client = self._local.client = api(self.head.info["address"], self.head.info["token"])
            with self._lock:
                self._clients.append(client)
        return client

    def prefix(self, arm: str) -> str:
        """The submission-id prefix of ``arm``'s jobs in this run (the arm tenant's scope)."""
        return f"{arm}-{self.run_id}-" if self.run_id else f"{arm}-"

    def adapter_settings(self) -> dict[str, Any]:
        return {"ray": {"address": self.head.info["address"], "token": self.head.info["token"]}}

    def tenant_scope(self, arm: str) -> dict[str, Any]:
        return {"ray": {"job_id_prefixes": [self.prefix(arm)], "metadata": {"evalstop_arm": arm}}}

    def submit(
        self,
        arm: str,
        name: str,
        argv: list[str],
        job_dir: Path,
        register: Callable[[str], None],
        *,
        width: int = 1,
    ) -> str:
        sid = self.prefix(arm) + name
        register(sid)
        resp = self._api.post(
            "/api/jobs/",
            json={
                "entrypoint": shlex.join(argv),
                "submission_id": sid,
                "entrypoint_resources": {SLOT: width},
                "metadata": {"evalstop_arm": arm},
            },
        )
        if resp.status_code >= 400:
            raise RuntimeError(f"Ray refused job {sid}: {resp.status_code} {resp.text[:500]}")
        return sid

    def poll(self, refs: Collection[str]) -> dict[str, Status] | None:
        """One ``GET /api/jobs/{id}`` per running job: the cost follows this arm's running jobs,
        not every job the cluster has ever run (``GET /api/jobs/`` lists them all, and on a
        shared cluster that list only grows)."""
        import httpx

        out: dict[str, Status] = {}
        for ref in refs:
            try:
                resp = self._api.get(f"/api/jobs/{ref}")
            except httpx.TransportError:  # a busy dashboard: poll again (the arm's timeout bounds it)
                return None
            if resp.status_code >= 500:
                return None
            if resp.status_code == 404:  # not known yet: the submission is still being recorded
                continue
            resp.raise_for_status()
            status = _status(resp.json())
            out[ref] = replace(status, slots=self._reserved(ref)) if status.terminal else status
        return out

    def _reserved(self, ref: str) -> int | None:
        """The slots Ray reserved for the job: the ``required_resources`` of its supervisor actor
        (created with the job's ``entrypoint_resources``), from the state API. The Jobs API
        itself does not report them. None when the state API does not answer."""
        import httpx

        query = {
            "filter_keys": "name",
            "filter_predicates": "=",
            "filter_values": SUPERVISOR.format(ref),
            "detail": "true",
        }
        try:
            resp = self._api.get("/api/v0/actors", params=query)
            found = resp.json()["data"]["result"]["result"] if resp.status_code == 200 else []
        except (httpx.HTTPError, ValueError, KeyError, TypeError):
            return None
        slots = (found[0].get("required_resources") or {}).get(SLOT) if found else None
        return int(slots) if isinstance(slots, (int, float)) else None

    def warm_up(self, argv: list[str], timeout_s: float = 180.0) -> float:
        started = time.time()
        body = {"entrypoint": shlex.join(argv), "entrypoint_resources": {SLOT: 1}}
        resp = self._first_submit(body, started + timeout_s)
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

    def _first_submit(self, body: dict[str, Any], deadline: float) -> Any:
        """POST a job, again while a just-started head's job agent is not up: the Jobs API answers
        before it, and a submission then fails with 500 "No available agent" (seen at load 20)
        or the connection drops."""
        import httpx

        while True:
            try:
                resp = self._api.post("/api/jobs/", json=body)
                if resp.status_code < 500 or time.time() > deadline:
                    return resp
            except httpx.TransportError:
                if time.time() > deadline:
                    raise
            time.sleep(1.0)

    def close(self) -> None:
        if self.head.proc is None:  # an existing cluster: stop what this run submitted, leave the rest
            self._stop_our_jobs()
        with self._lock:
            for client in self._clients:
                client.close()
            self._clients.clear()
        stop(self.head)

    def _stop_our_jobs(self) -> None:
        import httpx

        prefixes = tuple(self.prefix(arm) for arm in ("shadow", "enforced"))
        client = api(self.head.info["address"], self.head.info["token"])
        with contextlib.suppress(httpx.HTTPError), client:
            for job in client.get("/api/jobs/").json():
                sid = str(job.get("submission_id") or "")
                if sid.startswith(prefixes) and job.get("status") not in TERMINAL:
                    client.post(f"/api/jobs/{sid}/stop")


def _status(info: dict[str, Any]) -> Status:
    state = str(info.get("status"))
    return Status(state, state in TERMINAL, _ms(info.get("start_time")), _ms(info.get("end_time")))


def _ms(value: Any) -> float | None:
    """A Ray time in ms since the epoch as seconds (None when Ray has none)."""
    return value / 1000 if isinstance(value, (int, float)) and value > 0 else None
