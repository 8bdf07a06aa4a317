"""Run policies over seeded workloads: one workload per seed, shared by every policy
(common random numbers), seeds spread over a process pool.

``bank``: bank runs (``workloads.bank``) that the RLHF jobs replay instead of their generated
curves, drawn per seed by ``bank_workload`` (``bank_sim.run_bank_seed``); None keeps the generated
curves."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from contextlib import contextmanager
from typing import Any, TypeVar

import numpy as np

from ..sim.cluster import SimConfig, simulate
from ..sim.metrics import compute_metrics
from ..workloads import Workload, WorkloadConfig, generate
from ..workloads.bank import BankRun, bank_workload
from ..workloads.jobs_csv import TraceFiles
from .policies import PolicySpec

Row = dict[str, Any]
K = TypeVar("K")
R = TypeVar("R")
CDF_QUANTILES = np.linspace(0.0, 100.0, 101)


def run_seed(
    workload: WorkloadConfig,
    policies: Sequence[PolicySpec],
    seed: int,
    sim: SimConfig | None = None,
    bank: Sequence[BankRun] | None = None,
    trace: str | TraceFiles | None = None,
) -> list[Row]:
    """Pure: one workload for ``seed``, every policy on it, one metrics row per policy. With a
    ``bank``, the RLHF jobs take their eval curves and truth from bank runs (drawn with the same
    seed); sizes, arrivals and the LoRA/DPO jobs stay those of the preset. With a ``trace``
    (a ``jobs.csv``, or a ``TraceFiles`` with its curves; see ``workloads.jobs_csv``) the jobs
    are the file's."""
    if trace is not None:
        from ..workloads.jobs_csv import load_jobs_csv

        jobs = load_jobs_csv(trace, workload, seed)
    else:
        jobs = generate(workload, seed)
    if bank is not None:
        jobs = bank_workload(jobs, bank, seed)
    return run_policies(jobs, policies, sim)


def run_policies(
    jobs: Workload, policies: Sequence[PolicySpec], sim: SimConfig | None = None, jct_cdf: bool = False
) -> list[Row]:
    """Every policy on the same jobs (common random numbers): one metrics row per policy, with
    the JCT percentiles 0..100 if ``jct_cdf``."""
    rows = []
    for policy in policies:
        scheduler, config = policy.build(sim)
        result = simulate(jobs, scheduler, config)
        row = compute_metrics(result).as_dict()
        row["policy"] = policy.label
        if jct_cdf:
            jct = np.array([o.jct_s for o in result.outcomes])
            row["jct_quantiles_s"] = [float(q) for q in np.percentile(jct, CDF_QUANTILES)]
        rows.append(row)
    return rows


def run_seeds(
    workload: WorkloadConfig,
    policies: Sequence[PolicySpec],
    seeds: Sequence[int],
    sim: SimConfig | None = None,
    workers: int | None = None,
    progress: Callable[[int, int], None] | None = None,
    bank: Sequence[BankRun] | None = None,
    trace: str | TraceFiles | None = None,
) -> list[Row]:
    """All rows for all seeds, in seed order. ``workers=1`` runs in this process."""
    workers = workers or min(len(seeds), os.cpu_count() or 1)
    results: dict[int, list[Row]] = {}
    if workers <= 1:
        for seed in seeds:
            results[seed] = run_seed(workload, policies, seed, sim, bank, trace)
            _tick(progress, len(results), len(seeds))
    else:
        def done(seed: int, rows: list[Row]) -> None:
            results[seed] = rows
            _tick(progress, len(results), len(seeds))

        run_pool({seed: (run_seed, (workload, policies, seed, sim, bank, trace)) for seed in seeds},
                 workers, done)
    return [row for seed in seeds for row in results[seed]]


def run_pool(calls: Mapping[K, tuple[Callable[..., R], tuple[Any, ...]]], workers: int,
             done: Callable[[K, R], None]) -> None:
    """Run each ``key: (function, args)`` of ``calls`` on a process pool of at most ``workers``,
    calling ``done(key, result)`` here as each finishes (in any order). The workers ignore
    Ctrl-C; the parent takes it between its waits (:func:`sigint_deferred`), drops the queued
    calls and raises KeyboardInterrupt (what ``done`` has seen stays done)."""
    with sigint_deferred() as interrupted:
        pool = ProcessPoolExecutor(max_workers=min(workers, len(calls)), initializer=ignore_sigint)
        try:
            pending = {pool.submit(fn, *args): key for key, (fn, args) in calls.items()}
            while pending:
                finished, _ = wait(pending, timeout=POLL_S, return_when=FIRST_COMPLETED)
                interrupted()
                for future in finished:
                    done(pending.pop(future), future.result())
        except BaseException:  # Ctrl-C: do not wait for the queued calls
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        pool.shutdown()


def ignore_sigint() -> None:
    """Pool workers leave Ctrl-C to the parent, which stops the run and prints one line."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


#: How often a parent waiting on its pool looks for a deferred Ctrl-C (seconds).
POLL_S = 0.2


@contextmanager
def sigint_deferred() -> Iterator[Callable[[], None]]:
    """Ctrl-C, raised only where the caller calls the yielded check (between its waits on a
    process pool), never inside ``concurrent.futures``: a KeyboardInterrupt raised while
    ``wait()`` held its futures' locks left one held, the executor's thread then blocked on it,
    and the process hung at exit, since the executor's exit hook joins that thread (1 run in 40
    interrupted at random moments: ``scripts/interrupt_reproduce.py``). Only in the main thread,
    and only where Ctrl-C raises KeyboardInterrupt (Python's default handler); elsewhere the
    check does nothing and the handler is left alone."""
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler):
        yield lambda: None
        return
    pressed = threading.Event()

    def check() -> None:
        if pressed.is_set():
            pressed.clear()  # raised once
            raise KeyboardInterrupt

    signal.signal(signal.SIGINT, lambda _signum, _frame: pressed.set())
    try:
        yield check
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    check()  # pressed after the caller's last check (its pool's shutdown, say): not lost


def _tick(progress: Callable[[int, int], None] | None, done: int, total: int) -> None:
    if progress is not None:
        progress(done, total)


def stderr_progress(label: str, every_s: float = 10.0) -> Callable[[int, int], None]:
    """A one-line progress counter on stderr: redrawn in place on a terminal; elsewhere (a log)
    a line every ``every_s`` seconds, so a run shorter than that prints nothing."""
    last = [time.perf_counter()]

    def report(done: int, total: int) -> None:
        if sys.stderr.isatty():
            end = "\n" if done == total else ""
            sys.stderr.write(f"\r{label}: {done}/{total} seeds{end}")
        elif time.perf_counter() - last[0] >= every_s:
            last[0] = time.perf_counter()
            sys.stderr.write(f"{label}: {done}/{total} seeds\n")
        sys.stderr.flush()

    return report
