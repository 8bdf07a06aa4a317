"""Checks on a testbed run's summary and raw records, shared by the Ray and Slurm testbed tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from evalstop.testbed.summary import stop_decision


def by_name(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["name"]: r for r in rows}


def check_enforced_curves_are_prefixes(raw: dict[str, Any]) -> None:
    """The jobs are seeded: each enforced job's evals (step, watched score, gold) are the first
    evals of the same job in the shadow arm, which ran it to the end."""
    shadow = by_name(raw["shadow"])
    for record in raw["enforced"]:
        full = [(e["step"], e["score"], e["gold"]) for e in shadow[record["name"]]["evals"]]
        assert [(e["step"], e["score"], e["gold"]) for e in record["evals"]] == full[: len(record["evals"])]


#: How long the dispatcher may take to hand a stopped job's slots to the next one (it polls the
#: engine, then registers and submits). Bounded rather than compared with the stopped job's own
#: end: a stop a second before that end once lost the race at load ~50 (hand-over 1.6 s).
HANDOVER_S = 5.0


def check_freed_slots_go_to_queued_jobs(summary: dict[str, Any], slots: int) -> None:
    """Each enforced stop that happened while a job was queued ended the job before it would have
    ended on its own (its own start plus the shadow run's training time: start-up varies with the
    machine's load, paced training does not) and handed its slots to the first queued job (FIFO)
    within ``HANDOVER_S``. A stop whose slots were not enough for that job is not counted."""
    enforced, shadow = summary["jobs"]["enforced"], by_name(summary["jobs"]["shadow"])
    checked = 0
    for stopped in (j for j in enforced if j["enforced_stop"]):
        waiting = [j for j in enforced if j["arrival_s"] <= stopped["end_s"] < j["dispatch_s"]]
        if not waiting:
            continue
        natural_end = stopped["proc_start_s"] + shadow[stopped["name"]]["train_s"]
        successor = min(waiting, key=lambda j: j["dispatch_s"])
        assert successor["name"] == min(waiting, key=lambda j: j["arrival_s"])["name"]  # FIFO
        assert stopped["end_s"] <= successor["dispatch_s"], (stopped, successor)
        held = sum(k["slots"] for k in enforced if k["dispatch_s"] <= stopped["end_s"] < k["end_s"])
        if successor["slots"] > slots - held:
            continue  # it also needed a slot another job still held: not this stop's to give
        assert stopped["end_s"] < natural_end, (stopped, successor)  # the stop freed them early
        assert successor["dispatch_s"] - stopped["end_s"] <= HANDOVER_S, (stopped, successor)
        checked += 1
    assert checked >= 1, "no stop happened while a job was queued: the trace does not test reuse"


def check_delivered_checkpoint_is_the_best(summary: dict[str, Any], raw: dict[str, Any]) -> None:
    """Each stopped job delivered the decision's best checkpoint, which exists, is pinned, is the
    best eval seen up to the stop, and is better in gold than the unstopped run's end."""
    records, shadow = by_name(raw["enforced"]), by_name(summary["jobs"]["shadow"])
    for job in (j for j in summary["jobs"]["enforced"] if j["enforced_stop"]):
        decision = stop_decision(records[job["name"]])
        assert decision is not None
        assert job["delivered_step"] == decision["best_step"]
        ckpt = Path(job["delivered_checkpoint"])
        assert ckpt.name == f"step-{decision['best_step']:06d}" and (ckpt / "theta.npy").exists()
        assert (ckpt / ".evalstop-pin.json").exists(), "the adapter did not pin the best checkpoint"
        seen = [e for e in records[job["name"]]["evals"] if e["step"] <= decision["step"]]
        assert decision["best_step"] == max(seen, key=lambda e: e["score"])["step"]
        assert job["delivered_gold"] > shadow[job["name"]]["final_gold"]  # stopping paid off
