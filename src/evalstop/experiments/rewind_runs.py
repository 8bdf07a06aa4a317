"""The training side of the rewind study: one seed's TRL GRPO runs.

Per seed, every arm trains the same tiny GRPO policy (``workloads.trl_runs``, the path of the
TRL bank) from the same seed against a learned proxy reward (``TrlConfig.proxy``: today's
linear reward model, or the ``learned`` one whose error grows with the distance from the
reference, ``workloads._learned_rm``), with the same recorder (a noisy
watched eval on 24 prompts, and a large gold eval on held-out prompts that no rule sees):

- ``base``: no intervention, all ``n_steps`` steps. The stop arm is read off it: the default rule
  replayed over its watched evals (what ``EvalStopCallback`` decides in a run, step for step).
- one run per correction: the same training with ``EvalStopCallback(on_detect=OnDetect("rewind",
  max_rewinds=1, correction=...))`` bound to the ``GRPOTrainer``. At the detection it rewinds in
  place (weights, optimizer, scheduler of the best checkpoint; the correction on ``beta`` or the
  learning rate) and trains on; a second detection stops it.

Up to the detection a rewind run repeats the base run exactly (same seeds, single-threaded CPU);
``prefix_same`` records whether its watched evals matched the base run's there.

torch, transformers and trl are imported here only (``pip install -e '.[hf]'``).
"""

from __future__ import annotations

import time
import warnings
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ..detectors import DEFAULT_SPEC, OnDetect
from ..workloads.rl_toy import ToyRun
from ..workloads.trl_runs import TrlConfig, run_grpo

#: The base run: the bank's ``trl-proxy`` family (lr 2e-3; hacks within a quarter of the run),
#: shortened, with a KL coefficient of 1e-3 (a reference model exists, so a rewind can raise it;
#: 1e-3 does not change the dynamics: the bank's runs at beta 0 hack the same way).
BASE = {"lr": 2e-3, "beta": 1e-3, "n_steps": 72, "n_evals": 24, "gold_samples": 128}
#: arm -> correction applied at the rewind: a stronger KL to the initial policy, a lower
#: learning rate, the reference reset (the KL anchor becomes the checkpoint rewound to) alone
#: and with the same KL coefficient as rewind-kl (so the two differ only in the anchor)
CORRECTIONS = {"rewind-kl": "kl_coef=0.5", "rewind-lr": "lr*=0.25", "rewind-ref": "ref=best",
               "rewind-ref-kl": "ref=best,kl_coef=0.5"}


def base_config(proxy: str) -> dict[str, Any]:
    """The base run's config for a proxy family (the linear one is ``BASE`` as shipped)."""
    return dict(BASE) if proxy == "linear" else {**BASE, "proxy": proxy}
#: Seeds of the study are children of ``SeedSequence(seed, spawn_key=(STUDY_KEY,))``.
STUDY_KEY = 230


@dataclass
class ArmRun:
    """One training run's record: every eval (steps are the trainer's global steps, so a rewound
    run's evals after the rewind have steps past the detection), and what the rule did."""

    steps: list[int]
    watched: list[float]
    gold: list[float]
    cpu_s: float
    log: list[dict[str, Any]] = field(default_factory=list)
    rewinds: list[dict[str, Any]] = field(default_factory=list)
    steps_trained: int = 0


def seed_sequence(study_seed: int, index: int) -> np.random.SeedSequence:
    return np.random.SeedSequence(study_seed, spawn_key=(STUDY_KEY, index))


def run_seed(study_seed: int, index: int, base: dict[str, Any] | None = None,
             corrections: dict[str, str] | None = None) -> dict[str, Any]:
    """Every run of seed ``index``: {"base": ArmRun, "<arm>": ArmRun, ...} as JSON values."""
    config = TrlConfig().with_(**(BASE if base is None else base))
    base_run = run_arm(config, seed_sequence(study_seed, index), None)
    out: dict[str, Any] = {"index": index, "base": asdict(base_run)}
    for arm, correction in (CORRECTIONS if corrections is None else corrections).items():
        policy = OnDetect("rewind", max_rewinds=1, correction=correction)
        run = run_arm(config, seed_sequence(study_seed, index), policy)
        out[arm] = asdict(run)
    return out


def run_arm(
    config: TrlConfig, seed: np.random.SeedSequence, policy: OnDetect | None, detector: str = DEFAULT_SPEC
) -> ArmRun:
    """One run: without a policy, no rule acts (the base run); with one, ``EvalStopCallback``
    watches the recorder's watched eval with ``detector`` and rewinds or stops the trainer."""
    from transformers import TrainerCallback

    from ..integrations.hf import EvalStopCallback

    watch = None if policy is None else EvalStopCallback("watched", detector, on_detect=policy)

    class Forward(TrainerCallback):
        """Hands each watched eval of the recorder to the EvalStopCallback, as an evaluation."""

        recorder: Any = None
        steps_trained = 0

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.steps_trained = int(state.global_step)
            record = self.recorder.record
            if watch is not None and record["steps"] and record["steps"][-1] == state.global_step:
                metrics = {"eval_watched": record["scores"][-1]}
                watch.on_evaluate(args, state, control, metrics=metrics, **kwargs)

    forward = Forward()
    start = time.process_time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the rewind's own report is kept in the record below
        toy: ToyRun = run_grpo(config, seed, callbacks=[forward],
                               on_trainer=None if watch is None else lambda trainer: _bind(watch, trainer))
    cpu_s = time.process_time() - start
    run = ArmRun(list(toy.steps), [float(s) for s in toy.scores], [float(g) for g in toy.true_gold], cpu_s,
                 steps_trained=forward.steps_trained)
    if watch is not None:
        monitor = watch.history.monitor  # type: ignore[union-attr]
        run.log, run.rewinds = monitor.log, _json_safe(watch.rewinds)
    return run


def _bind(watch: Any, trainer: Any) -> None:
    watch.bind(trainer)


def _json_safe(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in row.items() if isinstance(v, (int, float, str, bool, list, type(None)))}
            for row in rows]
