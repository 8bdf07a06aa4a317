"""Fake trainers that log and checkpoint exactly as veRL, OpenRLHF and NeMo-RL do (snapshots of
2026; file and line of each in docs/integrations.md), with the real writer library
(``torch.utils.tensorboard.SummaryWriter``, which all three use) and no model: each step's
"weights" file holds the step, so a test can tell which checkpoint it holds.

    python fake_trainers.py FRAMEWORK ROOT CURVE [--step-s S]

``CURVE`` is the eval score at each eval, comma-separated; evals and saves happen every step
(test_freq = save_freq = 1 and the like). Rotation keeps the latest 2 checkpoints, as each
framework's own rule does with that setting. Run by tests/watch/test_frameworks.py.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

from torch.utils.tensorboard import SummaryWriter

KEEP = 2


def weights(path: Path, step: int) -> None:
    path.mkdir(parents=True, exist_ok=True)
    (path / "model.bin").write_text(f"weights at step {step}\n")


def verl(root: Path, curve: list[float], pause: float) -> None:
    """ray_trainer.fit: validate -> _save_checkpoint -> logger.log(metrics, step); the actor's
    checkpoint manager keeps max_actor_ckpt_to_keep actor dirs (register_checkpoint)."""
    tb = SummaryWriter(os.environ.get("TENSORBOARD_DIR", str(root / "tensorboard_log/proj/exp")))
    local_dir = root / "checkpoints/proj/exp"  # trainer.default_local_dir
    saved: list[Path] = []  # checkpoint_manager.previous_saved_paths
    for global_steps, score in enumerate(curve, start=1):
        metrics = {"actor/pg_loss": 0.1, "critic/score/mean": 0.5 + global_steps}
        metrics["val-core/openai/gsm8k/acc/mean@1"] = score  # _val_metrics_update
        metrics["val-aux/openai/gsm8k/reward/mean@1"] = score
        step_dir = local_dir / f"global_step_{global_steps}"
        actor = step_dir / "actor"
        if len(saved) >= KEEP:  # ensure_checkpoint_capacity(max_ckpt_to_keep)
            for old in saved[: len(saved) - KEEP + 1]:
                shutil.rmtree(old, ignore_errors=True)
            saved = saved[len(saved) - KEEP + 1:]
        weights(actor, global_steps)
        saved.append(actor)  # register_checkpoint
        (step_dir / "data.pt").write_bytes(b"dataloader state")
        (local_dir / "latest_checkpointed_iteration.txt").write_text(str(global_steps))
        for key, value in metrics.items():  # _TensorboardAdapter.log
            tb.add_scalar(key, value, global_steps)
        tb.flush()
        time.sleep(pause)
    tb.close()


def openrlhf(root: Path, curve: list[float], pause: float) -> None:
    """ppo_trainer.fit: save_logs_and_checkpoints (train/ scalars, save_ckpt global_step{N} with
    max_num rotation: no-metric first, then worst metric, then oldest) -> evaluate (eval/ scalars)
    -> save_best_checkpoint (best_global_step{N}, older best* removed)."""
    tb = SummaryWriter(log_dir=str(root / "logs/tensorboard" / "run"))  # tensorboard_dir/run_name
    save_dir = root / "ckpt/_actor"
    latest, best = None, float("-inf")
    for global_step, score in enumerate(curve, start=1):
        tb.add_scalar("train/policy_loss", 0.1, global_step)
        _openrlhf_save(save_dir, f"global_step{global_step}", global_step, latest)
        tb.add_scalar("eval/eval_gsm8k_pass1", score, global_step)  # log_eval("eval_gsm8k_pass1")
        tb.add_scalar("eval/eval_num_samples", 8.0, global_step)
        tb.flush()
        latest = score
        if score > best:
            best = score
            _openrlhf_save(save_dir, f"best_global_step{global_step}", global_step, score)
        time.sleep(pause)
    tb.close()


def _openrlhf_save(save_dir: Path, tag: str, step: int, metric: float | None) -> None:
    save_dir.mkdir(parents=True, exist_ok=True)
    is_best = tag.startswith("best")
    if is_best:
        for d in save_dir.iterdir():
            if d.name.startswith("best") and d.name != tag and d.is_dir():
                shutil.rmtree(d)
    while not is_best:
        regular = [d for d in save_dir.iterdir() if d.is_dir() and not d.name.startswith("best")]
        if len(regular) - KEEP + 1 <= 0:
            break
        shutil.rmtree(min(regular, key=_eviction_order))
    weights(save_dir / tag, step)  # model.save_checkpoint(save_dir, tag=tag, save_latest=True)
    (save_dir / "latest").write_text(tag)
    (save_dir / tag / "metric.json").write_text(json.dumps({"metric_key": "eval_gsm8k_pass1",
                                                             "metric_value": metric}))


def _eviction_order(d: Path) -> tuple[bool, float, float]:
    """No metric first, then the worst metric, then the oldest (DeepspeedStrategy.save_ckpt)."""
    path = d / "metric.json"
    m = json.loads(path.read_text())["metric_value"] if path.exists() else None
    return (m is not None, m if m is not None else float("-inf"), d.stat().st_mtime)


def nemo_rl(root: Path, curve: list[float], pause: float) -> None:
    """grpo_train: validate -> log_metrics(prefix="validation") -> init_tmp_checkpoint
    (tmp_step_N) -> save -> finalize (rename to step_N, remove_old_checkpoints: keep_top_k=2,
    metric_name None: the most recent 2, the latest always protected)."""
    tb = SummaryWriter(log_dir=str(root / "logs/exp_001/tensorboard"))
    ckpt_dir = root / "results/grpo"
    for step, score in enumerate(curve, start=1):
        tb.add_scalar("validation/accuracy", score, step)
        tb.add_scalar("validation/avg_length", 100.0, step)
        tb.add_scalar("train/loss", 0.1, step)
        tb.flush()
        tmp = ckpt_dir / f"tmp_step_{step}"
        tmp.mkdir(parents=True)
        (tmp / "training_info.json").write_text(json.dumps({"step": step, "val:accuracy": score}))
        time.sleep(pause / 2)  # the policy's weights take a while to write
        weights(tmp / "policy" / "weights", step)
        os.rename(tmp, ckpt_dir / f"step_{step}")
        history = sorted(int(p.name.split("_")[1]) for p in ckpt_dir.glob("step_*"))
        for old in history[:-KEEP]:
            shutil.rmtree(ckpt_dir / f"step_{old}")
        time.sleep(pause / 2)
    tb.close()


FRAMEWORKS = {"verl": verl, "openrlhf": openrlhf, "nemo-rl": nemo_rl}

if __name__ == "__main__":
    name, root, curve = sys.argv[1], Path(sys.argv[2]), [float(x) for x in sys.argv[3].split(",")]
    step_s = float(sys.argv[sys.argv.index("--step-s") + 1]) if "--step-s" in sys.argv else 0.3
    FRAMEWORKS[name](root, curve, step_s)
    print(f"{name}: trained {len(curve)} steps")
