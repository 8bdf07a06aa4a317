"""The engine model: what ``evalstop testbed calibrate`` measures on its calibration runs, and
the only thing (with the trace's plan) the held-out prediction of an evaluation run reads.

- **Start-up**, as a function of load and width: ``startup_s = base + per_busy_slot * busy +
  per_extra_slot * (width - 1)``, where ``busy`` is the number of slots the engine had busy with
  other jobs (every arm sharing it) at the moment the job's slots were free, and the start-up runs
  from that moment to the training process's first line (:func:`.simcheck.slot_ready_s`).
  Floored at 0; the residual standard deviation is the spread the prediction samples. The terms
  are pooled over several calibration runs, and a load or width term is kept only where the
  runs agree on it (:mod:`.calibration`).
- **Stop latency**: the mean time from a stop decision (the eval it answered) to the engine's end
  of the job, over the calibration runs' enforced stops.
- **Eval overhead**, per job kind, from the jobs that ran to their end: eval ``k`` (1-based) comes
  ``setup_s + step_k * step_time + (k - 1) * eval_s`` after the process's first line (``step_time``
  is the plan's pacing, 0 for the unpaced GRPO jobs, whose ``eval_s`` is then their whole time per
  eval), and the engine ends the job ``tail_s`` after its last eval.

Kinds the calibration runs did not contain borrow the pooled timing of the numpy kinds (``hack``,
``healthy`` and ``sft`` share their training loop); a GRPO kind they did not contain is an error.

This module holds the model and what one calibration run observed (:func:`observe`);
:mod:`.calibration` pools the runs into the model.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from .simjobs import slot_ready_s
from .workload import JobPlan

NUMPY_KINDS = ("hack", "healthy", "sft")
POOLED = "numpy"
FORMAT = "evalstop-engine-model/1"


@dataclass(frozen=True)
class KindTiming:
    setup_s: float
    eval_s: float
    tail_s: float
    n: int

    def eval_offsets(self, steps: list[int], step_time_s: float) -> list[float]:
        """Seconds from the process's first line to each eval."""
        return [self.setup_s + s * step_time_s + k * self.eval_s for k, s in enumerate(steps)]


@dataclass(frozen=True)
class EngineModel:
    startup_base_s: float
    startup_per_busy_slot_s: float
    startup_per_extra_slot_s: float
    startup_residual_sd_s: float
    stop_latency_s: float
    timing: dict[str, KindTiming]
    calibration: dict[str, Any] = field(default_factory=dict)
    startup_mean_s: float | None = None  # the calibration's mean start-up (None: not recorded)
    #: per calibration run: its observations (``RunObservations.to_json``) and its own fit
    runs: list[dict[str, Any]] = field(default_factory=list)
    #: per start-up term: the pooled estimate, its interval, the per-run estimates, kept or not
    terms: dict[str, dict[str, Any]] = field(default_factory=dict)

    def startup_s(self, busy: float, width: int) -> float:
        fitted = (
            self.startup_base_s
            + self.startup_per_busy_slot_s * busy
            + self.startup_per_extra_slot_s * (width - 1)
        )
        return max(0.0, fitted)

    def constant(self) -> EngineModel | None:
        """The same model with one start-up for every job, the calibration's mean (no load or
        width term): the variant the bench reports beside the fitted one. None for a model that
        did not record the mean."""
        if self.startup_mean_s is None:
            return None
        return replace(
            self,
            startup_base_s=self.startup_mean_s,
            startup_per_busy_slot_s=0.0,
            startup_per_extra_slot_s=0.0,
        )

    def timing_for(self, kind: str) -> KindTiming:
        if kind in self.timing:
            return self.timing[kind]
        if kind in NUMPY_KINDS and POOLED in self.timing:
            return self.timing[POOLED]
        raise ValueError(
            f"The engine model has no timing for job kind {kind!r} (calibrated kinds: "
            f"{sorted(self.timing)}): calibrate on a trace that contains it (e.g. --grpo-share)."
        )

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, **asdict(self)}

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(self.to_json(), indent=1))

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> EngineModel:
        if data.get("format") != FORMAT:
            raise ValueError(f"Not an engine model ({FORMAT}): format {data.get('format')!r}.")
        body = {k: v for k, v in data.items() if k != "format"}
        body["timing"] = {kind: KindTiming(**t) for kind, t in body["timing"].items()}
        return cls(**body)

    @classmethod
    def load(cls, path: Path) -> EngineModel:
        try:
            return cls.from_json(json.loads(Path(path).read_text()))
        except (OSError, ValueError, TypeError, KeyError) as exc:
            raise ValueError(
                f"The '--engine-model' parameter must name an engine model file. Got {str(path)!r} ({exc})."
            ) from None

    def describe(self) -> str:
        pooled = f"pooled over {len(self.runs)} calibration runs: " if self.runs else ""
        return pooled + (
            f"start-up {self.startup_base_s:.2f} s + {self.startup_per_busy_slot_s:+.3f} s per busy slot "
            f"{self.startup_per_extra_slot_s:+.3f} s per extra slot of width (residual sd "
            f"{self.startup_residual_sd_s:.2f} s); stop latency {self.stop_latency_s:.2f} s; per eval "
            + ", ".join(f"{k} {t.eval_s:.3f} s" for k, t in sorted(self.timing.items()))
            + "".join(f"; {name} {_decision(term)}" for name, term in self.terms.items())
        )


def _decision(term: dict[str, Any]) -> str:
    """``per_busy_slot``'s fate, e.g. ``dropped (+0.085 [-0.366, +0.536]; runs +0.212/-0.115)``."""
    if term.get("interval") is None:
        return "not fitted (constant)"
    lo, hi = term["interval"]
    runs = "/".join(f"{b:+.3f}" for b in term["per_run"])
    verdict = f"kept x {term['shrink']:.2f}" if term["kept"] else "dropped"
    return f"{verdict} ({term['estimate']:+.3f} [{lo:+.3f}, {hi:+.3f}]; runs {runs or '-'})"


def busy_slots(at_s: float, intervals: list[tuple[float, float, int]], skip: int) -> int:
    """Slots held at ``at_s`` by the intervals ``(start, end, width)`` other than ``skip``."""
    return sum(w for i, (s, e, w) in enumerate(intervals) if i != skip and s <= at_s < e)


@dataclass(frozen=True)
class RunObservations:
    """What one calibration run measured, as the engine model reads it: per job ``(busy slots,
    width, start-up s)``, the enforced stops' latencies, and per kind the ``(setup, per-eval,
    tail)`` of each job that ran every eval; ``calibration`` says which run (seed, command, load)."""

    startups: tuple[tuple[float, int, float], ...]
    stop_latencies_s: tuple[float, ...]
    timing: dict[str, tuple[tuple[float, float, float], ...]]
    calibration: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "startups": [list(r) for r in self.startups],
            "stop_latencies_s": list(self.stop_latencies_s),
            "timing": {k: [list(r) for r in rows] for k, rows in self.timing.items()},
            "calibration": self.calibration,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunObservations:
        return cls(
            startups=tuple((float(b), int(w), float(s)) for b, w, s in data["startups"]),
            stop_latencies_s=tuple(float(x) for x in data["stop_latencies_s"]),
            timing={
                k: tuple((float(a), float(b), float(c)) for a, b, c in rows)
                for k, rows in data["timing"].items()
            },
            calibration=dict(data.get("calibration", {})),
        )


def observe(
    raw: dict[str, list[dict[str, Any]]], plan: list[JobPlan], calibration: dict[str, Any]
) -> RunObservations:
    """A calibration run's observations from its raw records (``raw.json``: both arms) and its
    ``plan``. ``calibration["concurrent"]``: the arms shared the engine at once (else each arm's
    load is its own)."""
    plans = {j.name: j for j in plan}
    rows: list[tuple[float, int, float]] = []
    latencies: list[float] = []
    timings: dict[str, list[tuple[float, float, float]]] = {}
    for arm, records in raw.items():
        pool = [r for a, rs in raw.items() for r in rs] if calibration.get("concurrent") else records
        intervals = [(r["dispatch_s"], r["end_s"], int(r.get("slots", 1))) for r in pool]
        for r in records:
            if r["proc_start_s"] is None:
                continue
            ready = slot_ready_s(r, records)
            me = next(i for i, x in enumerate(pool) if x is r)
            rows.append(
                (float(busy_slots(ready, intervals, me)), int(r.get("slots", 1)), r["proc_start_s"] - ready)
            )
            stop = _stop_step(r)
            if arm == "enforced" and stop is not None:
                t = next((e["t"] for e in r["evals"] if e["step"] == stop), None)
                if t is not None:
                    latencies.append(r["end_s"] - t)
            row = _timing_row(r, plans[r["name"]])
            if row is not None:
                timings.setdefault(r["kind"], []).append(row)
    if len(rows) < 3:
        raise ValueError(f"A calibration run needs at least 3 jobs with a start; got {len(rows)}.")
    return RunObservations(
        tuple(rows), tuple(latencies), {k: tuple(v) for k, v in timings.items()}, dict(calibration)
    )


def _stop_step(record: dict[str, Any]) -> int | None:
    stops = [d for d in record["service"]["decisions"] if d["decision"] == "stop"]
    return int(stops[0]["step"]) if stops else None


def _timing_row(record: dict[str, Any], plan: JobPlan) -> tuple[float, float, float] | None:
    """(setup, per-eval overhead, tail) of a job that ran every eval; None otherwise."""
    evals = record["evals"]
    if len(evals) < max(2, plan.n_evals) or record.get("sigterm"):
        return None
    step_time = plan.step_time_s
    first, last = evals[0], evals[-1]
    eval_s = ((last["t"] - first["t"]) - (last["step"] - first["step"]) * step_time) / (len(evals) - 1)
    setup_s = first["t"] - record["proc_start_s"] - first["step"] * step_time
    return setup_s, eval_s, record["end_s"] - last["t"]
