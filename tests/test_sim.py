"""The cluster simulator: exact event logs on hand-built workloads, EvalStop kills, fast path vs
event path, determinism across processes, invariants on random workloads, the oracle, and
the invariant guard."""

from __future__ import annotations

import itertools
import json
import math
import os
import subprocess
import sys
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evalstop.detectors import Detector, Eval, FixedProgress, KDeclines, NeverStop
from evalstop.schedulers import FIFO, SCHEDULERS, EvalStop, JobView, Scheduler, SRTFEst, make_scheduler
from evalstop.sim.cluster import ClusterSim, SimConfig, SimulationInvariantError, simulate
from evalstop.sim.engine import Engine
from evalstop.sim.outcome import SimResult
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

RESTORE_S = SimConfig().preempt_overhead_s
FLAT = (0.5, 0.5, 0.5, 0.5)


# -- helpers ---------------------------------------------------------------------------------


class EventStorm(RuntimeError):
    """The run popped more events than any sane run of its size needs (a livelock)."""


class BoundedEngine(Engine):
    """The kernel with a cap on scheduled events, so a livelocked simulation fails instead of
    hanging. The cap is on ``seq``, which every push draws from (the cluster pushes and pops the
    heap itself on its hot path, so a cap on ``pop`` would never be reached); a livelock is an
    endless stream of pushes."""

    def __init__(self, max_events: int) -> None:
        super().__init__()
        self.seq = self._capped(max_events)

    def _capped(self, max_events: int) -> Iterator[int]:
        for n in itertools.count():
            if n >= max_events:
                raise EventStorm(f"event cap exceeded at t={self.now} with {len(self)} events queued")
            yield n


def run(
    workload: Workload, scheduler: Scheduler, config: SimConfig | None = None, max_events: int | None = None
) -> tuple[ClusterSim, SimResult]:
    sim = ClusterSim(workload, scheduler, config)
    n_evals = sum(len(spec.evals) for spec in workload.jobs)
    sim.engine = BoundedEngine(max_events or 10_000 + 100 * (len(workload.jobs) + n_evals))
    return sim, sim.run()


@dataclass(frozen=True)
class Hand:
    """A hand-built job. Evals are evenly spaced over progress (1/n, ..., 1)."""

    gpus: int
    arrival_s: float
    duration_s: float
    budget_s: float | None = None  # None: the budget is exact
    kind: str = "rlhf"
    scores: tuple[float, ...] = FLAT
    true_q: tuple[float, ...] | None = None  # None: equal to the scores
    hacking: bool = False
    peak_progress: float = 1.0


SMALL_SHAPES = {kind: KindShape((1, 2, 4), (0.4, 0.3, 0.3), 1.0, 0.5) for kind in KINDS}


def hand_workload(*jobs: Hand, total_gpus: int = 4) -> Workload:
    config = WorkloadConfig(n_jobs=len(jobs), total_gpus=total_gpus, shapes=SMALL_SHAPES)
    specs, truths = [], []
    for job_id, h in enumerate(jobs):
        n = len(h.scores)
        evals = tuple(
            Eval(step=i + 1, score=s, progress=(i + 1) / n, loss=1.0 / (i + 1))
            for i, s in enumerate(h.scores)
        )
        true_q = h.true_q if h.true_q is not None else h.scores
        budget = h.duration_s if h.budget_s is None else h.budget_s
        specs.append(JobSpec(job_id, 0, h.kind, h.gpus, h.arrival_s, budget, evals))
        truths.append(JobTruth(h.hacking, h.duration_s, h.peak_progress, true_q, max(true_q), true_q[-1]))
    return Workload(config, 0, tuple(specs), tuple(truths))


def jcts(result: SimResult) -> list[float]:
    return [o.jct_s for o in result.outcomes]


def evalstop_all() -> list[tuple[str, Scheduler]]:
    return [(name, EvalStop(make_scheduler(name), KDeclines(against="best"))) for name in SCHEDULERS]


# -- exact event logs on hand-built workloads ------------------------------------------------

# 4 GPUs. Job 0 fills the cluster; jobs 1 and 2 (2 GPUs each) arrive while it runs. Job 2
# underestimates its budget (100 s declared, 400 s true).
THREE = hand_workload(
    Hand(gpus=4, arrival_s=0.0, duration_s=1000.0),
    Hand(gpus=2, arrival_s=200.0, duration_s=300.0),
    Hand(gpus=2, arrival_s=250.0, duration_s=400.0, budget_s=100.0),
)


# 4 GPUs. Job 0 holds 2; job 1 needs all 4 and waits; job 2 (1 GPU) arrives behind it.
HEAD_OF_LINE = hand_workload(
    Hand(gpus=2, arrival_s=0.0, duration_s=1000.0),
    Hand(gpus=4, arrival_s=10.0, duration_s=100.0),
    Hand(gpus=1, arrival_s=20.0, duration_s=50.0),
)


@pytest.mark.parametrize(
    ("backfill", "starts"), [(False, [0.0, 1000.0, 1100.0]), (True, [0.0, 1000.0, 20.0])]
)
def test_fifo_blocks_behind_a_wide_job_unless_it_backfills(backfill: bool, starts: list[float]) -> None:
    _, result = run(HEAD_OF_LINE, FIFO(backfill=backfill))
    assert [o.start_s for o in result.outcomes] == starts


def test_fifo_runs_jobs_in_arrival_order_without_preempting() -> None:
    sim, result = run(THREE, FIFO())
    assert sim.log == [
        (0.0, "arrive", 0),
        (0.0, "start", 0),
        (200.0, "arrive", 1),
        (250.0, "arrive", 2),
        (1000.0, "complete", 0),
        (1000.0, "start", 1),
        (1000.0, "start", 2),
        (1300.0, "complete", 1),
        (1400.0, "complete", 2),
    ]
    assert jcts(result) == [1000.0, 1100.0, 1150.0]
    assert [o.start_s for o in result.outcomes] == [0.0, 1000.0, 1000.0]
    assert all(o.n_preemptions == 0 and o.gpu_s_overhead == 0.0 for o in result.outcomes)
    assert result.makespan_s == 1400.0
    assert result.policy == "fifo"


def test_srtf_preempts_and_the_resume_pays_the_restore_overhead() -> None:
    sim, result = run(THREE, SRTFEst())
    # t=200: job 1 (300 s left) outranks job 0 (800 s left) and job 0 is preempted; its 4 GPUs
    # do not fit next to job 1, so 2 GPUs idle until job 2 arrives. Job 2 (budget 100 s) then
    # outranks job 0 until it completes; job 0 resumes at 650 and restores for 120 s first.
    assert sim.log == [
        (0.0, "arrive", 0),
        (0.0, "start", 0),
        (200.0, "arrive", 1),
        (200.0, "preempt", 0),
        (200.0, "start", 1),
        (250.0, "arrive", 2),
        (250.0, "start", 2),
        (500.0, "complete", 1),
        (650.0, "complete", 2),
        (650.0, "start", 0),
        (650.0 + RESTORE_S + 800.0, "complete", 0),
    ]
    assert jcts(result) == [1570.0, 300.0, 400.0]
    job0 = result.outcomes[0]
    assert job0.n_preemptions == 1
    assert job0.gpu_s_overhead == RESTORE_S * 4
    assert job0.gpu_s_useful == 1000.0 * 4
    assert job0.start_s == 0.0
    assert job0.end_progress == 1.0 and not job0.killed


def test_restore_overhead_delays_completion_by_exactly_the_overhead() -> None:
    _, free = run(THREE, SRTFEst(), SimConfig(preempt_overhead_s=0.0))
    _, paid = run(THREE, SRTFEst())
    assert jcts(free) == [1450.0, 300.0, 400.0]
    assert paid.outcomes[0].end_s - free.outcomes[0].end_s == RESTORE_S
    assert free.outcomes[0].gpu_s_overhead == 0.0


def test_preemption_during_the_restore_charges_the_part_spent_and_restarts_it() -> None:
    workload = hand_workload(
        Hand(gpus=4, arrival_s=0.0, duration_s=1000.0),
        Hand(gpus=2, arrival_s=200.0, duration_s=300.0),
        Hand(gpus=2, arrival_s=250.0, duration_s=400.0, budget_s=100.0),
        Hand(gpus=4, arrival_s=700.0, duration_s=100.0, budget_s=10.0),  # 50 s into job 0's restore
    )
    sim, result = run(workload, SRTFEst())
    assert sim.log[-7:] == [
        (650.0, "start", 0),
        (700.0, "arrive", 3),
        (700.0, "preempt", 0),
        (700.0, "start", 3),
        (800.0, "complete", 3),
        (800.0, "start", 0),
        (800.0 + RESTORE_S + 800.0, "complete", 0),
    ]
    job0 = result.outcomes[0]
    assert job0.n_preemptions == 2
    assert job0.gpu_s_overhead == (50.0 + RESTORE_S) * 4
    assert job0.gpu_s_useful == 1000.0 * 4


def test_same_time_departures_free_gpus_before_an_arrival_takes_them() -> None:
    workload = hand_workload(
        Hand(gpus=4, arrival_s=0.0, duration_s=500.0),
        Hand(gpus=4, arrival_s=500.0, duration_s=100.0),
    )
    sim, result = run(workload, FIFO())
    assert sim.log == [
        (0.0, "arrive", 0),
        (0.0, "start", 0),
        (500.0, "complete", 0),
        (500.0, "arrive", 1),
        (500.0, "start", 1),
        (600.0, "complete", 1),
    ]
    assert jcts(result) == [500.0, 100.0]


def test_a_job_due_to_complete_now_is_not_preempted_now() -> None:
    # Jobs 0 and 1 both finish at t=1000. Job 2 (4 GPUs) waits; at t=1000 its estimate (3000 s)
    # beats job 1's (5000 - 1000 s), but job 1 has no work left.
    workload = hand_workload(
        Hand(gpus=2, arrival_s=0.0, duration_s=1000.0),
        Hand(gpus=2, arrival_s=0.0, duration_s=1000.0, budget_s=5000.0),
        Hand(gpus=4, arrival_s=10.0, duration_s=100.0, budget_s=3000.0),
    )
    sim, result = run(workload, SRTFEst())
    # Today: (1000, 'preempt', 1) ... (1220, 'complete', 1): JCT 1220, 240 GPU-s of overhead.
    assert (1000.0, "preempt", 1) not in sim.log
    job1 = result.outcomes[1]
    assert (job1.end_s, job1.n_preemptions, job1.gpu_s_overhead) == (1000.0, 0, 0.0)


# -- EvalStop kills --------------------------------------------------------------------------

# Job 0 (hacking, peak at progress 0.5) fills the cluster; job 1 waits for it. Scores decline
# from eval 3 on; the true quality peaks at eval 2.
HACKER = Hand(
    gpus=4,
    arrival_s=0.0,
    duration_s=1000.0,
    scores=(0.5, 0.6, 0.55, 0.5, 0.45),
    true_q=(0.3, 0.5, 0.45, 0.4, 0.35),
    hacking=True,
    peak_progress=0.5,
)
WAITER = Hand(gpus=4, arrival_s=100.0, duration_s=500.0, kind="lora", scores=(0.9, 0.8, 0.7, 0.6, 0.5))


@pytest.mark.parametrize("eval_path", ["fast", "events"])
def test_evalstop_kills_at_the_tripping_eval_and_hands_the_gpus_over_at_once(eval_path: str) -> None:
    workload = hand_workload(HACKER, WAITER)
    sim, result = run(workload, EvalStop(FIFO(), KDeclines(k=2)), SimConfig(eval_path=eval_path))
    # declines at evals 3 and 4 (progress 0.8): killed at t=800; the LoRA job is not watched
    assert sim.log == [
        (0.0, "arrive", 0),
        (0.0, "start", 0),
        (100.0, "arrive", 1),
        (800.0, "kill", 0),
        (800.0, "start", 1),
        (1300.0, "complete", 1),
    ]
    killed, waiter = result.outcomes
    assert killed.killed and killed.stop_progress == 0.8 and killed.end_progress == 0.8
    assert killed.end_s == 800.0
    assert killed.true_delivered == workload.truth[0].true_at_evals[1] == 0.5
    assert killed.regret == 0.0
    assert killed.gpu_s_useful == 800.0 * 4
    assert killed.gpu_s_after_peak == pytest.approx((0.8 - 0.5) * 1000.0 * 4)
    assert not waiter.killed and waiter.stop_progress is None and waiter.end_progress == 1.0
    assert result.policy == "evalstop(fifo)"


def test_without_evalstop_the_hacking_job_runs_to_the_end() -> None:
    workload = hand_workload(HACKER, WAITER)
    _, result = run(workload, FIFO())
    job0 = result.outcomes[0]
    assert not job0.killed and job0.end_s == 1000.0
    assert job0.true_delivered == workload.truth[0].true_final == 0.35
    assert job0.regret == pytest.approx(0.15)
    assert job0.gpu_s_after_peak == pytest.approx(0.5 * 1000.0 * 4)
    assert jcts(result) == [1000.0, 1400.0]


# (detector, scores) -> index of the eval at which the job is killed (None: never), best index
KILL_TABLE: list[tuple[Detector, tuple[float, ...], int | None, int | None]] = [
    (KDeclines(k=2), (0.5, 0.6, 0.55, 0.5, 0.45), 3, 1),
    (KDeclines(k=1), (0.5, 0.6, 0.55, 0.5, 0.45), 2, 1),
    (KDeclines(k=3), (0.5, 0.6, 0.55, 0.5, 0.45), 4, 1),  # the last eval still kills
    (KDeclines(k=2), (0.5, 0.7, 0.6, 0.65, 0.55), None, None),  # the rise at eval 4 resets
    (KDeclines(k=2, against="best"), (0.5, 0.7, 0.6, 0.65, 0.55), 3, 1),
    (KDeclines(k=2), (0.5, 0.6, math.nan, math.nan, math.nan), None, None),  # NaN never kills
    (KDeclines(k=2), (0.1, 0.2, 0.3, 0.4, 0.5), None, None),
    (FixedProgress(at=0.4), (0.1, 0.2, 0.3, 0.4, 0.5), 1, 1),
    (NeverStop(), (0.5, 0.4, 0.3, 0.2, 0.1), None, None),
]


@pytest.mark.parametrize("eval_path", ["fast", "events"])
@pytest.mark.parametrize(("detector", "scores", "kill_at", "best"), KILL_TABLE)
def test_kill_table(
    detector: Detector, scores: tuple[float, ...], kill_at: int | None, best: int | None, eval_path: str
) -> None:
    true_q = (0.31, 0.32, 0.33, 0.34, 0.35)
    workload = hand_workload(
        Hand(gpus=4, arrival_s=0.0, duration_s=1000.0, scores=scores, true_q=true_q), WAITER
    )
    sim, result = run(workload, EvalStop(FIFO(), detector), SimConfig(eval_path=eval_path))
    job0 = result.outcomes[0]
    end_s = 1000.0 if kill_at is None else 200.0 * (kill_at + 1)
    assert sim.log[3] == (end_s, "complete" if kill_at is None else "kill", 0)
    assert sim.log[4] == (end_s, "start", 1)
    assert job0.killed is (kill_at is not None)
    assert job0.end_s == end_s
    if kill_at is None:
        assert job0.stop_progress is None and job0.true_delivered == true_q[-1]
    else:
        assert job0.stop_progress == pytest.approx((kill_at + 1) / 5, rel=1e-12)
        assert best is not None and job0.true_delivered == true_q[best]


def test_watch_none_kills_any_kind() -> None:
    workload = hand_workload(WAITER)  # a LoRA job whose score falls from the start
    _, default = run(workload, EvalStop(FIFO(), KDeclines(k=2)))
    _, everything = run(workload, EvalStop(FIFO(), KDeclines(k=2), watch=None))
    assert not default.outcomes[0].killed
    assert everything.outcomes[0].killed and everything.outcomes[0].stop_progress == pytest.approx(0.6)


@pytest.mark.parametrize("eval_path", ["fast", "events"])
def test_kill_after_a_preemption_counts_attained_service_not_wall_time(eval_path: str) -> None:
    workload = hand_workload(
        HACKER,
        Hand(gpus=4, arrival_s=100.0, duration_s=200.0, budget_s=50.0),  # preempts job 0 at 100
    )
    sim, result = run(workload, EvalStop(SRTFEst(), KDeclines(k=2)), SimConfig(eval_path=eval_path))
    # job 0 resumes at 300 with 100 s attained, restores until 420, reaches progress 0.8 at 1120
    assert sim.log[-2:] == [(300.0, "start", 0), (300.0 + RESTORE_S + 700.0, "kill", 0)]
    job0 = result.outcomes[0]
    assert job0.killed and job0.stop_progress == pytest.approx(0.8, rel=1e-12)
    assert job0.gpu_s_overhead == RESTORE_S * 4
    assert job0.gpu_s_useful == pytest.approx(800.0 * 4)


# -- fast path vs event path -----------------------------------------------------------------

SMALL_PAPER = PRESETS["paper"].with_(n_jobs=300, total_gpus=16)
FIELDS = ("start_s", "end_s", "jct_s", "end_progress", "gpu_s_useful", "gpu_s_overhead", "true_delivered")


@pytest.fixture(scope="module")
def small_paper() -> dict[int, Workload]:
    return {seed: generate(SMALL_PAPER, seed) for seed in (0, 1, 2)}


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("name", sorted(SCHEDULERS))
def test_fast_path_and_event_path_agree(small_paper: dict[int, Workload], seed: int, name: str) -> None:
    workload = small_paper[seed]
    results = {
        path: run(
            workload, EvalStop(make_scheduler(name), KDeclines(against="best")), SimConfig(eval_path=path)
        )[1]
        for path in ("fast", "events")
    }
    fast, events = results["fast"], results["events"]
    assert sum(o.killed for o in fast.outcomes) > 0  # the comparison has kills in it
    if SCHEDULERS[name].preemptive:
        assert sum(o.n_preemptions for o in fast.outcomes) > 0  # ... and preemptions
    for a, b in zip(fast.outcomes, events.outcomes, strict=True):
        assert (a.job_id, a.killed, a.n_preemptions) == (b.job_id, b.killed, b.n_preemptions)
        if a.killed:
            assert a.stop_progress == pytest.approx(b.stop_progress, rel=1e-6)
        else:
            assert a.stop_progress is b.stop_progress is None
        for field in FIELDS:
            assert getattr(a, field) == pytest.approx(getattr(b, field), rel=1e-6), (a.job_id, field)
    assert fast.makespan_s == pytest.approx(events.makespan_s, rel=1e-6)


@pytest.mark.parametrize("name", sorted(SCHEDULERS))
def test_evalstop_with_never_stop_is_the_bare_base_policy(
    small_paper: dict[int, Workload], name: str
) -> None:
    workload = small_paper[0]
    _, bare = run(workload, make_scheduler(name))
    _, wrapped = run(workload, EvalStop(make_scheduler(name), NeverStop()))
    assert wrapped.event_log_hash == bare.event_log_hash
    assert wrapped.outcomes == bare.outcomes
    assert not any(o.killed for o in bare.outcomes)


# -- determinism -----------------------------------------------------------------------------

DETERMINISM_SCRIPT = """
import json, sys
from evalstop.detectors import KDeclines
from evalstop.schedulers import SCHEDULERS, EvalStop, make_scheduler
from evalstop.sim.cluster import SimConfig, simulate
from evalstop.workloads import PRESETS, generate
workload = generate(PRESETS["paper"].with_(n_jobs=150, total_gpus=16), seed=int(sys.argv[1]))
hashes = {}
for name in sorted(SCHEDULERS):
    for path in ("fast", "events"):
        scheduler = EvalStop(make_scheduler(name), KDeclines(against="best"))
        hashes[name + "/" + path] = simulate(workload, scheduler, SimConfig(eval_path=path)).event_log_hash
print(json.dumps(hashes))
"""


def determinism_hashes_here(seed: int) -> dict[str, str]:
    workload = generate(PRESETS["paper"].with_(n_jobs=150, total_gpus=16), seed=seed)
    return {
        f"{name}/{path}": simulate(
            workload, EvalStop(make_scheduler(name), KDeclines(against="best")), SimConfig(eval_path=path)
        ).event_log_hash
        for name in sorted(SCHEDULERS)
        for path in ("fast", "events")
    }


def test_same_spec_gives_the_same_event_log_hash_across_processes() -> None:
    seed = 17
    procs = []
    for hash_seed in ("0", "4242"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", DETERMINISM_SCRIPT, str(seed)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
                text=True,
            )
        )
    outputs = []
    for proc in procs:
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        outputs.append(json.loads(out))
    here = determinism_hashes_here(seed)
    assert outputs[0] == outputs[1] == here
    assert len(set(here.values())) > 1  # policies differ, so the hash is not a constant
    assert determinism_hashes_here(seed + 1) != here


def test_same_process_reruns_give_identical_logs(small_paper: dict[int, Workload]) -> None:
    workload = small_paper[1]
    first, a = run(workload, EvalStop(make_scheduler("fair"), KDeclines()))
    second, b = run(workload, EvalStop(make_scheduler("fair"), KDeclines()))
    assert first.log == second.log
    assert a == b
    assert a.seed == 1


# -- invariants on random workloads ----------------------------------------------------------

GPU_SIZES = (1, 2, 4, 8, 16, 32)


@st.composite
def small_workloads(draw: st.DrawFn) -> Workload:
    total_gpus = draw(st.integers(4, 32))
    fitting = [g for g in GPU_SIZES if g <= total_gpus]
    shapes = {}
    for kind in KINDS:
        choices = tuple(draw(st.lists(st.sampled_from(fitting), min_size=1, max_size=3, unique=True)))
        shapes[kind] = KindShape(
            choices,
            tuple(1.0 / len(choices) for _ in choices),
            draw(st.floats(0.1, 4.0)),
            draw(st.floats(0.0, 1.2)),
        )
    config = WorkloadConfig(
        n_jobs=draw(st.integers(5, 60)),
        total_gpus=total_gpus,
        offered_load=draw(st.floats(0.3, 1.5)),
        rlhf_share=draw(st.floats(0.0, 1.0)),
        hacking_share=draw(st.floats(0.0, 1.0)),
        evals_per_job=draw(st.integers(1, 12)),
        eval_noise=draw(st.floats(0.0, 0.1)),
        n_tenants=draw(st.integers(1, 5)),
        shapes=shapes,
    )
    return generate(config, seed=draw(st.integers(0, 2**32 - 1)))


DETECTORS = st.sampled_from(
    [KDeclines(), KDeclines(k=1, against="best"), KDeclines(k=3, min_delta=0.01), FixedProgress(at=0.5)]
)


@dataclass(frozen=True)
class Case:
    workload: Workload
    name: str
    detector: Detector | None  # None: the bare base policy
    watch_all: bool
    config: SimConfig

    def scheduler(self) -> Scheduler:
        base = make_scheduler(self.name)
        if self.detector is None:
            return base
        return EvalStop(base, self.detector, watch=None if self.watch_all else ("rlhf",))


@st.composite
def cases(draw: st.DrawFn) -> Case:
    return Case(
        workload=draw(small_workloads()),
        name=draw(st.sampled_from(sorted(SCHEDULERS))),
        detector=draw(st.none() | DETECTORS),
        watch_all=draw(st.booleans()),
        config=SimConfig(
            preempt_overhead_s=draw(st.sampled_from([0.0, 120.0, 900.0])),
            eval_path=draw(st.sampled_from(["fast", "events"])),
        ),
    )


def replay(
    log: Sequence[tuple[float, str, int]], gpus: dict[int, int], total_gpus: int
) -> tuple[float, dict[int, float], dict[int, int]]:
    """Walk the log as a state machine; return busy GPU-s, running wall-seconds per job and
    preemption counts. Asserts the GPU cap at every event and every legal transition."""
    state: dict[int, str] = {}
    used, busy_gpu_s, last_t = 0, 0.0, -math.inf
    run_s: dict[int, float] = defaultdict(float)
    since: dict[int, float] = {}
    preempts: dict[int, int] = defaultdict(int)
    for t, kind, job_id in log:
        assert t >= last_t, (t, last_t)
        if used:
            busy_gpu_s += used * (t - last_t)
        last_t = t
        if kind == "arrive":
            assert job_id not in state
            state[job_id] = "waiting"
        elif kind == "start":
            assert state[job_id] == "waiting", (t, kind, job_id)
            state[job_id], since[job_id] = "running", t
            used += gpus[job_id]
        else:
            assert kind in ("preempt", "kill", "complete"), kind
            assert state[job_id] == "running", (t, kind, job_id)
            state[job_id] = "waiting" if kind == "preempt" else "done"
            preempts[job_id] += kind == "preempt"
            run_s[job_id] += t - since.pop(job_id)
            used -= gpus[job_id]
        assert 0 <= used <= total_gpus, (t, used)
    assert set(state.values()) == {"done"}
    assert used == 0
    return busy_gpu_s, run_s, preempts


def check_invariants(case: Case, sim: ClusterSim, result: SimResult) -> None:
    workload, config = case.workload, case.config
    restore = config.preempt_overhead_s
    gpus = {spec.job_id: spec.gpus for spec in workload.jobs}
    busy_gpu_s, run_s, preempts = replay(sim.log, gpus, workload.config.total_gpus)
    ends = [(job_id, kind) for _, kind, job_id in sim.log if kind in ("kill", "complete")]
    assert sorted(job_id for job_id, _ in ends) == list(range(len(workload.jobs)))  # each ends once
    assert len(result.outcomes) == len(workload.jobs)

    spent = 0.0
    for o, spec, truth in zip(result.outcomes, workload.jobs, workload.truth, strict=True):
        tol = 1e-6 * max(1.0, o.end_s)
        assert o.job_id == spec.job_id and o.gpus == spec.gpus and o.hacking == truth.hacking
        assert o.arrival_s == spec.arrival_s
        assert o.start_s >= o.arrival_s
        assert o.end_s >= o.start_s
        assert o.n_preemptions == preempts[o.job_id]
        assert 0.0 <= o.gpu_s_overhead <= restore * o.gpus * o.n_preemptions + 1e-6
        if o.n_preemptions and restore:
            # the last resume always restores fully before the job can end
            assert o.gpu_s_overhead >= restore * o.gpus - 1e-6
        # GPU time the job held = its progress + its restores
        assert run_s[o.job_id] * o.gpus == pytest.approx(
            o.gpu_s_useful + o.gpu_s_overhead, rel=1e-9, abs=1e-6
        )
        assert o.gpu_s_useful == pytest.approx(o.end_progress * truth.duration_s * o.gpus, rel=1e-9)
        spent += o.gpu_s_useful + o.gpu_s_overhead
        if o.killed:
            assert case.detector is not None  # kills only under EvalStop
            assert o.stop_progress == o.end_progress
            assert o.end_s - o.arrival_s >= o.stop_progress * truth.duration_s - tol
        else:
            assert o.stop_progress is None and o.end_progress == 1.0
            assert o.jct_s >= truth.duration_s - tol
            assert o.true_delivered == truth.true_final
        check_kill_decision(case, o.killed, o.stop_progress, o.true_delivered, spec, truth)
    total_gpus = workload.config.total_gpus
    assert busy_gpu_s == pytest.approx(spent, rel=1e-9, abs=1e-6)
    assert spent <= total_gpus * result.makespan_s * (1 + 1e-9) + 1e-6
    assert result.makespan_s == pytest.approx(
        max(o.end_s for o in result.outcomes) - min(o.arrival_s for o in result.outcomes)
    )


def check_kill_decision(
    case: Case, killed: bool, stop_progress: float | None, delivered: float, spec: JobSpec, truth: JobTruth
) -> None:
    """A job is killed iff the detector fires on its full eval sequence (every job eventually
    reaches every eval it does not stop at), at that eval, delivering the detector's best."""
    watched = case.detector is not None and (case.watch_all or spec.kind == "rlhf")
    if not watched:
        assert not killed
        return
    assert case.detector is not None
    verdict = case.detector.evaluate(spec.evals)
    assert killed is verdict.stopped, spec.job_id
    if verdict.stopped:
        assert verdict.stop_index is not None and verdict.best_index is not None
        assert stop_progress == pytest.approx(spec.evals[verdict.stop_index].progress, rel=1e-9)
        assert delivered == truth.true_at_evals[verdict.best_index]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_random_workloads_keep_every_invariant(case: Case) -> None:
    sim, result = run(case.workload, case.scheduler(), case.config)
    check_invariants(case, sim, result)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_workloads(), st.sampled_from(sorted(SCHEDULERS)), DETECTORS)
def test_random_workloads_fast_and_event_paths_agree(
    workload: Workload, name: str, detector: Detector
) -> None:
    fast = run(workload, EvalStop(make_scheduler(name), detector), SimConfig(eval_path="fast"))[1]
    events = run(workload, EvalStop(make_scheduler(name), detector), SimConfig(eval_path="events"))[1]
    for a, b in zip(fast.outcomes, events.outcomes, strict=True):
        assert (a.killed, a.n_preemptions) == (b.killed, b.n_preemptions)
        assert a.end_s == pytest.approx(b.end_s, rel=1e-6)


NON_PREEMPTIVE = sorted(name for name, cls in SCHEDULERS.items() if not cls.preemptive)


@pytest.mark.parametrize("eval_path", ["fast", "events"])
@pytest.mark.parametrize("wrapped", [False, True], ids=["bare", "evalstop"])
@pytest.mark.parametrize("name", NON_PREEMPTIVE)
def test_a_non_preemptive_scheduler_never_preempts(
    small_paper: dict[int, Workload], name: str, wrapped: bool, eval_path: str
) -> None:
    heavy = generate(SMALL_PAPER.with_(offered_load=1.4), seed=3)
    for workload in (small_paper[0], heavy):
        base = make_scheduler(name)
        scheduler = EvalStop(base, KDeclines()) if wrapped else base
        assert not scheduler.preemptive
        sim, result = run(workload, scheduler, SimConfig(eval_path=eval_path))
        assert not any(kind == "preempt" for _, kind, _ in sim.log)
        assert all(o.n_preemptions == 0 and o.gpu_s_overhead == 0.0 for o in result.outcomes)
    # the same workload does make a preemptive policy preempt, so the check has teeth
    sim, _ = run(heavy, SRTFEst())
    assert any(kind == "preempt" for _, kind, _ in sim.log)


def test_fifo_is_the_only_non_preemptive_policy_registered() -> None:
    assert NON_PREEMPTIVE == ["fifo"]
    assert EvalStop(SRTFEst()).preemptive and not EvalStop(FIFO()).preemptive


# -- the oracle ------------------------------------------------------------------------------


def test_oracle_kills_exactly_the_hacking_jobs_at_their_true_best(small_paper: dict[int, Workload]) -> None:
    workload = small_paper[2]
    _, oracle = run(workload, make_scheduler("fifo"), SimConfig(oracle=True))
    _, evalstop = run(workload, EvalStop(make_scheduler("fifo"), KDeclines(against="best")))
    assert oracle.policy == "oracle"
    hacking = [o.hacking for o in oracle.outcomes]
    assert any(hacking)
    assert [o.killed for o in oracle.outcomes] == hacking
    regret_oracle, regret_evalstop = [], []
    for o, e, truth, spec in zip(
        oracle.outcomes, evalstop.outcomes, workload.truth, workload.jobs, strict=True
    ):
        if not o.hacking:
            continue
        best = int(np.argmax(truth.true_at_evals))
        assert o.true_delivered == max(truth.true_at_evals)
        assert o.stop_progress == pytest.approx(spec.evals[best].progress, rel=1e-9)
        assert o.regret <= e.regret + 1e-12  # no eval checkpoint beats the true best one
        regret_oracle.append(o.regret)
        regret_evalstop.append(e.regret)
    assert np.mean(regret_oracle) <= np.mean(regret_evalstop)
    assert np.mean(regret_oracle) < np.mean(
        [o.regret for o in run(workload, make_scheduler("fifo"))[1].outcomes if o.hacking]
    )


def test_oracle_on_the_event_path_terminates_and_matches_the_fast_path() -> None:
    workload = hand_workload(HACKER, WAITER)
    _, fast = run(workload, FIFO(), SimConfig(oracle=True))
    _, events = run(workload, FIFO(), SimConfig(oracle=True, eval_path="events"), max_events=1_000)
    assert events.outcomes == fast.outcomes


def test_the_event_cap_of_these_tests_is_live() -> None:
    """The guard that turns a livelock into a failure must be able to fire: a cap below what an
    ordinary run schedules stops it."""
    workload = hand_workload(HACKER, WAITER)
    sim = ClusterSim(workload, FIFO(), SimConfig(eval_path="events"))
    sim.engine = BoundedEngine(2)
    with pytest.raises(EventStorm, match="event cap exceeded"):
        sim.run()


# -- the invariant guard ---------------------------------------------------------------------


class ShrinkingFIFO(FIFO):
    """A buggy policy: it hands the simulator views that claim every job needs one GPU."""

    def order(self, jobs: Sequence[JobView], now: float) -> list[JobView]:
        fakes = [JobView(j.job_id, j.tenant, j.kind, 1, j.arrival_s, j.budget_s) for j in jobs]
        return super().order(fakes, now)


class ForgetfulSRTF(SRTFEst):
    """A buggy policy: it ranks no job at all, so nothing is ever (re)started."""

    def order(self, jobs: Sequence[JobView], now: float) -> list[JobView]:
        return []


def test_allocating_more_gpus_than_exist_raises_with_time_and_job() -> None:
    workload = hand_workload(
        Hand(gpus=2, arrival_s=0.0, duration_s=100.0), Hand(gpus=4, arrival_s=10.0, duration_s=50.0)
    )
    with pytest.raises(SimulationInvariantError, match=r"t=10\.0: starting job 1 allocates 6 GPUs of 4"):
        simulate(workload, ShrinkingFIFO())


def test_a_run_that_strands_jobs_raises_with_the_counts() -> None:
    workload = hand_workload(
        Hand(gpus=4, arrival_s=0.0, duration_s=100.0), Hand(gpus=4, arrival_s=10.0, duration_s=50.0)
    )
    # both jobs are preempted at t=10; the time reported is when the heap ran dry (job 0's stale
    # completion event at t=100)
    with pytest.raises(
        SimulationInvariantError, match=r"t=100\.0: run ended with 0 running, 2 waiting, 0/2 jobs done"
    ):
        simulate(workload, ForgetfulSRTF())


def test_simconfig_validates_its_parameters() -> None:
    with pytest.raises(
        ValueError, match=r"'eval_path' parameter of SimConfig must be one of 'events', 'fast'"
    ):
        SimConfig(eval_path="slow")
    with pytest.raises(ValueError, match=r"'preempt_overhead_s' parameter of SimConfig .* Got -1\.0"):
        SimConfig(preempt_overhead_s=-1.0)
