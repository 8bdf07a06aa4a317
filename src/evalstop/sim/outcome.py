"""What one simulation run produces: one record per job, plus run totals."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class JobOutcome:
    """How one job ended. Label-bearing fields (``hacking``, ``true_*``) come from the
    workload's hidden truth and are filled in by the simulator only after the run."""

    job_id: int
    tenant: int
    kind: str
    gpus: int
    hacking: bool
    arrival_s: float
    start_s: float  # first time the job got GPUs
    end_s: float  # completion or termination
    killed: bool  # True if a stopping rule terminated it (at any eval, the last one included)
    stop_progress: float | None  # progress at the kill, None if not killed
    end_progress: float  # progress when it ended (1.0 if it completed)
    n_preemptions: int
    gpu_s_useful: float  # GPU-seconds of training progress
    gpu_s_overhead: float  # GPU-seconds spent on preemption overhead (restore)
    gpu_s_after_peak: float  # GPU-seconds of progress after the job's true quality peak
    true_peak: float  # true quality at the true peak
    true_delivered: float  # true quality of the delivered checkpoint

    @property
    def jct_s(self) -> float:
        return self.end_s - self.arrival_s

    @property
    def regret(self) -> float:
        return self.true_peak - self.true_delivered


@dataclass(frozen=True)
class SimResult:
    policy: str
    seed: int
    total_gpus: int
    makespan_s: float  # first arrival to last departure
    outcomes: tuple[JobOutcome, ...]
    event_log_hash: str
