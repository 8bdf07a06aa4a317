"""The EvalStop primitive: wrap any base scheduler, kill jobs whose eval score the detector
says has turned, and leave every other decision to the base."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from ..detectors import Detector, Eval, KDeclines, Verdict
from ._base import JobView, Scheduler

RLHF_ONLY = ("rlhf",)


class EvalStop(Scheduler):
    """``EvalStop(base, detector)`` forwards every hook to ``base`` and acts only on evals.

    ``watch`` names the job kinds the rule applies to (the paper leaves it open; see
    docs/model.md); jobs of other kinds are never killed. On a STOP verdict the simulator kills
    the job, frees its GPUs, delivers the verdict's best checkpoint and asks the base policy to
    fill the GPUs.
    """

    def __init__(
        self,
        base: Scheduler,
        detector: Detector | None = None,
        watch: Collection[str] | None = RLHF_ONLY,
    ) -> None:
        if not isinstance(base, Scheduler):
            raise TypeError(f"The 'base' parameter of EvalStop must be a Scheduler. Got {base!r} instead.")
        self.base = base
        self.detector = detector if detector is not None else KDeclines()
        self.watch = None if watch is None else frozenset(watch)
        self.name = f"evalstop({base.name})"
        self.preemptive = base.preemptive
        self.backfill = base.backfill
        self.static_rank = base.static_rank

    def watches(self, job: JobView) -> bool:
        return self.watch is None or job.kind in self.watch

    def on_eval(self, job: JobView, history: Sequence[Eval], now: float) -> Verdict | None:
        base_verdict = self.base.on_eval(job, history, now)
        if base_verdict is not None and base_verdict.stopped:
            return base_verdict
        if not self.watches(job):
            return base_verdict
        verdict = self.detector.evaluate(history)
        # Fire only at the eval that tripped the rule (later evals do not re-fire).
        if verdict.stopped and verdict.stop_index == len(history) - 1:
            return verdict
        return base_verdict

    def first_stop(self, job: JobView, evals: Sequence[Eval]) -> Verdict | None:
        base_verdict = self.base.first_stop(job, evals)
        if not self.watches(job):
            return base_verdict
        verdict = self.detector.evaluate(evals)
        if not verdict.stopped:
            return base_verdict
        if base_verdict is not None and base_verdict.stop_index is not None:
            assert verdict.stop_index is not None
            if base_verdict.stop_index <= verdict.stop_index:
                return base_verdict
        return verdict

    def on_job_add(self, job: JobView, now: float) -> None:
        self.base.on_job_add(job, now)

    def on_job_end(self, job: JobView, now: float) -> None:
        self.base.on_job_end(job, now)

    def on_start(self, job: JobView, now: float) -> None:
        self.base.on_start(job, now)

    def on_stop(self, job: JobView, now: float) -> None:
        self.base.on_stop(job, now)

    def next_change_s(self, job: JobView) -> float | None:
        return self.base.next_change_s(job)

    def rank_key(self, job: JobView) -> tuple[Any, ...]:
        return self.base.rank_key(job)

    def order(self, jobs: Sequence[JobView], now: float) -> list[JobView]:
        return self.base.order(jobs, now)
