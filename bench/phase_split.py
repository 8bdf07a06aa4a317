"""The tail's phase split: what the servers' phase logs (``evalstop.service.phases``, on with
``EVALSTOP_PHASES_OUT``) say about the slowest 1 % of a run's requests.

``service_load.py --phase-log`` and ``service_floor.py --phase-log`` turn the logs on, empty
them after the warm-up (``SIGUSR1``) and add :func:`split` of the measured phase to their
figures: per phase, the median over the slowest requests (ms); how many of them each phase
dominated; how many overlapped a garbage-collector pause (and a full collection), took the
token or policy lookup (first sight, or an expired entry); and each generation's pauses.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

#: the phases in request order, named by the stamp that ends each (evalstop.service.phases)
ORDER = ("client", "queue", "loop", "admit", "hand_off", "database", "hand_back", "reply")


def reset(pids: Sequence[int]) -> None:
    """Empty the servers' logs (the warm-up is not counted)."""
    for pid in pids:
        os.kill(pid, signal.SIGUSR1)


def split(out: Path, pids: Sequence[int], fraction: float = 0.01) -> dict[str, Any] | None:
    """The slowest ``fraction`` of all the servers' requests together, from their reports."""
    reports = [json.loads(p.read_text()) for pid in pids if (p := out / f"phases-{pid}.json").exists()]
    if not reports:
        return None
    requests = sum(r["requests"] for r in reports)
    rows = sorted((row for r in reports for row in r["slowest"]), key=lambda row: -row["total_ms"])
    rows = rows[:max(1, int(requests * fraction))]
    names = [n for n in ORDER if any(n in row["phases"] for row in rows)]
    dominant = Counter(max(row["phases"], key=row["phases"].get) for row in rows if row["phases"])
    hits: Counter[str] = Counter()
    for row in rows:
        hits["gc_pause_over_1ms"] += row["gc_ms"] >= 1.0
        hits["gc_full_collection"] += row["gc_full"] > 0
        for lookup in ("token", "policy"):
            if lookup in row:
                hits[f"{lookup}_{row[lookup]}"] += 1
    gc: dict[str, dict[str, float]] = {}
    for r in reports:
        for gen, g in r["gc"].items():
            mine = gc.setdefault(gen, {"passes": 0, "total_ms": 0.0, "max_ms": 0.0})
            mine["passes"] += g["passes"]
            mine["total_ms"] = round(mine["total_ms"] + g["total_ms"], 3)
            mine["max_ms"] = max(mine["max_ms"], g["max_ms"])
    sums: Counter[str] = Counter()
    for r in reports:
        sums.update(r.get("phase_ms_sum", {}))
    parts = sorted({k for row in rows for k in row if k.endswith("_ms") and k not in ("total_ms", "gc_ms")})
    return {
        "requests": requests, "slowest": len(rows),
        "total_ms_median": round(statistics.median(row["total_ms"] for row in rows), 2),
        "phase_ms_median": {n: round(statistics.median(row["phases"].get(n, 0.0) for row in rows), 2)
                            for n in names},
        # every request's mean per phase (the slowest are a different population)
        "phase_ms_mean_all": {n: round(sums[n] / max(1, requests), 3) for n in ORDER if n in sums},
        # parts of phases the slowest noted (rule, token, policy, lease): median where noted
        "parts_ms_median": {k: round(statistics.median(row[k] for row in rows if k in row), 3)
                            for k in parts},
        "group_median": statistics.median(row.get("group", 1) for row in rows),
        "dominant": dict(dominant), "hits": dict(hits), "gc": gc,
    }


def line(s: dict[str, Any] | None) -> str:
    """One line of text for :func:`split`."""
    if s is None:
        return "no phase log"
    phases = " ".join(f"{k} {v}" for k, v in s["phase_ms_median"].items())
    gc = ", ".join(f"gen{g} {v['passes']}x max {v['max_ms']}" for g, v in s["gc"].items())
    means = " ".join(f"{k} {v}" for k, v in s["phase_ms_mean_all"].items())
    return (f"slowest {s['slowest']} of {s['requests']}: median {s['total_ms_median']} ms = {phases}; "
            f"dominant {s['dominant']}; hits {s['hits']}; parts {s['parts_ms_median']}; gc {gc}; "
            f"mean of all: {means}")
