"""``evalstop simulate`` with ``[workload] bank``: RLHF jobs replay bank runs, per seed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalstop.cli import main
from evalstop.experiments.policies import PolicySpec
from evalstop.experiments.runner import run_seeds
from evalstop.experiments.simulate_cmd import ConfigError, load_config
from evalstop.workloads import PRESETS, generate
from evalstop.workloads.bank import bank_workload, build_bank, read_bank, write_bank

N_JOBS = 150
SEEDS = [1, 2]
POLICIES = """
[[policy]]
label = "SRTF-Est"
base = "srtf"

[[policy]]
label = "EvalStop"
base = "srtf"
detector = "evalstop:k=2,against=best"
"""


@pytest.fixture(scope="module")
def banks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``<root>/mixed`` (hacking and healthy runs), ``<root>/hacking``, ``<root>/healthy``."""
    root = tmp_path_factory.mktemp("banks")
    hacking, healthy = build_bank(0, 3, ["lr-high"]), build_bank(0, 3, ["control-gold"])
    assert {r.truth.label for r in hacking} == {"hacking"} and {r.truth.label for r in healthy} == {"healthy"}
    write_bank(hacking + healthy, root / "mixed")
    write_bank(hacking, root / "hacking", items=False)
    write_bank(healthy, root / "healthy", items=False)
    return root


def write_config(directory: Path, bank: str) -> Path:
    path = directory / "sim.toml"
    workload = f'[workload]\npreset = "paper"\nn_jobs = {N_JOBS}\nbank = "{bank}"\n'
    path.write_text(f"seeds = {SEEDS}\n\n{workload}{POLICIES}")
    return path


def simulate(config: Path, capsys: pytest.CaptureFixture[str]) -> list[dict]:
    assert main(["simulate", str(config), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def n_rlhf(seed: int) -> int:
    return sum(job.kind == "rlhf" for job in generate(PRESETS["paper"].with_(n_jobs=N_JOBS), seed).jobs)


def test_rlhf_outcomes_follow_the_bank_labels(banks: Path, capsys: pytest.CaptureFixture[str]) -> None:
    hacking = simulate(write_config(banks, "hacking"), capsys)
    healthy = simulate(write_config(banks, "healthy"), capsys)
    assert [r["n_hacking"] for r in hacking] == [n_rlhf(s) for s in SEEDS for _ in range(2)]
    assert [r["n_hacking"] for r in healthy] == [0] * 4
    assert all(r["false_positives"] == 0 for r in hacking) and all(r["true_positives"] == 0 for r in healthy)


def test_mixed_bank_hacking_count_is_that_of_the_bank_runs_drawn(
    banks: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = simulate(write_config(banks, "mixed"), capsys)
    runs = read_bank(banks / "mixed")
    config = PRESETS["paper"].with_(n_jobs=N_JOBS)
    expected = [sum(t.hacking for t in bank_workload(generate(config, s), runs, s).truth) for s in SEEDS]
    assert [r["n_hacking"] for r in rows] == [n for n in expected for _ in range(2)]
    assert 0 < expected[0] < n_rlhf(SEEDS[0])


def test_bank_path_is_relative_to_the_config_file(
    banks: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "configs").mkdir()
    config = write_config(tmp_path / "configs", str(Path("..") / "elsewhere"))
    monkeypatch.chdir(banks)
    assert main(["simulate", str(config)]) == 2
    assert str(tmp_path / "configs" / ".." / "elsewhere") in capsys.readouterr().err
    monkeypatch.chdir(tmp_path)
    assert simulate(write_config(banks, "healthy"), capsys)[0]["n_hacking"] == 0


def test_serial_and_pooled_bank_runs_agree(banks: Path) -> None:
    config, runs = PRESETS["paper"].with_(n_jobs=N_JOBS), tuple(read_bank(banks / "mixed"))
    policies = [PolicySpec("EvalStop", detector="evalstop:k=2,against=best")]
    serial = run_seeds(config, policies, SEEDS, workers=1, bank=runs)
    assert serial == run_seeds(config, policies, SEEDS, workers=2, bank=runs)
    assert serial != run_seeds(config, policies, SEEDS, workers=1)


def test_missing_bank_dir_exits_2_naming_the_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = write_config(tmp_path, "no-such-bank")
    assert main(["simulate", str(config), "--json"]) == 2
    err = capsys.readouterr().err
    assert str(tmp_path / "no-such-bank") in err and "not a directory" in err


@pytest.mark.parametrize(
    ("breakage", "match"),
    [
        ("no-curves", r"cannot read the bank in .*broken.*curves\.csv"),
        ("truth-without-label", r"cannot read the bank in .*broken: missing column 'label'"),
        ("empty", r".*broken has no hacking or healthy run"),
    ],
)
def test_bad_bank_files_are_config_errors_naming_the_path(banks: Path, tmp_path: Path, breakage: str,
                                                           match: str) -> None:
    broken = tmp_path / "broken"
    broken.mkdir()
    curves = (banks / "healthy" / "curves.csv").read_text()
    truth = (banks / "healthy" / "truth.csv").read_text().splitlines()
    if breakage != "no-curves":
        (broken / "curves.csv").write_text(curves)
    if breakage == "truth-without-label":
        truth = [line.replace("label,", "labl,", 1) for line in truth]
    (broken / "truth.csv").write_text("\n".join(truth[:1] if breakage == "empty" else truth) + "\n")
    with pytest.raises(ConfigError, match=match):
        load_config({"policy": [{"base": "srtf"}], "workload": {"bank": "broken"}}, base_dir=tmp_path)


def test_bank_must_be_a_path_string() -> None:
    with pytest.raises(ConfigError, match=r"\[workload\]: 'bank' must be a string"):
        load_config({"policy": [{"base": "srtf"}], "workload": {"bank": 3}})
