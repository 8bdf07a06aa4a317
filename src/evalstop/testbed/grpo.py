"""TRL GRPO jobs for the testbed (off by default: ``--grpo-share``).

A testbed job of kind ``grpo-proxy`` or ``grpo-gold`` is one run of
:func:`evalstop.workloads.trl_runs.run_grpo` (a one-layer GPT-2 policy from a character
tokenizer, ``trl.GRPOTrainer`` against the learned proxy reward, or against gold for the control),
shortened so that one job fits in well under a minute on a CPU core: ``GRPO_STEPS`` steps,
``GRPO_EVALS`` evals and a gold sample of ``GOLD_SAMPLES`` completions. The run's own eval
recorder measures the watched eval and the gold; a callback behind it hands each eval to the
job's ``report`` (checkpoint, remote post, event line), the same path as the numpy jobs. There is
no step pacing: the steps are real torch work, so these jobs' durations depend on the CPU's load.

Needs the ``hf`` extra (torch, transformers, trl, datasets).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

#: TrlConfig changes per kind (the bank's ``trl-proxy`` and ``control-trl-gold`` families).
GRPO_CONFIG: dict[str, dict[str, Any]] = {
    "grpo-proxy": {"lr": 2e-3},
    "grpo-gold": {"lr": 2e-3, "target": "gold"},
}
GRPO_STEPS = 40
GRPO_EVALS = 10
GOLD_SAMPLES = 256

#: ``report(step, score, gold, proxy, save)``: ``save(dir)`` writes the checkpoint into ``dir``.
Report = Callable[[int, float, float, float, Callable[[Path], None]], None]


def grpo_training(plan: dict[str, Any], report: Report) -> None:
    """Train the job's GRPO policy, calling ``report`` at each eval."""
    from transformers import TrainerCallback

    from ..workloads.trl_runs import TrlConfig, run_grpo

    class Reporter(TrainerCallback):
        recorder: Any = None  # the run's EvalRecorder, set by run_grpo before training

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            record = self.recorder.record
            if record["steps"] and record["steps"][-1] == state.global_step:
                model = kwargs["model"]
                report(
                    state.global_step,
                    record["scores"][-1],
                    record["gold"][-1],
                    record["proxy"][-1],
                    lambda out: model.save_pretrained(out),
                )

    config = TrlConfig().with_(
        **GRPO_CONFIG[plan["kind"]],
        n_steps=plan["n_steps"],
        n_evals=plan["n_evals"],
        gold_samples=GOLD_SAMPLES,
    )
    run_grpo(config, plan["seed"], callbacks=[Reporter()])
