"""A tiny TRL GRPO run on CPU that logs its evals to TensorBoard, as a user's train.py would.

    python trl_grpo_train.py --output_dir DIR --config hacking|healthy [--max_steps N]

The policy, tokenizer and rewards are those of examples/trl_grpo_evalstop.py (nothing is
downloaded): ``hacking`` optimises the learned proxy reward (weights [1, 0]) and the gold reward,
logged as ``eval/rewards/gold/mean``, peaks and falls; ``healthy`` optimises the gold reward itself
(weights [0, 1]). Every checkpoint's weights are also copied to ``DIR.saved/step-N`` when saved,
so a test can check which one ``best/`` holds after the Trainer's rotation deleted it.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

from transformers import TrainerCallback
from trl import GRPOConfig, GRPOTrainer

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
from trl_grpo_evalstop import COMPLETION_LEN, tiny_grpo_setup

#: seconds each training step is padded to last at least this much longer (see PaceSteps)
STEP_PACE_S = 0.25


class CopyEachSave(TrainerCallback):
    def __init__(self, out: Path) -> None:
        self.out = out

    def on_save(self, args, state, control, **kwargs):  # type: ignore[no-untyped-def]
        src = Path(args.output_dir) / f"checkpoint-{state.global_step}" / "model.safetensors"
        (self.out / f"step-{state.global_step}").mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, self.out / f"step-{state.global_step}" / "model.safetensors")


class PaceSteps(TrainerCallback):
    """A real RL step takes seconds or more; this tiny one takes a fraction of a second, so with
    ``save_total_limit=2`` a checkpoint could be rotated away within one poll of the watcher.
    Pacing each step keeps a checkpoint's life (two save intervals) well above the poll."""

    def on_step_end(self, args, state, control, **kwargs):  # type: ignore[no-untyped-def]
        time.sleep(STEP_PACE_S)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--output_dir", required=True)
    parser.add_argument("--config", choices=("hacking", "healthy"), required=True)
    parser.add_argument("--max_steps", type=int, default=40)
    opts = parser.parse_args()
    setup = tiny_grpo_setup(n_eval=4)
    config = GRPOConfig(
        output_dir=opts.output_dir, max_steps=opts.max_steps, learning_rate=5e-3,
        lr_scheduler_type="constant",
        per_device_train_batch_size=8, per_device_eval_batch_size=8, num_generations=8,
        max_completion_length=COMPLETION_LEN, temperature=1.0, beta=0.0,
        reward_weights=[1.0, 0.0] if opts.config == "hacking" else [0.0, 1.0],
        logging_steps=5, eval_strategy="steps", eval_steps=5, save_strategy="steps", save_steps=5,
        save_total_limit=2, report_to=["tensorboard"], use_cpu=True, disable_tqdm=True, seed=0, bf16=False,
    )
    trainer = GRPOTrainer(model=setup.model, reward_funcs=[setup.proxy, setup.gold], args=config,
                          train_dataset=setup.train, eval_dataset=setup.evals,
                          processing_class=setup.tokenizer,
                          callbacks=[CopyEachSave(Path(opts.output_dir + ".saved")), PaceSteps()])
    trainer.train()
    print(f"trained to step {trainer.state.global_step}")


if __name__ == "__main__":
    main()
