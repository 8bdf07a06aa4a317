"""Issue 23 (c): the rewind study: a real TRL GRPO trainer rewound in place, and the arms' measures."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from evalstop.experiments.rewind_cmd import read_runs
from evalstop.experiments.rewind_report import rewind_section
from evalstop.experiments.rewind_study import SHIPPED, analyse_families, analyse_rules, deliveries
from evalstop.experiments.rewind_table import format_families


@pytest.mark.slow
def test_a_real_grpo_trainer_rewinds_with_a_stronger_kl() -> None:
    pytest.importorskip("trl", reason="needs pip install -e '.[hf]'")
    from evalstop.detectors import OnDetect
    from evalstop.experiments.rewind_runs import run_arm
    from evalstop.workloads.trl_runs import TrlConfig

    config = TrlConfig().with_(lr=2e-3, beta=1e-3, n_steps=12, n_evals=6, gold_samples=16, eval_prompts=8)
    policy = OnDetect("rewind", max_rewinds=1, correction="kl_coef=0.5")
    run = run_arm(config, np.random.SeedSequence(3), policy, detector="fixed-progress:at=0.5")
    base = run_arm(config, np.random.SeedSequence(3), None)
    # fires at the 3rd eval (step 6, progress 0.5), rewinds to its best eval, fires again at once
    events = [(e["event"], e["step"]) for e in run.log]
    assert events == [("detect", 6), ("rewind", 6), ("detect", 8), ("stop", 8)]
    rewind = run.rewinds[0]
    assert rewind["kl_coef"] == [0.001, 0.5] and rewind["optimizer"] and rewind["scheduler"]
    assert rewind["to_step"] == base.steps[int(np.argmax(base.watched[:3]))]
    assert run.steps_trained == 8 and run.steps == [2, 4, 6, 8]
    assert run.watched[:3] == base.watched[:3]  # the same training up to the detection
    assert run.watched[3] != base.watched[3]  # after it, another policy



@pytest.mark.slow
def test_the_learned_proxy_family_trains_and_rewinds_with_the_reference_reset() -> None:
    pytest.importorskip("trl", reason="needs pip install -e '.[hf]'")
    from evalstop.detectors import OnDetect
    from evalstop.experiments.rewind_runs import base_config, run_arm
    from evalstop.workloads.trl_runs import TrlConfig

    small = {"n_steps": 12, "n_evals": 6, "gold_samples": 16, "eval_prompts": 8}
    config = TrlConfig().with_(**{**base_config("learned"), **small})
    assert config.proxy == "learned" and "proxy" not in base_config("linear")  # the shipped design
    policy = OnDetect("rewind", max_rewinds=1, correction="ref=best,kl_coef=0.5")
    run = run_arm(config, np.random.SeedSequence(3), policy, detector="fixed-progress:at=0.5")
    base = run_arm(config, np.random.SeedSequence(3), None)
    linear = run_arm(TrlConfig().with_(**{**base_config("linear"), **small}), np.random.SeedSequence(3), None)
    rewind = run.rewinds[0]
    assert rewind["ref"] == rewind["checkpoint"] and rewind["kl_coef"] == [0.001, 0.5]
    assert run.watched[:3] == base.watched[:3] and run.watched[3] != base.watched[3]
    assert base.gold != linear.gold  # another reward model, another training

Points = list[tuple[int, float, float]]


def _seed(base: Points, rewound: Points, log: list[str]) -> dict:
    def run(points: Points, events: list[dict]) -> dict:
        steps, watched, gold = (list(x) for x in zip(*points, strict=True))
        return {"steps": steps, "watched": watched, "gold": gold, "cpu_s": 0.1 * len(points),
                "steps_trained": steps[-1], "log": events, "rewinds": []}
    events = {"rewind": [{"event": "detect", "step": 8}, {"event": "rewind", "step": 8}],
              "stop": [{"event": "detect", "step": 12}, {"event": "stop", "step": 12, "best_step": 10}]}
    return {"base": run(base, []), "rewind-kl": run(rewound, [e for name in log for e in events[name]])}


def test_the_arms_deliver_what_the_rules_say() -> None:
    # watched rises to step 4 then falls fast: the default rule stops the base run; gold falls too
    base = [(s, 0.1 * s if s <= 4 else 0.4 - 0.3 * (s - 4), 0.1 * s if s <= 4 else 0.4 - 0.2 * (s - 4))
            for s in range(1, 13)]
    rewound = [*base[:8], (9, 0.45, 0.45), (10, 0.5, 0.5), (11, 0.2, 0.35), (12, 0.1, 0.2)]
    arms = deliveries(_seed(base, rewound, ["rewind", "stop"]), ["rewind-kl"])
    stop = arms["stop"]
    assert stop["detect_step"] is not None and stop["steps"] == stop["detect_step"]
    assert stop["quality"] == pytest.approx(0.4)  # the best checkpoint, step 4
    assert arms["none"]["quality"] == pytest.approx(base[-1][2]) and arms["none"]["steps"] == 12
    kl = arms["rewind-kl"]
    assert kl["quality"] == pytest.approx(0.5) and kl["steps"] == 12  # its second stop delivers step 10
    assert kl["rewound"] and kl["detected_again"] and kl["hacked_again"]  # gold 0.5 -> 0.2 after the rewind
    assert arms["none"]["anytime"][-1] == arms["none"]["quality"]


def test_the_shipped_runs_give_the_table(tmp_path: Path) -> None:
    if not SHIPPED.is_file():
        pytest.skip("the rewind study's runs are not shipped in this checkout")
    results = analyse_rules(read_runs(SHIPPED))
    for result in results.values():
        assert result["n_seeds"] == 20 and set(result["arms"]) == {"none", "stop", "rewind-kl", "rewind-lr"}
    for seed in read_runs(SHIPPED)[0]["seeds"]:  # each rewind run repeated the base run up to its detection
        for arm in ("rewind-kl", "rewind-lr"):
            detect = next((e["step"] for e in seed[arm]["log"] if e["event"] == "detect"), None)
            n = len([s for s in seed["base"]["steps"] if detect is None or s <= detect])
            assert seed[arm]["watched"][:n] == seed["base"]["watched"][:n]
    text = format_families(analyse_families(read_runs(SHIPPED)))
    assert text.startswith("Rewind study, proxy family linear: 20 seeds")
    assert text.count("| pooled | stop |") == 4 and text.count("| pooled | rewind-kl |") == 4
    assert "End of budget: final" in text and "End of budget: best by watched eval" in text
    command = [sys.executable, "-m", "evalstop.cli", "rewind"]
    out = subprocess.run(command, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == text
    pytest.importorskip("matplotlib", reason="the figure needs the plot extra")
    lines, page, png = rewind_section(tmp_path)
    assert png is not None and png.stat().st_size > 10_000 and text in lines and "data:image/png" in page


def _by_the_rule(run: dict, end: int, stopped: bool, end_rule: str) -> float:
    """Independent of the study's code: the first highest watched eval up to ``end`` at a stop or
    under the "best" end-of-run rule, else the last eval up to ``end``; its true gold."""
    evals = [(s, w, g) for s, w, g in zip(run["steps"], run["watched"], run["gold"], strict=True) if s <= end]
    if stopped or end_rule == "best":
        return max(evals, key=lambda e: (e[1], -e[0]))[2]
    return evals[-1][2]


def _ends(seed: dict, arms: list[str], stop_step: int | None) -> dict[str, tuple[dict, int, bool]]:
    """Per arm: its run, where it ended, whether a stop ended it."""
    base = seed["base"]
    out = {"none": (base, base["steps_trained"], False),
           "stop": (base, stop_step or base["steps_trained"], stop_step is not None)}
    for arm in arms:
        stop = next((e["step"] for e in seed[arm]["log"] if e["event"] == "stop"), None)
        out[arm] = (seed[arm], stop or seed[arm]["steps_trained"], stop is not None)
    return out


@pytest.mark.parametrize("end_rule", ["final", "best"])
def test_every_arm_delivers_by_the_same_rule(end_rule: str) -> None:
    # the rewound run climbs again after its rewind and reaches the end without a second stop
    base = [(s, 0.1 * s if s <= 4 else 0.4 - 0.3 * (s - 4), 0.1 * s if s <= 4 else 0.4 - 0.2 * (s - 4))
            for s in range(1, 13)]
    rewound = [*base[:8], (9, 0.45, 0.45), (10, 0.5, 0.5), (11, 0.3, 0.35), (12, 0.25, 0.2)]
    seeds = [_seed(base, rewound, ["rewind"])]
    if SHIPPED.is_file():
        seeds += read_runs(SHIPPED)[0]["seeds"]
    arms = ["rewind-kl"]
    n_ended_unstopped = 0
    for seed in seeds:
        got = deliveries(seed, arms, end_rule)
        for arm, (run, end, stopped) in _ends(seed, arms, got["stop"]["detect_step"]).items():
            expected = _by_the_rule(run, end, stopped, end_rule)
            assert got[arm]["quality"] == pytest.approx(expected), (arm, end_rule)
            assert got[arm]["steps"] == end
            n_ended_unstopped += arm.startswith("rewind") and not stopped
    assert n_ended_unstopped >= 1  # the case where the rules differ is covered
    synthetic = deliveries(seeds[0], arms, end_rule)["rewind-kl"]["quality"]
    assert synthetic == pytest.approx(0.5 if end_rule == "best" else 0.2)


def test_batches_are_summarised_apart_and_pooled(tmp_path: Path) -> None:
    if not SHIPPED.is_file():
        pytest.skip("the rewind study's runs are not shipped in this checkout")
    from evalstop.experiments.rewind_cmd import write_runs

    (runs,) = read_runs(SHIPPED)
    halves = [{**runs, "study_seed": b, "seeds": runs["seeds"][10 * b:10 * (b + 1)]} for b in (0, 1)]
    paths = [tmp_path / f"b{b}.json.gz" for b in (0, 1)]
    for half, path in zip(halves, paths, strict=True):
        write_runs([half], path)
    results = analyse_rules(read_runs(paths[0]) + read_runs(paths[1]))
    whole = analyse_rules([runs])
    for rule, result in results.items():
        assert set(result["batches"]) == {"0", "1"} and result["n_seeds"] == 20
        assert result["arms"]["rewind-kl"]["quality"] == whole[rule]["arms"]["rewind-kl"]["quality"]
        for b, half in zip("01", halves, strict=True):
            alone = analyse_rules([half])[rule]["arms"]["rewind-kl"]
            assert result["batches"][b]["arms"]["rewind-kl"]["quality_vs_stop"] == alone["quality_vs_stop"]
        rows = result["rows"]
        per_h = [r["stop"]["quality"] / (r["stop"]["steps"] * result["cpu_s_per_step"] / 3600) for r in rows]
        assert result["arms"]["stop"]["quality_per_gpu_h"][0] == pytest.approx(float(np.mean(per_h)))
    command = [sys.executable, "-m", "evalstop.cli", "rewind", *(a for p in paths for a in ("--runs", p))]
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    assert out.count("| seed 1 | rewind-lr |") == 4 and out.count("| pooled | rewind-lr |") == 4
    write_runs([{**halves[1], "base": {**runs["base"], "proxy": "learned"}}], paths[1])  # another family
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    assert "proxy family linear: 10 seeds per arm (study seed 0: 10)" in out
    assert "proxy family learned: 10 seeds per arm (study seed 1: 10)" in out
    write_runs([{**halves[1], "corrections": {"rewind-kl": "kl_coef=0.5"}}], paths[1])
    bad = subprocess.run(command, capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "ran another design" in bad.stderr
