"""scripts/readme_figures.py: the README's figures come from one record, and its check accepts
CPU time within a factor of 1.5 while counts and tables must match exactly."""

from __future__ import annotations

import copy
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("readme_figures", ROOT / "scripts" / "readme_figures.py")
assert _spec is not None and _spec.loader is not None
figures = importlib.util.module_from_spec(_spec)
sys.modules["readme_figures"] = figures
_spec.loader.exec_module(figures)


@pytest.fixture
def record() -> dict[str, Any]:
    rec: dict[str, Any] = json.loads(figures.RECORD.read_text())
    return rec


def test_the_readme_blocks_are_the_record_rendered(record: dict[str, Any]) -> None:
    text = figures.README.read_text()
    names = [m.group("name") for m in figures._BLOCK.finditer(text)]
    assert sorted(names) == ["headline", "timings"]
    assert figures.rewrite(text, figures.render(record)) == text  # else: scripts/readme_figures.py render


def test_each_figure_is_stated_once(record: dict[str, Any]) -> None:
    """The CPU times and task counts appear in the Timings block only; the rest refer to it."""
    text = figures.README.read_text()
    for value in (f"{record['cpu_reproduce_s']} s", f"{record['cpu_quick_s']} s",
                  f"{record['all_default_tasks']:,} tasks", f"{record['all_default_tasks']:,} |"):
        assert text.count(value) <= 1, value
    assert "p = 2e-40" not in text  # the claims table is the command's, not a rounded copy


@pytest.mark.parametrize(("factor", "ok"), [(1.0, True), (1.49, True), (1 / 1.49, True), (1.6, False),
                                            (1 / 1.6, False)])
def test_cpu_figures_pass_within_the_factor(record: dict[str, Any], factor: float, ok: bool) -> None:
    got = copy.deepcopy(record)
    got["cpu_reproduce_s"] = record["cpu_reproduce_s"] * factor
    problems = figures.compare(record, got)
    assert (problems == []) is ok, problems
    if not ok:
        assert "cpu_reproduce_s" in problems[0] and "x1.5" in problems[0]


@pytest.mark.parametrize("change", ["all_default_tasks", "all_ci.tasks", "headline"])
def test_counts_and_tables_must_match_exactly(record: dict[str, Any], change: str) -> None:
    got = copy.deepcopy(record)
    if change == "all_ci.tasks":
        got["all_ci"]["tasks"] += 1
    elif change == "headline":
        got["headline"] = got["headline"].replace("p=", "p = ", 1)
    else:
        got[change] += 1
    assert [p for p in figures.compare(record, got) if p.startswith(change)]


def test_headline_tables_are_taken_from_the_commands_output() -> None:
    out = ("EvalStop headline: ...\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n| claim |\n|---|\n| c |\n\n"
           "Columns:\n  a: x\n")
    assert figures.headline_tables(out) == "| a | b |\n|---|---|\n| 1 | 2 |\n\n| claim |\n|---|\n| c |\n"


def _junit(path: Path, tests: int, failures: int = 0, skipped: int = 0) -> Path:
    path.write_text(f'<?xml version="1.0"?><testsuites><testsuite name="pytest" tests="{tests}" '
                    f'failures="{failures}" errors="0" skipped="{skipped}"></testsuite></testsuites>')
    return path


def test_test_counts_come_from_the_junit_file_and_a_failure_is_not_recorded(tmp_path: Path) -> None:
    assert figures.test_counts(_junit(tmp_path / "a.xml", 100, skipped=7)) == {"passed": 93, "skipped": 7}
    with pytest.raises(SystemExit, match="1 failed"):
        figures.test_counts(_junit(tmp_path / "b.xml", 100, failures=1))


def test_check_tests_fails_on_another_count(tmp_path: Path, record: dict[str, Any]) -> None:
    n = record["tests"]
    assert figures.main(["check-tests", str(_junit(tmp_path / "ok.xml", n["passed"] + n["skipped"],
                                                   skipped=n["skipped"]))]) == 0
    assert figures.main(["check-tests", str(_junit(tmp_path / "no.xml", n["passed"] + n["skipped"] + 1,
                                                   skipped=n["skipped"]))]) == 1


def test_the_ci_command_and_the_readme_run_the_same_figures_checks() -> None:
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert f"\n{ci}\n" in figures.README.read_text()
    assert "readme_figures.py check --all-results results/ci" in ci
    assert ci.index("readme_figures.py check-tests") > ci.index("pytest -q --junitxml=results/ci/pytest.xml")
