"""EvalStop on a Hugging Face Trainer run whose held-out quality peaks, then falls.

A tiny GPT-2 (built from a config, no download) first learns the "gold" task (count up by 1),
then the training stream drifts to a proxy task (count up by 7), the way an RLHF policy drifts
toward what the reward model likes. The watched metric ``eval_gold`` is next-token accuracy on
held-out gold sequences: it rises, peaks, then falls. EvalStopCallback stops the run after the
rule fires and ``load_best_model_at_end`` restores the best checkpoint.

    python examples/hf_trainer_evalstop.py [--quick] [--out DIR]

The three lines a user adds::

    from evalstop.integrations import EvalStopCallback
    args = TrainingArguments(..., load_best_model_at_end=True, metric_for_best_model="gold")
    trainer.add_callback(EvalStopCallback(metric="eval_gold", detector="evalstop:k=2"))
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile

import numpy as np
import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

from evalstop.integrations import EvalStopCallback

VOCAB, SEQ = 32, 12
GOLD_STRIDE, PROXY_STRIDE = 1, 7


def sequences(n: int, stride: int, rng: np.random.Generator) -> torch.Tensor:
    starts = rng.integers(0, VOCAB, size=(n, 1))
    return torch.as_tensor((starts + stride * np.arange(SEQ)) % VOCAB)


class DriftingStream(torch.utils.data.IterableDataset):  # type: ignore[type-arg]
    """Gold-task examples for the first ``switch`` samples; then the share of proxy-task
    examples grows linearly to 1 over the next ``ramp`` samples."""

    def __init__(self, switch: int, ramp: int, seed: int) -> None:
        self.switch, self.ramp, self.seed = switch, ramp, seed

    def __iter__(self):  # type: ignore[no-untyped-def]
        rng = np.random.default_rng(self.seed)
        i = 0
        while True:
            p_proxy = min(max((i - self.switch) / self.ramp, 0.0), 1.0)
            stride = PROXY_STRIDE if rng.random() < p_proxy else GOLD_STRIDE
            ids = sequences(1, stride, rng)[0]
            yield {"input_ids": ids, "labels": ids}
            i += 1


class GoldSet(torch.utils.data.Dataset):  # type: ignore[type-arg]
    def __init__(self, n: int, seed: int) -> None:
        self.ids = sequences(n, GOLD_STRIDE, np.random.default_rng(seed))

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def gold_score(eval_pred) -> dict[str, float]:  # type: ignore[no-untyped-def]
    """Mean probability the model gives the right next token of a gold sequence."""
    return {"gold": float(np.mean(eval_pred.predictions))}


def next_token_probability(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    probs = logits[:, :-1].softmax(dim=-1)
    return probs.gather(-1, labels[:, 1:, None]).squeeze(-1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smaller run (the tests use it)")
    parser.add_argument("--out", default=os.environ.get("EVALSTOP_EXAMPLE_OUT"), help="output directory")
    parser.add_argument("--detector", default="evalstop:k=2", help="an evalstop detector spec")
    opts = parser.parse_args()
    out = opts.out or tempfile.mkdtemp(prefix="evalstop-hf-")
    batch, switch_step, max_steps = 8, (20 if opts.quick else 60), (100 if opts.quick else 300)
    ramp, every = (30 if opts.quick else 60), (5 if opts.quick else 10)

    torch.manual_seed(0)
    # Untied output layer: a tied one is not written to the checkpoint, and the Trainer's reload of
    # the best checkpoint then warns "missing keys ['lm_head.weight']" although nothing is missing.
    model = GPT2LMHeadModel(GPT2Config(
        vocab_size=VOCAB, n_positions=SEQ, n_embd=32, n_layer=1, n_head=2, bos_token_id=0, eos_token_id=0,
        tie_word_embeddings=False,
    ))
    args = TrainingArguments(
        output_dir=out, max_steps=max_steps, per_device_train_batch_size=batch, learning_rate=5e-3,
        eval_strategy="steps", eval_steps=every, save_strategy="steps", save_steps=every, save_total_limit=2,
        load_best_model_at_end=True, metric_for_best_model="gold", greater_is_better=True,
        logging_steps=every, report_to=[], use_cpu=True, disable_tqdm=True, seed=0,
    )
    callback = EvalStopCallback(metric="eval_gold", detector=opts.detector)
    trainer = Trainer(
        model=model, args=args, train_dataset=DriftingStream(switch_step * batch, ramp=ramp * batch, seed=1),
        eval_dataset=GoldSet(64, seed=2), compute_metrics=gold_score,
        preprocess_logits_for_metrics=next_token_probability, callbacks=[callback],
    )
    trainer.train()

    v = callback.verdict
    curve = [(h["step"], round(h["eval_gold"], 3)) for h in trainer.state.log_history if "eval_gold" in h]
    print("eval_gold by step:", curve)
    if v.stopped:
        print(f"stopped at step {v.stop_step}: {v.reason}; best step {v.best_step} (gold {v.best_score:.3f})")
    else:
        print(f"ran to the end (step {trainer.state.global_step}): {v.reason}")
    print("best checkpoint:", trainer.state.best_model_checkpoint)
    print(json.dumps({**callback.history.record(), "best_checkpoint": trainer.state.best_model_checkpoint}))


if __name__ == "__main__":
    main()
