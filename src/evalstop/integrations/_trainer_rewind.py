"""Rewind a Hugging Face Trainer (or a TRL trainer) in place to a saved checkpoint.

``check_correction`` (at train begin) and ``check_checkpoint`` (at the detection) say, before
anything changes, why a rewind cannot be done: a ``kl_coef`` correction on a trainer without a
KL coefficient, or on a TRL trainer built with ``beta=0`` (it has no reference model to stay
near); a ``ref=best`` correction on a trainer without a reference model of its own (no
``ref_model``, ``beta=0``, or PEFT, whose reference is the base model with the adapters off); an
``lr`` correction without an optimizer; no checkpoint saved at the best eval.
``rewind_in_place`` then loads the
checkpoint's weights into the live model, its optimizer and scheduler state where the checkpoint
has them, and applies the correction: ``kl_coef`` sets the trainer's ``beta`` (TRL's GRPO, RLOO,
DPO trainers read ``self.beta`` at every step), ``ref=best`` loads the same checkpoint into the
trainer's reference model (``ref_model``: the KL anchor becomes the checkpoint the run rewinds
to), ``lr`` the learning rate of every optimizer
parameter group and the scheduler's base rates (a scheduler recomputes the rate from them at
each step). Training then simply continues: the Trainer's step counter keeps counting (so
``max_steps`` bounds the steps trained, the discarded ones included) and later checkpoints keep
their ``checkpoint-<step>`` names.
"""

from __future__ import annotations

import json
import os
from typing import Any

from ..detectors import Correction
from ._common import missing_extra

try:
    import torch
    from safetensors.torch import load_file
except ImportError as exc:  # pragma: no cover - exercised without the hf extra
    raise missing_extra("torch", "EvalStopCallback's rewind") from exc

WEIGHTS = "model.safetensors"
WEIGHTS_INDEX = "model.safetensors.index.json"
WEIGHTS_BIN = "pytorch_model.bin"
OPTIMIZER = "optimizer.pt"
SCHEDULER = "scheduler.pt"


class RewindRefused(ValueError):
    """A rewind that cannot be done; the message says why and what to change."""


def check_checkpoint(output_dir: str | None, step: int | None) -> str:
    """The best checkpoint's directory; raise RewindRefused if it was never saved."""
    if step is None:
        raise RewindRefused("EvalStopCallback cannot rewind: the rule fired before any valid eval, so "
                            "there is no best checkpoint to go back to.")
    checkpoint = os.path.join(output_dir or "", f"checkpoint-{step}")
    if not output_dir or not _has_weights(checkpoint):
        raise RewindRefused(
            f"EvalStopCallback cannot rewind: no checkpoint was saved at the best eval (step {step}; "
            f"looked in {checkpoint!r}). Set TrainingArguments.output_dir and keep the checkpoint."
        )
    return checkpoint


def check_correction(correction: Correction, trainer: Any) -> None:
    """Raise RewindRefused if ``correction`` cannot be applied to ``trainer`` (None: not bound)."""
    if correction.ref is not None:
        _check_reference(trainer)
    kl = correction.get("kl_coef")
    if kl is not None:
        if trainer is None:
            raise RewindRefused(
                "EvalStopCallback cannot apply 'kl_coef': it needs the trainer. Add the callback with "
                "callback.bind(trainer) instead of trainer.add_callback(callback)."
            )
        if not isinstance(getattr(trainer, "beta", None), (int, float)):
            raise RewindRefused(
                f"EvalStopCallback cannot apply 'kl_coef': {type(trainer).__name__} has no KL coefficient "
                f"(no 'beta'; TRL's GRPO, RLOO and DPO trainers have one). Correct 'lr' only."
            )
        if trainer.beta == 0.0 and "ref_model" in vars(trainer) and trainer.ref_model is None \
                and kl.apply(0.0) > 0.0 and not _is_peft(trainer):
            raise RewindRefused(
                f"EvalStopCallback cannot apply {kl}: {type(trainer).__name__} was built with beta=0.0, so "
                f"it has no reference model to stay near. Start it with a small beta > 0 (e.g. 0.001)."
            )
        if kl.op == "*=" and trainer.beta == 0.0:
            raise RewindRefused(f"EvalStopCallback cannot apply {kl}: beta is 0.0, and scaling it keeps "
                                f"it 0. Set it instead (kl_coef=0.05).")


def _check_reference(trainer: Any) -> None:
    if trainer is None:
        raise RewindRefused("EvalStopCallback cannot apply ref=best: it needs the trainer. Add the callback "
                            "with callback.bind(trainer) instead of trainer.add_callback(callback).")
    name = type(trainer).__name__
    if _is_peft(trainer):
        raise RewindRefused(f"EvalStopCallback cannot apply ref=best: {name} trains a PEFT model, whose "
                            f"reference is the base model with the adapters off. Correct kl_coef or lr.")
    if getattr(getattr(trainer, "args", None), "precompute_ref_log_probs", False):
        raise RewindRefused(f"EvalStopCallback cannot apply ref=best: {name} precomputed the reference "
                            f"model's log-probabilities (precompute_ref_log_probs=True), so a new reference "
                            f"would not be used. Train without it, or correct kl_coef or lr.")
    if getattr(trainer, "ref_model", None) is None:
        built = f" was built with beta={trainer.beta}, so it" if getattr(trainer, "beta", None) == 0.0 else ""
        raise RewindRefused(f"EvalStopCallback cannot apply ref=best: {name}{built} has no reference model "
                            f"(no 'ref_model'). Start a KL-regularised trainer with a small beta > 0.")


def rewind_in_place(
    checkpoint: str, correction: Correction, model: Any, optimizer: Any, scheduler: Any, trainer: Any
) -> dict[str, Any]:
    """Load ``checkpoint`` into the live training objects and apply ``correction``; return what
    was done (JSON values)."""
    if correction.get("lr") is not None and optimizer is None:
        raise RewindRefused("EvalStopCallback cannot apply 'lr': the Trainer passed no optimizer to the "
                            "callback.")
    _load_weights(model, checkpoint)
    done: dict[str, Any] = {"checkpoint": checkpoint}
    done["optimizer"] = _load_state(optimizer, os.path.join(checkpoint, OPTIMIZER))
    done["scheduler"] = _load_state(scheduler, os.path.join(checkpoint, SCHEDULER))
    if correction.ref is not None:
        _load_weights(trainer.ref_model, checkpoint)
        done["ref"] = checkpoint  # the checkpoint the reference model now holds
    kl, lr = correction.get("kl_coef"), correction.get("lr")
    if kl is not None:
        before = float(trainer.beta)
        trainer.beta = kl.apply(before)
        if hasattr(getattr(trainer, "args", None), "beta"):
            trainer.args.beta = trainer.beta
        done["kl_coef"] = [before, trainer.beta]
    if lr is not None:
        done["lr"] = _scale_lr(optimizer, scheduler, lr.apply)
    return done


def _has_weights(folder: str) -> bool:
    return any(os.path.isfile(os.path.join(folder, name)) for name in (WEIGHTS, WEIGHTS_INDEX, WEIGHTS_BIN))


def _is_peft(trainer: Any) -> bool:
    return hasattr(getattr(trainer, "model", None), "peft_config")


def _load_weights(model: Any, folder: str) -> None:
    """Copy the checkpoint's tensors into ``model``; weights tied to a loaded one may be absent."""
    if os.path.isfile(os.path.join(folder, WEIGHTS)):
        saved = load_file(os.path.join(folder, WEIGHTS))
    elif os.path.isfile(os.path.join(folder, WEIGHTS_INDEX)):
        with open(os.path.join(folder, WEIGHTS_INDEX), encoding="utf-8") as f:
            shards = sorted(set(json.load(f)["weight_map"].values()))
        saved = {k: v for shard in shards for k, v in load_file(os.path.join(folder, shard)).items()}
    else:
        saved = torch.load(os.path.join(folder, WEIGHTS_BIN), map_location="cpu", weights_only=True)
    unwrapped = getattr(model, "module", model)
    params = unwrapped.state_dict()
    shared = {params[k].data_ptr() for k in saved if k in params}
    missing = [k for k in params if k not in saved and params[k].data_ptr() not in shared]  # tied: fine
    unexpected = [k for k in saved if k not in params]
    if missing or unexpected:  # checked before loading anything: a refused rewind changes nothing
        raise RewindRefused(f"EvalStopCallback cannot rewind to {folder}: its weights do not fit the model "
                            f"(missing {missing[:5]}, unexpected {unexpected[:5]}).")
    unwrapped.load_state_dict(saved, strict=False)


def _load_state(obj: Any, path: str) -> bool:
    """Load ``obj``'s state dict from ``path`` if both exist; whether it was loaded."""
    if obj is None or not os.path.isfile(path):
        return False
    obj.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
    return True


def _scale_lr(optimizer: Any, scheduler: Any, change: Any) -> list[float]:
    """Apply the lr change to every param group and to the scheduler's base rates; [before, after]
    of the first group."""
    groups = optimizer.param_groups
    before = float(groups[0]["lr"])
    for group in groups:
        group["lr"] = change(group["lr"])
        if "initial_lr" in group:
            group["initial_lr"] = change(group["initial_lr"])
    inner = getattr(scheduler, "scheduler", scheduler)  # accelerate wraps the scheduler
    if inner is not None and hasattr(inner, "base_lrs"):
        inner.base_lrs = [change(b) for b in inner.base_lrs]
        inner._last_lr = [g["lr"] for g in groups]
    return [before, float(groups[0]["lr"])]
