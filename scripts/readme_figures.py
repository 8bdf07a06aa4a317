"""Measure the README's figures, and rewrite (``write``) or check (``check``) them.

Each figure is stated once, in a generated block of README.md between
``<!-- readme_figures: NAME -->`` and ``<!-- /readme_figures -->``; every other mention points
to it. The recorded values are in bench/readme-figures.json; the blocks are rendered from them.

- ``headline``: the two tables ``evalstop reproduce`` prints, verbatim (checked exactly).
- ``timings``: CPU time (user + system, worker processes included: ``getrusage`` of the
  children) of ``evalstop reproduce`` and ``evalstop reproduce --quick``, run here; of
  ``evalstop reproduce --all --seeds 3`` from its ``results.json`` (``cpu_s``, written by the
  run itself; CI's run in results/ci, so CI runs ``--all`` once); the task counts of ``--all`` at
  its default seeds (from the study specs) and at 3 seeds; the test suite's passed and skipped
  counts (from pytest's JUnit XML). CPU time varies between machines: ``check`` accepts a
  factor of 1.5 either way. Counts must match exactly.

    python scripts/readme_figures.py write [--all-results DIR] [--pytest-xml FILE]
    python scripts/readme_figures.py check --all-results results/ci     # before pytest (CI)
    python scripts/readme_figures.py check-tests results/ci/pytest.xml  # after pytest (CI)
    python scripts/readme_figures.py render     # the README's blocks from the record, nothing run

``write`` without ``--all-results`` runs ``--all --seeds 3 --no-cache`` itself; without
``--pytest-xml`` it keeps the recorded test counts.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
RECORD = ROOT / "bench" / "readme-figures.json"
CPU_FACTOR = 1.5
CI_SEEDS = 3
_BLOCK = re.compile(r"(<!-- readme_figures: (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- /readme_figures -->)",
                    re.S)


def evalstop(*args: str) -> tuple[str, float]:
    """stdout and CPU seconds (user + system, with every process it waited for) of a command."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run([sys.executable, "-m", "evalstop.cli", *args], capture_output=True, text=True,
                          check=False, cwd=ROOT)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        sys.exit(f"readme_figures: evalstop {' '.join(args)} failed ({proc.returncode}):\n"
                 f"{proc.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return proc.stdout, round(cpu, 1)


def headline_tables(stdout: str) -> str:
    """The policy table and the claims table of ``evalstop reproduce``'s output."""
    tables = [block for block in stdout.split("\n\n") if block.startswith("| ")]
    return "\n\n".join(tables[:2]) + "\n"


def default_all_tasks() -> int:
    from evalstop.experiments.spec import load_studies
    from evalstop.experiments.suite import plan_tasks

    _, tasks = plan_tasks(load_studies())
    return len({(t.key, t.seed) for t in tasks})


def all_run(results: Path | None) -> dict[str, Any]:
    """Tasks and CPU time of ``--all --seeds 3``, from its results.json (run now when None)."""
    if results is None:
        with tempfile.TemporaryDirectory() as tmp:
            evalstop("reproduce", "--all", "--seeds", str(CI_SEEDS), "--no-cache", "--no-report",
                     "--out", tmp)
            return all_run(Path(tmp))
    doc = json.loads((results / "results.json").read_text())
    if doc.get("seeds_override") != CI_SEEDS or doc["tasks"]["cached"]:
        sys.exit(f"readme_figures: {results} is not a run of --all --seeds {CI_SEEDS} without the cache "
                 f"(seeds {doc.get('seeds_override')}, {doc['tasks']['cached']} tasks from the cache)")
    return {"tasks": doc["tasks"]["ran"], "cpu_s": round(doc["cpu_s"], 1)}


def machine() -> str:
    """The machine in plain words: cores and CPU model (and AVX-512, which numpy uses)."""
    model, flags = platform.processor() or "unknown CPU", ""
    try:
        info = Path("/proc/cpuinfo").read_text()
        model = re.search(r"model name\s*: (.*)", info).group(1).strip()  # type: ignore[union-attr]
        flags = " with AVX-512" if " avx512f" in info else ""
    except (OSError, AttributeError):
        pass
    return f"{os.cpu_count()} cores, {model}{flags}"


def measure(results: Path | None) -> dict[str, Any]:
    out, cpu = evalstop("reproduce")
    _, quick = evalstop("reproduce", "--quick")
    return {"machine": machine(), "headline": headline_tables(out), "cpu_reproduce_s": cpu,
            "cpu_quick_s": quick, "all_default_tasks": default_all_tasks(), "all_ci": all_run(results)}


def test_counts(xml: Path) -> dict[str, int]:
    """passed and skipped of a pytest JUnit XML; a failure or error is not a count to record."""
    suites = ET.parse(xml).getroot()
    suite = suites if suites.tag == "testsuite" else suites.find("testsuite")
    assert suite is not None
    n = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
    if n["failures"] or n["errors"]:
        sys.exit(f"readme_figures: {xml}: {n['failures']} failed, {n['errors']} errors")
    return {"passed": n["tests"] - n["skipped"], "skipped": n["skipped"]}


def render(rec: dict[str, Any]) -> dict[str, str]:
    ci, tests = rec["all_ci"], rec["tests"]
    timings = (
        f"Measured by `python scripts/readme_figures.py write` on {rec['machine']}. CPU time is user +\n"
        "system time of the command and its worker processes; unlike wall time, it changes little\n"
        "when the machine is busy, and CI checks it to within a factor of 1.5.\n\n"
        "| command | tasks | CPU time |\n|---|---|---|\n"
        f"| `evalstop reproduce --quick` | 8 seeds | {rec['cpu_quick_s']} s |\n"
        f"| `evalstop reproduce` | 30 seeds | {rec['cpu_reproduce_s']} s |\n"
        f"| `evalstop reproduce --all --seeds {CI_SEEDS}` (what CI runs) | {ci['tasks']:,} "
        f"| {ci['cpu_s']} s |\n"
        f"| `evalstop reproduce --all` (default seeds) | {rec['all_default_tasks']:,} | — |\n\n"
        "—: not measured by the script, which would have to run every study at full seeds; the\n"
        "command prints its own time at the end.\n\n"
        f"The test command's pytest run: {tests['passed']:,} passed, {tests['skipped']} skipped.\n")
    return {"headline": rec["headline"], "timings": timings}


def rewrite(text: str, blocks: dict[str, str]) -> str:
    def sub(m: re.Match[str]) -> str:
        return m.group(1) + blocks[m.group("name")] + m.group(4)

    return _BLOCK.sub(sub, text)


def compare(rec: dict[str, Any], got: dict[str, Any]) -> list[str]:
    """What differs: CPU figures beyond the factor, anything else at all."""
    problems = []
    for key in ("cpu_reproduce_s", "cpu_quick_s"):
        problems += _cpu(key, rec[key], got[key])
    problems += _cpu("all_ci.cpu_s", rec["all_ci"]["cpu_s"], got["all_ci"]["cpu_s"])
    for key, a, b in (("headline", rec["headline"], got["headline"]),
                      ("all_default_tasks", rec["all_default_tasks"], got["all_default_tasks"]),
                      ("all_ci.tasks", rec["all_ci"]["tasks"], got["all_ci"]["tasks"])):
        if a != b:
            problems.append(f"{key}: the README says {a!r}, measured {b!r}")
    return problems


def _cpu(key: str, stated: float, measured: float) -> list[str]:
    if measured > stated * CPU_FACTOR or measured < stated / CPU_FACTOR:
        return [f"{key}: the README says {stated} s of CPU, measured {measured} s (beyond x{CPU_FACTOR})"]
    return []


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=("write", "check", "check-tests", "render"))
    parser.add_argument("xml", nargs="?", type=Path, help="check-tests: pytest's --junitxml file")
    parser.add_argument("--all-results", type=Path, default=None,
                        help=f"results of `evalstop reproduce --all --seeds {CI_SEEDS}` (no cache)")
    parser.add_argument("--pytest-xml", type=Path, default=None, help="write: the test counts from here")
    args = parser.parse_args(argv)
    rec: dict[str, Any] = json.loads(RECORD.read_text()) if RECORD.is_file() else {}
    text = README.read_text()
    if args.mode == "check-tests":
        if args.xml is None:
            parser.error("check-tests needs the JUnit XML file")
        got = test_counts(args.xml)
        if got != rec["tests"]:
            print(f"readme_figures: the README says {rec['tests']}, pytest ran {got}: "
                  "rerun `python scripts/readme_figures.py write --pytest-xml FILE`", file=sys.stderr)
            return 1
        print(f"readme_figures: test counts match ({got['passed']} passed, {got['skipped']} skipped)")
        return 0
    if args.mode == "render":
        README.write_text(rewrite(text, render(rec)))
        return 0
    got = measure(args.all_results)
    if args.mode == "write":
        got["tests"] = test_counts(args.pytest_xml) if args.pytest_xml else rec["tests"]
        RECORD.write_text(json.dumps(got, indent=1) + "\n")
        README.write_text(rewrite(text, render(got)))
        print(f"readme_figures: wrote {RECORD.relative_to(ROOT)} and the README's blocks")
        return 0
    problems = compare(rec, got)
    if rewrite(text, render(rec)) != text:
        problems.append("README.md's generated blocks differ from bench/readme-figures.json")
    for p in problems:
        print(f"readme_figures: {p}", file=sys.stderr)
    if not problems:
        print(f"readme_figures: the README's figures hold (CPU within x{CPU_FACTOR}: "
              f"{got['cpu_reproduce_s']} s, {got['cpu_quick_s']} s, {got['all_ci']['cpu_s']} s measured)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
