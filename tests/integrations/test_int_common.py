"""What the integrations share: light imports, the missing-extra message, detector resolution,
the per-job history."""

from __future__ import annotations

import math
import re
import subprocess
import sys

import pytest

from evalstop.detectors import DEFAULT_SPEC, Eval, KDeclines, NeverStop, parse_spec
from evalstop.integrations._common import EvalHistory, as_score, evals_from_rows, resolve_detector

HEAVY = ("torch", "transformers", "trl", "ray", "optuna", "datasets", "accelerate")


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_importing_evalstop_and_integrations_stays_light() -> None:
    proc = run_python(
        "import sys, evalstop, evalstop.integrations\n"
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))"
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("blocked", "name", "extra"),
    [
        ("transformers", "EvalStopCallback", "hf"),
        ("ray", "EvalStopStopper", "tune"),
        ("ray", "EvalStopScheduler", "tune"),
        ("optuna", "EvalStopPruner", "optuna"),
    ],
)
def test_a_missing_extra_names_what_to_install(blocked: str, name: str, extra: str) -> None:
    proc = run_python(
        f"import sys; sys.modules[{blocked!r}] = None\n"
        f"from evalstop.integrations import {name}"
    )
    assert proc.returncode != 0
    assert f"pip install -e '.[{extra}]'" in proc.stderr.strip().splitlines()[-1]


def test_resolve_detector() -> None:
    assert resolve_detector(None, None, "X") == parse_spec(DEFAULT_SPEC)
    assert resolve_detector("evalstop:k=3", "min", "X") == KDeclines(k=3, mode="min")
    rule = NeverStop()
    assert resolve_detector(rule, None, "X") is rule
    message = "The 'mode' parameter of X must be one of 'max', 'min'. Got 'up' instead."
    with pytest.raises(ValueError, match=re.escape(message)):
        resolve_detector(None, "up", "X")
    with pytest.raises(TypeError, match="The 'detector' parameter of X"):
        resolve_detector(KDeclines, None, "X")  # type: ignore[arg-type]


def test_history_fires_once_and_ignores_repeated_steps() -> None:
    history = EvalHistory(KDeclines(k=2))
    fired = []
    for step, score in [(1, 0.1), (2, 0.5), (2, 0.9), (3, 0.4), (4, math.nan), (5, 0.3), (6, 0.2)]:
        verdict = history.add(Eval(step, score))
        fired.append(None if verdict is None else history.fired_now)
    assert fired == [False, False, None, False, False, True, None]  # step 2 repeats; 6 is after the stop
    assert (history.verdict.stop_step, history.verdict.best_step, history.verdict.n_invalid) == (5, 2, 1)
    record = history.record()
    assert record["evals"][3] == [4, None, None, None]  # NaN is written as null (valid JSON)
    assert [e.step for e in evals_from_rows(record["evals"])] == [1, 2, 3, 4, 5]
    assert math.isnan(evals_from_rows(record["evals"])[3].score)


def test_as_score() -> None:
    assert as_score(0.5) == 0.5 and as_score("0.25") == 0.25
    assert math.isnan(as_score(None)) and math.isnan(as_score("n/a")) and math.isnan(as_score([1]))
