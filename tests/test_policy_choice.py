"""``policy_choice``: the shipped leave-one-bank-out choice that ``evalstop validate`` reads."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tomllib
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import numpy as np
import pytest

from evalstop import cli
from evalstop.detectors import Eval
from evalstop.experiments import cadence_policy, policy_choice
from evalstop.experiments.cadence_policy import bank_of, policy_specs
from evalstop.experiments.holdout import Case
from evalstop.workloads.bank import build_trl_bank

RISE_FALL = [0.1, 0.3, 0.5, 0.7, 0.9, 0.7, 0.5, 0.3, 0.2, 0.1]


def case(job: str, family: str, label: str, scores: list[float]) -> Case:
    evals = tuple(Eval(i + 1, s, (i + 1) / len(scores)) for i, s in enumerate(scores))
    peak = max(range(len(scores)), key=scores.__getitem__)
    return Case(job, family, label, evals, tuple(scores), peak)


CASES = [case("n0", "base", "hacking", RISE_FALL), case("t0", "trl-proxy", "hacking", RISE_FALL)]
SPECS = ["evalstop:k=1", "evalstop:k=3"]


def test_a_written_choice_is_read_back_only_for_the_same_banks_and_grid(tmp_path: Path) -> None:
    path = tmp_path / "choice.toml"
    assert policy_choice.read_choice(CASES, SPECS, path) is None  # no file
    held = {"chosen": {"numpy": "evalstop:k=3", "trl": "evalstop:k=1"}, "final": "evalstop:k=1"}
    policy_choice.write_choice(held, CASES, SPECS, path)
    assert policy_choice.read_choice(CASES, SPECS, path) == held
    assert policy_choice.read_choice(CASES, [*SPECS, "evalstop:k=2"], path) is None  # another grid
    moved = [CASES[0], case("t0", "trl-proxy", "hacking", [*RISE_FALL[:-1], 0.11])]
    assert policy_choice.read_choice(moved, SPECS, path) is None  # another bank


def test_study_with_a_choice_scores_the_recorded_specs_as_the_search_would() -> None:
    searched = cadence_policy.study("evalstop:k=1", SPECS, CASES)
    held = searched["held_out"]
    read = cadence_policy.study("evalstop:k=1", SPECS, CASES, choice=held)
    assert read["held_out"]["banks"] == held["banks"] and read["banks"] == searched["banks"]
    assert held["searched"] and not read["held_out"]["searched"]
    assert "rule-search.toml" in cadence_policy.render(read)


def test_the_shipped_choice_names_candidates_of_the_grid() -> None:
    data = tomllib.loads(policy_choice.CHOICE_FILE.read_text())
    specs = set(policy_specs())
    assert data["grid"] == policy_choice.grid_digest(policy_specs())
    assert set(data["chosen"]) == {"numpy", "trl", "trl-noisy", "final"}
    assert all(spec in specs for spec in data["chosen"].values())


def test_the_validation_trl_runs_are_new_seeds_of_the_trl_families() -> None:
    runs = policy_choice.validation_trl_bank()
    assert len(runs) == 28 and all(r.job_id.endswith("@seed1") for r in runs)
    assert {bank_of(r.family) for r in runs} == {"trl"}
    assert sum(r.truth.label == "hacking" for r in runs) == 15


#: numpy's AVX-512 kernels off (as tests/test_sim_equivalence.py): the digests pin the banks'
#: values to 9 significant digits, not the CPU's last bits.
AVX512_OFF = {"NPY_DISABLE_CPU_FEATURES": "X86_V4 AVX512_ICL AVX512_SKX AVX512F"}
DIGESTS = (
    "from evalstop.experiments.rule_search import all_cases\n"
    "from evalstop.experiments.policy_choice import bank_digests\n"
    "import json; print(json.dumps(bank_digests(all_cases())))"
)


@pytest.mark.slow
@pytest.mark.parametrize("env", [{}, AVX512_OFF], ids=["cpu", "avx512-off"])
def test_the_shipped_choice_was_made_on_the_shipped_banks(env: dict[str, str]) -> None:
    """``evalstop validate`` reads the choice instead of searching only while the banks match:
    a changed bank (or generator) must come with a rerun of the search (``--write-choice``)."""
    done = subprocess.run([sys.executable, "-c", DIGESTS], env={**os.environ, **env},
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    data = tomllib.loads(policy_choice.CHOICE_FILE.read_text())
    assert json.loads(done.stdout) == data["banks"]


@pytest.mark.slow
def test_validate_reads_the_shipped_choice_instead_of_searching() -> None:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = cli.main(["validate", "--cadences", "none", "--rule", "patience", "--detector", "never",
                         "--supervised", "none"])
    assert code == 0 and "searching" not in err.getvalue()
    text = out.getvalue()
    data = tomllib.loads(policy_choice.CHOICE_FILE.read_text())
    assert f"chosen on all banks: `{data['chosen']['final']}` (the choice recorded in" in text
    assert "| trl | adaptive:every=3,dense=1 | 26 (23) | 21 |" in text  # 21 shipped + 28 validation runs


@pytest.mark.slow
def test_one_validation_run_regenerates_as_shipped() -> None:
    """The validation-only runs are seed 1 of the shipped generator (meta.json has the command)."""
    pytest.importorskip("trl", reason="needs pip install 'evalstop[hf]'")
    (fresh,) = build_trl_bank(1, 1, ["trl-proxy"])
    (shipped,) = [r for r in policy_choice.validation_trl_bank() if r.job_id == f"{fresh.job_id}@seed1"]
    np.testing.assert_allclose([e.score for e in fresh.evals], [e.score for e in shipped.evals], atol=1e-4)
    np.testing.assert_allclose(fresh.truth.true_gold, shipped.truth.true_gold, atol=1e-4)
    assert fresh.truth.label == shipped.truth.label
