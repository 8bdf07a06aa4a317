"""Supervised fine-tuning of the testbed's policy on demonstrations (numpy, CPU).

The first stage of the pipeline the RL jobs stand for: the same log-linear policy of
:mod:`evalstop.workloads.rl_toy` (``pi(y|x) ~ pi0(y|x) exp(theta . phi(x, y))``) is trained by
minibatch gradient ascent on the log-likelihood of demonstrations, not against a reward. The
demonstrations are ``demos_per_prompt`` responses per training prompt drawn from a demonstrator
who prefers good responses (``softmax(gold / temperature)``); the training prompts are the ones
the watched eval does not use, so the eval is held out. The gradient of the mean log-likelihood
of a batch is ``mean(phi(x, y) - E_pi[phi(x, .)])``. Gold rises towards the demonstrator's
quality and stays there: a healthy run whose eval plateaus, which is where a stopping rule's
false alarms happen (docs/testbed.md).

numpy rather than torch: ``import torch`` alone took 3.8-5.0 s on the development machine,
against 0.55 s for everything a numpy job imports, and a job trains for about 9 s.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from ..workloads.rl_toy import Env, FloatArray, policy, softmax


@dataclass(frozen=True)
class Demos:
    prompts: NDArray[np.int64]
    responses: NDArray[np.int64]


def demonstrations(
    env: Env, rng: np.random.Generator, *, per_prompt: int = 4, temperature: float = 0.15
) -> Demos:
    """``per_prompt`` demonstrations for every prompt outside the watched eval's."""
    train = np.setdiff1d(np.arange(env.gold.shape[0]), env.eval_prompts)
    prompts = np.repeat(train, per_prompt)
    probs = softmax(env.gold[prompts] / temperature)
    u = rng.random((prompts.size, 1))
    responses = np.minimum((probs.cumsum(axis=1) < u).sum(axis=1), probs.shape[1] - 1)
    return Demos(prompts.astype(np.int64), responses.astype(np.int64))


def sft_gradient(
    theta: FloatArray, env: Env, demos: Demos, rng: np.random.Generator, batch: int = 32
) -> FloatArray:
    """The gradient of the mean log-likelihood of a minibatch of demonstrations in ``theta``."""
    pick = rng.choice(demos.prompts.size, size=min(batch, demos.prompts.size), replace=False)
    x, y = demos.prompts[pick], demos.responses[pick]
    pi = policy(env, theta, x)
    features = env.features[x]
    expected = np.einsum("pk,pkd->pd", pi, features)
    return np.asarray((features[np.arange(x.size), y] - expected).mean(axis=0), dtype=float)
