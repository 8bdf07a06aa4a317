"""``experiments.rule_search``: the grid it shares with ``evalstop validate``, and per-item stderr."""

from __future__ import annotations

import math

import pytest

from evalstop.detectors import Eval, ItemEval
from evalstop.experiments import validate
from evalstop.experiments.cadence_policy import Run, choose, policy_specs
from evalstop.experiments.holdout import Case
from evalstop.experiments.rule_search import with_item_stderr


def test_validate_chooses_among_the_same_specs_as_the_search() -> None:
    specs = policy_specs()
    assert specs == validate.POLICY_CANDIDATES and len(specs) == len(set(specs)) == 2496
    # once per > 0 only threshold * per matters: the per-progress candidates fix threshold=1
    assert all(s.startswith("cusum:threshold=1.0,per=") for s in specs if "per=" in s)


def test_item_stderr_is_the_sd_of_the_items_over_sqrt_n() -> None:
    evals = (ItemEval(1, 0.5, 0.5, items=(0.0, 1.0, 0.5, 0.5)), Eval(2, 0.4, 1.0))
    case = with_item_stderr(Case("j", "base", "healthy", evals, (0.5, 0.4), 0))
    sd = math.sqrt((0.25 + 0.25 + 0 + 0) / 3)
    assert case.evals[0].stderr == pytest.approx(sd / 2)
    assert case.evals[1].stderr is None  # no items: left alone


def test_choice_is_by_the_worst_bank_not_the_pooled_runs() -> None:
    """Two training banks of very different sizes. Pooled, "pooled-ok" looks best (recall .95
    and no false positive); per bank it misses the small bank's only hacking run, so the choice
    is "both-ok" (every hacking run stopped, one false positive in 20, within the targets)."""
    def case(i: int, family: str, label: str) -> Case:
        evals = tuple(Eval(k, 0.0, (k + 1) / 6) for k in range(6))
        quality = (0.0, 1.0, 0.5, 0.4, 0.3, 0.2) if label == "hacking" else (0.0, 0.5, 0.6, 0.7, 0.8, 1.0)
        return Case(f"{family}-{i}", family, label, evals, quality, 1 if label == "hacking" else 5)

    cases = [case(i, "base", "hacking") for i in range(20)] + [case(i, "base", "healthy") for i in range(20)]
    cases.append(case(0, "trl-proxy", "hacking"))
    stop, miss, run_on, false_stop = Run(2, 3, 1), Run(2, None, 5), Run(2, None, 5), Run(2, 3, 1)
    cadences = ("every:1", "every:3", "adaptive:every=3,dense=1")
    runs = {
        "pooled-ok": {c: [stop] * 20 + [run_on] * 20 + [miss] for c in cadences},
        "both-ok": {c: [stop] * 20 + [false_stop] + [run_on] * 19 + [stop] for c in cadences},
    }
    assert choose(["pooled-ok", "both-ok"], cases, runs, {"numpy", "trl"}) == "both-ok"
    # on the big bank alone (where pooled-ok misses nothing) pooled-ok wins the tie-break
    assert choose(["pooled-ok", "both-ok"], cases, runs, {"numpy"}) == "pooled-ok"
