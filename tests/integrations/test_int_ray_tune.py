"""EvalStopStopper and EvalStopScheduler on a real local Ray instance and a real Tuner."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ray = pytest.importorskip("ray", reason="needs pip install -e '.[tune]'")
tune = pytest.importorskip("ray.tune", reason="needs pip install -e '.[tune]'")

from ray.tune.schedulers import ASHAScheduler, FIFOScheduler, TrialScheduler  # noqa: E402

from evalstop.detectors import Eval, KDeclines  # noqa: E402
from evalstop.integrations import EvalStopScheduler, EvalStopStopper  # noqa: E402
from evalstop.integrations.ray_tune import best_checkpoint_config  # noqa: E402
from evalstop.testbed.cluster import Proc  # noqa: E402
from evalstop.testbed.ray_head import head_env, private_head  # noqa: E402

N_ITERS = 12


def curve(iteration: int, peak: int) -> float:
    """Rises to ``peak`` then falls; a NaN at iteration 3 (a broken eval) must not matter."""
    if iteration == 3:
        return math.nan
    return iteration / peak if iteration <= peak else 1.0 - 0.1 * (iteration - peak)


def trainable(config: dict[str, Any]) -> None:
    for it in range(1, N_ITERS + 1):
        with tempfile.TemporaryDirectory() as d:
            Path(d, "state.json").write_text(json.dumps({"iteration": it}))
            tune.report({"gold": curve(it, config["peak"])}, checkpoint=tune.Checkpoint.from_directory(d))


@pytest.fixture(scope="module")
def ray_head() -> Iterator[Proc]:
    """The tests' one Ray head (evalstop.testbed.ray_head): ready once a job has run on it, on a
    loaded machine too (issue 19: ``ray.init(address="local")`` gave up there)."""
    # no token: this process is the driver, and imported ray first
    with private_head("evs-tu-", 2, token_auth=False) as head:
        yield head


@pytest.fixture(scope="module")
def local_ray(ray_head: Proc) -> Iterator[None]:
    # Ray workers cannot import this test module by name: ship its functions by value.
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    if ray.is_initialized():  # another test module left one running: use it
        yield
        return
    ray.init(address=ray_head.info["gcs"], log_to_driver=False)
    yield
    ray.shutdown()


def expected(peak: int) -> Any:
    return KDeclines(k=2).evaluate([Eval(it, curve(it, peak)) for it in range(1, N_ITERS + 1)])


def fit(tmp_path: Path, **kwargs: Any) -> Any:
    run_config = tune.RunConfig(
        storage_path=str(tmp_path), checkpoint_config=best_checkpoint_config("gold", "max"),
        verbose=0, stop=kwargs.pop("stop", None),
    )
    tuner = tune.Tuner(
        trainable, param_space={"peak": tune.grid_search([5, 100])},
        tune_config=tune.TuneConfig(**kwargs), run_config=run_config,
    )
    return tuner.fit()


def check_results(results: Any) -> None:
    assert expected(5).stop_step == 7 and expected(5).best_step == 5 and not expected(100).stopped
    by_peak = {r.config["peak"]: r for r in results}
    assert by_peak[5].metrics["training_iteration"] == 7  # stopped at the detector's step
    assert by_peak[100].metrics["training_iteration"] == N_ITERS  # the healthy trial ran to the end
    for peak, want in ((5, 5), (100, N_ITERS)):
        best = by_peak[peak].get_best_checkpoint("gold", "max")
        with best.as_directory() as d:
            assert json.loads(Path(d, "state.json").read_text())["iteration"] == want
        assert len(by_peak[peak].best_checkpoints) == 1  # num_to_keep=1: only the best is left


def test_stopper_stops_trials_at_detector_step(local_ray: None, tmp_path: Path) -> None:
    stopper = EvalStopStopper("gold", "max", KDeclines(k=2))
    results = fit(tmp_path, stop=stopper)
    assert not results.errors
    check_results(results)


@pytest.mark.parametrize("base", [FIFOScheduler, lambda: ASHAScheduler(max_t=100, grace_period=100)])
def test_scheduler_wraps_a_base_scheduler(local_ray: None, tmp_path: Path, base: Any) -> None:
    scheduler = EvalStopScheduler(base(), detector="evalstop:k=2")
    results = fit(tmp_path, scheduler=scheduler, metric="gold", mode="max")
    assert not results.errors
    check_results(results)


class Recorder(TrialScheduler):  # type: ignore[misc]
    """A base scheduler that records the hooks it receives and always says CONTINUE."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []
        self.decision = str(TrialScheduler.CONTINUE)

    def set_search_properties(self, metric: Any, mode: Any, **spec: Any) -> bool:
        self.calls.append(f"props:{metric}:{mode}")
        return True

    def _record(self, name: str) -> str:
        self.calls.append(name)
        return self.decision

    def on_trial_add(self, *args: Any) -> None:
        self._record("on_trial_add")

    def on_trial_result(self, *args: Any) -> str:
        return self._record("on_trial_result")

    def on_trial_complete(self, *args: Any) -> None:
        self._record("on_trial_complete")

    def on_trial_error(self, *args: Any) -> None:
        self._record("on_trial_error")

    def on_trial_remove(self, *args: Any) -> None:
        self._record("on_trial_remove")

    def choose_trial_to_run(self, *args: Any) -> None:
        self._record("choose_trial_to_run")


class FakeTrial:
    def __init__(self, trial_id: str) -> None:
        self.trial_id = trial_id


def test_scheduler_forwards_every_hook_and_acts_only_on_results() -> None:
    base = Recorder()
    scheduler = EvalStopScheduler(base, metric="gold", mode="max", detector=KDeclines(k=1))
    trial = FakeTrial("t1")
    scheduler.on_trial_add(None, trial)
    decisions = [scheduler.on_trial_result(None, trial, {"gold": g, "training_iteration": i})
                 for i, g in enumerate([0.1, 0.5, math.nan, 0.4], start=1)]
    scheduler.on_trial_complete(None, trial, {})
    scheduler.on_trial_error(None, trial)
    scheduler.on_trial_remove(None, trial)
    scheduler.choose_trial_to_run(None)
    assert decisions == ["CONTINUE", "CONTINUE", "CONTINUE", "STOP"]
    assert base.calls == ["props:gold:max", "on_trial_add", *["on_trial_result"] * 4, "on_trial_complete",
                          "on_trial_error", "on_trial_remove", "choose_trial_to_run"]
    verdict = scheduler.verdicts["t1"]
    assert (verdict.stop_step, verdict.best_step, verdict.n_invalid) == (4, 2, 1)


def test_base_decisions_pass_through_until_the_rule_fires() -> None:
    base = Recorder()
    base.decision = str(TrialScheduler.PAUSE)
    scheduler = EvalStopScheduler(base, metric="loss", mode="min", detector="evalstop:k=1")
    trial = FakeTrial("t1")
    decisions = [scheduler.on_trial_result(None, trial, {"loss": v, "training_iteration": i})
                 for i, v in enumerate([1.0, 0.8, 0.9], start=1)]
    assert decisions == ["PAUSE", "PAUSE", "STOP"]
    assert scheduler.detector == KDeclines(k=1, mode="min")


def test_bad_configuration() -> None:
    with pytest.raises(TypeError, match="'base' parameter of EvalStopScheduler"):
        EvalStopScheduler(object())
    with pytest.raises(ValueError, match="already has its own"):
        EvalStopScheduler(ASHAScheduler(metric="a", mode="max"), metric="gold", mode="max")
    with pytest.raises(ValueError, match="has no metric"):
        EvalStopScheduler().on_trial_add(None, FakeTrial("t"))
    with pytest.raises(ValueError, match="'mode' parameter of EvalStopStopper"):
        EvalStopStopper("gold", "up")
    with pytest.raises(ValueError, match="'num_to_keep' parameter"):
        best_checkpoint_config("gold", "max", num_to_keep=0)


@pytest.mark.slow
def test_ray_tune_example_keeps_each_trials_best_checkpoint(ray_head: Proc, tmp_path: Path) -> None:
    example = Path(__file__).resolve().parents[2] / "examples" / "ray_tune_evalstop.py"
    proc = subprocess.run(
        [sys.executable, str(example), "--quick", "--out", str(tmp_path),
         "--ray-address", ray_head.info["gcs"]],
        capture_output=True, text=True, timeout=600, env=head_env(ray_head),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads(proc.stdout.strip().splitlines()[-1])
    assert any(r["stopped_by_evalstop"] for r in rows), proc.stdout
    for r in rows:
        if r["stopped_by_evalstop"]:
            assert r["iterations_run"] == r["stop_step"]
        # Tune numbers checkpoints from 0: the kept one is the detector's best iteration
        assert Path(r["best_checkpoint"]).name == f"checkpoint_{r['best_step'] - 1:06d}"
