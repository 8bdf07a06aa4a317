"""The learned reward-model proxy family: Gao et al.'s gold-vs-KL shape under best-of-n sampling
from the reference distribution (no training; numpy only)."""

from __future__ import annotations

import numpy as np
import pytest

from evalstop.workloads._learned_rm import best_of_n, reference_texts, rm_features
from evalstop.workloads.trl_runs import (
    ALPHABET,
    COMPLETION_LEN,
    TrlConfig,
    fit_proxy,
    gold_quality,
    proxy_features,
)

NS = [1, 4, 16, 64, 256, 1024, 4096]


def _curve(proxy: str, seed: int) -> dict[str, list[float]]:
    config = TrlConfig(proxy=proxy)
    weights, phi = fit_proxy(config, np.random.default_rng(seed)), proxy_features(config)
    draws = np.random.default_rng(seed + 1000)
    return best_of_n(lambda t: phi(t) @ weights, gold_quality,
                     lambda n: reference_texts(draws, n, ALPHABET, COMPLETION_LEN), NS, trials=40)


def test_the_features_count_letters_bigrams_and_length() -> None:
    x = rm_features(["aab", "", "ba"], "ab")
    #             a  b  aa ab ba bb len bias
    assert x.tolist() == [[2, 1, 1, 1, 0, 0, 3, 1], [0, 0, 0, 0, 0, 0, 0, 1], [1, 1, 0, 0, 1, 0, 2, 1]]


@pytest.mark.parametrize("seed", [0, 3])
def test_the_learned_proxy_overoptimises_with_distance_from_the_reference(seed: int) -> None:
    curve = _curve("learned", seed)
    kl, proxy, gold = (np.array(curve[k]) for k in ("kl", "proxy", "gold"))
    assert np.all(np.diff(proxy) > -0.02)  # the proxy keeps rising with the KL ...
    peak = int(np.argmax(gold))
    assert 0 < peak < len(NS) - 1 and gold[-1] < gold[peak] - 0.1  # ... gold rises, peaks, falls
    gap = proxy - gold
    assert gap[-1] > gap[0] + 0.2  # the proxy's error grows with the distance
    d = np.sqrt(kl)  # Gao et al.'s best-of-n form: gold - gold(0) = d (alpha - beta d)
    (alpha, beta), *_ = np.linalg.lstsq(np.stack([d, -d * d], axis=1), gold - gold[0], rcond=None)
    assert alpha > 0.0 and beta > 0.0


def test_the_learned_proxy_is_a_family_the_runs_can_train() -> None:
    learned, linear = TrlConfig(proxy="learned"), TrlConfig()
    w = fit_proxy(learned, np.random.default_rng(0))
    assert w.shape == (len(ALPHABET) * (len(ALPHABET) + 1) + 2,)
    assert proxy_features(learned)(["aaaa"]).shape == (1, w.shape[0])
    assert fit_proxy(linear, np.random.default_rng(0)).shape == (3,)
    with pytest.raises(ValueError, match="'proxy' parameter of TrlConfig must be one of 'learned', 'linear'"):
        TrlConfig(proxy="mlp")
