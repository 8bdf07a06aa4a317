"""The standard error of a Trainer eval metric that is a mean over the eval set.

The HF ``Trainer`` reports ``eval_loss`` as the mean of the per-example losses (each batch's
mean loss repeated batch-size times), and nothing about its spread. Two ways to get one:

- ``BatchSpread`` wraps the trainer's ``prediction_step`` (it is installed by
  ``EvalStopCallback.bind(trainer)`` when the watched metric is an eval loss) and keeps each
  batch's mean loss and size during an evaluation. The eval loss is their size-weighted mean
  ``L = sum(n_i l_i) / N``; treating the batches as independent clusters of examples, its
  standard error is ``sqrt(k / (k - 1) * sum(n_i^2 (l_i - L)^2)) / N`` for ``k`` batches (the
  cluster-robust variance of a mean). With equal batches this is ``sd(l_i) / sqrt(k)``. It
  needs at least two batches (``None`` otherwise); non-finite batch losses are left out, as the
  Trainer leaves them out of the mean with ``logging_nan_inf_filter``.
- ``mean_and_stderr(name, values)`` is for ``compute_metrics``: given the per-example values of
  a metric that is their mean, it returns ``{name: mean, name + "_stderr": sd / sqrt(n)}``; the
  callback reads ``<metric>_stderr`` from the evaluation's metrics.

Both are estimates from the eval set alone; the rules use an eval's stderr as its noise sd
(``cusum``, ``noise-aware``), and behave as before for an eval without one.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any


class BatchSpread:
    """Per-batch mean eval losses of the current evaluation (see the module doc)."""

    def __init__(self) -> None:
        self.batches: list[tuple[float, int]] = []
        self._latest: float | None = None

    def install(self, trainer: Any) -> None:
        """Wrap ``trainer.prediction_step`` so that each eval batch's loss is recorded."""
        original = trainer.prediction_step

        def prediction_step(model: Any, inputs: Any, prediction_loss_only: bool, **kwargs: Any) -> Any:
            out = original(model, inputs, prediction_loss_only, **kwargs)
            loss = out[0]
            if loss is not None:
                self.batches.append((float(loss.detach().float().mean()), _batch_size(inputs)))
            return out

        trainer.prediction_step = prediction_step

    def take(self) -> float | None:
        """The standard error of the latest evaluation (None with fewer than two finite batches
        or a zero spread). The Trainer logs an evaluation's metrics and then reports them to
        ``on_evaluate``: both read the same estimate; the next evaluation's batches start afresh."""
        if self.batches:
            batches = [(loss, n) for loss, n in self.batches if math.isfinite(loss) and n > 0]
            self.batches = []
            self._latest = cluster_stderr(batches)
        return self._latest


def cluster_stderr(batches: list[tuple[float, int]]) -> float | None:
    """Standard error of the size-weighted mean of ``(mean, size)`` clusters (module doc)."""
    k = len(batches)
    if k < 2:
        return None
    total = sum(n for _, n in batches)
    mean = math.fsum(n * x for x, n in batches) / total
    spread = math.fsum((n * (x - mean)) ** 2 for x, n in batches)
    stderr = math.sqrt(k / (k - 1) * spread) / total
    return stderr if math.isfinite(stderr) and stderr > 0 else None


def mean_and_stderr(name: str, values: Iterable[float]) -> dict[str, float]:
    """``{name: mean, name_stderr: sd / sqrt(n)}`` of per-example ``values`` (finite ones), for a
    ``compute_metrics`` whose metric is a mean over the eval set. No stderr with fewer than two."""
    xs = [float(v) for v in values]
    xs = [x for x in xs if math.isfinite(x)]
    if not xs:
        raise ValueError(f"mean_and_stderr: no finite value for metric {name!r}.")
    mean = math.fsum(xs) / len(xs)
    out = {name: mean}
    if len(xs) > 1:
        sd = math.sqrt(math.fsum((x - mean) ** 2 for x in xs) / (len(xs) - 1))
        out[f"{name}_stderr"] = sd / math.sqrt(len(xs))
    return out


def _batch_size(inputs: Any) -> int:
    """The number of examples in a batch: the first dimension of its first tensor."""
    values = inputs.values() if isinstance(inputs, dict) or hasattr(inputs, "values") else [inputs]
    for value in values:
        shape = getattr(value, "shape", None)
        if shape:
            return int(shape[0])
    return 1
