"""What a platform trades when tenants choose rewind instead of stop: the simulator.

A rewound job keeps its GPUs: at the detection it goes back to its best eval and trains on from
there, for the rest of its budget, instead of ending. The simulator itself is unchanged (a
stop-only run leaves every event log as it was); the rewind is a change of the workload, done
before simulating. For each watched job whose rule fires (a first detection at eval ``d``, best
eval ``b``, progress ``p_d`` and ``p_b``) the rewound job:

- runs ``p_d + (1 - p_b)`` of its original duration: what it trained up to the detection, then
  the redone part from its best point to the end (its budget grows by the same factor: the
  platform knows it rewound);
- has the evals ``0..b`` (the rule's state after ``b`` is the state it restarts from; the evals
  ``b+1..d`` no longer count, as ``Monitor.rewind`` does), then one eval per original eval point
  after ``b``, at the same spacing;
- has, after the rewind, the true quality of the **post-rewind curve model**: with probability
  ``rehack`` the job replays its own curve from its best eval on (a hacking job declines again;
  a healthy job falsely stopped improves as it would have), else it holds its best quality plus
  a gain that grows linearly to ``gain`` at its end. Its watched scores are those true values
  plus the noise its original evals had at the same points.

The same rule then runs unchanged over the rewound workload: a second detection stops the job
(``max_rewinds = 1``). ``calibrate`` sets ``rehack`` and ``gain`` from the real-training study
(``rewind_study``); docs/rewind.md gives the assumption and its sensitivity.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .._validation import check_float
from ..detectors import Eval, Monitor
from ..schedulers import EvalStop
from ..sim.cluster import SimConfig, simulate
from ..sim.metrics import compute_metrics
from ..workloads import JobSpec, JobTruth, Workload, WorkloadConfig, generate
from .policies import PolicySpec
from .stats import paired_compare

#: Per-job draws of the model come from ``SeedSequence(seed, spawn_key=(REWIND_KEY,))``.
REWIND_KEY = 23


@dataclass(frozen=True)
class PostRewind:
    """The post-rewind curve model: P(the job replays its own curve from the best) and the gain
    in true quality otherwise, reached at the end of the job."""

    rehack: float = 0.5
    gain: float = 0.0

    def __post_init__(self) -> None:
        check_float("PostRewind", "rehack", self.rehack, low=0.0, high=1.0)
        check_float("PostRewind", "gain", self.gain, low=-1.0, high=1.0)


def calibrate(result: dict[str, Any], arm: str) -> PostRewind:
    """The model of one arm of the real-training study: ``rehack`` = the share of its rewound
    runs whose true gold fell again (>= 0.1 below its post-rewind peak), ``gain`` = the mean over
    its other rewound runs of (true quality delivered - true quality at the rewind's best eval)."""
    rows = [r for r in result["rows"] if r[arm].get("rewound")]
    if not rows:
        return PostRewind()
    rehack = sum(r[arm]["hacked_again"] for r in rows) / len(rows)
    held = [r[arm]["quality"] - r["stop"]["quality"] for r in rows if not r[arm]["hacked_again"]]
    gain = float(np.clip(np.mean(held), -1.0, 1.0)) if held else 0.0
    return PostRewind(rehack=rehack, gain=gain)


def rewound_workload(workload: Workload, scheduler: EvalStop, model: PostRewind) -> tuple[Workload, int]:
    """``workload`` with every job the rule stops turned into its rewound job; and how many."""
    jobs, truth = list(workload.jobs), list(workload.truth)
    rng = np.random.default_rng(np.random.SeedSequence(workload.seed, spawn_key=(REWIND_KEY,)))
    draws = rng.random(len(jobs))  # one draw per job, whatever the rule does: streams never shift
    n = 0
    for i, spec in enumerate(jobs):
        if scheduler.watch is not None and spec.kind not in scheduler.watch:
            continue
        monitor = Monitor(scheduler.detector)
        verdict = monitor.observe_many(spec.evals)
        if not monitor.fired or verdict.best_index is None or verdict.stop_index is None:
            continue
        jobs[i], truth[i] = _rewind_job(spec, truth[i], verdict.best_index, verdict.stop_index,
                                        draws[i] < model.rehack, model.gain)
        n += 1
    return Workload(workload.config, workload.seed, tuple(jobs), tuple(truth)), n


def _rewind_job(
    spec: JobSpec, truth: JobTruth, b: int, d: int, replay: bool, gain: float
) -> tuple[JobSpec, JobTruth]:
    """The rewound job of a job whose rule fires at eval ``d`` with best eval ``b``."""
    evals, true = spec.evals, truth.true_at_evals
    p = [ev.progress if ev.progress is not None else (k + 1) / len(evals) for k, ev in enumerate(evals)]
    stretch = p[d] + (1.0 - p[b])
    new_true = list(true[: b + 1])
    new_evals = [Eval(ev.step, ev.score, p[k] / stretch, ev.loss) for k, ev in enumerate(evals[: b + 1])]
    after = range(b + 1, len(evals))
    for j, k in enumerate(after, start=1):
        q = true[k] if replay else true[b] + gain * j / len(after)
        noise = evals[k].score - true[k]
        new_true.append(q)
        new_evals.append(Eval(len(new_evals) + 1, q + noise, (p[d] + p[k] - p[b]) / stretch, evals[k].loss))
    new_spec = JobSpec(spec.job_id, spec.tenant, spec.kind, spec.gpus, spec.arrival_s,
                       spec.budget_s * stretch, tuple(new_evals))
    peak = max(new_true)
    peak_at = new_evals[new_true.index(peak)].progress or 1.0
    hacking = truth.hacking if replay else False  # replaying its own curve, it hacks as it did
    new_truth = JobTruth(hacking, truth.duration_s * stretch, peak_at, tuple(new_true), peak, new_true[-1])
    return new_spec, new_truth


def platform_study(config: WorkloadConfig, seeds: int, models: dict[str, PostRewind],
                   base: str = "srtf") -> dict[str, Any]:
    """Per policy (stop, and rewind under each model), metrics averaged over ``seeds`` seeds; with
    two seeds or more, each rewind arm's change against stop on ``COMPARED``, paired by seed
    (``vs_stop``: ``stats.paired_compare``, bootstrap 95 % CI of the relative change)."""
    policy = PolicySpec(label="EvalStop", base=base, detector="default")
    rows: dict[str, list[dict[str, float]]] = {"stop": [], **{f"rewind ({name})": [] for name in models}}
    n_rewound: dict[str, list[int]] = {name: [] for name in rows}
    for seed in range(seeds):
        workload = generate(config, seed)
        scheduler, sim = policy.build()
        assert isinstance(scheduler, EvalStop)
        rows["stop"].append(_measures(workload, policy, sim))
        n_rewound["stop"].append(0)
        for name, model in models.items():
            rewound, n = rewound_workload(workload, scheduler, model)
            rows[f"rewind ({name})"].append(_measures(rewound, policy, sim))
            n_rewound[f"rewind ({name})"].append(n)
    out: dict[str, dict[str, Any]] = {
        name: {**{k: float(np.mean([r[k] for r in rs])) for k in rs[0]},
               "rewound_jobs": float(np.mean(n_rewound[name]))} for name, rs in rows.items()
    }
    if seeds >= 2:
        for name, rs in rows.items():
            if name != "stop":
                out[name]["vs_stop"] = {
                    k: paired_compare([r[k] for r in rows["stop"]], [r[k] for r in rs]).as_dict()
                    for k in COMPARED
                }
    return out


#: The measures each rewind arm is compared on with stop, paired by seed (``--platform N >= 2``).
COMPARED = ("gpu_hours", "jct_mean_h", "rlhf_quality", "rlhf_quality_per_gpu_hour")


def _measures(workload: Workload, policy: PolicySpec, sim: SimConfig) -> dict[str, float]:
    scheduler, _ = policy.build()
    result = simulate(workload, scheduler, sim)
    metrics = compute_metrics(result)
    cols = result.columns
    rlhf = cols["kind"] == "rlhf"
    delivered = cols["true_delivered"].astype(float)[rlhf]
    gpu_h = (cols["gpu_s_useful"].astype(float) + cols["gpu_s_overhead"].astype(float))[rlhf] / 3600.0
    return {
        "jct_mean_h": metrics.jct_mean_s / 3600.0, "jct_p95_h": metrics.jct_p95_s / 3600.0,
        "gpu_hours": metrics.gpu_hours_total, "rlhf_quality": float(delivered.mean()),
        "rlhf_quality_per_gpu_hour": float(delivered.sum() / gpu_h.sum()),
        "rlhf_regret": float((cols["true_peak"].astype(float)[rlhf] - delivered).mean()),
    }


__all__ = ["PostRewind", "calibrate", "platform_study", "rewound_workload"]
