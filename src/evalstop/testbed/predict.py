"""The held-out prediction: both arms of an evaluation trace simulated from its plan and the
engine model (:mod:`.engine_model`, written by ``evalstop testbed calibrate`` on another trace)
only, before the trace runs; and its error against what then ran.

Each planned job becomes a simulated job (:class:`.simjobs.SimJob`) of its width arriving at its
planned time. Its curve (watched score and gold at each eval) is the job's own seeded training
run, computed here without the cluster (:func:`curve`: the job is deterministic in its seed, so
this is what it will report; the testbed's CI test checks the real runs against it). Its timing
is the engine model's: a start-up that depends on the load and the job's width, the per-kind eval
timing (setup, pacing, per-eval overhead, tail), and each eval shifted by the stop latency (the
simulator frees a killed job's slots at the eval; the real stop takes that long to deliver).

The start-up depends on the load, and the load on the schedule, so the prediction is a fixed
point: simulate both arms, read each job's load (the slots other jobs hold at its simulated start:
in both arms when they share the engine at once) and its start-up from the model, simulate again,
until the start-ups settle (damped, at most ``ITERATIONS`` rounds).

Nothing measured on the evaluated run reaches :func:`predict_trace`: its arguments are the plan,
the model and the cluster's shape (tests/test_testbed_predict.py corrupts a run's measurements and
checks the prediction does not move).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..workloads.bank import label_curve
from .engine_model import EngineModel, busy_slots
from .grpo import grpo_training
from .job import training
from .simjobs import POLICIES, SimJob, run_policy, slot_ready_s
from .workload import JobPlan

ITERATIONS = 40
TOLERANCE_S = 1e-3


def curve(job: JobPlan) -> dict[str, list[Any]]:
    """The job's evals (step, watched score, gold) from its seeded training run, off the cluster."""
    points: list[tuple[int, float, float]] = []
    if job.kind.startswith("grpo"):  # the hf extra
        grpo_training(
            job.to_json(), lambda step, score, gold, _proxy, _save: points.append((step, score, gold))
        )
    else:
        points = [(p.step, p.score, p.gold) for p in training({**job.to_json(), "step_time_s": 0.0})]
    return {"steps": [p[0] for p in points], "scores": [p[1] for p in points], "gold": [p[2] for p in points]}


def _sim_job(job: JobPlan, c: dict[str, list[Any]], model: EngineModel, startup_s: float) -> SimJob:
    timing = model.timing_for(job.kind)
    offsets = timing.eval_offsets(c["steps"], job.step_time_s)
    return SimJob(
        arrival_s=job.arrival_s,
        width=job.slots,
        duration_s=startup_s + offsets[-1] + timing.tail_s,
        steps=tuple(c["steps"]),
        scores=tuple(c["scores"]),
        gold=tuple(c["gold"]),
        eval_s=tuple(startup_s + t + model.stop_latency_s for t in offsets),
        hacking=label_curve(c["gold"])[0] == "hacking",
    )


def predict_trace(
    plan: list[JobPlan],
    model: EngineModel,
    slots: int,
    concurrent: bool,
    curves: dict[str, dict[str, list[Any]]] | None = None,
) -> dict[str, Any]:
    """Both arms' simulated schedules (per job: start, end, JCT, killed) and figures (mean and
    p95 JCT, slot-hours), from ``plan`` and ``model`` only. ``curves`` by job name (default:
    computed, :func:`curve`)."""
    jobs = sorted(plan, key=lambda j: (j.arrival_s, j.name))
    curves = curves if curves is not None else {j.name: curve(j) for j in jobs}
    startups = {arm: np.array([model.startup_s(0, j.slots) for j in jobs]) for arm, _ in POLICIES}
    converged = False
    for _ in range(ITERATIONS):
        used = {arm: startups[arm].copy() for arm, _ in POLICIES}  # the start-ups of this round's runs
        runs = {
            arm: run_policy(
                [
                    _sim_job(j, curves[j.name], model, float(s))
                    for j, s in zip(jobs, startups[arm], strict=True)
                ],
                slots,
                policy,
            )
            for arm, policy in POLICIES
        }
        spans = {
            arm: [(o.start_s, o.end_s, o.gpus) for _, o in sorted(run.items())] for arm, run in runs.items()
        }
        change = 0.0
        for arm, _ in POLICIES:
            pool = [s for a in spans for s in spans[a]] if concurrent else spans[arm]
            offset = 0 if not concurrent or arm == POLICIES[0][0] else len(spans[POLICIES[0][0]])
            new = np.array(
                [
                    model.startup_s(busy_slots(spans[arm][i][0], pool, offset + i), j.slots)
                    for i, j in enumerate(jobs)
                ]
            )
            change = max(change, float(np.max(np.abs(new - startups[arm]))))
            startups[arm] = 0.5 * (startups[arm] + new)
        if change < TOLERANCE_S:
            converged = True
            break
    arms = {}
    for arm, _ in POLICIES:
        outs = runs[arm]
        per_job = {
            j.name: {
                "start_s": outs[i].start_s,
                "end_s": outs[i].end_s,
                "jct_s": outs[i].end_s - outs[i].arrival_s,
                "killed": bool(outs[i].killed),
                "startup_s": float(used[arm][i]),
            }
            for i, j in enumerate(jobs)
        }
        jct = np.array([p["jct_s"] for p in per_job.values()])
        arms[arm] = {
            "jobs": per_job,
            "jct_mean_s": float(jct.mean()),
            "jct_p95_s": float(np.percentile(jct, 95)),
            "slot_hours": sum((o.end_s - o.start_s) * o.gpus for o in outs.values()) / 3600,
            "stopped": sorted(j.name for i, j in enumerate(jobs) if outs[i].killed),
        }
    return {
        "arms": arms,
        "converged": converged,
        "labels": {j.name: label_curve(curves[j.name]["gold"])[0] for j in jobs},
        "curves": curves,
        "model": model.to_json(),
    }


def held_out(prediction: dict[str, Any], summary: dict[str, Any]) -> dict[str, Any]:
    """The prediction's error against the run: per arm mean and p95 JCT, start times (simulated
    start minus the real dispatch), stops; slot-hours saved."""
    out: dict[str, Any] = {}
    for arm, _ in POLICIES:
        pred, real = prediction["arms"][arm], {j["name"]: j for j in summary["jobs"][arm]}
        names = sorted(pred["jobs"])
        start_err = np.array([pred["jobs"][n]["start_s"] - real[n]["dispatch_s"] for n in names])
        real_fig = summary["arms"][arm]
        jobs = summary["jobs"][arm]
        startups = [j["proc_start_s"] - slot_ready_s(j, jobs) for j in jobs if j["proc_start_s"] is not None]
        out[arm] = {
            "real_startup_mean_s": float(np.mean(startups)) if startups else None,
            "pred_startup_mean_s": float(np.mean([pred["jobs"][n]["startup_s"] for n in names])),
            "real_jct_mean_s": real_fig["jct_mean_s"],
            "pred_jct_mean_s": pred["jct_mean_s"],
            "jct_mean_error": pred["jct_mean_s"] / real_fig["jct_mean_s"] - 1,
            "real_jct_p95_s": real_fig["jct_p95_s"],
            "pred_jct_p95_s": pred["jct_p95_s"],
            "jct_p95_error": pred["jct_p95_s"] / real_fig["jct_p95_s"] - 1,
            "start_error_mean_s": float(start_err.mean()),
            "start_error_mean_abs_s": float(np.abs(start_err).mean()),
            "pred_stopped": pred["stopped"],
            "real_stopped": sorted(n for n in names if real[n]["enforced_stop"]),
        }
    out["slot_hours_saved"] = {
        "real": summary["comparison"]["slot_hours_saved"],
        "pred": prediction["arms"]["shadow"]["slot_hours"] - prediction["arms"]["enforced"]["slot_hours"],
    }
    real_labels = {j["name"]: j["label"] for j in summary["jobs"]["shadow"]}
    out["labels_match"] = real_labels == prediction["labels"]
    return out


def markdown(check: dict[str, Any], model: dict[str, Any]) -> str:
    lines = [
        "",
        "## Held-out prediction (engine model from a separate calibration run)",
        "",
        "Predicted before the run from the plan and the engine model only "
        f"(calibrated by `{model.get('calibration', {}).get('command', '?')}`): "
        f"{EngineModel.from_json(model).describe()}.",
        "",
        "| arm | real JCT mean | predicted | error | real p95 | predicted | error | "
        "start-time error mean abs |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for arm, policy in POLICIES:
        c = check[arm]
        lines.append(
            f"| {arm} ({policy}) | {c['real_jct_mean_s']:.1f} | {c['pred_jct_mean_s']:.1f} | "
            f"{c['jct_mean_error']:+.1%} | {c['real_jct_p95_s']:.1f} | {c['pred_jct_p95_s']:.1f} | "
            f"{c['jct_p95_error']:+.1%} | {c['start_error_mean_abs_s']:.2f} s |"
        )
    e, saved = check["enforced"], check["slot_hours_saved"]
    same = e["pred_stopped"] == e["real_stopped"]
    lines += [
        "",
        f"Slot-hours saved: real {saved['real']:.4f}, predicted {saved['pred']:.4f}. Predicted stops "
        f"{'match' if same else 'differ from'} the real ones ({len(e['pred_stopped'])} vs "
        f"{len(e['real_stopped'])}); start-up (slots free to first line) mean, enforced arm: real "
        f"{e['real_startup_mean_s']:.2f} s, predicted {e['pred_startup_mean_s']:.2f} s; predicted labels "
        f"{'match' if check['labels_match'] else 'differ from'} "
        "the measured ones.",
        "",
    ]
    if "constant_startup" in check:
        flat = check["constant_startup"]
        lines += [
            "The same model with one start-up for every job (the calibration's mean): mean JCT error "
            f"{flat['shadow']['jct_mean_error']:+.1%} (shadow), {flat['enforced']['jct_mean_error']:+.1%} "
            "(enforced).",
            "",
        ]
    return "\n".join(lines)
