"""``evalstop replay``: run recorded eval curves through a detector, one verdict per job.

Input CSV columns: ``job_id,step,score`` and optionally ``progress``, ``loss``, ``stderr`` (the
score's standard error, which rules that measure noise use where given) and ``items``.
``items`` holds an eval's per-prompt scores joined by ``;`` (as ``evalstop bank`` writes them);
a row with items becomes an ``ItemEval``, read by ``paired`` (and ``noise-aware:items=true``),
while every other rule sees only the score. Rows of one job are in step order (jobs may
interleave). An empty cell is a missing value: a missing score is read as NaN (the detector
skips it), a missing progress or loss as None, missing items as none. ``nan``/``inf`` are
allowed wherever a number is; a NaN, inf or missing score is skipped by every rule, and the
command says on stderr how many there were. Output CSV:
``job_id,stopped,stop_step,best_step,best_score,reason``, one row per job in order of first
appearance; ``reason`` is the rule's own account (why it stopped, or where it stands, e.g.
``CUSUM 2.87 <= threshold=3.0``).

``--cadence every:N|adaptive[:params]`` reads the file as dense (every eval the job could have
run) and feeds each job's rule only the rows its cadence policy asks for (``Monitor.next_eval``,
counted in rows); the output then gains ``evals_used``, the rows the job evaluated. Without it
every row is fed, as before.

``--confirm [size=N,z=Z]`` gives each job's monitor confirmation evals (``detectors._confirm``):
when its rule fires at a row, the row's ``confirm_score``, ``confirm_stderr`` and
``confirm_items`` are what a confirmation eval at that step returns (an empty ``confirm_score``
is NaN, and clears the alarm). Without a ``confirm_score`` column replay refuses (exit 2). The
output gains ``evals_used``, in routine evals: each confirmation counts ``size`` (default 4).

``--backfill`` (with ``--cadence``): at a stop, the rows the cadence skipped within two rows of
the best one (up to the stop) are evaluated too, counted in ``evals_used``, and the best of them
and the best eval is delivered (``detectors._backfill``). The output gains ``delivered_step``:
that step for a stopped job, the last row's step for one that ran to the end.

Refused, with the line and job named: a row with fewer or more fields than the header (a
truncated file), a step seen twice for one job (the service answers 409 to the same), a step
that goes backwards, and a rule that needs a column the file
lacks (``fixed-progress`` needs ``progress``; ``loss-plateau`` and ``slaq`` need ``loss``;
``paired`` needs ``items``). A UTF-8 byte-order mark is skipped. A header with no rows gives a
header with no rows, and a warning.

Each job's rows are folded into its own ``Monitor`` as they are read, so memory grows with the
number of jobs, not of rows, and every row costs O(1).
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, TextIO

from .detectors import (
    DEFAULT_SPEC,
    REGISTRY,
    CadencePolicy,
    CadenceWalk,
    Confirm,
    Detector,
    Eval,
    ItemEval,
    Monitor,
    parse_cadence,
    parse_confirm,
    parse_spec,
)
from .detectors._backfill import Neighbours, Slot

REQUIRED_COLUMNS = ("job_id", "step", "score")
#: The column ``--confirm`` needs (``confirm_stderr`` and ``confirm_items`` are optional).
CONFIRM_COLUMN = "confirm_score"
OUTPUT_COLUMNS = ("job_id", "stopped", "stop_step", "best_step", "best_score", "reason")
#: The extra output column with ``--cadence``.
CADENCE_COLUMN = "evals_used"
#: The extra output column with ``--backfill``.
DELIVERED_COLUMN = "delivered_step"
PROGRESS_MIN_JOBS = 500

Row = Mapping[str, str | None]


class CurvesError(ValueError):
    """The curves file is malformed; the message names the line and job."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "curves", metavar="CURVES.csv", help="eval curves: job_id,step,score[,progress,loss,items]"
    )
    parser.add_argument(
        "--detector",
        metavar="SPEC",
        default=DEFAULT_SPEC,
        help=f"detector spec 'name[:param=value,...]', name one of {', '.join(REGISTRY)} "
        f"(default: {DEFAULT_SPEC})",
    )
    parser.add_argument(
        "--cadence",
        metavar="POLICY",
        default=None,
        help="read the file as dense and feed the rule only the evals this policy asks for: "
        "every:N or adaptive[:every=N,dense=M]; adds an evals_used column (default: every row)",
    )
    parser.add_argument(
        "--confirm",
        metavar="PARAMS",
        nargs="?",
        const="",
        default=None,
        help="confirm each alarm with the row's confirm_score (confirm_stderr, confirm_items) before "
        "stopping: optional size=N (routine evals, default 4), z=Z (default 3); adds evals_used",
    )
    parser.add_argument(
        "--backfill",
        action="store_true",
        help="with --cadence: at a stop, also evaluate the skipped rows within two of the best one and "
        "deliver the best; adds delivered_step",
    )
    parser.add_argument("--out", metavar="PATH", default="-", help="output CSV (default: stdout)")
    parser.set_defaults(run=run)


def check_columns(columns: Iterable[str] | None, detector: Detector | None = None) -> None:
    """The header has the required columns, and the one ``detector``'s rule needs, if any."""
    present = set(columns or ())
    missing = [c for c in REQUIRED_COLUMNS if c not in present]
    if missing:
        raise CurvesError(
            f"curves file is missing required column(s) {', '.join(missing)}; "
            f"columns found: {', '.join(sorted(present)) or 'none'}"
        )
    if detector is None:
        return
    needed = [c for c in detector.reads if c not in present]
    if needed:
        raise CurvesError(
            f"the {detector.name!r} rule needs a {needed[0]!r} column, which the file lacks (columns "
            f"found: {', '.join(sorted(present))}); add it, or choose another rule with --detector"
        )


def read_evals(rows: Iterable[Row]) -> Iterator[tuple[str, Eval]]:
    """Validate rows into (job, eval) pairs, in file order. Errors name the line (the header is
    line 1) and the job; a job's steps must strictly increase."""
    for job, ev, _, _ in _read(rows):
        yield job, ev


def _read(rows: Iterable[Row]) -> Iterator[tuple[str, Eval, Row, str]]:
    """``read_evals`` with each eval's row and where it is (for the confirmation columns)."""
    last: dict[str, tuple[int, int]] = {}  # job -> (step, line)
    for line, row in enumerate(rows, start=2):
        if line == 2:
            check_columns(k for k in row if k is not None)
        _check_width(row, line)
        job = (row.get("job_id") or "").strip()
        if not job:
            raise CurvesError(f"line {line}: empty job_id")
        where = f"line {line}, job {job!r}"
        score = _parse_number(row, "score", where)
        ev = Eval(
            step=_parse_step(row.get("step"), where),
            score=math.nan if score is None else score,
            progress=_parse_number(row, "progress", where),
            loss=_parse_number(row, "loss", where),
            stderr=_parse_number(row, "stderr", where),
        )
        items = _parse_items(row.get("items"), where)
        if items:
            ev = ItemEval(ev.step, ev.score, ev.progress, ev.loss, ev.stderr, items=items)
        previous = last.get(job)
        if previous is not None and ev.step == previous[0]:
            raise CurvesError(f"{where}: step {ev.step} appears twice for this job (first on line "
                              f"{previous[1]}); keep one row per (job_id, step)")
        if previous is not None and ev.step < previous[0]:
            raise CurvesError(f"{where}: step {ev.step} goes backwards (previous step {previous[0]})")
        last[job] = (ev.step, line)
        yield job, ev, row, where


def confirmation_of(row: Row, ev: Eval, where: str) -> Eval:
    """What a confirmation eval at ``ev``'s step returns, from the row's ``confirm_*`` columns."""
    score = _parse_number(row, CONFIRM_COLUMN, where)
    value = math.nan if score is None else score
    stderr = _parse_number(row, "confirm_stderr", where)
    items = _parse_items(row.get("confirm_items"), where)
    if items:
        return ItemEval(ev.step, value, ev.progress, ev.loss, stderr, items=items)
    return Eval(ev.step, value, ev.progress, ev.loss, stderr)


def read_curves(rows: Iterable[Row]) -> dict[str, list[Eval]]:
    """Group and validate rows into per-job eval histories (first-appearance order)."""
    jobs: dict[str, list[Eval]] = {}
    for job, ev in read_evals(rows):
        jobs.setdefault(job, []).append(ev)
    return jobs


def _check_width(row: Row, line: int) -> None:
    """csv.DictReader fills missing fields with None and puts extra ones under the key None."""
    if None in row:
        raise CurvesError(f"line {line}: more fields than the header has columns")
    short = [k for k, v in row.items() if v is None]
    if short:
        raise CurvesError(f"line {line}: the row ends early (no value for {', '.join(short)}); "
                          "is the file truncated? Leave a cell empty for a missing value")


def replay_rows(
    rows: Iterable[Row],
    detector: Detector,
    on_job: Callable[[int, int], None] | None = None,
    cadence: CadencePolicy | None = None,
    confirm: Confirm | None = None,
    backfill: bool = False,
) -> list[dict[str, Any]]:
    """Replay CSV-style rows through ``detector``; one result dict per job.

    Each dict has the keys of ``OUTPUT_COLUMNS`` and ``n_invalid`` (the scores the rule skipped):
    ``stopped`` is a bool, ``reason`` a str, the others an int, float or None; with ``cadence``
    or ``confirm``, also ``evals_used``; with ``backfill`` (which needs ``cadence``), also
    ``delivered_step``. ``on_job(done, total)`` is called after each job (for progress display).
    """
    if backfill and cadence is None:
        raise ValueError("backfill needs a cadence (with every row evaluated, no row is skipped)")
    near: dict[str, Neighbours] = {}  # job -> the rows around its best (backfill only)
    monitors: dict[str, Monitor] = {}
    walks: dict[str, CadenceWalk] = {}  # with a cadence: each job's rows, one opportunity each
    current: list[tuple[Row, str]] = [({}, "")]  # the row being read, for its confirmation columns

    def confirmation(ev: Eval) -> Eval:
        return confirmation_of(current[0][0], ev, current[0][1])

    for job, ev, line, where in _read(rows):
        current[0] = (line, where)
        monitor = monitors.get(job)
        if monitor is None:
            monitor = monitors[job] = Monitor(detector, cadence, confirm=confirm)
            if cadence is not None:
                walks[job] = CadenceWalk(monitor, confirmation)
        if cadence is None:
            monitor.observe(ev)
            if monitor.pending is not None:
                monitor.observe_confirmation(confirmation(ev))
            continue
        done_before = monitor.fired
        used = walks[job].offer(ev)
        if backfill and not done_before:
            near.setdefault(job, Neighbours()).add(Slot(ev.step, ev.score, used), monitor.state["best_step"])
    results = []
    for done, (job, monitor) in enumerate(monitors.items(), start=1):
        verdict = monitor.verdict
        result = {
            "job_id": job,
            "stopped": verdict.stopped,
            "stop_step": verdict.stop_step,
            "best_step": verdict.best_step,
            "best_score": verdict.best_score,
            "reason": verdict.reason,
            "n_invalid": verdict.n_invalid,
        }
        if cadence is not None or confirm is not None:
            result[CADENCE_COLUMN] = monitor.evals_used
        if backfill:
            _deliver(result, monitor, near[job])
        results.append(result)
        if on_job is not None:
            on_job(done, len(monitors))
    return results


def _deliver(result: dict[str, Any], monitor: Monitor, near: Neighbours) -> None:
    """``delivered_step`` (and the backfilled evals in ``evals_used``) of one replayed job."""
    verdict = monitor.verdict
    if verdict.stop_step is None or verdict.best_score is None:
        result[DELIVERED_COLUMN] = near.recent[-1].step if near.recent else None
        return
    step, extra = near.backfill(monitor.sign, verdict.best_score, verdict.stop_step)
    result[DELIVERED_COLUMN] = step
    result[CADENCE_COLUMN] += extra


def write_results(
    results: Iterable[Mapping[str, Any]], out: TextIO, with_cadence: bool = False,
    with_delivered: bool = False,
) -> None:
    columns = OUTPUT_COLUMNS + ((CADENCE_COLUMN,) if with_cadence else ()) + \
        ((DELIVERED_COLUMN,) if with_delivered else ())
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for result in results:
        writer.writerow([_format_cell(result[column]) for column in columns])


def run(args: argparse.Namespace) -> int:
    try:
        detector = parse_spec(args.detector)
        cadence = None if args.cadence is None else parse_cadence(args.cadence)
        confirm = None if args.confirm is None else parse_confirm(args.confirm)
        if args.backfill and cadence is None:
            raise ValueError("--backfill needs --cadence (with every row evaluated, no row is skipped)")
    except ValueError as exc:
        print(f"evalstop replay: error: {exc}", file=sys.stderr)
        return 2
    try:
        with open(args.curves, newline="", encoding="utf-8-sig") as f:
            reader = csv.DictReader(f)
            if confirm is not None and CONFIRM_COLUMN not in (reader.fieldnames or ()):
                print(f"evalstop replay: error: --confirm needs a {CONFIRM_COLUMN!r} column (what a "
                      f"confirmation eval at that step returns); {args.curves} has none", file=sys.stderr)
                return 2
            check_columns(reader.fieldnames, detector)
            results = replay_rows(reader, detector, on_job=_progress_reporter(sys.stderr), cadence=cadence,
                                  confirm=confirm, backfill=args.backfill)
    except (OSError, CurvesError) as exc:
        print(f"evalstop replay: error: {args.curves}: {exc}", file=sys.stderr)
        return 1
    if not results:  # a header and no rows: the output is a header too (a pipeline may run empty)
        print(f"evalstop replay: warning: {args.curves} has no rows after the header; nothing replayed",
              file=sys.stderr)
    skipped = [r for r in results if r["n_invalid"]]
    if skipped:
        print(f"evalstop replay: warning: {sum(r['n_invalid'] for r in skipped)} NaN, inf or missing "
              f"score(s) in {len(skipped)} job(s) (first: {skipped[0]['job_id']!r}); the rule skipped them",
              file=sys.stderr)
    counted = cadence is not None or confirm is not None
    if args.out in (None, "-"):
        write_results(results, sys.stdout, counted, args.backfill)
        return 0
    try:
        with open(args.out, "w", newline="", encoding="utf-8") as out:
            write_results(results, out, counted, args.backfill)
    except OSError as exc:
        print(f"evalstop replay: error: {exc}", file=sys.stderr)
        return 1
    return 0


def _parse_step(text: str | None, where: str) -> int:
    text = (text or "").strip()
    try:
        return int(text)
    except ValueError:
        raise CurvesError(f"{where}: step must be an integer, got {text!r}") from None


def _parse_number(row: Row, column: str, where: str) -> float | None:
    text = (row.get(column) or "").strip()
    if not text:
        return None
    try:
        return float(text)
    except ValueError:
        raise CurvesError(f"{where}: {column} must be a number, got {text!r}") from None


def _parse_items(text: str | None, where: str) -> tuple[float, ...]:
    """The ``;``-separated per-prompt scores of one eval (an empty cell or no column: none)."""
    if not (text or "").strip():
        return ()
    items = []
    for part in (text or "").split(";"):
        try:
            items.append(float(part))
        except ValueError:
            raise CurvesError(f"{where}: items must be numbers joined by ';', got {part!r}") from None
    return tuple(items)


def _format_cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value) if isinstance(value, float) else str(value)


def _progress_reporter(stream: TextIO) -> Callable[[int, int], None] | None:
    if not stream.isatty():
        return None

    def report(done: int, total: int) -> None:
        if total >= PROGRESS_MIN_JOBS and (done % 100 == 0 or done == total):
            end = "\n" if done == total else ""
            print(f"\rreplayed {done}/{total} jobs", end=end, file=stream, flush=True)

    return report
