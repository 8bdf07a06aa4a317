"""EvalStopPruner in real (in-memory) Optuna studies."""

from __future__ import annotations

import contextlib
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

optuna = pytest.importorskip("optuna", reason="needs pip install -e '.[optuna]'")

from evalstop.detectors import Eval, KDeclines  # noqa: E402
from evalstop.integrations import EvalStopPruner  # noqa: E402

optuna.logging.set_verbosity(optuna.logging.WARNING)
NAN = math.nan

# (name, curve) -> the step at which the trial must be pruned (None: it completes)
CURVES: list[tuple[str, list[float], int | None]] = [
    ("rises", [0.1, 0.2, 0.3, 0.4, 0.5, 0.6], None),
    ("peaks then falls", [0.1, 0.3, 0.5, 0.4, 0.3, 0.2], 4),
    ("one dip then recovers", [0.1, 0.3, 0.2, 0.4, 0.5, 0.6], None),
    ("NaN between declines", [0.1, 0.5, 0.4, NAN, 0.3, 0.2], 4),
    ("NaN run", [0.1, NAN, NAN, NAN, NAN, 0.2], None),
    ("inf", [0.1, 0.5, math.inf, 0.6, 0.7, 0.8], None),
]


def run_study(pruner: Any, curves: list[list[float]], direction: str = "maximize") -> Any:
    def objective(trial: Any) -> float:
        values = curves[trial.number]
        for step, value in enumerate(values):
            trial.report(value, step)
            if trial.should_prune():
                raise optuna.TrialPruned()
        return max(v for v in values if math.isfinite(v))

    study = optuna.create_study(direction=direction, pruner=pruner)
    bad_values = any(not math.isfinite(v) for c in curves for v in c)
    with pytest.warns(UserWarning, match="not pruning") if bad_values else contextlib.nullcontext():
        study.optimize(objective, n_trials=len(curves))
    return study


def pruned_at(trial: Any) -> int | None:
    return trial.last_step if trial.state == optuna.trial.TrialState.PRUNED else None


def test_trials_are_pruned_at_the_detector_step() -> None:
    study = run_study(EvalStopPruner(KDeclines(k=2)), [c for _, c, _ in CURVES])
    got = {name: pruned_at(t) for (name, _, _), t in zip(CURVES, study.trials, strict=True)}
    assert got == {name: want for name, _, want in CURVES}
    for _, values, want in CURVES:  # the detector, run on its own, agrees
        verdict = KDeclines(k=2).evaluate([Eval(i, v) for i, v in enumerate(values)])
        assert verdict.stop_step == want


def test_mode_follows_the_study_direction() -> None:
    losses = [[1.0, 0.8, 0.6, 0.7, 0.9, 1.2], [1.0, 0.8, 0.6, 0.5, 0.4, 0.3]]
    study = run_study(EvalStopPruner("evalstop:k=2"), losses, direction="minimize")
    assert [pruned_at(t) for t in study.trials] == [4, None]
    pruner = EvalStopPruner("evalstop:k=2", mode="max")  # an explicit mode wins over the direction
    study = run_study(pruner, losses, direction="minimize")
    assert [pruned_at(t) for t in study.trials] == [2, 2]
    verdict = pruner.verdict(study, study.trials[1])
    assert (verdict.stop_step, verdict.best_step) == (2, 0)


def test_nan_latest_value_never_prunes_and_warns() -> None:
    study = optuna.create_study(direction="maximize")
    trial = study.ask()
    for step, value in enumerate([0.5, 0.4, 0.3]):
        trial.report(value, step)
    frozen = study._storage.get_trial(trial._trial_id)
    pruner = EvalStopPruner(KDeclines(k=2))
    assert pruner.prune(study, frozen)
    trial.report(NAN, 3)
    with pytest.warns(UserWarning, match="reported nan at step 3; not pruning"):
        assert not pruner.prune(study, study._storage.get_trial(trial._trial_id))


def test_wrapped_pruner_composes() -> None:
    always = optuna.pruners.ThresholdPruner(lower=10.0)  # prunes every finite value below 10
    study = run_study(EvalStopPruner(KDeclines(k=5), wrapped=always), [[0.1, 0.2, 0.3]])
    assert pruned_at(study.trials[0]) == 0


def test_bad_arguments() -> None:
    with pytest.raises(TypeError, match="'wrapped' parameter of EvalStopPruner"):
        EvalStopPruner(wrapped="median")
    with pytest.raises(ValueError, match="'mode' parameter of EvalStopPruner"):
        EvalStopPruner(mode="maximize")
    with pytest.raises(ValueError, match="Unknown detector"):
        EvalStopPruner("kdeclines")


def test_optuna_example_stops_runs_after_their_peak() -> None:
    example = Path(__file__).resolve().parents[2] / "examples" / "optuna_evalstop.py"
    proc = subprocess.run(
        [sys.executable, str(example), "--quick"], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads(proc.stdout.strip().splitlines()[-1])
    stopped = [r for r in rows if r["evalstop_stop_step"] is not None]
    assert stopped, proc.stdout
    for r in rows:
        assert r["evalstop_stop_step"] == r["stop_step"]  # stopped exactly where the detector fired
        assert r["best_step"] == r["best_by_detector"]
        if r["stop_step"] is not None:
            assert r["best_step"] < r["stop_step"] < r["steps"]
