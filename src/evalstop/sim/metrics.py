"""Run-level metrics computed from a :class:`SimResult`. Definitions and reasons: docs/metrics.md.

Classification: a *positive* is a hacking job; a *positive prediction* is a job killed by the
stopping rule. ``fpr`` counts every non-hacking job (healthy RLHF, LoRA, DPO) as a negative, the
reading that reproduces the paper's numbers; ``fpr_healthy_rlhf`` restricts the negatives to
healthy RLHF jobs; ``fpr_by_kind`` gives the FPR within each job kind.

A ratio whose denominator is zero is ``nan``, never 0 or 1: precision when nothing was killed,
recall when there are no hacking jobs, an FPR with no negatives, JCT percentiles of an empty run,
utilisation of a zero-length run. ``format_value`` prints ``nan`` as "—"; ``Metrics.as_dict``
writes it as ``None`` so the result is strict JSON.

Percentiles use ``numpy.percentile(..., method="linear")`` (linear interpolation between order
statistics, numpy's default; "type 7" in Hyndman and Fan).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from .outcome import SimResult

__all__ = ["Metrics", "compute_metrics", "format_value", "metrics_table"]

Array = np.ndarray[Any, Any]
_S_PER_HOUR = 3600.0
_NAN = float("nan")


@dataclass(frozen=True)
class Metrics:
    """Summary of one simulation run. Units are in the names; ``nan`` means "undefined"."""

    policy: str
    seed: int
    n_jobs: int
    n_hacking: int
    n_killed: int
    true_positives: int  # hacking jobs killed
    false_positives: int  # non-hacking jobs killed
    false_negatives: int  # hacking jobs not killed
    true_negatives: int  # non-hacking jobs not killed
    precision: float
    recall: float
    fpr: float  # negatives: every non-hacking job of any kind
    fpr_healthy_rlhf: float  # negatives: non-hacking RLHF jobs only
    fpr_by_kind: dict[str, float] = field(hash=False)  # per job kind, negatives of that kind
    jct_mean_s: float
    jct_p50_s: float
    jct_p95_s: float
    jct_p99_s: float
    wasted_gpu_hours: float  # after_peak + overhead
    after_peak_gpu_hours: float  # GPU-hours of progress after a job's true quality peak
    overhead_gpu_hours: float  # GPU-hours of preemption restore overhead
    gpu_hours_total: float  # useful + overhead + eval
    hacking_gpu_hours: float  # every GPU-hour spent on reward-hacking jobs (a second reading of waste)
    mean_regret: float  # over all jobs
    mean_regret_hacking: float  # over hacking jobs
    utilisation: float  # (useful + overhead + eval) / (total_gpus * makespan_s)
    #: GPU-hours spent running evals on the jobs' own GPUs (0 unless ``SimConfig.eval_cost``)
    eval_gpu_hours: float = 0.0
    #: evals run per RLHF job (nan unless evals are timed: ``eval_cost`` > 0 or a cadence)
    evals_per_rlhf_job: float = _NAN

    def as_dict(self) -> dict[str, Any]:
        """Plain dict for ``json.dumps``; ``nan`` becomes ``None`` so the output is strict JSON."""
        return {key: _json_safe(value) for key, value in asdict(self).items()}


def compute_metrics(result: SimResult) -> Metrics:
    """Compute every run-level metric of ``result``, from its outcome columns (no per-job
    records are built; sums of GPU time are exact, ``math.fsum``)."""
    cols = result.columns
    hacking, killed = cols["hacking"].astype(bool), cols["killed"].astype(bool)
    kind = cols["kind"]
    tp, fp, fn, tn = _confusion(hacking, killed)
    jct = cols["end_s"].astype(float) - cols["arrival_s"].astype(float)
    p50, p95, p99 = _percentiles(jct, (50.0, 95.0, 99.0))
    useful, overhead = cols["gpu_s_useful"].astype(float), cols["gpu_s_overhead"].astype(float)
    evals = cols["gpu_s_eval"].astype(float) if "gpu_s_eval" in cols else np.zeros_like(useful)
    after_peak_s = math.fsum(cols["gpu_s_after_peak"].astype(float).tolist())
    overhead_s = math.fsum(overhead.tolist())
    eval_s = math.fsum(evals.tolist())
    busy_s = math.fsum(useful.tolist()) + overhead_s + eval_s
    regret = cols["true_peak"].astype(float) - cols["true_delivered"].astype(float)
    return Metrics(
        policy=result.policy,
        seed=result.seed,
        n_jobs=int(hacking.size),
        n_hacking=tp + fn,
        n_killed=tp + fp,
        true_positives=tp,
        false_positives=fp,
        false_negatives=fn,
        true_negatives=tn,
        precision=_ratio(tp, tp + fp),
        recall=_ratio(tp, tp + fn),
        fpr=_ratio(fp, fp + tn),
        fpr_healthy_rlhf=_fpr(hacking, killed, kind == "rlhf"),
        fpr_by_kind={k: _fpr(hacking, killed, kind == k) for k in sorted(set(kind.tolist()))},
        jct_mean_s=_mean(jct),
        jct_p50_s=p50,
        jct_p95_s=p95,
        jct_p99_s=p99,
        wasted_gpu_hours=(after_peak_s + overhead_s) / _S_PER_HOUR,
        after_peak_gpu_hours=after_peak_s / _S_PER_HOUR,
        overhead_gpu_hours=overhead_s / _S_PER_HOUR,
        gpu_hours_total=busy_s / _S_PER_HOUR,
        hacking_gpu_hours=math.fsum((useful + overhead + evals)[hacking].tolist()) / _S_PER_HOUR,
        mean_regret=_mean(regret),
        mean_regret_hacking=_mean(regret[hacking]),
        utilisation=_ratio(busy_s, result.total_gpus * result.makespan_s),
        eval_gpu_hours=eval_s / _S_PER_HOUR,
        evals_per_rlhf_job=_mean(cols["n_evals"][kind == "rlhf"].astype(float)) if "n_evals" in cols
        else _NAN,
    )


def format_value(value: float, digits: int = 3) -> str:
    """A table cell: ``nan`` (undefined) prints as "—"."""
    return "—" if math.isnan(value) else f"{value:.{digits}f}"


_TABLE_COLUMNS = (
    "precision",
    "recall",
    "fpr",
    "fpr_healthy_rlhf",
    "jct_mean_s",
    "jct_p95_s",
    "wasted_gpu_hours",
    "mean_regret",
    "utilisation",
)


def metrics_table(rows: Sequence[Metrics], columns: Sequence[str] = _TABLE_COLUMNS) -> str:
    """A Markdown table, one row per run; undefined values print as "—"."""
    header = "| policy | seed | " + " | ".join(columns) + " |"
    rule = "|---|---|" + "---|" * len(columns)
    lines = [header, rule]
    for m in rows:
        cells = [format_value(float(getattr(m, name))) for name in columns]
        lines.append(f"| {m.policy} | {m.seed} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _confusion(hacking: Array, killed: Array) -> tuple[int, int, int, int]:
    """(true positives, false positives, false negatives, true negatives) of boolean columns."""
    tp = int(np.count_nonzero(hacking & killed))
    fp = int(np.count_nonzero(~hacking & killed))
    fn = int(np.count_nonzero(hacking & ~killed))
    return tp, fp, fn, int(hacking.size) - tp - fp - fn


def _fpr(hacking: Array, killed: Array, among: Array) -> float:
    _, fp, _, tn = _confusion(hacking[among], killed[among])
    return _ratio(fp, fp + tn)


def _ratio(numerator: float, denominator: float) -> float:
    return numerator / denominator if denominator else _NAN


def _mean(values: np.ndarray[Any, np.dtype[np.float64]]) -> float:
    return float(values.mean()) if values.size else _NAN


def _percentiles(
    values: np.ndarray[Any, np.dtype[np.float64]], qs: tuple[float, ...]
) -> tuple[float, ...]:
    if values.size == 0:
        return tuple(_NAN for _ in qs)
    return tuple(float(p) for p in np.percentile(values, qs, method="linear"))


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {key: _json_safe(v) for key, v in value.items()}
    return value
