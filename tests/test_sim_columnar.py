"""Columnar workloads and outcomes, and the batch kill plan, against the record-based paths."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from evalstop.detectors import Eval, KDeclines, Monitor, _kdeclines
from evalstop.schedulers import FIFO, EvalStop, JobView, KillPlan, Scheduler, SRTFEst
from evalstop.sim._kill_plan import batch_plan
from evalstop.sim.cluster import SimConfig, simulate
from evalstop.sim.outcome import OutcomeTable
from evalstop.workloads import PRESETS, Workload, generate
from evalstop.workloads.table import DenseEvals, JobTable


def _monitor_plan(rule: KDeclines, scores: np.ndarray) -> tuple[list[int], list[int]]:
    stops, bests = [], []
    for row in scores.tolist():
        monitor = Monitor(rule)
        fired = monitor.fold([Eval(step, score) for step, score in enumerate(row, start=1)])
        verdict = monitor.verdict
        stops.append(verdict.stop_index if fired else -1)
        bests.append(verdict.best_index if fired and verdict.best_index is not None else -1)
    return stops, bests


RULES = [
    KDeclines(k=k, against=against, mode=mode, min_delta=delta, n_warmup_evals=warm)
    for k, against, mode, delta, warm in itertools.product(
        (1, 2, 3), ("previous", "best"), ("max", "min"), (0.0, 0.01), (0, 2)
    )
]


@pytest.mark.parametrize("chunk", [65536, 7], ids=["one-chunk", "chunks-of-7"])
@pytest.mark.parametrize("rule", RULES, ids=repr)
def test_batch_kdeclines_plan_is_the_monitor_fold(
    rule: KDeclines, chunk: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_kdeclines, "_FOLD_CHUNK", chunk)  # 400 rows: 58 chunks, a short last one
    rng = np.random.default_rng(3)
    scores = np.round(rng.normal(0.0, 0.05, (400, 8)).cumsum(axis=1), 2)  # ties happen
    holes = rng.random(scores.shape)
    scores[holes < 0.05] = np.nan
    scores[(holes >= 0.05) & (holes < 0.07)] = np.inf
    scores[(holes >= 0.07) & (holes < 0.08)] = -np.inf
    planned = rule.fold_rows(scores)
    assert planned is not None
    stop, best = planned
    want_stop, want_best = _monitor_plan(rule, scores)
    assert stop.tolist() == want_stop
    assert [b if s >= 0 else -1 for s, b in zip(stop.tolist(), best.tolist(), strict=True)] == want_best
    assert any(s >= 0 for s in want_stop) and any(s < 0 for s in want_stop)


def test_batch_plan_only_for_plain_evalstop_over_kdeclines_on_dense_evals() -> None:
    workload = generate(PRESETS["paper"].with_(n_jobs=50, total_gpus=16), seed=2)
    table = workload.table
    plan = batch_plan(EvalStop(SRTFEst(), KDeclines()), table)
    assert plan is not None
    rlhf = [table.kinds[k] == "rlhf" for k in table.kind.tolist()]
    assert all(s == -1 for s, watched in zip(plan[0], rlhf, strict=True) if not watched)
    assert batch_plan(SRTFEst(), table) is None
    records = Workload(workload.config, workload.seed, workload.jobs, workload.truth)
    assert batch_plan(EvalStop(SRTFEst(), KDeclines()), records.table) is None


class OwnMonitors(EvalStop):
    def monitor(self, job: JobView) -> Monitor | None:
        return Monitor(self.detector)


class OwnWatch(EvalStop):
    def watches(self, job: JobView) -> bool:
        return True


class BaseWithMonitors(FIFO):
    def monitor(self, job: JobView) -> Monitor | None:
        return Monitor(KDeclines())


class LoudStart(EvalStop):
    def on_start(self, job: JobView, now: float) -> None:
        super().on_start(job, now)


@pytest.mark.parametrize(("scheduler", "plan"), [
    (FIFO(), KillPlan()),
    (EvalStop(SRTFEst(), KDeclines(), watch=("rlhf",)), KillPlan(KDeclines(), frozenset({"rlhf"}))),
    (EvalStop(FIFO(), KDeclines(), watch=None), KillPlan(KDeclines(), None)),
    (EvalStop(FIFO(), KDeclines(), cadence="every:2"), None),  # a cadence skips evals: per job
    (EvalStop(EvalStop(FIFO(), KDeclines()), KDeclines()), None),  # the base hands out monitors
    (EvalStop(BaseWithMonitors(), KDeclines()), None),
    (BaseWithMonitors(), None),
    (OwnMonitors(FIFO(), KDeclines()), None),  # a subclass that makes its monitors its own way
    (OwnWatch(FIFO(), KDeclines()), None),
])
def test_the_scheduler_says_whether_its_kills_can_be_planned_at_once(
        scheduler: Scheduler, plan: KillPlan | None) -> None:
    assert scheduler.kill_plan() == plan


def test_a_wrapper_hands_out_its_bases_hooks_unless_it_defines_them() -> None:
    base = SRTFEst()
    wrapped = EvalStop(base, KDeclines())
    assert wrapped.hook("rank_key") == base.rank_key
    assert wrapped.hook("on_start") is None and FIFO().hook("on_start") is None  # the no-op: skipped
    assert wrapped.hook("monitor") == wrapped.monitor
    loud = LoudStart(base, KDeclines())
    assert loud.hook("on_start") == loud.on_start and loud.hook("on_stop") is None
    assert BaseWithMonitors().hook("monitor") is not None


@pytest.mark.parametrize("path", ["fast", "events"])
def test_a_columnar_workload_and_its_records_simulate_identically(path: str) -> None:
    workload = generate(PRESETS["paper"].with_(n_jobs=300, total_gpus=16, offered_load=1.2), seed=5)
    records = Workload(workload.config, workload.seed, workload.jobs, workload.truth)
    assert isinstance(workload.table.evals, DenseEvals)
    assert records == workload
    for scheduler in (lambda: EvalStop(SRTFEst(), KDeclines(against="best")), lambda: FIFO(backfill=True)):
        a = simulate(workload, scheduler(), SimConfig(eval_path=path))
        b = simulate(records, scheduler(), SimConfig(eval_path=path))
        assert a.event_log_hash == b.event_log_hash
        assert a.outcomes == b.outcomes
        assert isinstance(a.outcomes, OutcomeTable)


def test_outcome_columns_match_the_records() -> None:
    workload = generate(PRESETS["paper"].with_(n_jobs=200, total_gpus=8, offered_load=1.3), seed=1)
    result = simulate(workload, EvalStop(SRTFEst(), KDeclines()), SimConfig(min_run_s=60.0))
    columns = result.columns
    for name in ("start_s", "end_s", "gpu_s_useful", "gpu_s_overhead", "true_delivered", "n_preemptions"):
        assert columns[name].tolist() == [getattr(o, name) for o in result.outcomes]
    assert columns["killed"].sum() == sum(o.killed for o in result.outcomes) > 0
    assert sum(o.n_preemptions for o in result.outcomes) > 0


def test_table_records_round_trip_and_replace() -> None:
    workload = generate(PRESETS["realistic"].with_(n_jobs=40, total_gpus=8), seed=4)
    again = JobTable.from_records(workload.jobs, workload.truth)
    assert again.records() == (workload.jobs, workload.truth)
    later = workload.table.replace(arrival_s=workload.table.arrival_s + 10.0)
    assert [s.arrival_s for s in Workload(workload.config, 4, table=later).jobs] == [
        s.arrival_s + 10.0 for s in workload.jobs
    ]
    with pytest.raises(ValueError, match="no columns"):
        workload.table.replace(arrival=1.0)


@pytest.mark.parametrize("path", ["fast", "events"])
def test_outcome_rows_and_log_flushed_in_chunks_give_the_same_run(
    monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    """The outcome rows and the event log's lists are moved into numpy every FLUSH entries:
    flushing every 7 gives the same outcomes, log and hash as one flush at the end."""
    import evalstop.sim._inputs as inputs
    import evalstop.sim.cluster as cluster

    workload = generate(PRESETS["paper"].with_(n_jobs=120, total_gpus=8, offered_load=1.1), seed=6)
    config = SimConfig(eval_path=path)
    runs = []
    for flush in (None, 7):
        if flush is not None:
            monkeypatch.setattr(cluster, "FLUSH", flush)
            monkeypatch.setattr(inputs, "FLUSH", flush)
        sim = cluster.ClusterSim(workload, EvalStop(SRTFEst(), KDeclines()), config)
        runs.append((sim.run(), sim.log))
    (whole, whole_log), (chunked, chunked_log) = runs
    assert chunked.outcomes == whole.outcomes and chunked.event_log_hash == whole.event_log_hash
    assert chunked_log == whole_log
    assert any(kind == "preempt" for _, kind, _ in whole_log)  # ``add`` flushes by itself too


def test_duplicate_job_ids_are_rejected_before_the_run() -> None:
    from evalstop._validation import InvalidParameterError

    workload = generate(PRESETS["paper"].with_(n_jobs=5, total_gpus=16), seed=0)
    ids = workload.table.job_id.copy()
    ids[3] = ids[1]
    twice = Workload(workload.config, 0, table=workload.table.replace(job_id=ids))
    with pytest.raises(InvalidParameterError, match="job 1 appears twice"):
        simulate(twice, FIFO())
    with pytest.raises(TypeError, match="jobs and truth records, or a table"):
        Workload(workload.config, 0)


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf")])
def test_a_bad_arrival_time_is_rejected_before_the_run(bad: float) -> None:
    from evalstop._validation import InvalidParameterError

    workload = generate(PRESETS["paper"].with_(n_jobs=5, total_gpus=16), seed=0)
    arrival = workload.table.arrival_s.copy()
    arrival[2] = bad
    late = Workload(workload.config, 0, table=workload.table.replace(arrival_s=arrival))
    with pytest.raises(InvalidParameterError, match=r"Job 2 has arrival_s=.*finite and >= 0"):
        simulate(late, FIFO())
