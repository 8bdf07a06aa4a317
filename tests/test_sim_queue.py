"""The simulator under a long queue: its schedules against the lean reference loop in bench/,
and the incremental (static-rank) allocation against ranking every active job by ``order``."""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from evalstop.detectors import KDeclines
from evalstop.schedulers import FIFO, LAS, EvalStop, Gittins, JobView, Scheduler, SRTFEst
from evalstop.sim.cluster import ClusterSim, SimConfig, simulate
from evalstop.workloads import PRESETS, Workload, generate

BENCH = Path(__file__).resolve().parents[1] / "bench"


def _lean_module() -> object:
    spec = importlib.util.spec_from_file_location("lean_sim", BENCH / "lean_sim.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["lean_sim"] = module
    spec.loader.exec_module(module)
    return module


def burst_workload(n_jobs: int, total_gpus: int, window_s: float, seed: int) -> Workload:
    """The paper preset with exact budgets, every arrival squeezed into ``window_s`` seconds."""
    config = PRESETS["paper"].with_(
        n_jobs=n_jobs, total_gpus=total_gpus, budget_error_sigma=0.0, evals_per_job=2
    )
    workload = generate(config, seed)
    scale = window_s / workload.jobs[-1].arrival_s
    jobs = tuple(dataclasses.replace(j, arrival_s=j.arrival_s * scale) for j in workload.jobs)
    return Workload(workload.config, workload.seed, jobs, workload.truth)


@pytest.mark.parametrize("policy", ["fifo", "sjf"])
@pytest.mark.parametrize("backfill", [False, True])
def test_start_times_match_the_lean_reference_loop(policy: str, backfill: bool) -> None:
    workload = burst_workload(3000, 650, 120.0, seed=5)
    submit = [j.arrival_s for j in workload.jobs]
    gpus = [j.gpus for j in workload.jobs]
    duration = [t.duration_s for t in workload.truth]
    if policy == "fifo":
        scheduler: Scheduler = FIFO(backfill=backfill)
        key = lambda i: (submit[i], i)  # noqa: E731
    else:
        scheduler = SRTFEst(preemptive=False, backfill=backfill)
        key = lambda i: (duration[i], submit[i], i)  # noqa: E731
    lean = _lean_module().lean_starts(submit, gpus, duration, 650, key, backfill)  # type: ignore[attr-defined]
    result = simulate(workload, scheduler)
    assert [o.start_s for o in result.outcomes] == lean
    assert sum(o.start_s > o.arrival_s for o in result.outcomes) > 1000  # a long queue formed


def _ranked_by_order(scheduler: Scheduler) -> Scheduler:
    """The same policy with the opt-in dropped: every decision sorts every active job."""

    class Sorted(type(scheduler)):  # type: ignore[misc]
        def order(self, jobs: Sequence[JobView], now: float) -> list[JobView]:
            return super().order(jobs, now)

    clone = Sorted.__new__(Sorted)
    clone.__dict__.update(scheduler.__dict__)
    assert not clone.static_rank
    return clone


STATIC = [
    lambda: FIFO(), lambda: FIFO(backfill=True), lambda: SRTFEst(), lambda: SRTFEst(backfill=False),
    lambda: SRTFEst(gpu_weighted=True), lambda: SRTFEst(preemptive=False), lambda: LAS(),
    lambda: LAS(backfill=False), lambda: LAS(preemptive=False), lambda: Gittins(),
]


@pytest.mark.parametrize("make", STATIC)
@pytest.mark.parametrize("eval_path", ["fast", "events"])
def test_the_incremental_allocation_gives_the_log_of_sorting_every_job(make: object, eval_path: str) -> None:
    config = SimConfig(eval_path=eval_path)
    for load, gpus in ((1.4, 16), (0.9, 32)):
        workload = generate(PRESETS["paper"].with_(n_jobs=150, total_gpus=gpus, offered_load=load), 3)
        fast = ClusterSim(workload, make(), config)  # type: ignore[operator]
        assert fast.scheduler.static_rank
        slow = ClusterSim(workload, _ranked_by_order(make()), config)  # type: ignore[operator]
        fast.run()
        slow.run()
        assert fast.log == slow.log
        assert any(kind == "preempt" for _, kind, _ in fast.log) == fast.scheduler.preemptive


def test_evalstop_keeps_its_base_policys_opt_in() -> None:
    assert EvalStop(SRTFEst(), KDeclines()).static_rank
    assert EvalStop(SRTFEst(), KDeclines()).rank_key(JobView(3, 0, "rlhf", 2, 5.0, 10.0)) == (10.0, 5.0, 3)
