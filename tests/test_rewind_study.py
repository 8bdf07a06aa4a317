"""Issue 23 (c): the rewind study: a real TRL GRPO trainer rewound in place, and the arms' measures."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from evalstop.experiments.rewind_cmd import read_runs
from evalstop.experiments.rewind_report import rewind_section
from evalstop.experiments.rewind_study import SHIPPED, analyse, deliveries, format_table


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
    result = analyse(read_runs(SHIPPED))
    assert result["n_seeds"] == 20 and set(result["arms"]) == {"none", "stop", "rewind-kl", "rewind-lr"}
    for seed in read_runs(SHIPPED)["seeds"]:  # each rewind run repeated the base run up to its detection
        for arm in ("rewind-kl", "rewind-lr"):
            detect = next((e["step"] for e in seed[arm]["log"] if e["event"] == "detect"), None)
            n = len([s for s in seed["base"]["steps"] if detect is None or s <= detect])
            assert seed[arm]["watched"][:n] == seed["base"]["watched"][:n]
    text = format_table(result)
    assert "| stop |" in text and "| rewind-kl |" in text
    command = [sys.executable, "-m", "evalstop.cli", "rewind"]
    out = subprocess.run(command, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == text
    pytest.importorskip("matplotlib", reason="the figure needs the plot extra")
    lines, page, png = rewind_section(tmp_path)
    assert png is not None and png.stat().st_size > 10_000 and text in lines and "data:image/png" in page
