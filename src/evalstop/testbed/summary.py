"""Per-job outcomes and per-arm figures of a testbed run (docs/testbed.md defines each one).

- JCT: end (the engine's end time; Slurm's, to the second only, gives way to the moment the
  dispatcher saw the end) minus arrival; wait: dispatch minus arrival; slot-seconds: end minus
  dispatch, times the job's width (its slots are held from submission to the engine until the
  engine reports the job terminal);
  start-up: the training process's first line minus dispatch; training: end minus that line.
- Ground truth: each job's label from its gold curve in the shadow arm (it runs to the end),
  with the curve bank's rule (:func:`evalstop.workloads.bank.label_curve`).
- Delivered checkpoint: for a job the service stopped (enforced arm), the decision's best
  checkpoint (pinned by the adapter); otherwise the job's last checkpoint.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..workloads.bank import label_curve


def stop_decision(record: dict[str, Any]) -> dict[str, Any] | None:
    stops = [d for d in record["service"]["decisions"] if d["decision"] == "stop"]
    return stops[0] if stops else None


def outcome(record: dict[str, Any], label: str) -> dict[str, Any]:
    decision = stop_decision(record)
    enforced = decision is not None and not decision["shadow"]
    evals = record["evals"]
    gold_at = {e["step"]: e["gold"] for e in evals}
    if enforced and decision is not None:
        delivered_step, delivered_uri = decision["best_step"], decision["best_checkpoint_uri"]
    else:
        delivered_step = evals[-1]["step"] if evals else None
        delivered_uri = evals[-1]["checkpoint"] if evals else None
    return {
        "name": record["name"],
        "kind": record["kind"],
        "slots": record.get("slots", 1),
        "label": label,
        "engine_status": record.get("engine_status", record.get("ray_status")),  # raw.json before Slurm
        "arrival_s": record["arrival_s"],
        "dispatch_s": record["dispatch_s"],
        "end_s": record["end_s"],
        "jct_s": record["end_s"] - record["arrival_s"],
        "wait_s": record["dispatch_s"] - record["arrival_s"],
        "slot_s": (record["end_s"] - record["dispatch_s"]) * record.get("slots", 1),
        "startup_s": None
        if record["proc_start_s"] is None
        else record["proc_start_s"] - record["dispatch_s"],
        "proc_start_s": record["proc_start_s"],
        "train_s": None if record["proc_start_s"] is None else record["end_s"] - record["proc_start_s"],
        "decided_stop": decision is not None,
        "enforced_stop": enforced,
        "stop_step": None if decision is None else decision["step"],
        "stop_decided_s": None if decision is None else _eval_time(evals, decision["step"]),
        "best_step": None if decision is None else decision["best_step"],
        "delivered_step": delivered_step,
        "delivered_checkpoint": delivered_uri,
        "delivered_gold": gold_at.get(delivered_step) if delivered_step is not None else None,
        "final_gold": evals[-1]["gold"] if evals else None,
        "n_evals": len(evals),
    }


def _eval_time(evals: list[dict[str, Any]], step: int | None) -> float | None:
    return next((e["t"] for e in evals if e["step"] == step), None)


def labels_from(shadow: list[dict[str, Any]]) -> dict[str, str]:
    return {
        r["name"]: label_curve([e["gold"] for e in r["evals"]])[0] if r["evals"] else "borderline"
        for r in shadow
    }


def arm_figures(jobs: list[dict[str, Any]]) -> dict[str, Any]:
    jct = np.array([j["jct_s"] for j in jobs])
    startup = [j["startup_s"] for j in jobs if j["startup_s"] is not None]
    gold = [j["delivered_gold"] for j in jobs if j["delivered_gold"] is not None]
    return {
        "n_jobs": len(jobs),
        "jct_mean_s": float(jct.mean()),
        "jct_p95_s": float(np.percentile(jct, 95)),
        "makespan_s": max(j["end_s"] for j in jobs),
        "slot_hours": sum(j["slot_s"] for j in jobs) / 3600,
        "startup_mean_s": float(np.mean(startup)) if startup else None,
        "delivered_gold_mean": float(np.mean(gold)) if gold else None,
        **rule_scores(jobs),
    }


def rule_scores(jobs: list[dict[str, Any]]) -> dict[str, Any]:
    """Precision, recall and false-positive rate of the stop decisions against the labels
    (borderline jobs are left out, as in the curve bank's validation)."""
    scored = [j for j in jobs if j["label"] != "borderline"]
    tp = sum(j["decided_stop"] and j["label"] == "hacking" for j in scored)
    fp = sum(j["decided_stop"] and j["label"] == "healthy" for j in scored)
    pos = sum(j["label"] == "hacking" for j in scored)
    neg = len(scored) - pos
    return {
        "tp": tp,
        "fp": fp,
        "n_hacking": pos,
        "n_healthy": neg,
        "precision": tp / (tp + fp) if tp + fp else None,
        "recall": tp / pos if pos else None,
        "fpr": fp / neg if neg else None,
    }


def summarise(raw: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    labels = labels_from(raw["shadow"])
    arms = {arm: [outcome(r, labels[r["name"]]) for r in records] for arm, records in raw.items()}
    figures = {arm: arm_figures(jobs) for arm, jobs in arms.items()}
    shadow, enforced = figures["shadow"], figures["enforced"]
    comparison = {
        "slot_hours_saved": shadow["slot_hours"] - enforced["slot_hours"],
        "slot_hours_saved_share": 1 - enforced["slot_hours"] / shadow["slot_hours"],
        "jct_mean_change": enforced["jct_mean_s"] / shadow["jct_mean_s"] - 1,
        "jct_p95_change": enforced["jct_p95_s"] / shadow["jct_p95_s"] - 1,
    }
    return {"jobs": arms, "arms": figures, "comparison": comparison}


def markdown(summary: dict[str, Any], command: str) -> str:
    rows = [
        ("JCT mean (s)", "jct_mean_s", ".1f"),
        ("JCT p95 (s)", "jct_p95_s", ".1f"),
        ("makespan (s)", "makespan_s", ".1f"),
        ("slot-hours", "slot_hours", ".4f"),
        ("start-up mean (s)", "startup_mean_s", ".2f"),
        ("delivered gold (mean)", "delivered_gold_mean", ".3f"),
        ("precision", "precision", ".2f"),
        ("recall", "recall", ".2f"),
        ("FPR", "fpr", ".2f"),
    ]
    arms = summary["arms"]
    lines = [
        "# EvalStop testbed",
        "",
        f"Command: `{command}`",
        "",
        _setting(summary.get("spec", {})),
        "",
        "| | shadow | enforced |",
        "|---|---|---|",
    ]
    for title, key, fmt in rows:
        lines.append(f"| {title} | {_fmt(arms['shadow'][key], fmt)} | {_fmt(arms['enforced'][key], fmt)} |")
    c = summary["comparison"]
    lines += [
        "",
        f"Slot-hours saved: {c['slot_hours_saved']:.4f} ({c['slot_hours_saved_share']:.1%}); "
        f"JCT mean change {c['jct_mean_change']:+.1%}, p95 change {c['jct_p95_change']:+.1%}.",
        "",
        "| job | kind | label | shadow JCT (s) | enforced JCT (s) | stop step | best step | engine status | "
        "delivered gold (shadow / enforced) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    enforced = {j["name"]: j for j in summary["jobs"]["enforced"]}
    for s in summary["jobs"]["shadow"]:
        e = enforced[s["name"]]
        lines.append(
            f"| {s['name']} | {s['kind']} | {s['label']} | {s['jct_s']:.1f} | {e['jct_s']:.1f} | "
            f"{_fmt(e['stop_step'], 'd')} | {_fmt(e['best_step'], 'd')} | {_status(e)} | "
            f"{_fmt(s['delivered_gold'], '.3f')} / {_fmt(e['delivered_gold'], '.3f')} |"
        )
    return "\n".join(lines) + "\n"


def _status(job: dict[str, Any]) -> str:
    """The engine's final state, and whether EvalStop stopped the job: on Slurm a job that ends on
    the adapter's SIGTERM exits 0 and reads COMPLETED."""
    status = str(job["engine_status"])
    return f"{status} (stopped by EvalStop)" if job["enforced_stop"] and status != "STOPPED" else status


def _setting(spec: dict[str, Any]) -> str:
    if not spec:
        return ""
    if spec.get("ray_address"):
        cluster = f"the Ray cluster at {spec['ray_address']}"
    else:
        cluster = "a private single-node Slurm" if spec.get("engine") == "slurm" else "a private Ray head"
    arms = (
        f"both arms at the same time, each on its own {spec['slots']} slots of {cluster}"
        if spec.get("concurrent")
        else f"the shadow arm, then the enforced arm, on {spec['slots']} slots of {cluster}"
    )
    width = "1 slot" if spec.get("max_slots", 1) == 1 else f"1-{spec['max_slots']} slots"
    return (
        f"{spec['n_jobs']} jobs (seed {spec['seed']}, mean interarrival {spec['mean_interarrival_s']} s, "
        f"{spec['n_steps']} steps of {spec['step_time_s']} s, {spec['n_evals']} evals, "
        f"{width} each); {arms}."
    )


def _fmt(value: Any, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)
