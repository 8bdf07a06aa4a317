"""The Slurm engine: each job is one batch job on a private single-node Slurm
(:mod:`.slurm_cluster`, one CPU per slot), submitted with ``sbatch``: one task with ``width``
CPUs (``--ntasks=1 --cpus-per-task=width``; the node allocates CPUs one by one, ``CR_CPU``, so a
job of width ``w`` holds ``w`` slots until it ends).

The reference is the Slurm job id, which exists only once ``sbatch`` answers: the job is
submitted held (``--hold``), registered with the service, then released (``scontrol release``),
so it always finds its service id. Each arm's jobs run under their own Slurm account (the arm's
name), which is what the arm's tenant scope allows. The service stops a job through the Slurm
adapter (``target=slurm``, the CLI transport: ``scontrol update Comment=evalstop-pin:<uri>``,
``scancel --signal=TERM --full``, ``scancel`` after the grace period). A job that ends on that
SIGTERM exits 0, so Slurm calls it COMPLETED: the adapter's pin comment on the job record is
what tells it from a job that ran to its end.

Slurm's times have a resolution of one second; the arm uses the time it saw the job end
(``clock_s`` says so).
"""

from __future__ import annotations

import shlex
import subprocess
import time
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

from .engine import Status
from .slurm_cluster import SlurmCluster, missing, start_cluster

POLL_S = 0.1
FIELDS = "%i|%T|%S|%e|%C|%k"  # job id, state, start, end, CPUs, comment (last: it may hold "|")


class SlurmEngine:
    target = "slurm"
    clock_s = 1.0

    def __init__(self, cluster: SlurmCluster, run_id: str = "") -> None:
        from ..service.adapters._slurm import TERMINAL

        self.cluster = cluster
        self.slots = cluster.cpus
        self.run_id = run_id  # in the job names (the job id is the reference; the cluster is private)
        self._terminal = TERMINAL  # the adapter's: COMPLETING still holds the slot

    @classmethod
    def start(cls, root: Path, slots: int, run_id: str = "") -> SlurmEngine:
        reason = missing()
        if reason:
            raise RuntimeError(f"cannot start a private Slurm: {reason}")
        return cls(start_cluster(root, cpus=slots), run_id)

    def adapter_settings(self) -> dict[str, Any]:
        return {"slurm": {"slurm_conf": str(self.cluster.conf), "timeout_s": 10.0}}

    def tenant_scope(self, arm: str) -> dict[str, Any]:
        return {"slurm": {"accounts": [arm]}}

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
        job_id = self._sbatch(
            argv,
            job_dir,
            width,
            "--hold",
            f"--job-name={arm}-{self.run_id}-{name}" if self.run_id else f"--job-name={arm}-{name}",
            f"--account={arm}",
            f"--output={job_dir / 'slurm-%j.out'}",
        )
        try:
            register(job_id)
        except BaseException:
            self.cluster.run("scancel", job_id)
            raise
        released = self.cluster.run("scontrol", "release", job_id)
        if released.returncode != 0:
            raise RuntimeError(f"scontrol release {job_id}: {released.stderr.strip()[:500]}")
        return job_id

    def _sbatch(self, argv: list[str], job_dir: Path, width: int, *options: str) -> str:
        out = self.cluster.run(
            "sbatch",
            "--parsable",
            "--ntasks=1",
            f"--cpus-per-task={width}",
            f"--chdir={job_dir}",
            *options,
            "--wrap",
            "exec " + shlex.join(argv),
        )
        if out.returncode != 0:
            raise RuntimeError(f"sbatch refused the job: {out.stderr.strip()[:500]}")
        return out.stdout.strip().split(";")[0]

    def poll(self, refs: Collection[str]) -> dict[str, Status] | None:
        if not refs:
            return {}
        try:
            out = self.cluster.run(
                "squeue", "--noheader", "--states=all", f"--jobs={','.join(refs)}", f"--format={FIELDS}"
            )
        except subprocess.TimeoutExpired:  # a controller too busy to answer in time: the same
            return None
        if out.returncode != 0:  # a busy controller: poll again (the arm's timeout bounds it)
            return None
        seen = {}
        for line in out.stdout.splitlines():
            job_id, state, start, end, cpus, comment = (line.split("|", 5) + [""] * 6)[:6]
            if job_id in refs:
                terminal = state in self._terminal
                width = int(cpus) if cpus.strip().isdigit() else None
                seen[job_id] = Status(
                    state, terminal, _slurm_time(start), _slurm_time(end), comment, width
                )
        return seen

    def warm_up(self, argv: list[str], timeout_s: float = 180.0) -> float:
        started = time.time()
        job_dir = self.cluster.root
        job_id = self._sbatch(argv, job_dir, 1, "--job-name=warm-up", f"--output={job_dir / 'warm-up.out'}")
        while time.time() - started < timeout_s:
            status = (self.poll([job_id]) or {}).get(job_id)
            if status is not None and status.state == "COMPLETED":
                return time.time() - started
            if status is not None and status.terminal:
                log = (job_dir / "warm-up.out").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"the warm-up job ended {status.state}: {log}")
            time.sleep(POLL_S)
        raise TimeoutError(f"the warm-up job did not finish in {timeout_s} s")

    def close(self) -> None:
        self.cluster.stop()


def _slurm_time(text: str) -> float | None:
    """``2026-12-01T08:08:00`` (the controller's local time) as seconds since the epoch."""
    try:
        return time.mktime(time.strptime(text.strip(), "%Y-%m-%dT%H:%M:%S"))
    except ValueError:  # "N/A", "NONE", "Unknown"
        return None
