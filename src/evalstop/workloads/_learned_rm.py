"""A learned reward model for the TRL runs' ``proxy="learned"`` family, and the best-of-n curve that
shows its overoptimisation.

The reward model is a ridge regression on many features of a completion (the count of each
letter, the count of each bigram, the length, a bias), fit on noisy gold labels of completions
drawn from the reference policy's distribution (letters uniform, a uniform length). Near that
distribution it is accurate; far from it (completions the labels almost never show, such as
many ``a``) it extrapolates what it learned nearby and picks up the spurious bigram weights its
label noise gave it, so optimising it drives the gold up and then down with the distance from
the reference: the shape Gao, Schulman and Hilton (2022) measured for learned reward models
(gold against the square root of the KL to the initial policy rises, peaks and falls, while the
proxy keeps rising). ``best_of_n`` measures that curve without training: best-of-n sampling from
the reference distribution, whose KL to it is ``log n - (n - 1) / n``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import pairwise

import numpy as np

Scorer = Callable[[list[str]], np.ndarray]
#: ridge penalty of the learned reward model (the bias is not penalised)
RIDGE = 1.0


def rm_features(texts: list[str], alphabet: str) -> np.ndarray:
    """Per completion: the count of each letter, of each bigram, the length, and a bias."""
    index = {c: i for i, c in enumerate(alphabet)}
    k = len(alphabet)
    out = np.zeros((len(texts), k + k * k + 2))
    for row, text in enumerate(texts):
        codes = [index[c] for c in text if c in index]
        for a in codes:
            out[row, a] += 1.0
        for a, b in pairwise(codes):
            out[row, k + a * k + b] += 1.0
        out[row, -2], out[row, -1] = len(codes), 1.0
    return out


def reference_texts(rng: np.random.Generator, n: int, alphabet: str, max_len: int) -> list[str]:
    """``n`` completions of the reference distribution: uniform letters, length uniform in 1..max_len."""
    letters = list(alphabet)
    return ["".join(rng.choice(letters, int(rng.integers(1, max_len + 1)))) for _ in range(n)]


def fit_learned(
    rng: np.random.Generator, n_labels: int, label_noise: float, label_bias: float, alphabet: str,
    max_len: int, gold: Scorer,
) -> np.ndarray:
    """Ridge weights on ``rm_features`` from ``n_labels`` noisy gold labels of reference
    completions; labellers add ``label_bias`` per letter other than the first."""
    texts = reference_texts(rng, n_labels, alphabet, max_len)
    x = rm_features(texts, alphabet)
    others = np.array([sum(c != alphabet[0] for c in t) for t in texts], dtype=float)
    y = gold(texts) + label_bias * others + rng.normal(0.0, label_noise, len(texts))
    penalty = RIDGE * np.eye(x.shape[1])
    penalty[-1, -1] = 0.0
    return np.asarray(np.linalg.solve(x.T @ x + penalty, x.T @ y), dtype=float)


def best_of_n(
    proxy: Scorer, gold: Scorer, sample: Callable[[int], list[str]], ns: Sequence[int], trials: int,
) -> dict[str, list[float]]:
    """Best-of-n by ``proxy`` over ``sample(n)`` draws, ``trials`` times per n: the KL of the
    best-of-n policy to the reference (``log n - (n - 1) / n``), its mean proxy and mean gold."""
    out: dict[str, list[float]] = {"n": [], "kl": [], "proxy": [], "gold": []}
    for n in ns:
        picked = []
        for _ in range(trials):
            texts = sample(n)
            picked.append(texts[int(np.argmax(proxy(texts)))])
        out["n"].append(float(n))
        out["kl"].append(float(np.log(n) - (n - 1) / n))
        out["proxy"].append(float(proxy(picked).mean()))
        out["gold"].append(float(gold(picked).mean()))
    return out
