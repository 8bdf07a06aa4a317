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


# --- the ratio form (Tiresias's STARVELIMIT): wait >= ratio x the job's last run -----------------


@pytest.mark.parametrize(
    ("ratio", "second_start"),
    [
        (3.33, 433.0),  # job 0 last ran 0..100 s: promoted at 100 + 3.33 x 100
        (5.175, 617.5),
        (50.0, 2100.0),  # a wait of 5000 s is never reached: it waits for the whole stream
    ],
)
def test_ratio_guard_promotes_when_the_wait_reaches_ratio_times_the_last_run(
    ratio: float, second_start: float
) -> None:
    sim, _ = run(starved_workload(), LAS(THRESHOLDS, promote_after_wait_ratio=ratio), NO_OVERHEAD)  # type: ignore[arg-type]
    starts = job0_times(sim.log, STARTED)
    assert starts[0] == 0.0 and job0_times(sim.log, PREEMPTED)[0] == pytest.approx(100.0)
    assert starts[1] == pytest.approx(second_start, abs=1e-9)


def test_ratio_guard_counts_the_last_run_restore_overhead_included() -> None:
    """With a 120 s restore, job 0's second run holds its GPUs 120 s + 100 s of service: its
    next wait is ratio x 220 s, not ratio x 100 s (and not its whole 320 s of runs)."""
    overhead = SimConfig(preempt_overhead_s=120.0)
    sim, _ = run(starved_workload(), LAS(THRESHOLDS, promote_after_wait_ratio=2.0), overhead)  # type: ignore[arg-type]
    starts, preempts = job0_times(sim.log, STARTED), job0_times(sim.log, PREEMPTED)
    assert starts[1] == pytest.approx(100.0 + 2.0 * 100.0)
    assert preempts[1] == pytest.approx(starts[1] + 220.0)
    assert starts[2] == pytest.approx(preempts[1] + 2.0 * 220.0)


def test_ratio_guard_is_not_static_rank_and_a_huge_ratio_gives_the_plain_log() -> None:
    workload = generate(PRESETS["paper"].with_(n_jobs=300), 3)
    base, _ = run(workload, LAS())
    assert not LAS(promote_after_wait_ratio=2.0).static_rank
    assert not EvalStop(LAS(promote_after_wait_ratio=2.0)).static_rank
    never, _ = run(workload, LAS(promote_after_wait_ratio=1e12))
    assert never.log == base.log


def test_ratio_guard_improves_p99_jct_over_no_guard_under_overload() -> None:
    """Offered load 1.5 on the paper preset: plain LAS starves long jobs (their p99 JCT is the
    worst of the three); the ratio guard cuts it, as the absolute guard does."""
    from evalstop.sim.cluster import simulate
    from evalstop.sim.metrics import compute_metrics

    config = PRESETS["paper"].with_(n_jobs=400, total_gpus=32, offered_load=1.5)
    workload = generate(config, 0)
    plain = compute_metrics(simulate(workload, LAS())).jct_p99_s
    ratio = compute_metrics(simulate(workload, LAS(promote_after_wait_ratio=4.0))).jct_p99_s
    assert ratio < 0.9 * plain, (ratio, plain)


@pytest.mark.parametrize("bad", [0, 0.0, -1.0, float("nan"), float("inf"), "2", True])
def test_bad_promote_after_wait_ratio_names_the_parameter(bad: object) -> None:
    with pytest.raises(InvalidParameterError, match=r"'promote_after_wait_ratio' parameter of LAS"):
        LAS(promote_after_wait_ratio=bad)  # type: ignore[arg-type]


def test_the_two_guards_are_mutually_exclusive() -> None:
    with pytest.raises(InvalidParameterError, match=r"LAS takes one starvation guard: .*not both\. Got "
                       r"promote_after_wait_s=60\.0 and promote_after_wait_ratio=2\.0 instead"):
        LAS(promote_after_wait_s=60.0, promote_after_wait_ratio=2.0)
