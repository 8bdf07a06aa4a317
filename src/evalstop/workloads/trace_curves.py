"""Given eval curves for the jobs of a ``jobs.csv``: ``[workload] curves = "curves.csv"``.

The curves file is the ``evalstop replay`` format, read by the replay tool's own reader
(:func:`evalstop.replay.read_evals`): columns ``job_id,step,score`` and optionally
``progress``, ``loss`` and ``items``; a job's rows in step order; an empty or ``nan`` score is
a missing eval (the stopping rule skips it, so it never kills a job). ``job_id`` must be a job
of the jobs.csv. A job's evals sit at its ``progress`` values when the column is filled for
its rows (each in (0, 1], increasing), else at ``step / last step``: eval i of a job whose
steps are 1..E lands at i/E of its duration, exactly where the synthetic model puts its evals.
The simulator runs an eval when the job's attained service reaches progress x duration.

Ground truth (what only the metrics read) comes from an optional companion file in the
``truth.csv`` format ``evalstop bank`` writes: ``job_id`` and ``hacking`` (``true``/``false``)
required, ``true_gold`` optional (the true quality at each of the job's evals, joined by
``;``); the bank's derived columns (``family``, ``label``, ``peak_step``, ...) are accepted and
ignored. Every curve job needs a row. Without the file the observed curve is taken as the truth:
true quality = the score (a missing score takes the nearest earlier valid one, or the first
valid one), and the job is labelled hacking by the bank's rule (:func:`bank.label_curve`: its
final score at least ``HACK_DROP`` = 0.05 below its peak, the peak before 90 % of the run;
borderline counts as not hacking). That rule assumes a 0-1 score scale.

Jobs without a curve keep their drawn curve and label (bit for bit those of the run without a
curves file), unless ``curves_for_all_jobs`` makes a missing curve an error. Every row is
checked before any job is built; errors name the file, the line and the value.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from .._validation import InvalidParameterError
from ..detectors import Eval
from .bank import TRUTH_COLUMNS, label_curve
from .model import Workload
from .records import JobTruth


@dataclass(frozen=True)
class GivenCurve:
    """One job's curve from the file: its evals (at their simulator progress) and its truth."""

    evals: tuple[Eval, ...]
    hacking: bool
    true_at: tuple[float, ...]


def read_curves_file(path: str | Path, job_ids: Sequence[int]) -> dict[int, list[Eval]]:
    """The evals of each job of ``path`` (ids among ``job_ids``), at their simulator progress."""
    from ..replay import CurvesError, check_columns, read_evals

    path, known = Path(path), set(job_ids)
    rows: dict[int, list[Eval]] = {}
    lines: dict[int, list[int]] = {}
    try:
        with path.open(newline="", encoding="utf-8-sig") as f:
            reader = csv.DictReader(f)
            check_columns(reader.fieldnames)
            for line, (job, ev) in enumerate(read_evals(reader), start=2):
                job_id = _job_id(job)
                if job_id is None or job_id not in known:
                    raise InvalidParameterError(
                        f"{path}, line {line}: job_id={job!r} is not a job of the jobs.csv")
                rows.setdefault(job_id, []).append(ev)
                lines.setdefault(job_id, []).append(line)
    except CurvesError as exc:
        raise InvalidParameterError(f"{path}: {exc}") from None
    if not rows:
        raise InvalidParameterError(f"{path}: no curves (a header and at least one row are needed).")
    return {job_id: _placed(path, job_id, evals, lines[job_id]) for job_id, evals in rows.items()}


def _job_id(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


def _placed(path: Path, job_id: int, evals: list[Eval], lines: list[int]) -> list[Eval]:
    """``evals`` at their progress: the given one if every row has it, else step / last step."""
    given = [ev.progress is not None for ev in evals]
    if any(given) and not all(given):
        line = lines[given.index(False)]
        raise InvalidParameterError(f"{path}, line {line}: job {job_id} has progress on some rows and not "
                                    "on others; fill it on every row of the job or on none")
    if all(given):
        previous = 0.0
        for ev, line in zip(evals, lines, strict=True):
            p = float(ev.progress)  # type: ignore[arg-type]
            if not (math.isfinite(p) and previous < p <= 1.0):
                raise InvalidParameterError(
                    f"{path}, line {line}: progress={p!r} must be in (0, 1] and above the job's "
                    f"previous eval ({previous!r})")
            previous = p
        return evals
    last = evals[-1].step
    for ev, line in zip(evals, lines, strict=True):
        if ev.step < 1:
            raise InvalidParameterError(
                f"{path}, line {line}: step={ev.step} must be >= 1 when there is no progress column "
                f"(an eval sits at step / last step of the job's duration; step {ev.step} would be "
                "before any training): drop the row or give progress")
    return [replace(ev, progress=ev.step / last) for ev in evals]


#: job id -> (hacking, true quality at each eval, or None to take the observed curve).
Truth = dict[int, tuple[bool, tuple[float, ...] | None]]


def read_truth_file(path: str | Path, curves: Mapping[int, Sequence[Eval]]) -> Truth:
    """job id -> (hacking, true quality at each eval or None) for every job of ``curves``."""
    path = Path(path)
    truth: Truth = {}
    with path.open(newline="", encoding="utf-8-sig") as f:
        reader = csv.DictReader(f)
        header = reader.fieldnames or []
        missing = [c for c in ("job_id", "hacking") if c not in header]
        extra = [c for c in header if c not in TRUTH_COLUMNS]
        if missing or extra:
            raise InvalidParameterError(
                f"{path}: the header must name job_id and hacking, and may name the other columns "
                f"of an `evalstop bank` truth.csv ({', '.join(TRUTH_COLUMNS[2:])}). "
                f"Missing {missing}, unknown {extra}.")
        for line, row in enumerate(reader, start=2):
            job_id, hacking, gold = _truth_row(path, line, row, curves)
            if job_id in truth:
                raise InvalidParameterError(f"{path}, line {line}: job_id={row['job_id']!r} is a duplicate")
            truth[job_id] = (hacking, gold)
    absent = [job_id for job_id in curves if job_id not in truth]
    if absent:
        raise InvalidParameterError(f"{path}: no truth row for job(s) {absent[:10]} of the curves file; "
                                    "every job with a curve needs one")
    return truth


def _truth_row(
    path: Path, line: int, row: Mapping[str, str | None], curves: Mapping[int, Sequence[Eval]]
) -> tuple[int, bool, tuple[float, ...] | None]:
    def bad(column: str, rule: str) -> InvalidParameterError:
        return InvalidParameterError(f"{path}, line {line}: {column}={row.get(column)!r} {rule}")

    job_id = _job_id((row.get("job_id") or "").strip())
    if job_id is None or job_id not in curves:
        raise bad("job_id", "is not a job of the curves file")
    flag = (row.get("hacking") or "").strip().lower()
    if flag not in ("true", "false"):
        raise bad("hacking", "must be true or false")
    text = (row.get("true_gold") or "").strip()
    if not text:
        return job_id, flag == "true", None
    try:
        gold = tuple(float(x) for x in text.split(";"))
    except ValueError:
        raise bad("true_gold", "must be numbers joined by ';'") from None
    n_evals = len(curves[job_id])
    if len(gold) != n_evals:
        raise bad("true_gold", f"must hold one value per eval of job {job_id} ({n_evals}), not {len(gold)}")
    if not all(math.isfinite(g) for g in gold):
        raise bad("true_gold", "must be finite")
    return job_id, flag == "true", gold


def observed_truth(evals: Sequence[Eval]) -> tuple[bool, tuple[float, ...]]:
    """(hacking, true quality at each eval) taken from the observed scores (module docstring)."""
    scores = [ev.score if math.isfinite(ev.score) else None for ev in evals]
    valid = [s for s in scores if s is not None]
    if not valid:
        return False, tuple(0.0 for _ in evals)
    filled, last = [], valid[0]
    for s in scores:
        last = last if s is None else s
        filled.append(last)
    return label_curve(filled)[0] == "hacking", tuple(filled)


def given_curves(
    curves: Mapping[int, Sequence[Eval]], truth: Truth | None
) -> dict[int, GivenCurve]:
    out = {}
    for job_id, evals in curves.items():
        if truth is None:
            hacking, true_at = observed_truth(evals)
        else:  # the observed curve only where the truth file gives no true_gold
            hacking, gold = truth[job_id]
            true_at = observed_truth(evals)[1] if gold is None else gold
        out[job_id] = GivenCurve(tuple(evals), hacking, true_at)
    return out


def with_given_curves(workload: Workload, curves: Mapping[int, GivenCurve]) -> Workload:
    """``workload`` with the jobs of ``curves`` taking those curves and that truth; every other
    job, and every job's size, arrival, budget and duration, stays as it was."""
    jobs, truth = list(workload.jobs), list(workload.truth)
    for i, spec in enumerate(jobs):
        given = curves.get(spec.job_id)
        if given is None:
            continue
        jobs[i] = replace(spec, evals=given.evals)
        true_at = given.true_at
        peak = int(np.argmax(true_at))
        progress = given.evals[peak].progress
        truth[i] = JobTruth(given.hacking, truth[i].duration_s, 1.0 if progress is None else progress,
                            true_at, max(true_at), true_at[-1])
    return Workload(workload.config, workload.seed, tuple(jobs), tuple(truth))


def missing_curves(job_ids: Sequence[int], curves: Mapping[int, object], jobs_path: str | Path) -> None:
    """Raise naming the first jobs of ``job_ids`` (file order) that have no curve."""
    absent = [(line, job_id) for line, job_id in enumerate(job_ids, start=2) if job_id not in curves]
    if absent:
        shown = ", ".join(f"job_id={job_id} (line {line})" for line, job_id in absent[:5])
        raise InvalidParameterError(
            f"{jobs_path}: {len(absent)} job(s) have no curve in the curves file and curves_for_all_jobs "
            f"is true: {shown}{' ...' if len(absent) > 5 else ''}")
