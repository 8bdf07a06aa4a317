"""One signature for every scheduler.

A scheduler sees :class:`JobView` objects: what a platform knows about a job (size, tenant,
declared budget, service attained so far). The view has no label and no true duration, so no
base policy can peek at ground truth: the type does not carry it.

Hooks follow Ray Tune's vocabulary: ``on_job_add``, ``on_start``, ``on_stop``, ``on_job_end``;
``order`` ranks the active jobs, highest priority first, and the simulator gives GPUs in that
order. Two verbs act on a job: KILL (ends it, frees its GPUs, delivers its best checkpoint; only
a stopping rule asks for it: a policy that watches a job hands the simulator a ``Monitor`` from
``monitor(job)``, the simulator feeds it the job's evals, and kills the job when it fires) and
PREEMPT (pauses it; the simulator does it when a preemptive policy ranks a running job out of
the GPUs; it resumes later and pays the preemption overhead).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, ClassVar

from ..detectors import Detector, Monitor


class Action(StrEnum):
    CONTINUE = "continue"
    PREEMPT = "preempt"
    KILL = "kill"


class JobView:
    """A job as the platform sees it. The simulator updates ``attained_s`` and ``running``."""

    __slots__ = ("arrival_s", "attained_s", "budget_s", "gpus", "job_id", "kind", "running", "tenant")

    def __init__(
        self, job_id: int, tenant: int, kind: str, gpus: int, arrival_s: float, budget_s: float
    ) -> None:
        self.job_id = job_id
        self.tenant = tenant
        self.kind = kind
        self.gpus = gpus
        self.arrival_s = arrival_s
        self.budget_s = budget_s
        self.attained_s = 0.0
        self.running = False

    @property
    def attained_gpu_s(self) -> float:
        return self.attained_s * self.gpus

    def __repr__(self) -> str:
        return f"JobView(job_id={self.job_id}, kind={self.kind!r}, gpus={self.gpus})"


@dataclass(frozen=True)
class KillPlan:
    """How a policy's monitors are made, when it is simple enough for the simulator to plan every
    job's kill at once: each job of a kind in ``kinds`` (None: every kind) gets
    ``Monitor(detector)`` at the dense cadence, every other job no monitor; ``detector`` None: no
    job gets one. The simulator then folds all jobs' evals together (``Detector.fold_rows``)."""

    detector: Detector | None = None
    kinds: frozenset[str] | None = None


#: The hooks a policy may leave as ``Scheduler``'s no-ops (the simulator then skips the call).
OPTIONAL_HOOKS = ("on_job_add", "on_job_end", "on_start", "on_stop", "monitor", "next_change_s", "wake_at_s")


class Scheduler(ABC):
    """Base policy contract. Subclasses hold configuration (and bookkeeping they derive from
    the hooks); they never see labels."""

    name: str = ""
    #: If True, the simulator may preempt running jobs that ``order`` ranks out of the GPUs.
    preemptive: bool = True
    #: If True, a waiting job that fits may start ahead of a higher-ranked one that does not.
    backfill: bool = True
    #: Opt-in incremental contract. A policy that sets it defines ``rank_key`` such that
    #: ``order(jobs)`` is ``sorted(jobs, key=rank_key)`` (keys unique, e.g. ending in the job id),
    #: a waiting job's key does not change while it waits, and a running job's key never grows
    #: between two of its ``next_change_s`` milestones. The simulator then keeps waiting jobs in
    #: heaps keyed on it (no re-sort per decision) and skips instants where nothing changed.
    #: Policies whose ranks move otherwise (fair share) leave it False and are ranked by ``order``.
    static_rank: bool = False
    #: True if the monitors this policy hands out ask for every eval (cadence ``every:1``); a
    #: policy whose monitors skip evals sets it False, and the simulator then runs only the
    #: evals they ask for (``sim/_eval_time.py``).
    dense_evals: bool = True
    #: The optional hooks this policy (or a base class of it below ``Scheduler``) defines.
    _own_hooks: ClassVar[frozenset[str]] = frozenset()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._own_hooks = cls._own_hooks | {name for name in OPTIONAL_HOOKS if name in cls.__dict__}
        # A subclass that hands out monitors its own way no longer has its base's kill plan.
        if "monitor" in cls.__dict__ and "kill_plan" not in cls.__dict__:
            cls.kill_plan = Scheduler.kill_plan  # type: ignore[method-assign]
        # A subclass that re-defines ``order`` without re-declaring ``static_rank`` may no
        # longer rank by ``rank_key``: it loses the opt-in rather than being silently ignored.
        if "order" in cls.__dict__ and "static_rank" not in cls.__dict__:
            cls.static_rank = False

    def on_job_add(self, job: JobView, now: float) -> None:  # noqa: B027 - optional hook
        """A job arrived."""

    def on_job_end(self, job: JobView, now: float) -> None:  # noqa: B027 - optional hook
        """A job completed or was killed."""

    def on_start(self, job: JobView, now: float) -> None:  # noqa: B027 - optional hook
        """A job got its GPUs (first start or resume)."""

    def on_stop(self, job: JobView, now: float) -> None:  # noqa: B027 - optional hook
        """A job gave its GPUs back (preempted, completed or killed)."""

    def monitor(self, job: JobView) -> Monitor | None:
        """A fresh Monitor of the stopping rule that watches ``job``, or None. The simulator
        feeds it the job's evals (all at once at arrival on the fast path, valid because a rule
        reads only the job's own evals; one per eval event otherwise) and kills the job at the
        eval where it fires. Base policies never kill (None)."""
        return None

    def kill_plan(self) -> KillPlan | None:
        """How this policy's monitors are made (:class:`KillPlan`), or None when the simulator
        must ask ``monitor`` job by job. A policy that keeps the no-op ``monitor`` hands out
        none; one that defines ``monitor`` plans nothing unless it also defines this."""
        return None if "monitor" in self._own_hooks else KillPlan()

    def hook(self, name: str) -> Callable[..., Any] | None:
        """The bound hook ``name`` the simulator calls, or None for an optional hook this policy
        keeps as ``Scheduler``'s no-op (the simulator then skips the call). A wrapper may hand
        out the hook of the policy it wraps (``EvalStop``: the same call, one frame shorter)."""
        if name in OPTIONAL_HOOKS and name not in self._own_hooks:
            return None
        hook: Callable[..., Any] = getattr(self, name)
        return hook

    def next_change_s(self, job: JobView) -> float | None:
        """Attained service (s) at which this job's rank may next change while it runs (queue
        thresholds of LAS-style policies), or None if it changes only at arrivals/departures."""
        return None

    def wake_at_s(self, job: JobView, now: float) -> float | None:
        """Time at which a job that starts waiting at ``now`` may change rank while it waits
        (a starvation guard's promotion), or None. The simulator puts a timer event there so the
        change takes effect at that instant; only policies with ``static_rank`` False may use it."""
        return None

    def rank_key(self, job: JobView) -> tuple[Any, ...]:
        """The sort key of ``job`` in ``order`` (smaller first); only if ``static_rank``."""
        raise NotImplementedError(f"{type(self).__name__} does not define rank_key (static_rank is False)")

    @abstractmethod
    def order(self, jobs: Sequence[JobView], now: float) -> list[JobView]:
        """Rank ``jobs`` (running and waiting), highest priority first."""
