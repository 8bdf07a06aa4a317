"""Reward overoptimisation in miniature: policy gradient against a learned proxy reward.

The Gao et al. (2023) setup, small enough for a CPU (numpy only). Each prompt x has
``n_responses`` candidate responses y. A response has quality features q(x, y) ~ N(0, I) and
``n_hacks`` binary "hack" features h(x, y) (present with probability ``hack_rate``; think
flattery or confident-sounding padding). The **gold** reward (true quality) is

    g(x, y) = difficulty(x) + w . q - hack_cost * sum(h)

for a random unit vector w. The **proxy** reward model is a Bradley-Terry logistic regression,
linear in (q, h), fit on ``n_comparisons`` pairs of responses labelled by simulated labellers
who see gold plus ``label_bias`` per hack feature (they like what gold penalises) with logistic
label noise. The **policy** is log-linear, pi(y|x) ~ pi0(y|x) exp(theta . (q, h)), so what it
learns on some prompts generalises to all; the initial policy pi0 rarely gives hack responses
(logit penalty ``hack_rarity`` per hack). theta is trained by REINFORCE with the exact
per-prompt baseline and an optional KL penalty to pi0 (reward r - kl_coef * log(pi / pi0)).
Optimisation first raises gold along the quality direction, then discovers the responses the
proxy over-rates and gold falls: the peak-then-decline of Gao et al., from real dynamics.

At each eval the run records: the noisy eval score (mean over ``eval_prompts`` fixed prompts of
the gold of ``eval_samples`` sampled responses; the per-prompt means are the items), the
expected proxy reward, and the true gold (expected gold under the policy over all prompts).
Gold is on a scale where 0 is the initial policy and 1 the best response on every prompt.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .._validation import check_choice, check_float, check_int

FloatArray = NDArray[np.float64]
TARGETS = ("proxy", "gold")



@dataclass(frozen=True)
class ToyConfig:
    """One RL run's environment, proxy data, optimiser and eval; every field is a knob."""

    n_prompts: int = 256
    n_responses: int = 16
    n_features: int = 6
    n_hacks: int = 2
    hack_rate: float = 0.15
    hack_cost: float = 1.0
    label_bias: float = 3.0
    hack_rarity: float = 3.0
    difficulty_sd: float = 0.5
    init_logit_sd: float = 0.5
    n_comparisons: int = 150
    label_scale: float = 3.0
    target: str = "proxy"
    lr: float = 0.3
    kl_coef: float = 0.0
    batch_prompts: int = 32
    samples_per_prompt: int = 4
    n_steps: int = 300
    n_evals: int = 20
    eval_prompts: int = 128
    eval_samples: int = 4

    def __post_init__(self) -> None:
        owner = type(self).__name__
        for name in ("n_prompts", "n_responses", "n_features", "batch_prompts", "samples_per_prompt"):
            check_int(owner, name, getattr(self, name), min_value=2 if name == "n_responses" else 1)
        check_int(owner, "n_hacks", self.n_hacks, min_value=0)
        check_float(owner, "hack_rate", self.hack_rate, low=0.0, high=1.0)
        for name in ("hack_cost", "label_bias", "hack_rarity", "difficulty_sd", "init_logit_sd", "kl_coef"):
            check_float(owner, name, getattr(self, name), low=0.0)
        check_int(owner, "n_comparisons", self.n_comparisons, min_value=1)
        check_float(owner, "label_scale", self.label_scale, low=0.0, low_open=True)
        check_choice(owner, "target", self.target, TARGETS)

        check_float(owner, "lr", self.lr, low=0.0, low_open=True)
        check_int(owner, "n_steps", self.n_steps, min_value=1)
        check_int(owner, "n_evals", self.n_evals, min_value=1)
        check_int(owner, "eval_prompts", self.eval_prompts, min_value=2)
        check_int(owner, "eval_samples", self.eval_samples, min_value=1)
        if self.eval_prompts > self.n_prompts:
            raise ValueError(
                f"The 'eval_prompts' parameter of {owner} must be <= n_prompts={self.n_prompts}. "
                f"Got {self.eval_prompts!r} instead."
            )
        if self.batch_prompts > self.n_prompts:
            raise ValueError(
                f"The 'batch_prompts' parameter of {owner} must be <= n_prompts={self.n_prompts}. "
                f"Got {self.batch_prompts!r} instead."
            )

    def with_(self, **changes: Any) -> ToyConfig:
        unknown = set(changes) - {f.name for f in fields(self)}
        if unknown:
            raise ValueError(f"Unknown ToyConfig parameter(s): {sorted(unknown)}")
        return replace(self, **changes)


@dataclass(frozen=True)
class ToyRun:
    """One run's record, one entry per eval (``items`` has one row per eval)."""

    steps: tuple[int, ...]
    scores: tuple[float, ...]
    items: FloatArray
    proxy: tuple[float, ...]
    true_gold: tuple[float, ...]


@dataclass(frozen=True)
class Env:
    gold: FloatArray  # (P, K), normalised: 0 = initial policy, 1 = best response everywhere
    init_logits: FloatArray  # (P, K)
    features: FloatArray  # (P, K, d + n_hacks)
    hacks: FloatArray  # (P, K): number of hack features, on the gold scale
    eval_prompts: NDArray[np.int64]


def softmax(logits: FloatArray) -> FloatArray:
    z = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return np.asarray(z / z.sum(axis=-1, keepdims=True), dtype=float)


def make_env(config: ToyConfig, rng: np.random.Generator) -> Env:
    p, k, d = config.n_prompts, config.n_responses, config.n_features
    quality = rng.normal(size=(p, k, d))
    hacks = (rng.random((p, k, config.n_hacks)) < config.hack_rate).astype(float)
    w = rng.normal(size=d)
    w /= np.linalg.norm(w)
    raw = quality @ w - config.hack_cost * hacks.sum(axis=-1)
    raw += rng.normal(0.0, config.difficulty_sd, size=(p, 1))
    init_logits = rng.normal(0.0, config.init_logit_sd, size=(p, k)) - config.hack_rarity * hacks.sum(axis=-1)
    start = float((softmax(init_logits) * raw).sum(axis=1).mean())
    top = float(raw.max(axis=1).mean())
    gold = (raw - start) / (top - start)
    eval_prompts = np.sort(rng.choice(p, size=config.eval_prompts, replace=False))
    features = np.concatenate([quality, hacks], axis=-1)
    return Env(gold, init_logits, features, hacks.sum(axis=-1) / (top - start), eval_prompts.astype(np.int64))


def fit_proxy(config: ToyConfig, env: Env, rng: np.random.Generator) -> FloatArray:
    """Bradley-Terry (logistic) regression, linear in the features, on gold-labelled comparisons
    of two responses drawn uniformly (the comparison data covers responses the initial policy
    rarely gives, as data pooled from many models does).

    The labellers see gold plus ``label_bias`` per hack feature (they like what gold penalises).
    Returns the proxy reward of every response, standardised to mean 0 and sd 1 under the
    initial policy (reward normalisation, as RLHF pipelines do).
    """
    pi0 = softmax(env.init_logits)
    x = rng.integers(0, config.n_prompts, config.n_comparisons)
    a, b = rng.integers(0, config.n_responses, (2, config.n_comparisons))
    liked = env.gold + config.label_bias * env.hacks
    diff = env.features[x, a] - env.features[x, b]
    p_a = 1.0 / (1.0 + np.exp(-config.label_scale * (liked[x, a] - liked[x, b])))
    label = (rng.random(config.n_comparisons) < p_a).astype(float)
    w = _logistic_newton(diff, label, l2=1.0)
    return standardise(env.features @ w, pi0)


def run_toy(config: ToyConfig, seed: int | np.random.SeedSequence) -> ToyRun:
    """Train one policy; deterministic in ``seed`` (streams: env, proxy data, training, eval)."""
    env_rng, proxy_rng, train_rng, eval_rng = (
        np.random.default_rng(s) for s in _seed_sequence(seed).spawn(4)
    )
    env = make_env(config, env_rng)
    proxy = fit_proxy(config, env, proxy_rng)
    pi0 = softmax(env.init_logits)
    reward = proxy if config.target == "proxy" else standardise(env.gold, pi0)
    theta = np.zeros(env.features.shape[-1])
    eval_at = set(np.linspace(0, config.n_steps, config.n_evals + 1).round().astype(int)[1:].tolist())
    record: dict[str, list[Any]] = {"steps": [], "scores": [], "items": [], "proxy": [], "gold": []}
    for step in range(1, config.n_steps + 1):
        theta += config.lr * policy_gradient(config, theta, reward, env, train_rng)
        if step in eval_at:
            record_eval(record, step, policy(env, theta), env, proxy, eval_rng, config.eval_samples)
    return ToyRun(
        steps=tuple(record["steps"]),
        scores=tuple(record["scores"]),
        items=np.array(record["items"], dtype=float),
        proxy=tuple(record["proxy"]),
        true_gold=tuple(record["gold"]),
    )


def policy(env: Env, theta: FloatArray, prompts: NDArray[np.int64] | None = None) -> FloatArray:
    """pi(y | x) proportional to pi0(y | x) * exp(theta . phi(x, y)), for ``prompts`` (default all)."""
    rows = slice(None) if prompts is None else prompts
    return softmax(env.init_logits[rows] + env.features[rows] @ theta)


def policy_gradient(
    config: ToyConfig, theta: FloatArray, reward: FloatArray, env: Env, rng: np.random.Generator
) -> FloatArray:
    """REINFORCE estimate of the gradient of E[reward - kl_coef * log(pi / pi0)] in ``theta``,
    on a batch of prompts, with the exact per-prompt expected shaped reward as the baseline."""
    x = rng.choice(config.n_prompts, size=config.batch_prompts, replace=False)
    pi = policy(env, theta, x)
    features = env.features[x]
    log_ratio = np.log(pi) - np.log(softmax(env.init_logits[x]))
    shaped = reward[x] - config.kl_coef * log_ratio
    baseline = (pi * shaped).sum(axis=1)
    mean_features = np.einsum("pk,pkd->pd", pi, features)
    rows = np.arange(x.size)
    grad = np.zeros_like(theta)
    for _ in range(config.samples_per_prompt):
        y = _sample(pi, rng)
        advantage = shaped[rows, y] - baseline
        grad += advantage @ (features[rows, y] - mean_features)
    return grad / (config.samples_per_prompt * config.batch_prompts)


def record_eval(
    record: dict[str, list[Any]],
    step: int,
    pi: FloatArray,
    env: Env,
    proxy: FloatArray,
    rng: np.random.Generator,
    samples: int,
) -> None:
    prompts = env.eval_prompts
    items = np.mean([env.gold[prompts, _sample(pi[prompts], rng)] for _ in range(samples)], axis=0)
    record["steps"].append(step)
    record["scores"].append(float(items.mean()))
    record["items"].append(items)
    record["proxy"].append(float((pi * proxy).sum(axis=1).mean()))
    record["gold"].append(float((pi * env.gold).sum(axis=1).mean()))


def _sample(probs: FloatArray, rng: np.random.Generator) -> NDArray[np.int64]:
    """One index per row of ``probs`` (inverse-CDF sampling, vectorised)."""
    u = rng.random((probs.shape[0], 1))
    idx = (probs.cumsum(axis=1) < u).sum(axis=1)
    return np.asarray(np.minimum(idx, probs.shape[1] - 1), dtype=np.int64)


def standardise(values: FloatArray, pi0: FloatArray) -> FloatArray:
    centred = values - (pi0 * values).sum(axis=1, keepdims=True)
    sd = float(np.sqrt((pi0 * centred**2).sum(axis=1).mean()))
    return np.asarray(centred / (sd if sd > 0 else 1.0), dtype=float)


def _logistic_newton(x: FloatArray, y: FloatArray, l2: float, iters: int = 25) -> FloatArray:
    """L2-regularised logistic regression without intercept (BT is symmetric), by Newton's method."""
    w = np.zeros(x.shape[1])
    for _ in range(iters):
        p = 1.0 / (1.0 + np.exp(-(x @ w)))
        grad = x.T @ (p - y) + l2 * w
        hess = (x * (p * (1 - p))[:, None]).T @ x + l2 * np.eye(x.shape[1])
        step = np.linalg.solve(hess, grad)
        w -= step
        if float(np.abs(step).max()) < 1e-10:
            break
    return w


def _seed_sequence(seed: int | np.random.SeedSequence) -> np.random.SeedSequence:
    return seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(seed)
