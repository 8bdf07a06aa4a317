"""The engine model pooled over several calibration runs, so that a prediction does not hinge on
one calibration draw.

A start-up load slope fitted on a dozen jobs at a few levels of load is mostly noise, and one run
can draw a slope no engine has (a start-up that falls as the engine fills). So :func:`pool`:

- fits the start-up ``base + per_busy_slot * busy + per_extra_slot * (width - 1)`` by least
  squares over the jobs of every run together, the load and width centred on their pooled means
  (the intercept is then the pooled mean start-up), and each run on its own;
- gives each term an interval (``LEVEL``, two-sided): the wider of the pooled fit's own
  (Student-t on its standard error) and the spread of the per-run estimates (Student-t on their
  standard error, with runs - 1 degrees of freedom; needs two runs that vary the term);
- keeps a term only where its interval excludes zero; otherwise the term is 0 and the start-up
  is the pooled mean there;
- shrinks a kept term toward 0 (so the start-up toward the pooled mean) by the positive-part
  James-Stein factor ``1 - (se / estimate)^2``, the standard error the interval's half-width came
  from;
- pools the stop latencies and the per-kind eval timing over the runs (their means), and the
  residual sd from the kept terms over every job.

The model file records each run's observations and its own fit (``runs``) and each term's
estimate, interval, per-run estimates and decision (``terms``). :func:`resample` is one bootstrap
draw over the runs (the same procedure on runs drawn with replacement), which the prediction
uses to carry the calibration's uncertainty into its range.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np
from scipy import stats

from .engine_model import NUMPY_KINDS, POOLED, EngineModel, KindTiming, RunObservations, observe
from .workload import JobPlan

LEVEL = 0.95
TERMS = ("per_busy_slot", "per_extra_slot")

__all__ = ["LEVEL", "TERMS", "fit", "pool", "resample", "run_alone"]


def fit(
    raw: dict[str, list[dict[str, Any]]], plan: list[JobPlan], calibration: dict[str, Any]
) -> EngineModel:
    """The engine model of one calibration run (:func:`pool` over that run alone)."""
    return pool([observe(raw, plan, calibration)], calibration)


def pool(runs: list[RunObservations], calibration: dict[str, Any]) -> EngineModel:
    """The engine model from ``runs`` (see the module doc); ``calibration`` describes them."""
    if not runs:
        raise ValueError("The 'runs' parameter of pool must hold at least one calibration run. Got none.")
    x, y = _design(runs)
    latencies = [t for r in runs for t in r.stop_latencies_s]
    if not latencies:
        raise ValueError("The calibration runs had no enforced stop: use a trace with hacking jobs.")
    per_run = [_run_fit(r) for r in runs]
    centre = x.mean(axis=0)
    estimate, se, df = _ols(x - centre, y)
    terms = {
        name: _term(name, estimate[c], se[c], df, [f[name] for f in per_run if f[name] is not None])
        for c, name in enumerate(TERMS)
    }
    slopes = np.array([terms[name]["value"] for name in TERMS])
    base = float(y.mean() - slopes @ centre)
    resid = y - base - x @ slopes
    kept = sum(t["kept"] for t in terms.values())
    return EngineModel(
        startup_base_s=base,
        startup_per_busy_slot_s=float(slopes[0]),
        startup_per_extra_slot_s=float(slopes[1]),
        startup_residual_sd_s=float(np.std(resid, ddof=min(1 + kept, len(y) - 1))),
        stop_latency_s=float(np.mean(latencies)),
        timing=_timing(runs),
        calibration={
            **calibration,
            "n_runs": len(runs),
            "n_startups": len(y),
            "n_stops": len(latencies),
        },
        startup_mean_s=float(y.mean()),
        runs=[{"observations": r.to_json(), "fit": f} for r, f in zip(runs, per_run, strict=True)],
        terms=terms,
    )


def resample(model: EngineModel, rng: np.random.Generator) -> EngineModel:
    """One bootstrap draw of ``model``: :func:`pool` over its runs drawn with replacement (the
    model itself when it holds fewer than two runs: nothing to resample)."""
    if len(model.runs) < 2:
        return model
    picks = [int(rng.integers(len(model.runs))) for _ in model.runs]
    runs = [RunObservations.from_json(model.runs[i]["observations"]) for i in picks]
    calibration = {k: v for k, v in model.calibration.items() if k not in ("n_runs", "n_startups", "n_stops")}
    return pool(runs, calibration)


def run_alone(model: EngineModel, index: int) -> EngineModel:
    """Run ``index`` of ``model`` on its own with its least squares terms as fitted (no interval,
    no shrinking): the single-draw calibration, to compare the pooled model with."""
    run = RunObservations.from_json(model.runs[index]["observations"])
    alone, own = pool([run], run.calibration), model.runs[index]["fit"]
    return replace(
        alone,
        startup_base_s=own["startup_base_s"],
        startup_per_busy_slot_s=own["per_busy_slot"] or 0.0,
        startup_per_extra_slot_s=own["per_extra_slot"] or 0.0,
        terms={},
    )


def _design(runs: list[RunObservations]) -> tuple[np.ndarray, np.ndarray]:
    """The columns (busy slots, width - 1) and the start-ups of every job of ``runs``."""
    rows = np.array([row for r in runs for row in r.startups], dtype=float).reshape(-1, 3)
    return np.column_stack([rows[:, 0], rows[:, 1] - 1]), rows[:, 2]


def _ols(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Least squares of ``y`` on a constant and the columns of ``x`` that vary: per column its
    slope and standard error (nan for a column that does not vary), and the residual degrees of
    freedom."""
    varies = [c for c in range(x.shape[1]) if np.ptp(x[:, c]) > 0]
    design = np.column_stack([np.ones(len(y)), x[:, varies]])
    coef, *_ = np.linalg.lstsq(design, y, rcond=None)
    df = len(y) - design.shape[1]
    sigma2 = float(np.sum((y - design @ coef) ** 2) / df) if df > 0 else math.nan
    cov = sigma2 * np.linalg.pinv(design.T @ design)
    estimate, se = np.full(x.shape[1], math.nan), np.full(x.shape[1], math.nan)
    estimate[varies], se[varies] = coef[1:], np.sqrt(np.diag(cov))[1:]
    return estimate, se, df


def _run_fit(run: RunObservations) -> dict[str, Any]:
    """One run's own least squares fit and means (a term the run did not vary: None)."""
    x, y = _design([run])
    estimate, _, _ = _ols(x, y)
    slopes = np.nan_to_num(estimate)
    return {
        "seed": run.calibration.get("spec", {}).get("seed"),
        "n_startups": len(y),
        "startup_base_s": float(y.mean() - slopes @ x.mean(axis=0)),
        **{name: None if math.isnan(b) else float(b) for name, b in zip(TERMS, estimate, strict=True)},
        "startup_mean_s": float(y.mean()),
        "stop_latency_s": float(np.mean(run.stop_latencies_s)) if run.stop_latencies_s else None,
        "n_stops": len(run.stop_latencies_s),
    }


def _term(name: str, estimate: float, se: float, df: int, per_run: list[float]) -> dict[str, Any]:
    """A term's interval and decision (see the module doc)."""
    out: dict[str, Any] = {
        "per_run": per_run,
        "estimate": None,
        "interval": None,
        "kept": False,
        "value": 0.0,
    }
    if math.isnan(estimate):
        return out | {"reason": "constant in the calibration runs"}
    half, used = (_t(df) * se, se) if df > 0 else (math.inf, math.inf)
    if len(per_run) >= 2:
        spread = float(np.std(per_run, ddof=1)) / math.sqrt(len(per_run))
        if _t(len(per_run) - 1) * spread > half:
            half, used = _t(len(per_run) - 1) * spread, spread
    kept = abs(estimate) > half
    shrink = max(0.0, 1.0 - (used / estimate) ** 2) if kept else 0.0
    return out | {
        "estimate": float(estimate),
        "interval": [float(estimate - half), float(estimate + half)],
        "kept": bool(kept),
        "shrink": float(shrink),
        "value": float(estimate * shrink) if kept else 0.0,  # not -0.0
        "reason": "interval excludes 0" if kept else "interval includes 0: the pooled mean",
    }


def _t(df: int) -> float:
    return float(stats.t.ppf(0.5 + LEVEL / 2, df))


def _timing(runs: list[RunObservations]) -> dict[str, KindTiming]:
    rows: dict[str, list[tuple[float, float, float]]] = {}
    for r in runs:
        for kind, ts in r.timing.items():
            rows.setdefault(kind, []).extend(ts)
    timing = {kind: _kind_timing(ts) for kind, ts in rows.items()}
    numpy_rows = [t for kind in NUMPY_KINDS for t in rows.get(kind, [])]
    if numpy_rows:
        timing[POOLED] = _kind_timing(numpy_rows)
    return timing


def _kind_timing(rows: list[tuple[float, float, float]]) -> KindTiming:
    setup, per_eval, tail = (float(np.mean([r[i] for r in rows])) for i in range(3))
    return KindTiming(setup, per_eval, tail, len(rows))
