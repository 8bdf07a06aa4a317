"""The user docs read as docs for users: no work-log words (issue numbers, "pass N"), and no
machine-load or clock-time figures; measurement logs live in bench/results/ as dated journals.

README.md is held to the same rule."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = sorted((ROOT / "docs").rglob("*.md"))

#: (what it is, the pattern). Offered load ("offered load 1.2", "at load 0.7") is a simulation
#: parameter and stays allowed; a machine's load is an integer or a range, or "load average N".
_TO = r" *(?:-|\u2013|to) *"  # a range: hyphen, en dash or "to"
WORK_LOG = [
    ("issue number", re.compile(r"\bissue #?\d+", re.IGNORECASE)),
    ("work pass", re.compile(r"\bpass (\d+|one|two|three|four|five|six)\b", re.IGNORECASE)),
    ("this session", re.compile(r"\bthis session\b", re.IGNORECASE)),
    ("load average figure", re.compile(r"\bload average:? *[~\u2248]?\d", re.IGNORECASE)),
    ("machine load range", re.compile(r"\bload \d+(\.\d+)?" + _TO + r"\d", re.IGNORECASE)),
    ("machine load", re.compile(
        r"\b(at|under) load \d+(?![.\d]|" + _TO + r"\d)|\bload (under|about) \d", re.IGNORECASE)),
    ("UTC minute", re.compile(r"\b\d\d:\d\d(" + _TO + r"\d\d:\d\d)? *UTC\b")),
]


def work_log_lines(path: Path) -> list[str]:
    """Each line of ``path`` with work-log text, as ``file:line: kind: text``."""
    found = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        for kind, pattern in WORK_LOG:
            if pattern.search(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {kind}: {line.strip()}")
    return found


@pytest.mark.parametrize("text,kind", [
    ("validation uses since issue 20 grew the bank", "issue number"),
    ("## Fourth pass (2026-12-01 afternoon)", None),  # "Fourth pass" is not "pass four"
    ("the second pass two of the bank", "work pass"),
    ("19.3 s of CPU, 43.5 s wall at load 9\u201311", "machine load range"),
    ("(25 s at load 12, 2026-12-02)", "machine load"),
    ("this 2-core machine shared with other jobs (load average ~16)", "load average figure"),
    ("quiet, 2026-12-01 14:34-14:37 UTC (the method", "UTC minute"),
    ("vs SRTF-Est mean JCT was -9.9 % at load 0.7", None),
    ("offered load 1.2 and 1.5 on a fixed 64-GPU cluster", None),
    ("the machine's load average at the start and end of the run (`load_average`)", None),
    ("Pass a policy, and add the callback with `bind`", None),
])
def test_patterns(text: str, kind: str | None) -> None:
    kinds = [k for k, pattern in WORK_LOG if pattern.search(text)]
    assert kinds == ([kind] if kind else [])


def test_docs_have_no_work_log() -> None:
    assert DOCS, "no docs found"
    found = [hit for page in DOCS for hit in work_log_lines(page)]
    assert not found, "work-log text in docs/ (move it to bench/results/):\n" + "\n".join(found)


def test_readme_has_no_work_log() -> None:
    found = work_log_lines(ROOT / "README.md")
    assert not found, "\n".join(found)
