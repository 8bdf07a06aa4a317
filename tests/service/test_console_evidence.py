"""The evidence the job page draws: which evals counted, the threshold line, the running best;
and the SVG markers. Tables of (rule, curve) -> expected."""

from __future__ import annotations

import re

import pytest

from evalstop.detectors import Eval, parse_spec
from evalstop.service.console.charts import MAX_POINTS, curve_charts
from evalstop.service.console.evidence import explain

RISE_FALL = [0.50, 0.61, 0.58, 0.57, 0.40, 0.30]


def evals(values: list[float], start: int = 10) -> list[Eval]:
    return [Eval(start * (i + 1), v) for i, v in enumerate(values)]


@pytest.mark.parametrize(("spec", "values", "stop_step", "counted"), [
    ("evalstop:k=2", RISE_FALL, 40, (30, 40)),
    ("evalstop:k=3", RISE_FALL, 50, (30, 40, 50)),
    ("patience:patience=3", RISE_FALL, 50, (30, 40, 50)),
    ("evalstop:k=2", [0.5, 0.6, 0.7], None, ()),
    ("evalstop:k=2", [0.5, float("nan"), 0.4, 0.3], 40, (30, 40)),  # NaN neither counts nor resets
])
def test_counted_evals_end_at_the_rules_stop(
    spec: str, values: list[float], stop_step: int | None, counted: tuple[int, ...]
) -> None:
    ev = explain(parse_spec(spec), [evals(values)])
    assert ev.verdict.stop_step == stop_step
    assert ev.counted == counted


def test_cusum_counts_the_evals_since_the_best() -> None:
    values = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.2, 0.1, 0.0, -0.1]
    ev = explain(parse_spec("cusum:sigma=0.01,n_warmup_evals=3"), [evals(values)])
    assert ev.verdict.stopped and ev.verdict.best_step == 70
    assert ev.counted[0] == 80 and ev.counted[-1] == ev.verdict.stop_step


def test_running_best_and_threshold_lines() -> None:
    ev = explain(parse_spec("evalstop:k=2,against=best,min_delta=0.05"), [evals(RISE_FALL)])
    assert [b for _, b in ev.best[0]] == [0.50, 0.61, 0.61, 0.61, 0.61, 0.61]
    assert [round(v, 3) for _, v in ev.band[0]] == [0.45, 0.56, 0.56, 0.56, 0.56, 0.56]
    low = explain(parse_spec("patience:patience=2,min_delta=0.01,mode=min"), [evals([3.0, 2.0, 2.5, 2.6])])
    assert [b for _, b in low.best[0]] == [3.0, 2.0, 2.0, 2.0]
    assert [round(v, 3) for _, v in low.band[0]] == [2.99, 1.99, 1.99, 1.99]  # to beat: best - min_delta
    assert explain(parse_spec("cusum:per=0.1"), [evals(RISE_FALL)]).band == ()  # depends on the next spacing


@pytest.mark.parametrize("n", [8, 90])
def test_cusum_line_is_where_the_next_eval_fires_the_rule(n: int) -> None:
    values = [0.5 + 0.01 * ((i * 7) % 5) for i in range(n)]
    rule = parse_spec("cusum:n_warmup_evals=3,sigma=0.01")  # with an online sigma the next eval moves it
    ev = explain(rule, [evals(values)])
    assert not ev.verdict.stopped and ev.band_label.startswith("the next eval below")
    line = ev.band[0][-1][1]
    below = evals([*values, line - 1e-6])
    above = evals([*values, line + 1e-6])
    assert rule.evaluate(below).stop_index == n and rule.evaluate(above).stop_index is None


def test_a_rule_without_its_own_evidence_counts_the_evals_since_the_best() -> None:
    ev = explain(parse_spec("mann-kendall:min_window=4"), [evals([0.1, 0.5, 0.4, 0.3, 0.2, 0.1, 0.0])])
    assert ev.band == () and ev.verdict.stopped
    assert ev.counted[0] == 30 and ev.counted[-1] == ev.verdict.stop_step


def test_noise_aware_band_uses_the_reported_noise() -> None:
    ev = explain(parse_spec("noise-aware:sigma=0.01,z=2,n_warmup_evals=1"), [evals(RISE_FALL)])
    assert ev.band[0][1][1] == pytest.approx(0.61 - 2 * 0.01 * 2**0.5)


def test_markers_carry_their_steps_and_long_curves_are_thinned() -> None:
    n = 20_000
    curve = evals([i / n for i in range(n)] + [0.0, -0.1], start=1)
    ev = explain(parse_spec("evalstop:k=2"), [curve])
    svg = str(curve_charts([[(e.step, e.score) for e in curve]], ev, best_step=ev.verdict.best_step,
                           stop_step=ev.verdict.stop_step))
    assert re.search(rf'id="marker-best" data-step="{n}"', svg)
    assert re.search(rf'id="marker-stop" data-step="{n + 2}"', svg)
    points = re.search(r'<polyline points="([^"]*)"[^>]*id="evals"', svg)
    assert points is not None and len(points.group(1).split()) <= MAX_POINTS + 1
    assert "<script" not in svg and "style=" not in svg  # CSP: no inline script or style


def test_a_label_is_escaped() -> None:
    ev = explain(parse_spec("evalstop:k=2"), [evals(RISE_FALL)])
    svg = str(curve_charts([[(e.step, e.score) for e in evals(RISE_FALL)]], ev, best_step=20, stop_step=40,
                           stop_label="<b>x</b>"))
    assert "<b>" not in svg and "&lt;b&gt;" in svg
