"""EvalStop on a real TRL GRPO run that over-optimises a learned proxy reward.

Everything is built here, nothing is downloaded: a character-level tokenizer (``tokenizers``), a
tiny GPT-2 policy from a config, and a *learned* proxy reward model: a least-squares fit of the
gold quality on completions where more ``a`` was better. The gold quality peaks at ``PEAK``
``a`` characters and falls after; the proxy extrapolates "more ``a`` is better" (Goodhart).

GRPO optimises the proxy (weight 1). The gold reward is passed as a second reward function with
weight 0 (``GRPOConfig(reward_weights=[1.0, 0.0])``): it never moves the policy, but TRL logs it
as ``rewards/gold/mean``, and EvalStopCallback watches it. As the policy learns to emit more
``a``, the proxy reward keeps rising while the gold reward peaks and falls; the run stops and the
best checkpoint is kept.

    python examples/trl_grpo_evalstop.py [--quick] [--out DIR]

The three lines a user adds::

    from evalstop.integrations import EvalStopCallback
    config = GRPOConfig(..., reward_weights=[1.0, 0.0])       # reward_funcs=[proxy, gold]
    trainer.add_callback(EvalStopCallback(metric="rewards/gold/mean", detector="evalstop:k=2"))
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import torch
from datasets import Dataset
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast
from trl import GRPOConfig, GRPOTrainer

from evalstop.integrations import EvalStopCallback

ALPHABET = "abcdefgh"
SPECIALS = ["<pad>", "<eos>", "<unk>"]
PEAK = 4  # the gold quality is best with this many 'a' in a completion
COMPLETION_LEN = 8


def char_tokenizer() -> PreTrainedTokenizerFast:
    vocab = {tok: i for i, tok in enumerate([*SPECIALS, *ALPHABET, ">"])}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>", padding_side="left"
    )


def features(texts: Sequence[str]) -> np.ndarray:
    """What the reward model sees: the count of 'a', the count of other letters, a bias."""
    n_a = np.array([t.count("a") for t in texts], dtype=float)
    n_other = np.array([sum(c in ALPHABET[1:] for c in t) for t in texts], dtype=float)
    return np.stack([n_a, n_other, np.ones_like(n_a)], axis=1)


def gold_quality(texts: Sequence[str]) -> np.ndarray:
    """The hidden true quality: rises with each 'a' up to PEAK, falls faster after it."""
    n_a = features(texts)[:, 0]
    return np.where(n_a <= PEAK, n_a, PEAK - 1.5 * (n_a - PEAK)) / PEAK


def fit_proxy(rng: np.random.Generator) -> np.ndarray:
    """Fit the proxy reward model on labelled completions that never exceed PEAK 'a'."""
    pools = [list(ALPHABET[1:] + "a" * k) for k in range(1, 8)]
    texts = ["".join(rng.choice(pool, COMPLETION_LEN)) for pool in pools for _ in range(40)]
    texts = [t for t in texts if t.count("a") <= PEAK]
    x, y = features(texts), gold_quality(texts) + rng.normal(0, 0.05, len(texts))
    weights, *_ = np.linalg.lstsq(x, y, rcond=None)
    return np.asarray(weights)


def make_rewards(proxy_weights: np.ndarray):  # type: ignore[no-untyped-def]
    def proxy(completions: list[str], **_: object) -> list[float]:
        return [float(r) for r in features(completions) @ proxy_weights]

    def gold(completions: list[str], **_: object) -> list[float]:
        return [float(r) for r in gold_quality(completions)]

    return proxy, gold


def prompts(rng: np.random.Generator, n: int) -> Dataset:
    return Dataset.from_dict({"prompt": ["".join(rng.choice(list(ALPHABET), 3)) + ">" for _ in range(n)]})


class TinyGrpo(NamedTuple):
    tokenizer: PreTrainedTokenizerFast
    model: GPT2LMHeadModel
    train: Dataset
    evals: Dataset | None
    proxy: Any
    gold: Any


def tiny_grpo_setup(n_eval: int = 0, seed: int = 0) -> TinyGrpo:
    """The tiny GPT-2 policy, its tokenizer, 64 training prompts (and ``n_eval`` eval prompts) and
    the proxy and gold rewards, all from ``seed``: the same run every time."""
    rng = np.random.default_rng(seed)
    tokenizer = char_tokenizer()
    torch.manual_seed(seed)
    model = GPT2LMHeadModel(GPT2Config(
        vocab_size=len(tokenizer), n_positions=32, n_embd=32, n_layer=1, n_head=2,
        bos_token_id=tokenizer.eos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    ))
    train = prompts(rng, 64)
    evals = prompts(rng, n_eval) if n_eval else None
    proxy, gold = make_rewards(fit_proxy(rng))
    return TinyGrpo(tokenizer, model, train, evals, proxy, gold)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smaller run (the tests use it)")
    parser.add_argument("--out", default=os.environ.get("EVALSTOP_EXAMPLE_OUT"), help="output directory")
    parser.add_argument("--detector", default="evalstop:k=2,against=best,min_delta=0.02")
    parser.add_argument("--max-steps", type=int, default=None)
    opts = parser.parse_args()
    out = opts.out or tempfile.mkdtemp(prefix="evalstop-grpo-")
    max_steps = opts.max_steps or (60 if opts.quick else 150)

    setup = tiny_grpo_setup()
    config = GRPOConfig(
        output_dir=out, max_steps=max_steps, learning_rate=5e-3, lr_scheduler_type="constant",
        per_device_train_batch_size=8,
        num_generations=8, max_completion_length=COMPLETION_LEN, temperature=1.0, beta=0.0,
        reward_weights=[1.0, 0.0], logging_steps=5, save_strategy="steps", save_steps=5,
        save_total_limit=2, report_to=[], use_cpu=True, disable_tqdm=True, seed=0, bf16=False,
    )
    callback = EvalStopCallback(metric="rewards/gold/mean", detector=opts.detector)
    trainer = GRPOTrainer(
        model=setup.model, reward_funcs=[setup.proxy, setup.gold], args=config,
        train_dataset=setup.train, processing_class=setup.tokenizer, callbacks=[callback],
    )
    trainer.train()

    history = trainer.state.log_history
    curve = [(h["step"], round(h["rewards/proxy/mean"], 3), round(h["rewards/gold/mean"], 3))
             for h in history if "rewards/gold/mean" in h]
    print("(step, proxy, gold):", curve)
    v = callback.verdict
    if v.stopped:
        print(f"stopped at step {v.stop_step}: {v.reason}; best step {v.best_step} (gold {v.best_score:.3f})")
    else:
        print(f"ran to the end (step {trainer.state.global_step}): {v.reason}")
    print("best checkpoint:", trainer.state.best_model_checkpoint)
    best = trainer.state.best_model_checkpoint
    print(json.dumps({**callback.history.record(), "best_checkpoint": best, "curve": curve}))


if __name__ == "__main__":
    main()
