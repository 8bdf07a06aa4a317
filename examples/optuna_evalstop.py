"""EvalStop as an Optuna pruner: trials whose gold score peaks and falls are pruned.

The objective is a toy RLHF run in the form Gao et al. (2023) measured: gradient ascent on a
linear proxy reward moves the policy a distance d per step; the gold score is d (alpha - beta d)
plus eval noise, so it peaks and falls. Optuna tunes the learning rate and the number of steps;
the run reports the gold score at every step and asks ``trial.should_prune()``, which is True
once EvalStopPruner's rule has fired. Here the run then stops and delivers its best checkpoint:
the trial completes with its best gold score as its value (EvalStop's "stop, keep the best").
Raise ``optuna.TrialPruned()`` instead to discard such trials (the usual pruning).

    python examples/optuna_evalstop.py [--quick] [--trials N]

The three lines a user adds::

    from evalstop.integrations import EvalStopPruner
    study = optuna.create_study(direction="maximize", pruner=EvalStopPruner("evalstop:k=2"))
    trial.report(gold, step)
    if trial.should_prune(): break  # or raise optuna.TrialPruned()
"""

from __future__ import annotations

import argparse
import json
import math

import numpy as np
import optuna

from evalstop.integrations import EvalStopPruner

ALPHA, BETA, NOISE = 0.38, 0.15, 0.005


def objective(trial: optuna.Trial) -> float:
    lr = trial.suggest_float("lr", 0.01, 1.0, log=True)
    steps = trial.suggest_int("steps", 10, 40)
    rng = np.random.default_rng(trial.number)
    best, best_step, distance = -math.inf, 0, 0.0
    for step in range(1, steps + 1):
        distance += lr
        gold = distance * (ALPHA - BETA * distance) + rng.normal(0.0, NOISE)
        if gold > best:
            best, best_step = gold, step  # a real run would save its checkpoint here
        trial.report(gold, step)
        if trial.should_prune():
            trial.set_user_attr("evalstop_stop_step", step)
            break
    trial.set_user_attr("best_step", best_step)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smaller run (the tests use it)")
    parser.add_argument("--trials", type=int, default=None)
    parser.add_argument("--detector", default="evalstop:k=2")
    opts = parser.parse_args()
    n_trials = opts.trials or (12 if opts.quick else 40)

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    pruner = EvalStopPruner(opts.detector)
    sampler = optuna.samplers.TPESampler(seed=0)
    study = optuna.create_study(direction="maximize", pruner=pruner, sampler=sampler)
    study.optimize(objective, n_trials=n_trials)

    rows = []
    for t in study.trials:
        verdict = pruner.verdict(study, t)
        rows.append({
            "number": t.number, "steps": t.params["steps"], "last_step": t.last_step, "value": t.value,
            "evalstop_stop_step": t.user_attrs.get("evalstop_stop_step"), "stop_step": verdict.stop_step,
            "best_step": t.user_attrs["best_step"], "best_by_detector": verdict.best_step,
        })
    stopped = [r for r in rows if r["evalstop_stop_step"] is not None]
    print(f"{len(stopped)} of {len(rows)} trials stopped early by EvalStop; "
          f"best value {study.best_value:.3f} with {study.best_params}")
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
