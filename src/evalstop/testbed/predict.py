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

The start-up's spread (the model's residual sd) matters in a queue: a slow start-up delays every
job behind it. :func:`predict_sampled`, the headline, draws each job's deviation from its expected
start-up (normal with the residual sd, the start-up floored at 0) from the seeded stream
``SeedSequence([trace seed, STARTUP_STREAM])``, one draw per job and arm, for each of
``replicas`` replicas (default ``REPLICAS``), runs the fixed point above with those deviations,
and reports the average over the replicas of each figure (mean JCT, p95 JCT, slot-hours; per job
its start and start-up; a job is predicted stopped if most replicas stop it). Each replica also
uses its own bootstrap draw of the engine model over the calibration runs
(:func:`.calibration.resample`, from ``SeedSequence([trace seed, CALIBRATION_STREAM])``; the model
itself when it was calibrated on one run), so the replicas' range carries the calibration's
uncertainty as well as the start-up's spread.
:func:`predict_trace` with no deviations (every job its expected start-up) is kept as the variant
``expected_startup``.

Nothing measured on the evaluated run reaches :func:`predict_trace`: its arguments are the plan,
the model and the cluster's shape (tests/test_testbed_predict.py corrupts a run's measurements and
checks the prediction does not move).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..workloads.bank import label_curve
from .calibration import resample
from .engine_model import EngineModel, busy_slots
from .grpo import grpo_training
from .job import training
from .simjobs import POLICIES, SimJob, run_policy, slot_ready_s
from .workload import JobPlan

ITERATIONS = 40
TOLERANCE_S = 1e-3
REPLICAS = 64
STARTUP_STREAM = 0x57A27  # the start-up sampler's stream, beside the trace seed
CALIBRATION_STREAM = 0xCA1B  # the stream of the bootstrap over calibration runs


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
    deviations: dict[str, np.ndarray] | None = None,
) -> dict[str, Any]:
    """Both arms' simulated schedules (per job: start, end, JCT, killed) and figures (mean and
    p95 JCT, slot-hours), from ``plan`` and ``model`` only. ``curves`` by job name (default:
    computed, :func:`curve`). ``deviations``: per arm, each job's start-up deviation from the
    model's expected start-up, in the order of arrival (default: none)."""
    jobs = sorted(plan, key=lambda j: (j.arrival_s, j.name))
    curves = curves if curves is not None else {j.name: curve(j) for j in jobs}
    dev = deviations if deviations is not None else {arm: np.zeros(len(jobs)) for arm, _ in POLICIES}

    def startup(arm: str, i: int, busy: float) -> float:
        return max(0.0, model.startup_s(busy, jobs[i].slots) + float(dev[arm][i]))

    startups = {arm: np.array([startup(arm, i, 0) for i in range(len(jobs))]) for arm, _ in POLICIES}
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
                [startup(arm, i, busy_slots(spans[arm][i][0], pool, offset + i)) for i in range(len(jobs))]
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


def predict_sampled(
    plan: list[JobPlan],
    model: EngineModel,
    slots: int,
    concurrent: bool,
    seed: int,
    replicas: int = REPLICAS,
    curves: dict[str, dict[str, list[Any]]] | None = None,
) -> dict[str, Any]:
    """The prediction with each job's start-up drawn from the model's spread: the average of
    ``replicas`` runs of :func:`predict_trace`, the deviations from the seeded stream of the
    trace's ``seed``. The same shape as :func:`predict_trace`'s, plus ``sampling`` (seed,
    replicas, and each replica's mean JCT per arm) and ``expected_startup`` (the prediction
    without the spread)."""
    if replicas < 1:
        raise ValueError(f"The 'replicas' parameter must be an int >= 1. Got {replicas!r} instead.")
    jobs = sorted(plan, key=lambda j: (j.arrival_s, j.name))
    curves = curves if curves is not None else {j.name: curve(j) for j in jobs}
    expected = predict_trace(plan, model, slots, concurrent, curves=curves)
    rng = np.random.default_rng(np.random.SeedSequence([seed, STARTUP_STREAM]))
    calibration_rng = np.random.default_rng(np.random.SeedSequence([seed, CALIBRATION_STREAM]))
    runs = []
    for _ in range(replicas):
        drawn = resample(model, calibration_rng)  # the calibration's uncertainty
        deviations = {
            arm: np.array([rng.normal(0.0, drawn.startup_residual_sd_s) for _ in jobs]) for arm, _ in POLICIES
        }
        runs.append(predict_trace(plan, drawn, slots, concurrent, curves=curves, deviations=deviations))
    arms = {}
    for arm, _ in POLICIES:
        each = [r["arms"][arm] for r in runs]
        per_job = {
            j.name: {
                key: float(np.mean([e["jobs"][j.name][key] for e in each]))
                for key in ("start_s", "end_s", "jct_s", "startup_s")
            }
            | {"killed_share": float(np.mean([e["jobs"][j.name]["killed"] for e in each]))}
            for j in jobs
        }
        arms[arm] = {
            "jobs": per_job,
            "jct_mean_s": float(np.mean([e["jct_mean_s"] for e in each])),
            "jct_p95_s": float(np.mean([e["jct_p95_s"] for e in each])),
            "slot_hours": float(np.mean([e["slot_hours"] for e in each])),
            "stopped": sorted(n for n, p in per_job.items() if p["killed_share"] > 0.5),
        }
    return {
        "arms": arms,
        "converged": all(r["converged"] for r in runs),
        "labels": expected["labels"],
        "curves": curves,
        "model": model.to_json(),
        "sampling": {
            "seed": seed,
            "stream": STARTUP_STREAM,
            "calibration_stream": CALIBRATION_STREAM,
            "calibration_runs": max(1, len(model.runs)),
            "replicas": replicas,
            "replica_jct_mean_s": {arm: [r["arms"][arm]["jct_mean_s"] for r in runs] for arm, _ in POLICIES},
        },
        "expected_startup": {k: v for k, v in expected.items() if k not in ("curves", "model")},
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
        replica_means = prediction.get("sampling", {}).get("replica_jct_mean_s", {}).get(arm)
        if replica_means:  # the spread of the sampled replicas' mean JCT, 2.5-97.5 %
            band = np.percentile(np.array(replica_means) / real_fig["jct_mean_s"] - 1, [2.5, 97.5])
            out[arm]["jct_mean_error_replica_band"] = [float(b) for b in band]
            out[arm]["real_inside_band"] = bool(band[0] <= 0.0 <= band[1])
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
        f"{EngineModel.from_json(model).describe()}. Each job's start-up is drawn from the model's "
        f"spread, and the figures are the average of {check.get('sampling', {}).get('replicas', '?')} "
        "seeded replicas.",
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
    band = e.get("jct_mean_error_replica_band")
    if band:
        lines += [
            f"Enforced arm, mean JCT error of the replicas (2.5-97.5 %; each replica its own start-ups "
            f"and its own bootstrap draw over the calibration runs): {band[0]:+.1%} to {band[1]:+.1%}; the "
            f"real run is {'inside' if band[0] <= 0 <= band[1] else 'outside'} that range.",
            "",
        ]
    variants = (
        ("expected_startup", "The same model with each job's expected start-up (no spread)"),
        ("constant_startup", "The same model with one start-up for every job (the calibration's mean)"),
    )
    for key, what in variants:
        if key in check:
            v = check[key]
            lines += [
                f"{what}: mean JCT error {v['shadow']['jct_mean_error']:+.1%} (shadow), "
                f"{v['enforced']['jct_mean_error']:+.1%} (enforced); p95 "
                f"{v['enforced']['jct_p95_error']:+.1%} (enforced).",
                "",
            ]
    return "\n".join(lines)
