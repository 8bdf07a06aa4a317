"""The Slurm adapter: a real single-node Slurm started by the test, plus the error table."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from enforce_http import JsonHandler, serve
from slurm_cluster import SlurmCluster

from evalstop.service.adapters import AdapterError, JobRef, NotOwned, get_adapter
from evalstop.service.adapters._common import PIN_MARKER
from evalstop.service.adapters._slurm import Result, classify
from evalstop.testing.adapter_contract import check_stop_sequence, check_unknown_job, wait_stopped

TRAINER = """#!/bin/bash
trap '{on_term}' TERM
echo up > {out}/ready
sleep 600 &
wait
wait
"""


def submit(slurm: SlurmCluster, out: Path, on_term: str) -> str:
    script = out / "train.sh"
    script.write_text(TRAINER.format(on_term=on_term, out=out))
    job_id = slurm.sbatch(script)
    deadline = time.monotonic() + 60
    while not (out / "ready").exists():
        assert time.monotonic() < deadline, f"job {job_id} never started"
        time.sleep(0.2)
    return job_id


@pytest.fixture(params=["cli", "rest"])
def make_adapter(request: pytest.FixtureRequest, slurm: SlurmCluster) -> Any:
    """Builds the adapter for both transports: the CLI, and slurmrestd on a unix socket."""
    extra_base: dict[str, Any] = {"slurm_conf": str(slurm.conf)}
    if request.param == "rest":
        extra_base = {"rest_socket": str(request.getfixturevalue("rest_socket"))}

    def build(**extra: Any) -> Any:
        return get_adapter("slurm", {**extra_base, **extra})

    return build


@pytest.mark.slow
def test_stop_sequence_pins_then_signals(slurm: SlurmCluster, make_adapter: Any, tmp_path: Path) -> None:
    job_id = submit(slurm, tmp_path, f"echo got-term > {tmp_path}/term; exit 0")
    ckpt = tmp_path / "checkpoint-800"
    ckpt.mkdir()
    job = JobRef("job-1", "acme", job_id)
    adapter = make_adapter()
    adapter.pin_checkpoint(job, str(ckpt))
    assert adapter.states(job) == ["RUNNING"]  # pinned before any stop
    assert PIN_MARKER in {p.name for p in ckpt.iterdir()}
    show = subprocess.run(["scontrol", "show", "job", job_id], env=slurm.env, capture_output=True,
                          text=True, check=True).stdout
    assert f"Comment=evalstop-pin:{ckpt}" in show
    check_stop_sequence(adapter, job, str(ckpt), timeout_s=30)
    assert (tmp_path / "term").read_text().strip() == "got-term"


@pytest.mark.slow
def test_job_ignoring_sigterm_is_killed(slurm: SlurmCluster, make_adapter: Any, tmp_path: Path) -> None:
    job_id = submit(slurm, tmp_path, "")  # trap '' TERM: the shell and its sleep ignore SIGTERM
    job = JobRef("job-2", "acme", job_id)
    adapter = make_adapter()
    adapter.signal(job)
    time.sleep(1)
    assert adapter.is_stopped(job) is False  # SIGTERM ignored: still running
    adapter.hard_stop(job)
    assert wait_stopped(adapter, job, timeout_s=30)
    assert adapter.states(job) in ([], ["CANCELLED"])


@pytest.mark.slow
def test_queued_job_is_cancelled_by_signal(slurm: SlurmCluster, make_adapter: Any, tmp_path: Path) -> None:
    script = tmp_path / "later.sh"
    script.write_text("#!/bin/bash\nsleep 600\n")
    job = JobRef("job-q", "acme", slurm.sbatch(script, "--begin=now+3600"))
    adapter = make_adapter(timeout_s=10)
    assert adapter.states(job) == ["PENDING"] and adapter.is_stopped(job) is False
    adapter.signal(job)
    assert wait_stopped(adapter, job, timeout_s=10) and adapter.states(job) == ["CANCELLED"]


@pytest.mark.slow
def test_ownership_is_checked_with_slurm(slurm: SlurmCluster, make_adapter: Any, tmp_path: Path) -> None:
    """The job runs under account 'alpha' as root in partition 'debug': a tenant scoped to
    another account, user or partition is refused, whatever reference it registered."""
    job_id = _submit_as(slurm, tmp_path, "alpha")
    adapter = make_adapter()
    allowed = [{"accounts": ["alpha"]}, {"users": ["root"], "partitions": ["debug"]},
               {"accounts": ["x", "alpha"], "users": ["root"]}]
    # the reason names the field, never its value: a refused tenant learns nothing of the job's owner
    refused = [({"accounts": ["beta"]}, "the account of"), ({"users": ["nobody"]}, "the user of"),
               ({"accounts": ["alpha"], "partitions": ["gpu"]}, "the partition of")]
    for scope in allowed:
        adapter.check_owner(JobRef("j", "alice", job_id, scope={"slurm": scope}))
    for scope, says in refused:
        with pytest.raises(NotOwned, match=says):
            adapter.check_owner(JobRef("j", "mallory", job_id, scope={"slurm": scope}))
    with pytest.raises(NotOwned, match="no slurm scope"):
        adapter.check_owner(JobRef("j", "mallory", job_id, scope={}))
    adapter.check_owner(JobRef("j", "mallory", "999999", scope={"slurm": {"accounts": ["beta"]}}))  # gone
    with pytest.raises(NotOwned, match="Slurm does not know job '999999'"):  # at registration: refused
        adapter.check_owner(JobRef("j", "mallory", "999999", scope={"slurm": {"accounts": ["beta"]}}),
                            must_exist=True)
    adapter.check_owner(JobRef("j", "alice", job_id, scope={"slurm": allowed[0]}), must_exist=True)
    adapter.hard_stop(JobRef("j", "alice", job_id))


def _submit_as(slurm: SlurmCluster, out: Path, account: str) -> str:
    script = out / "own.sh"
    script.write_text("#!/bin/bash\nsleep 600\n")
    return slurm.sbatch(script, f"--account={account}")


@pytest.mark.slow
def test_unknown_job_counts_as_stopped(slurm: SlurmCluster, make_adapter: Any) -> None:
    check_unknown_job(make_adapter(), JobRef("job-3", "acme", "999999"))


def test_missing_controller_config_is_retryable_timeout() -> None:
    adapter = get_adapter("slurm", {"slurm_conf": "/nonexistent/slurm.conf", "timeout_s": 1.5})
    if shutil.which("scancel") is None:
        pytest.skip("scancel not installed")
    with pytest.raises(AdapterError) as err:
        adapter.hard_stop(JobRef("job-4", "acme", "12"))
    assert err.value.retryable is True


# Replies recorded from Slurm 22.05 (scancel / scontrol / squeue), exit code and stderr.
RECORDED = [
    (Result(0, "", ""), "ok"),
    (Result(0, "", "scancel: error: Kill job error on job id 99999: Invalid job id specified\n"), "gone"),
    (Result(1, "", "scancel: error: Kill job error on job id 99999: Invalid job id specified\n"), "gone"),
    (Result(1, "", "Job has already finished for job 1\n"), "gone"),
    (Result(1, "", "Invalid job id specified for job 99999\n"), "gone"),
    (Result(1, "", "slurm_load_jobs error: Invalid job id specified\n"), "gone"),
    # exit status = Slurm errno & 0xff, whatever the message says (issue 9: exit 229 was "failed")
    (Result(229, "", ""), "gone"),  # 2021 ESLURM_ALREADY_DONE: already completing or completed
    (Result(229, "", "slurm_update error: Job/step already completing or completed\n"), "gone"),
    (Result(225, "", ""), "gone"),  # 2017 ESLURM_INVALID_JOB_ID
    # recorded on the test cluster (Slurm 22.05), job in COMPLETING / COMPLETED state:
    (Result(1, "", "scancel: error: Kill job error on job id 1: Invalid job id specified\n"), "gone"),
    (Result(1, "", "Job has already finished for job 1\n"), "gone"),
]
RECORDED_ERRORS = [
    (Result(1, "", "scancel: error: Unable to contact slurm controller (connect failure)\n"), True),
    (Result(1, "", "squeue: error: slurm_receive_msg: Socket timed out on send/recv operation\n"), True),
    (Result(1, "", "scancel: error: Kill job error on job id 1: Job can not be altered now, "
                   "try again later\n"), True),
    (Result(1, "", "scancel: error: Kill job error on job id 5: Access/permission denied\n"), False),
    (Result(1, "", "scontrol: error: Invalid user for SlurmUser root, ignored\n"), False),
    (Result(228, "", ""), True),  # 2020 ESLURM_TRANSITION_STATE_NO_UPDATE
]


@pytest.mark.parametrize(("result", "expected"), RECORDED)
def test_recorded_replies_classify(result: Result, expected: str) -> None:
    assert classify("slurm x", result) == expected


@pytest.mark.parametrize(("result", "retryable"), RECORDED_ERRORS)
def test_recorded_errors_classify(result: Result, retryable: bool) -> None:
    with pytest.raises(AdapterError, match=f"slurm x: exit {result.returncode}") as err:
        classify("slurm x", result)
    assert err.value.retryable is retryable


@pytest.mark.parametrize("ref", ["", "abc", "12;rm -rf /", "12_x", "-1"])
def test_bad_job_id_is_permanent(ref: str) -> None:
    with pytest.raises(AdapterError, match="must be a Slurm job id") as err:
        get_adapter("slurm", {}).signal(JobRef("job-5", "acme", ref))
    assert err.value.retryable is False


def test_missing_binary_is_permanent(tmp_path: Path) -> None:
    with pytest.raises(AdapterError, match="command 'scancel' not found") as err:
        get_adapter("slurm", {"bin_dir": str(tmp_path)}).hard_stop(JobRef("job-6", "acme", "12"))
    assert err.value.retryable is False


# slurmrestd v0.0.38 bodies recorded from Slurm 22.05 (meta block trimmed).
REST_REPLIES = {
    "unknown": (500, {"errors": [{"description": "Unable to find JobId=99999", "error_number": 2017,
                                  "error": "Invalid job id specified", "source": "slurm_load_job"}]}),
    "busy": (500, {"errors": [{"description": "unable to kill JobId=2 with signal 15: Job can not be altered "
                               "now, try again later", "error_number": 2020,
                               "error": "Job can not be altered now, try again later"}]}),
    "bare500": (500, {"errors": []}),
    "denied": (401, {"errors": [{"error": "Authentication failure"}]}),
    "running": (200, {"errors": [], "jobs": [{"job_id": 7, "job_state": "RUNNING"}]}),
    "flags": (200, {"errors": [], "jobs": [{"job_id": 7, "job_state": ["CANCELLED"]}]}),
}


class RecordedRest(JsonHandler):
    def do_GET(self) -> None:
        self.server.state["headers"] = dict(self.headers)  # type: ignore[attr-defined]
        code, body = REST_REPLIES[self.server.state["reply"]]  # type: ignore[attr-defined]
        self.reply(code, body)

    do_DELETE = do_GET
    do_POST = do_GET


@pytest.mark.parametrize(("reply", "outcome"), [
    ("unknown", True), ("running", False), ("flags", True), ("busy", "retryable"), ("bare500", "retryable"),
    ("denied", "permanent"),
])
def test_rest_recorded_replies(reply: str, outcome: bool | str) -> None:
    state = {"reply": reply}
    with serve(RecordedRest, state) as url:
        adapter = get_adapter("slurm", {"rest_url": url, "user": "svc", "token": "jwt-123"})
        job = JobRef("job-7", "acme", "7")
        if isinstance(outcome, bool):
            assert adapter.is_stopped(job) is outcome
        else:
            with pytest.raises(AdapterError, match="slurm reconcile for job job-7") as err:
                adapter.is_stopped(job)
            assert err.value.retryable is (outcome == "retryable")
    headers = {k.lower(): v for k, v in state["headers"].items()}
    assert (headers["x-slurm-user-name"], headers["x-slurm-user-token"]) == ("svc", "jwt-123")
