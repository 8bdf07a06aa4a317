"""``experiments.rule_search``: the grid it shares with ``evalstop validate``, and per-item stderr."""

from __future__ import annotations

import math

import pytest

from evalstop.detectors import Eval, ItemEval
from evalstop.experiments import validate
from evalstop.experiments.cadence_policy import Run, choose, policy_specs
from evalstop.experiments.holdout import Case
from evalstop.experiments.rule_search import curves, miss_rows, misses, with_item_stderr


def test_validate_chooses_among_the_same_specs_as_the_search() -> None:
    specs = policy_specs()
    assert specs == validate.POLICY_CANDIDATES and len(specs) == len(set(specs)) == 1248
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


def test_misses_lists_the_healthy_runs_stopped_and_the_detectable_hacking_runs_missed() -> None:
    def case(name: str, label: str) -> Case:
        evals = tuple(Eval(k, 0.0, (k + 1) / 6) for k in range(6))
        quality = (0.0, 1.0, 0.5, 0.4, 0.3, 0.2) if label == "hacking" else (0.0, 0.5, 0.6, 0.7, 0.8, 1.0)
        return Case(name, "base", label, evals, quality, 1 if label == "hacking" else 5)

    cases = [case("caught", "hacking"), case("missed", "hacking"), case("quiet", "healthy"),
             case("stopped", "healthy")]
    cadences = ("every:1", "every:3", "adaptive:every=3,dense=1")
    runs = {"s": {c: [Run(6, 3, 1), Run(6, None, 5), Run(6, None, 5), Run(6, 2, 1)] for c in cadences}}
    rows = misses({"numpy": "s"}, cases, runs)[2:]
    assert len(rows) == 2 * len(cadences)
    assert "| numpy | every:1 | missed | base | hacking | not stopped: true peak at 0.333, falls 0.800, " \
        "delivers the last checkpoint (0.800 under the peak) |" in rows
    assert "| numpy | every:3 | stopped | base | healthy | stopped at progress 0.500 |" in rows
    assert not any("caught" in r or "quiet" in r for r in rows)
    # --json --misses puts these records in the JSON document: the same runs as the table's rows
    records = miss_rows({"numpy": "s"}, cases, runs)
    assert [f"| {r['bank']} | {r['cadence']} | {r['run']} | {r['family']} | {r['label']} | {r['did']} |"
            for r in records] == rows


def test_curves_prints_both_curves_and_the_longest_stretch_under_the_best() -> None:
    scores = [0.1, 0.5, 0.52, 0.5, 0.1, 0.1, 0.1, 0.5, 0.51, 0.1, 0.5, 0.49]
    evals = tuple(Eval(k, s, (k + 1) / 12) for k, s in enumerate(scores))
    case = Case("dip", "collapse-gold", "healthy", evals, tuple(scores), 2)
    lines = curves([case], ["dip"])
    assert lines[0] == "| eval | dip (healthy): watched / gold |"
    assert lines[2] == "| 1 | 0.100 / 0.100 |" and len(lines) == 2 + 12 + 2
    assert lines[-1].startswith("- dip: 3 evals in a row more than 2 sds")
    assert "from progress 0.417 to 0.583; true quality ends 0.030 under its peak" in lines[-1]
    with pytest.raises(ValueError, match="--curves: no bank run 'nope'"):
        curves([case], ["nope"])
