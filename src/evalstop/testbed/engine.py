"""The scheduler a testbed arm submits to: one small interface, a Ray and a Slurm implementation.

The dispatcher (:mod:`.arm`) only needs to hand a job to the engine, learn when it ended, and
know how the EvalStop service reaches it. An engine:

- ``target``: the service's adapter name for its jobs (``ray``, ``slurm``), and
  ``adapter_settings()`` for ``evalstop serve`` (``EVALSTOP_ADAPTER_SETTINGS``);
- ``tenant_scope(arm)``: the scope section that confines an arm's tenant to its own jobs;
- ``submit(arm, name, argv, job_dir, register, width=w)`` starts ``argv`` as one job that holds
  ``w`` slots (Ray: ``entrypoint_resources={"slot": w}``; Slurm: ``--cpus-per-task=w``) and
  returns its reference (the service's ``external_ref``). ``register(ref)`` is called once the
  reference exists and before the process can start (Ray: the submission id is chosen before the
  submission; Slurm: the job is submitted held, registered, then released), so the job always
  finds its service id;
- ``poll(refs)``: the engine's view of those jobs (:class:`Status`), or None when the engine did
  not answer this time (poll again);
- ``warm_up(argv)``: run one job to the end (the engine's first-job costs); ``close()``: stop
  what was started (on an existing Ray cluster, only this run's jobs).

``slots`` is the whole cluster's; each arm's dispatcher keeps to its own share of it. References
carry the run id (``run_id``), so that runs on a shared cluster never collide.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol


@dataclass(frozen=True)
class Status:
    """One job as its engine reports it: its own state word, whether that is final, the
    engine's start and end times (seconds since the epoch; None where it has none), the job's
    comment where the engine keeps one (Slurm: the adapter's ``evalstop-pin:<uri>``), and the
    slots the engine gave it where it reports them (Slurm: its CPUs; Ray: the ``slot`` resource its
    supervisor actor holds, from the state API)."""

    state: str
    terminal: bool
    start_t: float | None = None
    end_t: float | None = None
    comment: str = ""
    slots: int | None = None


class Engine(Protocol):
    target: str
    slots: int
    clock_s: float  # resolution of the engine's times (Slurm: 1 s)
    run_id: str

    def adapter_settings(self) -> dict[str, Any]: ...

    def tenant_scope(self, arm: str) -> dict[str, Any]: ...

    def submit(
        self,
        arm: str,
        name: str,
        argv: list[str],
        job_dir: Path,
        register: Callable[[str], None],
        *,
        width: int = 1,
    ) -> str: ...

    def poll(self, refs: Collection[str]) -> dict[str, Status] | None: ...

    def warm_up(self, argv: list[str], timeout_s: float = 180.0) -> float: ...

    def close(self) -> None: ...
