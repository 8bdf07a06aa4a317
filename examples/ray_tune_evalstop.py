"""EvalStop in a Ray Tune sweep: trials whose gold score peaks and falls are stopped early.

The trainable is a toy RLHF run in the form Gao et al. (2023) measured: gradient ascent on a
linear proxy reward moves the policy a distance d; the gold score is d (alpha - beta d) plus
eval noise, so it peaks and falls. Larger learning rates reach the peak sooner. Each report
carries a checkpoint; ``best_checkpoint_config`` keeps only the best one.

    python examples/ray_tune_evalstop.py [--quick] [--out DIR] [--how stopper|fifo|asha]

The three lines a user adds::

    from evalstop.integrations import EvalStopScheduler, best_checkpoint_config
    tune_config = tune.TuneConfig(scheduler=EvalStopScheduler(ASHAScheduler(), metric="gold", mode="max"))
    run_config = tune.RunConfig(checkpoint_config=best_checkpoint_config("gold", "max"))
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import ray
from ray import tune
from ray.tune.schedulers import ASHAScheduler, FIFOScheduler

from evalstop.integrations import EvalStopScheduler, EvalStopStopper, best_checkpoint_config

ALPHA, BETA, NOISE = 0.38, 0.15, 0.005


def train(config: dict[str, Any]) -> None:
    rng = np.random.default_rng(config["seed"])
    distance = 0.0
    for _ in range(config["iterations"]):
        distance += config["lr"]  # the proxy reward is linear: ascent moves at a constant speed
        gold = distance * (ALPHA - BETA * distance) + rng.normal(0.0, NOISE)
        with tempfile.TemporaryDirectory() as d:
            Path(d, "policy.json").write_text(json.dumps({"distance": distance, "gold": gold}))
            tune.report({"gold": gold, "proxy": distance}, checkpoint=tune.Checkpoint.from_directory(d))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smaller run (the tests use it)")
    parser.add_argument("--out", default=os.environ.get("EVALSTOP_EXAMPLE_OUT"), help="output directory")
    parser.add_argument("--how", choices=("stopper", "fifo", "asha"), default="asha")
    parser.add_argument("--detector", default="evalstop:k=2")
    parser.add_argument("--ray-address", help="an existing Ray cluster, HOST:PORT of its GCS (default: "
                        "start a local Ray for this run)")
    opts = parser.parse_args()
    out = Path(opts.out or tempfile.mkdtemp(prefix="evalstop-tune-")).resolve()
    iterations = 15 if opts.quick else 30
    lrs = [0.1, 0.4, 0.8] if opts.quick else [0.05, 0.1, 0.2, 0.4, 0.8]

    ray_temp = None if opts.ray_address else tempfile.mkdtemp(prefix="esray", dir="/tmp")  # short path
    if opts.ray_address:
        ray.init(address=opts.ray_address, log_to_driver=False)
    else:
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
                 _temp_dir=ray_temp)
    stop, scheduler = None, None
    if opts.how == "stopper":
        stop = EvalStopStopper("gold", "max", opts.detector)
    else:
        base = FIFOScheduler() if opts.how == "fifo" else ASHAScheduler(max_t=iterations, grace_period=5)
        scheduler = EvalStopScheduler(base, metric="gold", mode="max", detector=opts.detector)
    tuner = tune.Tuner(
        train,
        param_space={"lr": tune.grid_search(lrs), "seed": 0, "iterations": iterations},
        tune_config=tune.TuneConfig(scheduler=scheduler),
        run_config=tune.RunConfig(storage_path=str(out), stop=stop, verbose=0,
                                  checkpoint_config=best_checkpoint_config("gold", "max")),
    )
    results = tuner.fit()
    verdicts = (stop or scheduler).verdicts  # type: ignore[union-attr]
    rows = []
    for result in results:
        best = result.get_best_checkpoint("gold", "max")
        with best.as_directory() as d:
            policy = json.loads(Path(d, "policy.json").read_text())
        verdict = verdicts[result.metrics["trial_id"]]
        rows.append({
            "lr": result.config["lr"], "iterations_run": result.metrics["training_iteration"],
            "stopped_by_evalstop": verdict.stopped, "stop_step": verdict.stop_step,
            "best_step": verdict.best_step, "best_checkpoint_gold": round(policy["gold"], 4),
            "best_checkpoint": best.path,
        })
        print(f"lr={rows[-1]['lr']}: ran {rows[-1]['iterations_run']} iterations, {verdict.reason}; "
              f"best iteration {verdict.best_step}, kept checkpoint gold={policy['gold']:.3f}")
    ray.shutdown()
    if ray_temp is not None:  # the local Ray this run started (its socket paths need a short dir)
        shutil.rmtree(ray_temp, ignore_errors=True)
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
