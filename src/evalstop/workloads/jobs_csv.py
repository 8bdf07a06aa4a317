"""A user's own job list: ``jobs.csv`` with one row per job.

Columns (a header row names them; order free, extra columns are an error):

- ``job_id``: integer, unique in the file;
- ``submit_s``: submission time in seconds (finite, >= 0);
- ``gpus``: GPUs the job needs at once (integer, 1 to the cluster's ``total_gpus``);
- ``duration_s``: seconds of GPU time to completion (finite, > 0);
- ``kind`` (optional): ``rlhf``, ``lora`` or ``dpo`` (default ``rlhf``);
- ``tenant`` (optional): integer >= 0 (default 0).

The file fixes who arrives when, how wide and how long. What it does not know is drawn from the
synthetic model with the run's seed, exactly as for the Philly trace: which RLHF jobs hack
(``hacking_share``), the declared budget (duration times the log-normal
``budget_error_sigma`` error) and each job's eval curve. Every row is checked before any job is
built; a bad row raises :class:`InvalidParameterError` naming the file, the row and the value.

A :class:`TraceFiles` adds given eval curves (and optionally their ground truth) for some or
all of the jobs: see :mod:`evalstop.workloads.trace_curves`.
"""

from __future__ import annotations

import csv
import hashlib
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .. import _snap
from .._validation import InvalidParameterError
from .model import KINDS, JobColumns, Workload, WorkloadConfig, build_workload
from .trace_curves import (
    GivenCurve,
    given_curves,
    missing_curves,
    read_curves_file,
    read_truth_file,
    with_given_curves,
)

REQUIRED = ("job_id", "submit_s", "gpus", "duration_s")
OPTIONAL = ("kind", "tenant")
#: The ``[workload]`` keys of a trace, in the order of :class:`TraceFiles`'s fields.
CONFIG_KEYS = ("trace", "curves", "curves_truth", "curves_for_all_jobs")


class _Rows:
    """Parsed columns, filled row by row."""

    def __init__(self) -> None:
        self.ids: list[int] = []
        self.submit: list[float] = []
        self.gpus: list[int] = []
        self.duration: list[float] = []
        self.kinds: list[str] = []
        self.tenants: list[int] = []


def read_jobs_csv(path: str | Path, total_gpus: int) -> _Rows:
    """Parse and check every row of ``path`` for a cluster of ``total_gpus``."""
    path = Path(path)
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        header = reader.fieldnames or []
        missing = [c for c in REQUIRED if c not in header]
        extra = [c for c in header if c not in REQUIRED + OPTIONAL]
        if missing or extra:
            raise InvalidParameterError(
                f"{path}: the header must name {', '.join(REQUIRED)} and optionally "
                f"{', '.join(OPTIONAL)}. Missing {missing}, unknown {extra}."
            )
        rows, seen = _Rows(), set[int]()
        for line, row in enumerate(reader, start=2):
            _parse_row(path, line, row, total_gpus, rows, seen)
    if not rows.ids:
        raise InvalidParameterError(f"{path}: no jobs (a header and at least one row are needed).")
    return rows


def _parse_row(
    path: Path, line: int, row: dict[str, str], total_gpus: int, rows: _Rows, seen: set[int]
) -> None:
    def bad(column: str, rule: str) -> InvalidParameterError:
        return InvalidParameterError(f"{path}, line {line}: {column}={row.get(column)!r} {rule}.")

    def integer(column: str, default: int | None = None) -> int:
        text = (row.get(column) or "").strip()
        if not text and default is not None:
            return default
        try:
            return int(text)
        except ValueError:
            raise bad(column, "must be an integer") from None

    def number(column: str) -> float:
        try:
            value = float((row.get(column) or "").strip())
        except ValueError:
            raise bad(column, "must be a number") from None
        if not math.isfinite(value):
            raise bad(column, "must be finite")
        return value

    job_id = integer("job_id")
    if job_id in seen:
        raise bad("job_id", "is a duplicate")
    submit, gpus, duration = number("submit_s"), integer("gpus"), number("duration_s")
    if submit < 0:
        raise bad("submit_s", "must be >= 0")
    if not 1 <= gpus <= total_gpus:
        raise bad("gpus", f"must be 1 to the cluster's total_gpus={total_gpus}")
    if duration <= 0:
        raise bad("duration_s", "must be > 0")
    kind = (row.get("kind") or "").strip() or "rlhf"
    if kind not in KINDS:
        raise bad("kind", f"must be one of {', '.join(KINDS)}")
    tenant = integer("tenant", 0)
    if tenant < 0:
        raise bad("tenant", "must be >= 0")
    seen.add(job_id)
    rows.ids.append(job_id)
    rows.submit.append(submit)
    rows.gpus.append(gpus)
    rows.duration.append(duration)
    rows.kinds.append(kind)
    rows.tenants.append(tenant)


@dataclass(frozen=True)
class TraceFiles:
    """``[workload] trace`` and its optional companions: ``curves`` (a curves file in the
    ``evalstop replay`` format), ``curves_truth`` (a bank-format truth.csv for the curve jobs)
    and ``curves_for_all_jobs`` (a job of ``jobs`` without a curve is an error, not drawn)."""

    jobs: str
    curves: str | None = None
    curves_truth: str | None = None
    curves_for_all_jobs: bool = False

    def __post_init__(self) -> None:
        if self.curves is None and (self.curves_truth is not None or self.curves_for_all_jobs):
            raise InvalidParameterError(
                "workload.curves_truth and workload.curves_for_all_jobs need workload.curves (a curves "
                f"file). Got curves_truth={self.curves_truth!r}, "
                f"curves_for_all_jobs={self.curves_for_all_jobs!r} without it.")

    @classmethod
    def from_config(
        cls, workload: dict[str, Any], base_dir: Path, other_source: str = ""
    ) -> TraceFiles | None:
        """Pop ``trace``, ``curves``, ``curves_truth`` and ``curves_for_all_jobs`` off a
        ``[workload]`` table; paths are relative to ``base_dir`` (the config file's directory).
        ``other_source`` names another job source of the config, which ``trace`` excludes."""
        values = {key: workload.pop(key, None) for key in CONFIG_KEYS}
        jobs, curves, truth, all_jobs = values.values()
        given = [k for k, v in values.items() if v is not None]
        if jobs is None and given:
            raise InvalidParameterError(f"workload.{given[0]} needs workload.trace (a jobs.csv): the "
                                        "curves file holds curves of that file's jobs")
        if jobs is None:
            return None
        if other_source:
            raise InvalidParameterError(
                f"workload.trace (your own jobs.csv) and {other_source} cannot be combined")
        if not isinstance(jobs, str) or not jobs:
            raise InvalidParameterError(f"workload.trace must be a path to a jobs.csv. Got {jobs!r} instead.")
        for key, value in (("curves", curves), ("curves_truth", truth)):
            if value is not None and (not isinstance(value, str) or not value):
                raise InvalidParameterError(f"workload.{key} must be a file path. Got {value!r} instead.")
        if all_jobs is not None and not isinstance(all_jobs, bool):
            raise InvalidParameterError(
                f"workload.curves_for_all_jobs must be true or false. Got {all_jobs!r} instead.")
        return cls(str(base_dir / jobs), None if curves is None else str(base_dir / curves),
                   None if truth is None else str(base_dir / truth), bool(all_jobs))

    def check(self, total_gpus: int) -> None:
        """Read and check every file now (a bad row is reported before anything runs)."""
        self.given_curves(read_jobs_csv(self.jobs, total_gpus))

    def given_curves(self, rows: _Rows) -> dict[int, GivenCurve]:
        if self.curves is None:
            return {}
        curves = read_curves_file(self.curves, rows.ids)
        if self.curves_for_all_jobs:
            missing_curves(rows.ids, curves, self.jobs)
        truth = None if self.curves_truth is None else read_truth_file(self.curves_truth, curves)
        return given_curves(curves, truth)

    def digest(self) -> str:
        """What the files hold (part of a cache key): the jobs file's SHA-256 alone when there
        are no curves, so keys made before curves existed still hold."""
        digest = hashlib.sha256(Path(self.jobs).read_bytes())
        if self.curves is None:
            return digest.hexdigest()
        for name in (self.curves, self.curves_truth):
            digest.update(b"\0" + (b"-" if name is None else Path(name).read_bytes()))
        digest.update(b"\0all" if self.curves_for_all_jobs else b"\0some")
        return digest.hexdigest()


def load_jobs_csv(path: str | Path | TraceFiles, config: WorkloadConfig, seed: int) -> Workload:
    """The workload of ``path`` (a jobs.csv, or a :class:`TraceFiles`) on ``config.total_gpus``
    GPUs (``config.n_jobs`` is ignored: the file says how many jobs there are). Jobs keep their
    ids and are ordered by submission (ties in file order). Jobs with a given curve take it, and
    its truth, after every job's curve is drawn, so the others are those of a run without curves."""
    files = path if isinstance(path, TraceFiles) else TraceFiles(str(path))
    rows = read_jobs_csv(files.jobs, config.total_gpus)
    given = files.given_curves(rows)
    order = np.argsort(np.asarray(rows.submit), kind="stable")
    n = order.size
    config = config.with_(n_jobs=n)
    s_label, s_budget, s_curve, s_noise = (
        np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(4)
    )
    kinds = np.asarray(rows.kinds)[order]
    hacking = (kinds == "rlhf") & (s_label.random(n) < config.hacking_share)
    duration_s = np.asarray(rows.duration)[order]
    budget_s = duration_s * _snap.exp(s_budget.normal(0.0, config.budget_error_sigma, n))
    columns = JobColumns(
        kinds, hacking, np.asarray(rows.tenants)[order], np.asarray(rows.gpus)[order], duration_s,
        budget_s, np.asarray(rows.submit)[order],
    )
    workload = build_workload(config, seed, columns, s_curve, s_noise, job_ids=np.asarray(rows.ids)[order])
    return with_given_curves(workload, given) if given else workload
