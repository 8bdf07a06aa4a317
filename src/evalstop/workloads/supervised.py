"""Real supervised validation curves (shipped in ``evalstop/data``) as negative controls.

Each ``<model>/validation-<batch>.csv`` has columns ``progress,iteration,metric,...``. These
jobs do not reward-hack, so a stopping rule that fires on them is a false positive. The metric's
direction is per model (``evalstop/data/NOTICE.md``): lower is better for deepspeech2 (word error
rate) and yolov3 (a loss-like score), higher for the others. Scores are returned so that higher is
always better (the metric, negated where lower is better) and rescaled to [0, 1] by the curve's
own range (so an absolute threshold such as ``min_delta`` means the same share of the total gain
as on the bank's gold scale), and ``progress`` as a fraction of the curve's last progress value.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ..data import supervised_csvs
from ..detectors import Eval

LOWER_IS_BETTER = frozenset({"deepspeech2", "yolov3"})


@dataclass(frozen=True)
class SupervisedCurve:
    job_id: str
    model: str
    evals: tuple[Eval, ...]


def load_supervised(root: Path | None = None, min_evals: int = 3) -> list[SupervisedCurve]:
    """Every curve with at least ``min_evals`` rows (bert has only 2), sorted: the packaged curves
    when ``root`` is None, else every ``<model>/validation-*.csv`` under ``root``."""
    if root is None:
        files: Iterable[tuple[str, bytes]] = supervised_csvs()
    elif not root.is_dir():
        raise FileNotFoundError(f"supervised curves directory not found: {root}")
    else:
        paths = sorted(root.glob("*/validation-*.csv"))
        files = [(p.relative_to(root).as_posix(), p.read_bytes()) for p in paths]
    curves = []
    for name, content in files:
        model, stem = name.split("/")[0], Path(name).stem
        rows = list(csv.DictReader(io.StringIO(content.decode("utf-8-sig"))))
        if len(rows) >= min_evals:
            curves.append(_curve(model, stem, rows))
    return curves


def _curve(model: str, stem: str, rows: list[dict[str, str]]) -> SupervisedCurve:
    sign = -1.0 if model in LOWER_IS_BETTER else 1.0
    scores = [sign * _float(r["metric"]) for r in rows]
    finite = [s for s in scores if math.isfinite(s)]
    low, span = min(finite), (max(finite) - min(finite)) or 1.0
    last = max(float(r["progress"]) for r in rows) or 1.0
    evals = tuple(
        Eval(int(float(r["iteration"])), score=(s - low) / span, progress=float(r["progress"]) / last)
        for r, s in zip(rows, scores, strict=True)
    )
    return SupervisedCurve(f"{model}/{stem}", model, evals)


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return math.nan
