"""The testbed's jobs as the simulator's jobs: shared by the held-out prediction
(:mod:`.predict`, from the plan and the engine model) and the in-sample diagnostic
(:mod:`.simcheck`, from the shadow arm's measurements)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..detectors import Eval
from ..schedulers import FIFO, EvalStop
from ..sim.cluster import simulate
from ..sim.outcome import JobOutcome
from ..workloads import KINDS, JobSpec, JobTruth, KindShape, Workload, WorkloadConfig

#: (arm, simulated policy): the shadow arm is the base scheduler; the enforced arm adds the rule.
POLICIES = (("shadow", "FIFO"), ("enforced", "EvalStop(FIFO)"))


@dataclass(frozen=True)
class SimJob:
    """One job for the simulator: ``eval_s[k]`` seconds after its start (its slots free) it
    reports ``scores[k]`` at ``steps[k]``; it ends ``duration_s`` after its start."""

    arrival_s: float
    width: int
    duration_s: float
    steps: tuple[int, ...]
    scores: tuple[float, ...]
    gold: tuple[float, ...]
    eval_s: tuple[float, ...]
    hacking: bool


def slot_ready_s(job: dict[str, Any], jobs: list[dict[str, Any]]) -> float:
    """When ``job`` could have had its slots: its arrival, or, if it waited, the end of the last
    job to end before its dispatch (under strict FIFO, the one that freed the last slot it
    needed). The simulator starts a job at that instant; in reality the dispatcher first notices
    the end (it polls the engine), registers the job with the service and submits it, so the overhead
    the simulator must carry runs from there to the process's first line."""
    ended = [float(k["end_s"]) for k in jobs if k["end_s"] <= job["dispatch_s"]]
    return max([float(job["arrival_s"]), *ended])


def workload(jobs: list[SimJob], slots: int) -> Workload:
    """The simulator's workload, job ``i`` being ``jobs[i]``."""
    specs, truth = [], []
    for i, j in enumerate(jobs):
        evals = tuple(
            Eval(step=s, score=x, progress=min(1.0, t / j.duration_s))
            for s, x, t in zip(j.steps, j.scores, j.eval_s, strict=True)
        )
        specs.append(JobSpec(i, 0, "rlhf", j.width, j.arrival_s, j.duration_s, evals))
        if evals:
            peak = int(np.argmax(j.gold))
            peak_at = evals[peak].progress or 0.0
            truth.append(JobTruth(j.hacking, j.duration_s, peak_at, j.gold, j.gold[peak], j.gold[-1]))
        else:  # the engine failed it before its first eval: it delivered nothing (NaN quality)
            truth.append(JobTruth(j.hacking, j.duration_s, 0.0, (), float("nan"), float("nan")))
    widths = tuple(range(1, slots + 1))
    shapes = {kind: KindShape(widths, (1 / slots,) * slots, 1.0, 0.5) for kind in KINDS}  # sizes are given
    config = WorkloadConfig(n_jobs=len(specs), total_gpus=slots, shapes=shapes)
    return Workload(config, 0, tuple(specs), tuple(truth))


def run_policy(jobs: list[SimJob], slots: int, policy: str) -> dict[int, JobOutcome]:
    """Simulate ``jobs`` on ``slots`` under ``policy`` (FIFO, or EvalStop(FIFO) with the default
    rule watching every job: the rule the service runs); outcomes by job index."""
    scheduler = FIFO() if policy == "FIFO" else EvalStop(FIFO(), watch=None)
    return {o.job_id: o for o in simulate(workload(jobs, slots), scheduler).outcomes}
