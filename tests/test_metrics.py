import json
import math

import numpy as np
import pytest

from evalstop.sim.metrics import Metrics, compute_metrics, format_value, metrics_table
from evalstop.sim.outcome import JobOutcome, SimResult


def job(
    job_id: int,
    kind: str = "rlhf",
    *,
    hacking: bool = False,
    killed: bool = False,
    arrival_s: float = 0.0,
    end_s: float = 100.0,
    useful: float = 0.0,
    overhead: float = 0.0,
    after_peak: float = 0.0,
    true_peak: float = 1.0,
    true_delivered: float = 1.0,
) -> JobOutcome:
    return JobOutcome(
        job_id=job_id,
        tenant=0,
        kind=kind,
        gpus=1,
        hacking=hacking,
        arrival_s=arrival_s,
        start_s=arrival_s,
        end_s=end_s,
        killed=killed,
        stop_progress=0.5 if killed else None,
        end_progress=0.5 if killed else 1.0,
        n_preemptions=0,
        gpu_s_useful=useful,
        gpu_s_overhead=overhead,
        gpu_s_after_peak=after_peak,
        true_peak=true_peak,
        true_delivered=true_delivered,
    )


def result(outcomes: list[JobOutcome], total_gpus: int = 4, makespan_s: float = 3600.0) -> SimResult:
    return SimResult(
        policy="p", seed=7, total_gpus=total_gpus, makespan_s=makespan_s,
        outcomes=tuple(outcomes), event_log_hash="h",
    )


# 4 hacking RLHF (3 killed), 2 healthy RLHF (1 killed), 2 LoRA (1 killed), 2 DPO (none killed).
MIXED = [
    job(0, hacking=True, killed=True),
    job(1, hacking=True, killed=True),
    job(2, hacking=True, killed=True),
    job(3, hacking=True, killed=False),
    job(4, killed=True),
    job(5),
    job(6, "lora", killed=True),
    job(7, "lora"),
    job(8, "dpo"),
    job(9, "dpo"),
]


def test_confusion_counts_and_rates() -> None:
    m = compute_metrics(result(MIXED))
    assert (m.n_jobs, m.n_hacking, m.n_killed) == (10, 4, 5)
    assert (m.true_positives, m.false_positives, m.false_negatives, m.true_negatives) == (3, 2, 1, 4)
    assert m.precision == pytest.approx(3 / 5)
    assert m.recall == pytest.approx(3 / 4)
    assert m.fpr == pytest.approx(2 / 6)  # every non-hacking job is a negative
    assert m.fpr_healthy_rlhf == pytest.approx(1 / 2)
    assert m.fpr_by_kind == pytest.approx({"dpo": 0.0, "lora": 0.5, "rlhf": 0.5})


def test_nothing_killed_gives_nan_precision_and_zero_recall() -> None:
    m = compute_metrics(result([job(0, hacking=True), job(1)]))
    assert math.isnan(m.precision)
    assert m.recall == 0.0
    assert m.fpr == 0.0


def test_no_hacking_jobs_gives_nan_recall_and_regret_hacking() -> None:
    m = compute_metrics(result([job(0, "lora", killed=True), job(1, "dpo")]))
    assert math.isnan(m.recall)
    assert math.isnan(m.mean_regret_hacking)
    assert math.isnan(m.fpr_healthy_rlhf)  # no healthy RLHF negatives
    assert m.precision == 0.0
    assert m.fpr == 0.5


def test_jct_includes_queueing_and_uses_linear_percentiles() -> None:
    ends = [10.0, 20.0, 30.0, 40.0, 100.0]
    outcomes = [job(i, arrival_s=5.0, end_s=e) for i, e in enumerate(ends)]
    m = compute_metrics(result(outcomes))
    jct = [5.0, 15.0, 25.0, 35.0, 95.0]
    assert m.jct_mean_s == pytest.approx(35.0)
    assert m.jct_p50_s == pytest.approx(25.0)
    assert m.jct_p95_s == pytest.approx(35.0 + 0.8 * 60.0)  # rank 0.95 * 4 = 3.8
    assert m.jct_p99_s == pytest.approx(35.0 + 0.96 * 60.0)  # rank 3.96
    assert m.jct_p99_s == pytest.approx(float(np.percentile(jct, 99, method="linear")))


def test_waste_gpu_hours_and_utilisation() -> None:
    outcomes = [
        job(0, hacking=True, useful=7200.0, overhead=360.0, after_peak=1800.0),
        job(1, useful=3600.0, overhead=0.0, after_peak=0.0),
        job(2, "lora", useful=1440.0, overhead=120.0),
    ]
    m = compute_metrics(result(outcomes, total_gpus=4, makespan_s=7200.0))
    assert m.after_peak_gpu_hours == pytest.approx(0.5)
    assert m.overhead_gpu_hours == pytest.approx(0.13333333333)
    assert m.wasted_gpu_hours == pytest.approx(0.5 + 480.0 / 3600.0)
    assert m.gpu_hours_total == pytest.approx((12240.0 + 480.0) / 3600.0)
    assert m.utilisation == pytest.approx(12720.0 / (4 * 7200.0))


def test_regret_over_all_jobs_and_hacking_jobs() -> None:
    outcomes = [
        job(0, hacking=True, killed=True, true_peak=0.8, true_delivered=0.7),
        job(1, hacking=True, true_peak=0.9, true_delivered=0.6),
        job(2, true_peak=0.5, true_delivered=0.5),
        job(3, "dpo", true_peak=0.4, true_delivered=0.4),
    ]
    m = compute_metrics(result(outcomes))
    assert m.mean_regret == pytest.approx((0.1 + 0.3) / 4)
    assert m.mean_regret_hacking == pytest.approx((0.1 + 0.3) / 2)


def test_empty_run_is_all_nan_not_an_error() -> None:
    m = compute_metrics(result([], makespan_s=0.0))
    assert m.n_jobs == 0
    for name in ("precision", "recall", "fpr", "jct_mean_s", "jct_p99_s", "mean_regret", "utilisation"):
        assert math.isnan(getattr(m, name)), name
    assert m.fpr_by_kind == {}
    assert m.wasted_gpu_hours == 0.0


def test_as_dict_is_strict_json_with_nan_as_null() -> None:
    m = compute_metrics(result([job(0, hacking=True), job(1, "lora")]))
    d = m.as_dict()
    text = json.dumps(d, allow_nan=False)
    back = json.loads(text)
    assert back["precision"] is None
    assert back["recall"] == 0.0
    assert back["fpr_by_kind"] == {"lora": 0.0, "rlhf": None}
    assert set(back) == set(Metrics.__dataclass_fields__)


def test_table_prints_dash_for_undefined() -> None:
    assert format_value(float("nan")) == "—"
    assert format_value(0.98251) == "0.983"
    m = compute_metrics(result([job(0, hacking=True), job(1)]))
    table = metrics_table([m], columns=("precision", "recall"))
    assert table.splitlines() == [
        "| policy | seed | precision | recall |",
        "|---|---|---|---|",
        "| p | 7 | — | 0.000 |",
    ]
