"""LAS's starvation guard (``promote_after_wait_s``): a long job starved behind a stream of
short ones runs again once its wait reaches the limit, exactly then, and not before."""

from __future__ import annotations

import pytest

from evalstop._validation import InvalidParameterError
from evalstop.schedulers import LAS, EvalStop
from evalstop.sim.cluster import SimConfig
from evalstop.workloads import PRESETS, generate
from test_sim import Hand, hand_workload, run

THRESHOLDS = (400.0,)  # two queues: below / above 400 GPU-seconds (100 s of a 4-GPU job)
NO_OVERHEAD = SimConfig(preempt_overhead_s=0.0)
STARTED, PREEMPTED = "start", "preempt"


def starved_workload() -> object:
    """4 GPUs, every job takes all 4. Job 0 (1000 s) arrives first; 50 s jobs arrive every 50 s
    from t=10 to t=1960, keeping the cluster busy. Job 0 runs 0..100, crosses into queue 1 and
    is preempted by the short job waiting since t=10."""
    shorts = [Hand(4, 10.0 + 50.0 * k, 50.0) for k in range(40)]
    return hand_workload(Hand(4, 0.0, 1000.0), *shorts, total_gpus=4)


def job0_times(log: list[tuple[float, str, int]], kind: str) -> list[float]:
    return [t for t, ev, j in log if j == 0 and ev == kind]


@pytest.mark.parametrize(
    ("limit", "second_start"),
    [
        (None, 2100.0),  # no guard: job 0 waits until the 40 short jobs (2000 s) are done
        (333.0, 433.0),  # promoted at 100 + 333, between two unrelated events (multiples of 50)
        (517.5, 617.5),
        (5000.0, 2100.0),  # a limit longer than the stream never fires
    ],
)
def test_starved_job_resumes_exactly_when_its_wait_reaches_the_limit(
    limit: float | None, second_start: float
) -> None:
    sim, _ = run(starved_workload(), LAS(THRESHOLDS, promote_after_wait_s=limit), NO_OVERHEAD)  # type: ignore[arg-type]
    starts = job0_times(sim.log, STARTED)
    assert starts[0] == 0.0
    assert job0_times(sim.log, PREEMPTED)[0] == pytest.approx(100.0)
    assert starts[1] == pytest.approx(second_start, abs=1e-9)


def test_promoted_job_keeps_queue_0_for_one_threshold_then_is_demoted_again() -> None:
    sim, _ = run(starved_workload(), LAS(THRESHOLDS, promote_after_wait_s=333.0), NO_OVERHEAD)  # type: ignore[arg-type]
    starts, preempts = job0_times(sim.log, STARTED), job0_times(sim.log, PREEMPTED)
    # Runs 433..533 (100 more GPU-s in queue 0), is demoted and preempted, waits 333 again.
    assert preempts[1] == pytest.approx(533.0)
    assert starts[2] == pytest.approx(533.0 + 333.0)


@pytest.mark.parametrize("preset", ["paper"])
def test_guard_off_gives_the_static_rank_log(preset: str) -> None:
    workload = generate(PRESETS[preset].with_(n_jobs=300), 3)
    base, _ = run(workload, LAS())
    off, _ = run(workload, LAS(promote_after_wait_s=None))
    assert LAS().static_rank and not LAS(promote_after_wait_s=60.0).static_rank
    assert off.log == base.log
    # A limit no job ever reaches ranks like the static path, through the generic one.
    never, _ = run(workload, LAS(promote_after_wait_s=1e12))
    assert never.log == base.log


def test_evalstop_wrapper_passes_the_guard_through() -> None:
    sim, _ = run(starved_workload(), EvalStop(LAS(THRESHOLDS, promote_after_wait_s=333.0)), NO_OVERHEAD)  # type: ignore[arg-type]
    assert job0_times(sim.log, STARTED)[1] == pytest.approx(433.0)


@pytest.mark.parametrize("bad", [0, 0.0, -5.0, float("nan"), float("inf"), "60", True])
def test_bad_promote_after_wait_s_names_the_parameter(bad: object) -> None:
    with pytest.raises(InvalidParameterError, match=r"'promote_after_wait_s' parameter of LAS"):
        LAS(promote_after_wait_s=bad)  # type: ignore[arg-type]
