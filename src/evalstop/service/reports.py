"""Per-tenant savings: what shadow mode would have stopped, and the GPU-hours stops reclaimed.

Definitions (docs/metrics.md, "Service savings"): a stop at time ``t`` of a job holding ``gpus``
GPUs saves
- ``gpus x max(0, registered_at + expected_duration_s - t)`` when the job was registered with an
  expected duration (basis ``expected_duration``: the time left to its declared end), else
- ``gpus x max(0, last_seen - t)``, where ``last_seen`` is when the service last received a
  score of the job (basis ``lower_bound``: the job was seen running at least that long after
  ``t``; for an enforced stop this is usually 0).
For a shadow decision ``t`` is when the rule fired (the decision's time); for an enforced stop,
when the stop was confirmed (``stopped_at``). The JSON API and the console both call these
functions, so their numbers agree by construction.

Each job counts once. Reclaimed counts only stops that were delivered (the adapter confirmed
them): a job released by hand after its stop failed is counted in ``released_jobs``, not in the
GPU-hours. A shadow job that was then stopped by hand (an enforced ``stop_now``, delivered) counts
in reclaimed, where its hours were really saved, and not in "would have stopped"
(``shadow_summary`` counts it in ``reclaimed_jobs`` instead).

A shadow *rewind* (the job's policy is ``on_detect: rewind``) is not a stop: enforced, the job
would have gone back to its best checkpoint and gone on, holding its GPUs. So it is counted
apart, in ``would_rewind_jobs`` and ``rewinds`` (no GPU-hours), never in ``would_stop_jobs``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .store import Store
from .store import report as report_store

SECONDS_PER_HOUR = 3600.0


def gpu_hours_saved(
    gpus: int, registered_at: float, expected_duration_s: float | None, stop_at: float,
    last_seen: float | None,
) -> tuple[float, str]:
    """GPU-hours a stop at ``stop_at`` saves, and the basis (``expected_duration``/``lower_bound``)."""
    if expected_duration_s is not None:
        return gpus * max(0.0, registered_at + expected_duration_s - stop_at) / SECONDS_PER_HOUR, \
            "expected_duration"
    seen = stop_at if last_seen is None else last_seen
    return gpus * max(0.0, seen - stop_at) / SECONDS_PER_HOUR, "lower_bound"


def _job_entry(row: Any, stop_at: float, **extra: Any) -> dict[str, Any]:
    hours, basis = gpu_hours_saved(row.gpus, row.created_at, row.expected_duration_s, stop_at, row.last_seen)
    return {"job_id": row.id, "name": row.name, "state": row.state,
            "released": row.state == "stopped" and not row.delivered, "gpus": row.gpus,
            "expected_duration_s": row.expected_duration_s, "stop_at": stop_at, "gpu_hours": hours,
            "basis": basis, **extra}


def _group(
    names: Iterable[str], entries: list[tuple[str, dict[str, Any]]]
) -> dict[str, list[dict[str, Any]]]:
    grouped: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    for name, entry in entries:
        grouped.setdefault(name, []).append(entry)
    return grouped


def _rewind_entry(row: Any) -> dict[str, Any]:
    return {"job_id": row.id, "name": row.name, "state": row.state,
            "released": row.state == "stopped" and not row.delivered, "gpus": row.gpus,
            "step": row.step, "reason": row.reason, "decided_at": row.decided_at}


def shadow_summary(store: Store, tenant: str | None) -> list[dict[str, Any]]:
    """Per tenant: the jobs a shadow decision would have stopped, and the GPU-hours that saves;
    apart, the jobs a shadow decision would have rewound (``would_rewind_jobs``, ``rewinds``)."""
    names, shadow_flags, rows = report_store.shadow_decisions(store, tenant)
    pending = [r for r in rows if not r.delivered]
    entries = [(r.tenant, _job_entry(r, r.decided_at, step=r.step, reason=r.reason)) for r in pending
               if r.decision != "rewind"]
    rewinds = _group(names, [(r.tenant, _rewind_entry(r)) for r in pending if r.decision == "rewind"])
    stopped = _group(names, [(r.tenant, {}) for r in rows if r.delivered])
    return [{"tenant": name, "shadow": bool(shadow_flags.get(name, False)), "would_stop_jobs": len(found),
             "gpu_hours": sum(e["gpu_hours"] for e in found),
             "lower_bound_jobs": sum(e["basis"] == "lower_bound" for e in found),
             "would_rewind_jobs": len(rewinds.get(name, [])),
             "reclaimed_jobs": len(stopped.get(name, [])), "jobs": found, "rewinds": rewinds.get(name, [])}
            for name, found in _group(names, entries).items()]


def reclaimed(store: Store, tenant: str | None) -> list[dict[str, Any]]:
    """Per tenant: the jobs whose stop was enforced and confirmed, the GPU-hours reclaimed, and
    the cumulative total after each stop (``series``, in stop order); ``released_jobs``: jobs
    released by hand after their stop failed (not reclaimed)."""
    names, rows = report_store.stopped_jobs(store, tenant)
    entries = [(r.tenant, _job_entry(r, r.stopped_at)) for r in rows if r.delivered]
    released = _group(names, [(r.tenant, {}) for r in rows if not r.delivered])
    out = []
    for name, found in _group(names, entries).items():
        total, series = 0.0, []
        for e in found:
            total += e["gpu_hours"]
            series.append({"t": e["stop_at"], "gpu_hours": total})
        out.append({"tenant": name, "stopped_jobs": len(found), "gpu_hours": total,
                    "lower_bound_jobs": sum(e["basis"] == "lower_bound" for e in found),
                    "released_jobs": len(released.get(name, [])),
                    "jobs": found, "series": series})
    return out
