"""The simulator held against the testbed: the shadow arm's measured jobs through
:func:`evalstop.sim.simulate` under FIFO, compared with what the enforced arm did.

Each real job becomes one simulated job of width 1 on a cluster of ``slots`` GPUs:

- arrival: the trace's arrival time;
- duration: the training process's measured wall time in the shadow arm (first line to Ray's
  end time) plus ``startup_s``, the start-up overhead model (the shadow arm's mean time from
  submission to the training process's first line);
- evals: the shadow arm's watched scores, each placed at its measured time since submission
  (``startup_s`` + time since the process started) plus ``stop_latency_s``, because the simulator
  frees a killed job's slot at the eval itself while the real stop takes that long to deliver;
- truth: hacking from the gold label, gold at each eval.

The policy is ``EvalStop(FIFO(), DEFAULT_SPEC)`` watching every job: the same rule the service ran.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..detectors import Eval


def sim_workload(
    shadow: list[dict[str, Any]], labels: dict[str, str], slots: int, startup_s: float, stop_latency_s: float
) -> Any:
    from ..workloads import KINDS, JobSpec, JobTruth, KindShape, Workload, WorkloadConfig

    jobs, truth = [], []
    for i, r in enumerate(sorted(shadow, key=lambda r: (r["arrival_s"], r["name"]))):
        duration = startup_s + (r["end_s"] - r["proc_start_s"])
        evals = tuple(
            Eval(
                step=e["step"],
                score=e["score"],
                progress=min(1.0, (startup_s + e["t"] - r["proc_start_s"] + stop_latency_s) / duration),
            )
            for e in r["evals"]
        )
        gold = tuple(float(e["gold"]) for e in r["evals"])
        peak = int(np.argmax(gold))
        jobs.append(JobSpec(i, 0, "rlhf", 1, float(r["arrival_s"]), duration, evals))
        truth.append(
            JobTruth(
                labels[r["name"]] == "hacking",
                duration,
                evals[peak].progress or 0.0,
                gold,
                gold[peak],
                gold[-1],
            )
        )
    one_slot = {kind: KindShape((1,), (1.0,), 1.0, 0.5) for kind in KINDS}  # sizes are measured, not drawn
    config = WorkloadConfig(n_jobs=len(jobs), total_gpus=slots, shapes=one_slot)
    return Workload(config, 0, tuple(jobs), tuple(truth))


def compare(summary: dict[str, Any], raw: dict[str, list[dict[str, Any]]], slots: int) -> dict[str, Any]:
    """Simulated vs real (enforced arm): JCT, per-job start time, slot-hours saved, stops."""
    from ..schedulers import FIFO, EvalStop
    from ..sim.cluster import simulate
    from .summary import labels_from

    shadow_jobs = summary["jobs"]["shadow"]
    enforced = {j["name"]: j for j in summary["jobs"]["enforced"]}
    startup_s = float(np.mean([j["startup_s"] for j in shadow_jobs]))
    latencies = [
        j["end_s"] - j["stop_decided_s"]
        for j in enforced.values()
        if j["enforced_stop"] and j["stop_decided_s"] is not None
    ]
    stop_latency_s = float(np.mean(latencies)) if latencies else 0.0
    labels = labels_from(raw["shadow"])
    workload = sim_workload(raw["shadow"], labels, slots, startup_s, stop_latency_s)
    names = [r["name"] for r in sorted(raw["shadow"], key=lambda r: (r["arrival_s"], r["name"]))]
    sims = {"fifo": simulate(workload, FIFO()), "evalstop": simulate(workload, EvalStop(FIFO(), watch=None))}
    out: dict[str, Any] = {"startup_s": startup_s, "stop_latency_s": stop_latency_s}
    for arm, policy in (("shadow", "fifo"), ("enforced", "evalstop")):
        real = {j["name"]: j for j in summary["jobs"][arm]}
        sim = {names[o.job_id]: o for o in sims[policy].outcomes}
        real_jct = np.array([real[n]["jct_s"] for n in names])
        sim_jct = np.array([sim[n].jct_s for n in names])
        start_err = np.array([sim[n].start_s - real[n]["dispatch_s"] for n in names])
        out[arm] = {
            "real_jct_mean_s": float(real_jct.mean()),
            "sim_jct_mean_s": float(sim_jct.mean()),
            "jct_mean_error": float(sim_jct.mean() / real_jct.mean() - 1),
            "real_jct_p95_s": float(np.percentile(real_jct, 95)),
            "sim_jct_p95_s": float(np.percentile(sim_jct, 95)),
            "jct_p95_error": float(np.percentile(sim_jct, 95) / np.percentile(real_jct, 95) - 1),
            "start_error_mean_abs_s": float(np.abs(start_err).mean()),
            "start_error_max_abs_s": float(np.abs(start_err).max()),
            "sim_slot_hours": sum(sim[n].end_s - sim[n].start_s for n in names) / 3600,
            "sim_stopped": sorted(n for n in names if sim[n].killed),
            "sim_jobs": {
                n: {
                    "start_s": sim[n].start_s,
                    "end_s": sim[n].end_s,
                    "jct_s": sim[n].jct_s,
                    "killed": sim[n].killed,
                }
                for n in names
            },
            "real_stopped": sorted(n for n in names if real[n]["enforced_stop"]),
        }
    # How much of the error is the start-up drift between the arms (a shared machine's load
    # changes): the same prediction with the enforced arm's own mean start-up.
    own_startup = float(np.mean([j["startup_s"] for j in enforced.values()]))
    own = simulate(
        sim_workload(raw["shadow"], labels, slots, own_startup, stop_latency_s), EvalStop(FIFO(), watch=None)
    )
    own_jct = float(np.mean([o.jct_s for o in own.outcomes]))
    out["enforced"]["own_startup_s"] = own_startup
    out["enforced"]["jct_mean_error_own_startup"] = own_jct / out["enforced"]["real_jct_mean_s"] - 1
    out["slot_hours_saved"] = {
        "real": summary["comparison"]["slot_hours_saved"],
        "sim": out["shadow"]["sim_slot_hours"] - out["enforced"]["sim_slot_hours"],
    }
    return out


def markdown(check: dict[str, Any]) -> str:
    lines = [
        "",
        "## Simulator against the testbed",
        "",
        f"Start-up overhead model {check['startup_s']:.2f} s (shadow arm mean); stop latency "
        f"{check['stop_latency_s']:.2f} s (enforced arm mean, decision to Ray end).",
        "",
        "| arm (sim policy) | real JCT mean | sim JCT mean | error | real p95 | sim p95 | error | "
        "start-time error mean / max abs |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for arm, policy in (("shadow", "FIFO"), ("enforced", "EvalStop(FIFO)")):
        c = check[arm]
        lines.append(
            f"| {arm} ({policy}) | {c['real_jct_mean_s']:.1f} | {c['sim_jct_mean_s']:.1f} | "
            f"{c['jct_mean_error']:+.1%} | {c['real_jct_p95_s']:.1f} | {c['sim_jct_p95_s']:.1f} | "
            f"{c['jct_p95_error']:+.1%} | {c['start_error_mean_abs_s']:.2f} / "
            f"{c['start_error_max_abs_s']:.2f} s |"
        )
    saved = check["slot_hours_saved"]
    same = check["enforced"]["sim_stopped"] == check["enforced"]["real_stopped"]
    lines += [
        "",
        f"Slot-hours saved: real {saved['real']:.4f}, simulated {saved['sim']:.4f}. "
        f"Simulated stops {'match' if same else 'differ from'} the real ones "
        f"({len(check['enforced']['sim_stopped'])} vs {len(check['enforced']['real_stopped'])}).",
        "",
    ]
    own = check["enforced"]
    lines += [
        f"With the enforced arm's own mean start-up ({own['own_startup_s']:.2f} s) instead of the shadow "
        f"arm's, the enforced prediction's mean JCT error is {own['jct_mean_error_own_startup']:+.1%}: the "
        "difference is start-up drift between the arms (the load of a shared machine changes).",
        "",
    ]
    return "\n".join(lines)
