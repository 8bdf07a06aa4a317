"""Bank runs from a real trainer: tiny TRL GRPO policies against a learned proxy reward.

Everything is built locally (no downloads): a character tokenizer, a one-layer GPT-2 policy
from a config, and a proxy reward model *learned* from labelled completions. A completion is up
to ``COMPLETION_LEN`` letters. The hidden **gold** quality rises with each ``a`` up to ``PEAK``
and falls faster after it; the proxy is a least-squares fit of noisy gold labels on features
(count of ``a``, count of other letters, a bias) over completions that never go past ``PEAK``,
so it extrapolates "more ``a`` is better" (Goodhart). With few or very noisy labels the fit can
even point the wrong way, and the policy never improves.
``proxy="learned"`` swaps in a ridge reward model on letter and bigram counts, fit on labels of
completions from the reference distribution (``_learned_rm``): its error grows with the distance
from the reference (Gao et al.'s gold-vs-KL shape).

GRPO (``trl.GRPOTrainer``) optimises the proxy (or, for controls, gold itself), with or without
a KL penalty to the initial policy (``beta``). A callback evaluates the policy ``n_evals`` times,
evenly spaced: the **watched** eval is the gold quality of one sampled completion on each of
``eval_prompts`` fixed prompts (tens of samples: noisy; the per-prompt values are the items);
the **true** gold is the mean over ``gold_samples`` completions of ``gold_prompts`` other prompts
(the truth that labels the run; no rule sees it). Eval sampling uses its own seeded torch
generator, so it never moves the trainer's random stream. Gold is rescaled so that 0 is the
initial policy and 1 the best possible completion everywhere, as in ``rl_toy``.

torch, transformers, trl and datasets are imported here only (``pip install -e '.[hf]'``).
CPU runs are single-threaded so that a seed gives the same curve on any machine.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

import numpy as np

from .._validation import check_choice, check_float, check_int
from ._learned_rm import fit_learned, rm_features
from .rl_toy import ToyRun

ALPHABET = "abcdefgh"
SPECIALS = ("<pad>", "<eos>", "<unk>")
PEAK = 4
COMPLETION_LEN = 8
TARGETS = ("proxy", "gold")
#: the proxy reward model: "linear" (least squares on three features, labels capped at PEAK 'a')
#: or "learned" (ridge on letter and bigram counts, labels from the reference distribution;
#: ``_learned_rm``)
PROXIES = ("linear", "learned")


@dataclass(frozen=True)
class TrlConfig:
    """One GRPO run; every field is a knob a family may change."""

    target: str = "proxy"
    proxy: str = "linear"
    beta: float = 0.0
    lr: float = 5e-3
    n_steps: int = 120
    n_evals: int = 40
    n_labels: int = 240
    label_noise: float = 0.05
    label_bias: float = 0.0
    eval_prompts: int = 24
    gold_prompts: int = 64
    gold_samples: int = 1024
    num_generations: int = 8
    n_embd: int = 32
    #: a transient fault: the reward is negated for steps in [flip_start, flip_end) * n_steps
    #: (a reward bug that is fixed later), so the policy collapses and then recovers
    flip_start: float = 0.0
    flip_end: float = 0.0

    def __post_init__(self) -> None:
        owner = type(self).__name__
        check_choice(owner, "target", self.target, TARGETS)
        check_choice(owner, "proxy", self.proxy, PROXIES)
        check_float(owner, "beta", self.beta, low=0.0)
        check_float(owner, "lr", self.lr, low=0.0, low_open=True)
        check_float(owner, "label_noise", self.label_noise, low=0.0)
        check_float(owner, "label_bias", self.label_bias, low=0.0)
        check_float(owner, "flip_start", self.flip_start, low=0.0, high=1.0)
        check_float(owner, "flip_end", self.flip_end, low=self.flip_start, high=1.0)
        for name in ("n_steps", "n_evals", "eval_prompts", "gold_prompts", "gold_samples", "n_embd"):
            check_int(owner, name, getattr(self, name), min_value=1)
        check_int(owner, "n_labels", self.n_labels, min_value=3)
        check_int(owner, "num_generations", self.num_generations, min_value=2)
        if self.n_evals > self.n_steps:
            raise ValueError(
                f"The 'n_evals' parameter of {owner} must be <= n_steps={self.n_steps}. "
                f"Got {self.n_evals!r} instead."
            )

    def with_(self, **changes: Any) -> TrlConfig:
        unknown = set(changes) - {f.name for f in fields(self)}
        if unknown:
            raise ValueError(f"Unknown TrlConfig parameter(s): {sorted(unknown)}")
        return replace(self, **changes)


def features(texts: list[str]) -> np.ndarray:
    """What the reward model sees: the count of 'a', the count of other letters, a bias."""
    n_a = np.array([t.count("a") for t in texts], dtype=float)
    n_other = np.array([sum(c in ALPHABET[1:] for c in t) for t in texts], dtype=float)
    return np.stack([n_a, n_other, np.ones_like(n_a)], axis=1)


def gold_quality(texts: list[str]) -> np.ndarray:
    """The hidden true quality: rises with each 'a' up to PEAK, falls faster after it."""
    n_a = features(texts)[:, 0]
    return np.asarray(np.where(n_a <= PEAK, n_a, PEAK - 1.5 * (n_a - PEAK)) / PEAK, dtype=float)


def learned_features(texts: list[str]) -> np.ndarray:
    """What the learned reward model sees (``_learned_rm.rm_features`` over this alphabet)."""
    return rm_features(texts, ALPHABET)


def proxy_features(config: TrlConfig) -> Callable[[list[str]], np.ndarray]:
    """The feature map of ``config``'s reward model (its reward is features @ weights)."""
    return learned_features if config.proxy == "learned" else features


def fit_proxy(config: TrlConfig, rng: np.random.Generator) -> np.ndarray:
    """The reward model's weights. ``proxy="linear"``: least squares on ``n_labels`` noisy gold
    labels of completions with at most PEAK 'a' (the labelled data never shows what too many 'a'
    does); labellers add ``label_bias`` per letter other than 'a' (they like long answers, which
    gold does not). ``proxy="learned"``: ``_learned_rm.fit_learned``."""
    if config.proxy == "learned":
        return fit_learned(rng, config.n_labels, config.label_noise, config.label_bias, ALPHABET,
                           COMPLETION_LEN, gold_quality)
    texts: list[str] = []
    while len(texts) < config.n_labels:
        pool = list(ALPHABET[1:] + "a" * int(rng.integers(1, 8)))
        text = "".join(rng.choice(pool, int(rng.integers(1, COMPLETION_LEN + 1))))
        if text.count("a") <= PEAK:
            texts.append(text)
    x = features(texts)
    y = gold_quality(texts) + config.label_bias * x[:, 1] + rng.normal(0.0, config.label_noise, len(texts))
    weights, *_ = np.linalg.lstsq(x, y, rcond=None)
    return np.asarray(weights, dtype=float)


def run_grpo(
    config: TrlConfig,
    seed: int | np.random.SeedSequence,
    callbacks: Sequence[Any] = (),
    on_trainer: Callable[[Any], None] | None = None,
) -> ToyRun:
    """Train one policy with ``trl.GRPOTrainer``; the record has the ``rl_toy.ToyRun`` shape
    (proxy = mean proxy reward of the large gold sample). Deterministic in ``seed`` on CPU.
    ``callbacks`` (``TrainerCallback``) run after the eval recorder, which they may read
    (``callback.recorder``, set before training): the testbed's GRPO jobs report each eval.
    ``on_trainer(trainer)`` runs before training (the rewind study binds its callback there)."""
    import torch

    ss = seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(seed)
    data_ss, torch_ss, eval_ss = ss.spawn(3)
    rng = np.random.default_rng(data_ss)
    torch_seed = int(torch_ss.generate_state(1)[0])
    eval_seed = int(eval_ss.generate_state(1)[0])
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with tempfile.TemporaryDirectory(prefix="evalstop-grpo-") as tmp:
            return _train(config, rng, torch_seed, eval_seed, Path(tmp), callbacks, on_trainer)
    finally:
        torch.set_num_threads(threads)


def _prompts(rng: np.random.Generator, n: int) -> list[str]:
    return ["".join(rng.choice(list(ALPHABET), 3)) + ">" for _ in range(n)]


def _train(
    config: TrlConfig,
    rng: np.random.Generator,
    torch_seed: int,
    eval_seed: int,
    tmp: Path,
    callbacks: Sequence[Any] = (),
    on_trainer: Callable[[Any], None] | None = None,
) -> ToyRun:
    import torch
    from datasets import Dataset
    from transformers import GPT2Config, GPT2LMHeadModel, PrinterCallback
    from trl import GRPOConfig, GRPOTrainer  # type: ignore[attr-defined]

    from ._grpo_eval import EvalRecorder, char_tokenizer

    tokenizer = char_tokenizer(SPECIALS, ALPHABET + ">")
    torch.manual_seed(torch_seed)
    init = GPT2LMHeadModel(GPT2Config(
        vocab_size=len(tokenizer), n_positions=16, n_embd=config.n_embd, n_layer=1, n_head=2,
        bos_token_id=tokenizer.eos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
    ))
    init.save_pretrained(tmp / "init")  # the KL reference model is rebuilt from this path
    model = GPT2LMHeadModel.from_pretrained(tmp / "init")
    train_prompts = _prompts(rng, 64)
    weights = fit_proxy(config, rng)
    phi = proxy_features(config)
    recorder = EvalRecorder(
        tokenizer, _prompts(rng, config.eval_prompts), _prompts(rng, config.gold_prompts),
        config.gold_samples, COMPLETION_LEN, eval_seed, weights, gold_quality, phi,
        _eval_steps(config),
    )
    recorder.calibrate(model)
    for callback in callbacks:
        callback.recorder = recorder

    trainer: Any = None
    flip = (config.flip_start * config.n_steps, config.flip_end * config.n_steps)

    def sign() -> float:  # -1 inside the fault window (the step being trained is global_step + 1)
        step = trainer.state.global_step if trainer is not None else 0
        return -1.0 if flip[0] <= step < flip[1] else 1.0

    def proxy(completions: list[str], **_: object) -> list[float]:
        return [sign() * float(r) for r in phi(completions) @ weights]

    def gold(completions: list[str], **_: object) -> list[float]:
        return [sign() * float(r) for r in gold_quality(completions)]

    args = GRPOConfig(
        output_dir=str(tmp / "out"), max_steps=config.n_steps, learning_rate=config.lr,
        lr_scheduler_type="constant", per_device_train_batch_size=config.num_generations,
        num_generations=config.num_generations, max_completion_length=COMPLETION_LEN, temperature=1.0,
        beta=config.beta, logging_steps=config.n_steps, save_strategy="no", report_to=[], use_cpu=True,
        disable_tqdm=True, seed=torch_seed % 2**31, data_seed=torch_seed % 2**31, bf16=False,
    )
    reward: Any = proxy if config.target == "proxy" else gold
    trainer = GRPOTrainer(
        model=model, reward_funcs=[reward], args=args,
        train_dataset=Dataset.from_dict({"prompt": train_prompts}), processing_class=tokenizer,
        callbacks=[recorder, *callbacks],
    )
    trainer.remove_callback(PrinterCallback)  # no log dicts on stdout
    if on_trainer is not None:
        on_trainer(trainer)
    trainer.train()
    return recorder.run()


def _eval_steps(config: TrlConfig) -> tuple[int, ...]:
    steps = np.linspace(0, config.n_steps, config.n_evals + 1).round().astype(int)[1:]
    return tuple(int(s) for s in steps)


# ---- the TRL families of the bank -----------------------------------------------------------------

#: family -> changes to ``TrlConfig()``; the ``control-*`` families optimise gold itself.
FAMILIES: dict[str, dict[str, Any]] = {
    "trl-proxy": {"lr": 2e-3},
    "trl-proxy-slow": {"lr": 7e-4},
    "trl-proxy-kl": {"lr": 2e-3, "beta": 0.5},
    "trl-rm-biased": {"lr": 2e-3, "label_bias": 0.4},
    "trl-lr-tiny": {"lr": 1e-4},
    "control-trl-gold": {"lr": 2e-3, "target": "gold"},
    "control-trl-gold-lr-high": {"lr": 1e-2, "target": "gold"},
}
#: The noisy-eval bank (``evalstop bank --trainer trl-noisy``): the watched score is a 48-prompt
#: eval (the truth stays the 1,024-sample gold), and some runs have a transient collapse that
#: recovers (the reward is negated for a window of steps, as a reward bug fixed later would).
NOISY_FAMILIES: dict[str, dict[str, Any]] = {
    "noisy-proxy": {"lr": 2e-3},
    "noisy-proxy-slow": {"lr": 7e-4},
    "noisy-rm-biased": {"lr": 2e-3, "label_bias": 0.4},
    "noisy-proxy-kl": {"lr": 2e-3, "beta": 0.5},
    "collapse-proxy": {"lr": 2e-3, "flip_start": 0.1, "flip_end": 0.2},
    "collapse-gold": {"lr": 5e-3, "target": "gold", "flip_start": 0.25, "flip_end": 0.35},
    "collapse-gold-late": {"lr": 1e-2, "target": "gold", "flip_start": 0.5, "flip_end": 0.55},
    "control-noisy-gold": {"lr": 2e-3, "target": "gold"},
}
NOISY_BASE: dict[str, Any] = {"eval_prompts": 48}
#: The seed of family ``FAMILIES[i]`` is child ``FAMILY_KEY + i`` of the bank seed (the numpy
#: families use 0, 1, ...), and of ``NOISY_FAMILIES[i]`` child ``NOISY_KEY + i``, so no two
#: kinds of family share a stream.
FAMILY_KEY = 100
NOISY_KEY = 200
#: Where the generated TRL banks ship (package data), with the command that wrote each.
SHIPPED = Path(__file__).resolve().parent / "data" / "trl-bank"
SHIPPED_NOISY = Path(__file__).resolve().parent / "data" / "trl-noisy-bank"


def family_runs(
    name: str, seed: int, runs_per_family: int, first: int = 0
) -> list[tuple[str, TrlConfig, np.random.SeedSequence]]:
    """(job id, config, seed) of runs ``first..runs_per_family-1`` of family ``name``."""
    if name in FAMILIES:
        key, config = FAMILY_KEY + list(FAMILIES).index(name), TrlConfig().with_(**FAMILIES[name])
    elif name in NOISY_FAMILIES:
        key = NOISY_KEY + list(NOISY_FAMILIES).index(name)
        config = TrlConfig().with_(**NOISY_BASE, **NOISY_FAMILIES[name])
    else:
        valid = ", ".join([*FAMILIES, *NOISY_FAMILIES])
        raise ValueError(f"Unknown TRL bank family {name!r}. Valid families: {valid}.")
    family_seed = np.random.SeedSequence(seed, spawn_key=(key,))
    children = family_seed.spawn(runs_per_family)
    return [(f"{name}-{r:03d}", config, children[r]) for r in range(first, runs_per_family)]
