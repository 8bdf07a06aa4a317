"""``evalstop replay`` reads the bank's per-prompt ``items``: ``paired`` gets its paired test."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest

from evalstop.cli import main
from evalstop.detectors import Eval, ItemEval, parse_spec
from evalstop.experiments.holdout import outcomes
from evalstop.experiments.validate import bank_cases
from evalstop.replay import CurvesError, read_curves, replay_rows
from evalstop.workloads.bank import BankRun, build_bank, read_bank, write_bank

FAMILIES = ["base", "lr-high", "eval-small", "control-gold"]


@pytest.fixture(scope="module")
def bank_dirs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The same small bank written with and without the items column."""
    runs = build_bank(5, 2, FAMILIES)
    with_items, without = tmp_path_factory.mktemp("items"), tmp_path_factory.mktemp("no-items")
    write_bank(runs, with_items)
    write_bank(runs, without, items=False)
    return with_items, without


def replay_csv(curves: Path, spec: str, out: Path) -> list[dict[str, str]]:
    assert main(["replay", str(curves), "--detector", spec, "--out", str(out)]) == 0
    with out.open(newline="") as f:
        return list(csv.DictReader(f))


def validate_stop_steps(runs: list[BankRun], spec: str) -> dict[str, str]:
    """What ``evalstop validate --bank`` sees for ``spec``: the stop step per run ('' = none)."""
    cases = bank_cases(runs)
    stops = {}
    for case, result in zip(cases, outcomes([spec], cases)[spec], strict=True):
        stops[case.job_id] = "" if result.stop_index is None else str(case.evals[result.stop_index].step)
    return stops


def test_read_curves_gives_item_evals_with_the_bank_items(bank_dirs: tuple[Path, Path]) -> None:
    with_items, _ = bank_dirs
    with (with_items / "curves.csv").open(newline="") as f:
        jobs = read_curves(csv.DictReader(f))
    runs = read_bank(with_items)
    assert list(jobs) == [r.job_id for r in runs]
    for run in runs:
        assert all(isinstance(ev, ItemEval) for ev in jobs[run.job_id])
        assert jobs[run.job_id] == list(run.evals)


def test_paired_replay_matches_validate_in_memory(bank_dirs: tuple[Path, Path], tmp_path: Path) -> None:
    with_items, _ = bank_dirs
    runs = read_bank(with_items)
    replayed = replay_csv(with_items / "curves.csv", "paired", tmp_path / "out.csv")
    assert {r["job_id"]: r["stop_step"] for r in replayed} == validate_stop_steps(runs, "paired")
    assert {r["stopped"] for r in replayed} == {"true", "false"}  # the bank exercises both outcomes


def test_items_change_what_paired_decides(bank_dirs: tuple[Path, Path], tmp_path: Path) -> None:
    with_items, without = bank_dirs
    paired = replay_csv(with_items / "curves.csv", "paired", tmp_path / "a.csv")
    # Without items the rule falls back to its unpaired test (what a library caller gets); the
    # replay command refuses that file instead (issue 19: it used to exit 0 and stop nothing).
    with (without / "curves.csv").open(newline="") as f:
        unpaired = replay_rows(csv.DictReader(f), parse_spec("paired"))
    stops = [int(r["stop_step"]) if r["stop_step"] else None for r in paired]
    assert stops != [r["stop_step"] for r in unpaired]
    assert main(["replay", str(without / "curves.csv"), "--detector", "paired"]) != 0


@pytest.mark.parametrize(
    "spec", ["evalstop", "evalstop:k=2,against=best", "cusum", "noise-aware", "patience"]
)
def test_other_rules_ignore_items(bank_dirs: tuple[Path, Path], tmp_path: Path, spec: str) -> None:
    with_items, without = bank_dirs
    assert replay_csv(with_items / "curves.csv", spec, tmp_path / "a.csv") == replay_csv(
        without / "curves.csv", spec, tmp_path / "b.csv"
    )


def test_items_cell_is_split_on_semicolons_and_an_empty_cell_gives_a_plain_eval() -> None:
    data = [
        {"job_id": "j", "step": "1", "score": "0.4", "items": "0.5;nan;0.25"},
        {"job_id": "j", "step": "2", "score": "0.4", "items": ""},
    ]
    first, second = read_curves(data)["j"]
    assert isinstance(first, ItemEval) and first.items[::2] == (0.5, 0.25) and math.isnan(first.items[1])
    assert type(second) is Eval


def test_bad_items_name_the_line_and_job() -> None:
    data = [
        {"job_id": "j", "step": "1", "score": "0.4", "items": "0.1;0.2"},
        {"job_id": "j", "step": "2", "score": "0.4", "items": "0.1;x"},
    ]
    with pytest.raises(CurvesError, match=r"line 3, job 'j': items must be numbers joined by ';', got 'x'"):
        read_curves(data)
