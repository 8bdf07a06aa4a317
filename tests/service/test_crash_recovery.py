"""Crash recovery with real parts: `evalstop serve` as a subprocess on loopback with a SQLite file,
SIGKILLed while clients post scores and a stop is pending, then restarted on the same file.

After the restart: every acknowledged score is there, no decision was made twice, and every
stop took effect exactly once (the recording adapter appends each call, with its effect, to a
file that survives the kill).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from ._support import ADMIN, RECORDING_PLUGIN, free_port, wait_for

pytestmark = pytest.mark.slow

#: job name -> (curve, options). "drop" falls after step 6 (decided before the kill, pending
#: hard stop: it ignores the signal and has a 3 s grace); "late" falls after step 25 (decided
#: after the restart); "rise" never falls.
JOBS: dict[str, tuple[list[float], dict[str, Any]]] = {
    "drop": ([0.5 + 0.02 * i for i in range(6)] + [0.55 - 0.01 * i for i in range(34)],
             {"grace_period_s": 3.0, "target_options": {"obeys_signal": False}}),
    "late": ([0.5 + 0.01 * i for i in range(25)] + [0.7 - 0.01 * i for i in range(15)],
             {"grace_period_s": 0}),
    "rise": ([0.5 + 0.005 * i for i in range(40)], {"grace_period_s": 0}),
}


class Server:
    def __init__(self, tmp: Path) -> None:
        self.tmp, self.url_db = tmp, f"sqlite:///{tmp / 'evalstop.db'}"
        self.calls = tmp / "calls.jsonl"
        self.proc: subprocess.Popen[bytes] | None = None
        self.base = ""

    def start(self) -> None:
        port = free_port()
        env = {**os.environ, "EVALSTOP_ADMIN_TOKEN": ADMIN, "EVALSTOP_WORKER_POLL_S": "0.05",
               "EVALSTOP_WORKER_LEASE_S": "2",  # a row claimed at the kill is resumed after this
               "EVALSTOP_ADAPTER_PLUGINS": json.dumps(RECORDING_PLUGIN),
               "EVALSTOP_ADAPTER_SETTINGS": json.dumps({"recording": {"path": str(self.calls)}})}
        log = (self.tmp / "server.log").open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "evalstop.cli", "serve", "--database-url", self.url_db,
             "--port", str(port)],
            env=env, stdout=log, stderr=subprocess.STDOUT)
        self.base = f"http://127.0.0.1:{port}"
        wait_for(self._up, 60, "the server to answer /healthz")

    def _up(self) -> bool:
        assert self.proc is not None and self.proc.poll() is None, (self.tmp / "server.log").read_text()
        try:
            return httpx.get(self.base + "/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def kill(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        assert self.proc.wait(10) == -signal.SIGKILL

    def calls_for(self, ref: str) -> list[dict[str, Any]]:
        lines = self.calls.read_text().splitlines() if self.calls.exists() else []
        return [c for c in map(json.loads, lines) if c["ref"] == ref]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    srv = Server(tmp_path)
    yield srv
    if srv.proc is not None and srv.proc.poll() is None:
        srv.proc.terminate()
        srv.proc.wait(10)


def test_sigkill_mid_stream_loses_no_acknowledged_score_and_stops_exactly_once(server: Server) -> None:
    server.start()
    c = httpx.Client(base_url=server.base, timeout=5)
    token = c.post("/v1/tenants", json={"name": "acme"}, headers=_auth(ADMIN)).json()["token"]
    ids = {name: c.post("/v1/jobs", headers=_auth(token), json={
        "external_ref": f"ref-{name}", "target": "recording", "detector": "evalstop:k=2", **opts,
    }).json()["id"] for name, (_, opts) in JOBS.items()}

    acked: dict[str, list[tuple[int, float]]] = {name: [] for name in JOBS}
    killer: threading.Timer | None = None
    try:
        for step in range(40):
            for name, (curve, _) in JOBS.items():
                r = c.post(f"/v1/jobs/{ids[name]}/scores", headers=_auth(token),
                           json={"step": step, "value": curve[step], "checkpoint_uri": f"ckpt-{name}-{step}"})
                assert r.status_code == 200, r.text
                acked[name].append((step, curve[step]))
                if name == "drop" and r.json()["decided_now"]:
                    killer = threading.Timer(0.05, server.kill)  # kill while we keep posting
                    killer.start()
    except httpx.TransportError:
        pass
    assert killer is not None, "the 'drop' job was never decided"
    killer.join()
    assert 8 <= len(acked["drop"]) < 40, "the kill should land mid-stream"
    assert all(x["call"] != "hard_stop" for x in server.calls_for("ref-drop")), "hard stop must be pending"

    server.start()
    c = httpx.Client(base_url=server.base, timeout=5)
    for name, pairs in acked.items():  # nothing acknowledged is lost
        stored = c.get(f"/v1/jobs/{ids[name]}/scores", headers=_auth(token)).json()
        assert {(s["step"], s["value"]) for s in stored} >= set(pairs)
    for name, (curve, _) in JOBS.items():  # clients re-send and finish their curves
        body = {"scores": [{"step": s, "value": v} for s, v in enumerate(curve)]}
        r = c.post(f"/v1/jobs/{ids[name]}/scores", headers=_auth(token), json=body)
        assert r.status_code == 200, r.text
        assert r.json()["duplicates"] >= len(acked[name])

    wait_for(lambda: all(_state(c, token, ids[n]) == "stopped" for n in ("drop", "late")), 30,
             "both falling jobs to be stopped")
    decisions = {n: c.get(f"/v1/jobs/{ids[n]}/decisions", headers=_auth(token)).json() for n in JOBS}
    assert [len(decisions[n]) for n in JOBS] == [1, 1, 0]
    assert decisions["drop"][0]["step"] == 7 and decisions["late"][0]["step"] == 26
    assert _state(c, token, ids["rise"]) == "running"
    drop, late = server.calls_for("ref-drop"), server.calls_for("ref-late")
    assert sum(x["effect"] for x in drop if x["call"] == "hard_stop") == 1
    assert not any(x["stops"] for x in drop if x["call"] == "signal")  # it ignored the signal
    assert sum(x["stops"] for x in late) == 1
    assert {x["checkpoint_uri"] for x in drop if x["call"] == "pin_checkpoint"} == {"ckpt-drop-5"}
    assert server.calls_for("ref-rise") == []
    log = (server.tmp / "server.log").read_text()
    assert ADMIN not in log and token not in log


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _state(c: httpx.Client, token: str, job_id: str) -> str:
    return str(c.get(f"/v1/jobs/{job_id}", headers=_auth(token)).json()["state"])
