"""The EvalStop primitive: wrap any base scheduler, kill jobs whose eval score the detector
says has turned, and leave every other decision to the base."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Any

from ..detectors import DEFAULT_SPEC, CadencePolicy, Detector, Every, Monitor, parse_cadence, parse_spec
from ._base import JobView, KillPlan, Scheduler

RLHF_ONLY = ("rlhf",)


class EvalStop(Scheduler):
    """``EvalStop(base, detector)`` forwards every hook to ``base`` and acts only on evals.

    ``detector`` defaults to ``DEFAULT_SPEC``. ``watch`` names the job kinds the rule applies to
    (the paper leaves it open; see docs/model.md); jobs of other kinds are never killed. For a
    watched job ``monitor`` returns a ``Monitor`` of the rule; when it fires the simulator kills
    the job, frees its GPUs, delivers the verdict's best checkpoint and asks the base policy to
    fill the GPUs. A job the wrapper does not watch gets the base policy's monitor (if any).
    ``cadence`` (a policy or its spec; default ``every:1``) says which of a watched job's evals
    are run: the simulator runs only those, and the rule sees only those.
    """

    #: The hooks EvalStop only forwards: ``hook`` hands out the base policy's own. A subclass
    #: that defines one of them is asked itself.
    FORWARDED: frozenset[str] = frozenset(
        ("on_job_add", "on_job_end", "on_start", "on_stop", "next_change_s", "wake_at_s", "rank_key"))

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.FORWARDED = cls.FORWARDED - cls.__dict__.keys()
        # which jobs get ``Monitor(detector)`` is no longer ``watch`` alone: no kill plan
        if "watches" in cls.__dict__ and "kill_plan" not in cls.__dict__:
            cls.kill_plan = Scheduler.kill_plan  # type: ignore[method-assign]

    def __init__(
        self,
        base: Scheduler,
        detector: Detector | None = None,
        watch: Collection[str] | None = RLHF_ONLY,
        cadence: CadencePolicy | str | None = None,
    ) -> None:
        if not isinstance(base, Scheduler):
            raise TypeError(f"The 'base' parameter of EvalStop must be a Scheduler. Got {base!r} instead.")
        self.base = base
        self.detector = detector if detector is not None else parse_spec(DEFAULT_SPEC)
        self.watch = None if watch is None else frozenset(watch)
        if not isinstance(cadence, CadencePolicy):
            cadence = parse_cadence(cadence or "every:1")
        self.cadence = cadence
        self.dense_evals = cadence == Every(1) and base.dense_evals
        self.name = f"evalstop({base.name})"
        self.preemptive = base.preemptive
        self.backfill = base.backfill
        self.static_rank = base.static_rank

    def watches(self, job: JobView) -> bool:
        return self.watch is None or job.kind in self.watch

    def monitor(self, job: JobView) -> Monitor | None:
        if not self.watches(job):
            return self.base.monitor(job)
        return Monitor(self.detector, self.cadence)

    def kill_plan(self) -> KillPlan | None:
        """``Monitor(detector)`` for the watched kinds, at the dense cadence, over a base policy
        that hands out no monitors; None otherwise."""
        base = self.base.kill_plan()
        if not self.dense_evals or base is None or base.detector is not None:
            return None
        return KillPlan(self.detector, self.watch)

    def hook(self, name: str) -> Callable[..., Any] | None:
        return self.base.hook(name) if name in self.FORWARDED else super().hook(name)

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

    def wake_at_s(self, job: JobView, now: float) -> float | None:
        return self.base.wake_at_s(job, now)

    def rank_key(self, job: JobView) -> tuple[Any, ...]:
        return self.base.rank_key(job)

    def order(self, jobs: Sequence[JobView], now: float) -> list[JobView]:
        return self.base.order(jobs, now)
