"""The simulator at its edges: float round-off at an instant, zero-length jobs, jobs wider than
the cluster, strict (non-backfilling) preemptive policies, and one event log for both eval paths."""

from __future__ import annotations

import pytest

from evalstop._validation import InvalidParameterError
from evalstop.detectors import Eval, KDeclines
from evalstop.schedulers import FIFO, SCHEDULERS, EvalStop, Scheduler, SRTFEst, make_scheduler
from evalstop.sim.cluster import ClusterSim, SimConfig, simulate
from evalstop.workloads import (
    KINDS,
    PRESETS,
    JobSpec,
    JobTruth,
    KindShape,
    Workload,
    WorkloadConfig,
    generate,
)

SHAPES = {kind: KindShape((1,), (1.0,), 1.0, 0.5) for kind in KINDS}


def jobs(*rows: tuple[int, float, float, float], total_gpus: int = 4) -> Workload:
    """Jobs from (gpus, arrival_s, duration_s, budget_s) rows, two flat evals each."""
    specs, truths = [], []
    for job_id, (gpus, arrival, duration, budget) in enumerate(rows):
        evals = (Eval(1, 0.5, 0.5, 1.0), Eval(2, 0.5, 1.0, 0.5))
        specs.append(JobSpec(job_id, 0, "lora", gpus, arrival, budget, evals))
        truths.append(JobTruth(False, duration, 1.0, (0.5, 0.5), 0.5, 0.5))
    config = WorkloadConfig(n_jobs=len(rows), total_gpus=total_gpus, shapes=SHAPES)
    return Workload(config, 0, tuple(specs), tuple(truths))


def log_of(workload: Workload, scheduler: Scheduler, **config: object) -> list[tuple[float, str, int]]:
    sim = ClusterSim(workload, scheduler, SimConfig(**config))  # type: ignore[arg-type]
    sim.run()
    return sim.log


def test_a_job_due_at_a_rounded_instant_finishes_there_and_is_not_preempted() -> None:
    # Job 0 is due at 0.1 + 0.2 = 0.30000000000000004; job 1, shorter still, arrives at 0.3.
    assert 0.1 + 0.2 != 0.3
    workload = jobs((1, 0.1, 0.2, 0.2), (1, 0.3, 5.0, 1e-20), total_gpus=1)
    assert log_of(workload, SRTFEst()) == [
        (0.1, "arrive", 0), (0.1, "start", 0), (0.3, "arrive", 1), (0.3, "complete", 0),
        (0.3, "start", 1), (5.3, "complete", 1),
    ]


def test_a_zero_duration_job_starts_and_completes_at_once() -> None:
    result = simulate(jobs((2, 5.0, 0.0, 1.0), (2, 6.0, 10.0, 10.0)), FIFO())
    zero = result.outcomes[0]
    assert (zero.start_s, zero.end_s, zero.end_progress, zero.gpu_s_useful) == (5.0, 5.0, 1.0, 0.0)
    assert result.outcomes[1].end_s == 16.0


@pytest.mark.parametrize(("gpus", "duration"), [(8, 10.0), (0, 10.0)])
def test_a_job_the_cluster_cannot_hold_is_rejected_before_the_run(gpus: int, duration: float) -> None:
    workload = jobs((1, 0.0, 10.0, 10.0), (gpus, 1.0, duration, 10.0))
    with pytest.raises(InvalidParameterError, match=rf"Job 1 asks for {gpus} GPUs; the cluster has 4"):
        ClusterSim(workload, FIFO())


def test_a_negative_duration_is_rejected_before_the_run() -> None:
    with pytest.raises(InvalidParameterError, match=r"Job 0 has duration_s=-1\.0"):
        ClusterSim(jobs((1, 0.0, -1.0, 1.0)), FIFO())


@pytest.mark.parametrize("static", [True, False])
def test_a_preemptive_policy_without_backfill_lets_the_best_job_that_does_not_fit_block(static: bool) -> None:
    # Job 0 holds 3 of 4 GPUs; job 1 (2 GPUs) ranks next and does not fit; job 2 (1 GPU) would.
    workload = jobs((3, 0.0, 100.0, 100.0), (2, 1.0, 200.0, 200.0), (1, 2.0, 300.0, 300.0))
    starts = {}
    for backfill in (True, False):
        scheduler: Scheduler = SRTFEst(backfill=backfill)
        if not static:
            scheduler.static_rank = False  # rank every active job with order()
        log = log_of(workload, scheduler)
        starts[backfill] = [t for t, kind, job in log if kind == "start" and job == 2]
    assert starts == {True: [2.0], False: [100.0]}  # strict: job 2 waits for job 0 to end


@pytest.mark.parametrize("name", sorted(SCHEDULERS))
def test_the_fast_and_event_eval_paths_give_the_same_event_log_hash(name: str) -> None:
    workload = generate(PRESETS["paper"].with_(n_jobs=150, total_gpus=16, offered_load=1.2), 4)
    hashes, kills = set(), 0
    for path in ("fast", "events"):
        scheduler = EvalStop(make_scheduler(name), KDeclines(against="best"))
        result = simulate(workload, scheduler, SimConfig(eval_path=path))
        hashes.add(result.event_log_hash)
        kills += sum(o.killed for o in result.outcomes)
    assert len(hashes) == 1 and kills > 0
