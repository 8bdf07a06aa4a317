"""The experiment layer: reproduce, simulate configs, policies, claims."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from evalstop.cli import main
from evalstop.experiments.policies import PolicySpec
from evalstop.experiments.reproduce import headline_study
from evalstop.experiments.runner import run_seed, run_seeds
from evalstop.experiments.simulate_cmd import EXAMPLE, ConfigError, load_config
from evalstop.workloads import PRESETS

SMALL = PRESETS["paper"].with_(n_jobs=300)
HEADLINE_POLICIES = headline_study().policies


@pytest.fixture(scope="module")
def quick_result() -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "evalstop.cli", "reproduce", "--quick", "--json"],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return json.loads(out.stdout)


def test_reproduce_quick_json_has_every_policy_and_claim(quick_result: dict) -> None:
    assert set(quick_result["summary"]) == {p.label for p in HEADLINE_POLICIES}
    assert len(quick_result["rows"]) == 8 * len(HEADLINE_POLICIES)
    names = [c["name"] for c in quick_result["claims"]]
    assert "EvalStop precision" in names and "mean JCT vs SRTF-Est" in names


def test_reproduce_quick_matches_paper_detection_within_tolerance(quick_result: dict) -> None:
    claims = {c["name"]: c for c in quick_result["claims"]}
    for name in (
        "EvalStop precision",
        "EvalStop recall",
        "EvalStop FPR (all non-hacking jobs)",
        "mean JCT vs SRTF-Est",
        "StopAt-0.65 FPR",
        "Loss-plateau misses more than half of the hacking jobs",
    ):
        assert claims[name]["reproduced"], claims[name]


def test_reproduce_reports_the_waste_claim_honestly(quick_result: dict) -> None:
    waste = {c["name"]: c for c in quick_result["claims"]}["wasted GPU-h vs SRTF-Est (after-peak + overhead)"]
    assert waste["ours_value"] < 0  # EvalStop saves compute...
    assert (
        waste["verdict"].startswith("reproduced") == waste["reproduced"]
    )  # ...and the verdict says whether it matches


def test_oracle_bounds_evalstop_regret(quick_result: dict) -> None:
    s = quick_result["summary"]
    assert (
        s["Oracle"]["mean_regret_hacking"]["mean"] <= s["EvalStop + SRTF-Est"]["mean_regret_hacking"]["mean"]
    )
    assert s["Oracle"]["precision"]["mean"] == 1.0


def test_reproduce_text_table_shows_paper_column(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["reproduce", "--seeds", "2", "--workers", "1"]) == 0
    out = capsys.readouterr().out
    assert "| claim | paper | ours (95 % CI) |" in out and "98.3 %" in out


def test_reproduce_rejects_one_seed(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as refused:  # argparse refuses it, naming the command and option
        main(["reproduce", "--seeds", "1"])
    assert refused.value.code == 2
    err = capsys.readouterr().err
    assert "evalstop reproduce: error: argument --seeds: must be an int from 2 to 1000" in err


def test_common_random_numbers_every_policy_sees_the_same_jobs() -> None:
    rows = run_seed(SMALL, HEADLINE_POLICIES[:2], seed=3)
    assert rows[0]["n_jobs"] == rows[1]["n_jobs"] and rows[0]["n_hacking"] == rows[1]["n_hacking"]


def test_pool_and_serial_runs_agree() -> None:
    serial = run_seeds(SMALL, HEADLINE_POLICIES[:2], [1, 2], workers=1)
    pooled = run_seeds(SMALL, HEADLINE_POLICIES[:2], [1, 2], workers=2)
    assert serial == pooled


def test_policy_spec_rejects_unknown_detector() -> None:
    with pytest.raises(ValueError, match="nope"):
        PolicySpec("x", detector="nope").build()


def test_example_config_loads_and_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "c.toml"
    path.write_text(
        EXAMPLE.replace("n_jobs = 1000", "n_jobs = 200").replace("seeds = [1, 2, 3]", "seeds = [1]")
    )
    assert main(["simulate", str(path), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["policy"] for r in rows] == ["SRTF-Est", "EvalStop + SRTF-Est"]
    assert rows[1]["n_killed"] > 0 and rows[0]["n_killed"] == 0


@pytest.mark.parametrize(
    ("doc", "match"),
    [
        ({"policy": [{"base": "srtf"}], "bogus": 1}, "bogus"),
        ({"policy": [{"base": "srtf", "detectr": "evalstop"}]}, "detectr"),
        ({"policy": [{"base": "srtf"}], "workload": {"n_jobs": 0}}, "n_jobs"),
        ({"policy": [{"base": "srtf"}], "workload": {"n_jbos": 5}}, "n_jbos"),
        ({"policy": [{"base": "nosuch"}]}, "nosuch"),
        ({"policy": [{"base": "srtf", "detector": "evalstop:k=0"}]}, "'k' parameter"),
        ({"policy": [{"base": "srtf"}], "sim": {"eval_path": "slow"}}, "eval_path"),
        ({}, "policy"),
    ],
)
def test_bad_configs_name_the_problem(doc: dict, match: str) -> None:
    with pytest.raises((ConfigError, ValueError), match=match):
        load_config(doc)


def test_simulate_bad_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.toml"
    path.write_text("[[policy]]\nbase = 'srtf'\ncolour = 'red'\n")
    assert main(["simulate", str(path)]) == 2
    assert "colour" in capsys.readouterr().err


def test_simulate_example_flag_needs_no_file(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--example"]) == 0
    assert "[[policy]]" in capsys.readouterr().out
    assert main(["simulate"]) == 2
