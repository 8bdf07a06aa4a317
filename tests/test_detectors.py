"""Table tests: (params, series) -> expected stop index, for every detector; spec parsing."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

import pytest

from evalstop._validation import InvalidParameterError
from evalstop.detectors import (
    DEFAULT_SPEC,
    REGISTRY,
    Cusum,
    Decision,
    Detector,
    Eval,
    FixedProgress,
    KDeclines,
    LossPlateau,
    MannKendall,
    NeverStop,
    NoiseAware,
    Paired,
    Patience,
    SlaqLoss,
    format_spec,
    parse_spec,
)
from evalstop.detectors._spec import parse_value

NAN, INF = math.nan, math.inf


def scores(values: Sequence[float]) -> list[Eval]:
    return [Eval(step=10 * (i + 1), score=v) for i, v in enumerate(values)]


def losses(values: Sequence[float | None], score: float = 0.5) -> list[Eval]:
    return [Eval(step=10 * (i + 1), score=score, loss=v) for i, v in enumerate(values)]


def progresses(values: Sequence[float | None]) -> list[Eval]:
    return [Eval(step=10 * (i + 1), score=0.5, progress=v) for i, v in enumerate(values)]


def stop_index(detector: Detector, evals: Sequence[Eval]) -> int | None:
    return detector.evaluate(evals).stop_index


KDECLINES_TABLE: list[tuple[dict[str, Any], list[float], int | None]] = [
    # the paper's rule: two strict declines in a row vs the previous eval
    ({}, [0.1, 0.2, 0.3, 0.25, 0.2], 4),
    ({}, [0.1, 0.2, 0.3, 0.25], None),
    ({}, [0.1, 0.2, 0.15, 0.18, 0.1, 0.05], 5),  # a rise resets the count
    ({}, [], None),
    ({"k": 1}, [0.3, 0.3, 0.2], 2),
    ({"k": 3}, [0.5, 0.4, 0.3], None),
    ({"k": 3}, [0.5, 0.4, 0.3, 0.2], 3),
    # ties are not declines and reset the count
    ({}, [0.5, 0.4, 0.4, 0.3], None),
    ({}, [0.5, 0.4, 0.4, 0.3, 0.2], 4),
    # min_delta: a decline must exceed it
    ({"min_delta": 0.05}, [0.5, 0.47, 0.44, 0.41], None),
    ({"min_delta": 0.05}, [0.5, 0.4, 0.3], 2),
    # against the running best vs against the previous eval
    ({"against": "best"}, [0.1, 0.5, 0.4, 0.45, 0.42], 3),
    ({"against": "previous"}, [0.1, 0.5, 0.4, 0.45, 0.42], None),
    ({"against": "best", "min_delta": 0.03}, [0.5, 0.48, 0.46, 0.44], 3),
    ({"against": "previous", "min_delta": 0.03}, [0.5, 0.48, 0.46, 0.44], None),
    ({"against": "best"}, [0.5, 0.4, 0.6, 0.5, 0.55], 4),  # a new best resets
    # warm-up: the first n valid evals never count as declines
    ({"n_warmup_evals": 0}, [0.5, 0.4, 0.3, 0.2], 2),
    ({"n_warmup_evals": 2}, [0.5, 0.4, 0.3, 0.2], 3),
    ({"n_warmup_evals": 2}, [NAN, 0.5, NAN, 0.4, 0.3, 0.2], 5),  # counts valid evals only
    # mode="min": a rise is a decline
    ({"mode": "min"}, [0.5, 0.4, 0.45, 0.5], 3),
    ({"mode": "min"}, [0.5, 0.4, 0.3], None),
    # NaN/inf are skipped: they neither count nor reset, and never fire
    ({}, [0.5, 0.4, NAN, 0.3], 3),
    ({}, [0.5, 0.4, INF, 0.3], 3),
    ({}, [0.5, 0.4, -INF, 0.3], 3),
    ({}, [0.5, 0.4, NAN], None),
    ({}, [NAN, NAN, NAN], None),
]


@pytest.mark.parametrize(("params", "series", "expected"), KDECLINES_TABLE)
def test_kdeclines_table(params: dict[str, Any], series: list[float], expected: int | None) -> None:
    assert stop_index(KDeclines(**params), scores(series)) == expected


def test_kdeclines_verdict_carries_reason_and_best_checkpoint() -> None:
    verdict = KDeclines().evaluate(scores([0.1, 0.3, NAN, 0.2, 0.1, 0.05]))
    assert verdict.decision is Decision.STOP
    assert (verdict.stop_index, verdict.stop_step) == (4, 50)
    assert (verdict.best_index, verdict.best_step, verdict.best_score) == (1, 20, 0.3)
    assert verdict.n_invalid == 1
    assert "2 consecutive declines vs previous" in verdict.reason


FIXED_PROGRESS_TABLE: list[tuple[dict[str, Any], list[float | None], int | None]] = [
    ({}, [0.2, 0.4, 0.6, 0.8], 3),
    ({}, [0.2, 0.4, 0.65, 0.8], 2),  # at is inclusive
    ({}, [0.2, 0.4, 0.6], None),
    ({}, [None, NAN, INF, 0.9], 3),  # missing or non-finite progress never fires
    ({"at": 0.3}, [0.1, 0.3], 1),
    ({"at": 0.0}, [None, 0.0], 1),
    ({"at": 1.0}, [0.5, 0.99, 1.0], 2),
]


@pytest.mark.parametrize(("params", "series", "expected"), FIXED_PROGRESS_TABLE)
def test_fixed_progress_table(
    params: dict[str, Any], series: list[float | None], expected: int | None
) -> None:
    assert stop_index(FixedProgress(**params), progresses(series)) == expected


def test_fixed_progress_ignores_the_score_but_reports_the_best() -> None:
    evals = [Eval(10, 0.9, progress=0.3), Eval(20, NAN, progress=0.5), Eval(30, 0.1, progress=0.7)]
    verdict = FixedProgress().evaluate(evals)
    assert (verdict.stop_step, verdict.best_step, verdict.n_invalid) == (30, 10, 1)
    assert "progress 0.7" in verdict.reason


LOSS_PLATEAU_TABLE: list[tuple[dict[str, Any], list[float | None], int | None]] = [
    ({}, [1.0, 0.9, 0.8, 0.8, 0.8, 0.8], 5),
    ({}, [1.0, 0.9, 0.8, 0.8, 0.8], None),
    ({}, [1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4], None),
    ({}, [1.0, 0.995, 0.99, 0.985, 0.98], None),  # a slow decline adds up and resets the count
    ({"patience": 1, "n_warmup_evals": 0}, [1.0, 1.0], 1),
    ({"patience": 1, "n_warmup_evals": 2}, [1.0, 1.0, 1.0], 2),
    ({"patience": 1, "n_warmup_evals": 0, "min_rel_delta": 0.0}, [1.0, 0.99, 0.98, 0.97, 0.97], 4),
    ({"patience": 1, "n_warmup_evals": 0}, [1.0, 0.995], 1),  # improved less than 1 %
    ({"patience": 3, "n_warmup_evals": 0}, [1.0, 1.5, 2.0, 2.5], 3),  # a rising loss is stale
    ({"patience": 1, "n_warmup_evals": 0}, [-1.0, -1.005], 1),  # relative to |minimum|
    ({"patience": 1, "n_warmup_evals": 0}, [-1.0, -1.02], None),
    # missing / non-finite losses are skipped: they neither count nor reset
    ({"patience": 2, "n_warmup_evals": 0}, [1.0, 1.0, None, NAN, INF, 1.0], 5),
    ({"patience": 1, "n_warmup_evals": 0}, [1.0, NAN, None, -INF], None),
    ({}, [None, None, None, None, None], None),
]


@pytest.mark.parametrize(("params", "series", "expected"), LOSS_PLATEAU_TABLE)
def test_loss_plateau_table(params: dict[str, Any], series: list[float | None], expected: int | None) -> None:
    assert stop_index(LossPlateau(**params), losses(series)) == expected


def test_loss_plateau_reads_only_the_loss() -> None:
    falling_score = [Eval(10 * (i + 1), 1.0 - 0.2 * i, loss=1.0 - 0.2 * i) for i in range(5)]
    assert LossPlateau(patience=1, n_warmup_evals=0).evaluate(falling_score).stop_index is None
    verdict = LossPlateau().evaluate(losses([1.0, 0.9, 0.8, 0.8, 0.8, 0.8], score=0.7))
    assert verdict.best_score == 0.7 and verdict.best_index == 0
    assert "patience=3" in verdict.reason


SLAQ_TABLE: list[tuple[dict[str, Any], list[float | None], int | None]] = [
    ({}, [1.0, 0.5, 0.3, 0.29, 0.289], 4),
    ({}, [1.0, 0.5, 0.3, 0.29], None),
    ({"window": 1, "n_warmup_evals": 0, "threshold": 0.1}, [1.0, 0.5, 0.45, 0.44], 2),
    ({"window": 1, "n_warmup_evals": 0, "threshold": 0.05}, [1.0, 0.5, 0.45, 0.44], 3),
    ({}, [1.0, 1.1, 1.2, 1.3, 1.3], None),  # no overall reduction: the ratio is undefined
    ({}, [1.0, 1.0, 1.0, 1.0, 1.0], None),
    ({}, [1.0, 0.5, 0.4, 0.6], 3),  # the loss went back up: negative marginal reduction
    ({}, [1.0, NAN, 0.5, None, 0.3, INF, 0.29, 0.289], 7),  # invalid losses are skipped
    ({"window": 1, "n_warmup_evals": 4, "threshold": 0.5}, [1.0, 0.5, 0.45, 0.44, 0.43], 4),
    ({"window": 1, "n_warmup_evals": 0, "threshold": 0.5}, [1.0, 0.5, 0.45, 0.44, 0.43], 2),
    ({"window": 3, "n_warmup_evals": 0}, [1.0, 0.5, 0.3, 0.29, 0.289], None),
]


@pytest.mark.parametrize(("params", "series", "expected"), SLAQ_TABLE)
def test_slaq_table(params: dict[str, Any], series: list[float | None], expected: int | None) -> None:
    assert stop_index(SlaqLoss(**params), losses(series)) == expected


def test_slaq_reason_names_the_ratio() -> None:
    verdict = SlaqLoss().evaluate(losses([1.0, 0.5, 0.3, 0.29, 0.289]))
    assert verdict.stop_step == 50
    assert "threshold=0.02" in verdict.reason


@pytest.mark.parametrize("mode", ["max", "min"])
def test_never_stops_and_tracks_the_best(mode: str) -> None:
    verdict = NeverStop(mode=mode).evaluate(scores([0.3, 0.1, NAN, 0.5, 0.2]))
    assert verdict.decision is Decision.CONTINUE and verdict.stop_index is None
    assert verdict.best_score == (0.5 if mode == "max" else 0.1)
    assert verdict.n_invalid == 1


INVALID_PARAMS: list[tuple[type[Detector], str, Any]] = [
    (KDeclines, "k", 0),
    (KDeclines, "k", 2.0),
    (KDeclines, "k", True),
    (KDeclines, "min_delta", -0.1),
    (KDeclines, "min_delta", NAN),
    (KDeclines, "against", "mean"),
    (KDeclines, "n_warmup_evals", -1),
    (KDeclines, "mode", "maximize"),
    (NeverStop, "mode", "up"),
    (FixedProgress, "at", 1.5),
    (FixedProgress, "at", -0.1),
    (FixedProgress, "at", "half"),
    (FixedProgress, "mode", None),
    (LossPlateau, "patience", 0),
    (LossPlateau, "min_rel_delta", -0.01),
    (LossPlateau, "min_rel_delta", INF),
    (LossPlateau, "n_warmup_evals", 1.5),
    (LossPlateau, "mode", "MIN"),
    (SlaqLoss, "threshold", -0.01),
    (SlaqLoss, "threshold", 1.5),
    (SlaqLoss, "window", 0),
    (SlaqLoss, "n_warmup_evals", -2),
    (SlaqLoss, "mode", ""),
]


@pytest.mark.parametrize(("cls", "param", "value"), INVALID_PARAMS)
def test_invalid_parameters_name_the_parameter_and_value(cls: type[Detector], param: str, value: Any) -> None:
    pattern = (
        rf"The '{param}' parameter of {cls.__name__} must be .*\. Got {re.escape(repr(value))} instead\."
    )
    with pytest.raises(InvalidParameterError, match=pattern):
        cls(**{param: value})


# ---- specs -----------------------------------------------------------------------------------


def test_registry_names_every_detector() -> None:
    assert dict(REGISTRY) == {
        "evalstop": KDeclines,
        "never": NeverStop,
        "fixed-progress": FixedProgress,
        "loss-plateau": LossPlateau,
        "slaq": SlaqLoss,
        "patience": Patience,
        "cusum": Cusum,
        "mann-kendall": MannKendall,
        "paired": Paired,
        "noise-aware": NoiseAware,
    }
    assert all(cls.name == name for name, cls in REGISTRY.items())
    assert parse_spec(DEFAULT_SPEC) == Cusum(threshold=3.0, drift=3.0)  # chosen by evalstop validate
    assert parse_spec("evalstop") == KDeclines()


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("evalstop", KDeclines()),
        ("evalstop:k=3,min_delta=0.01,against=best", KDeclines(k=3, min_delta=0.01, against="best")),
        (" evalstop : k = 3 , mode = min ", KDeclines(k=3, mode="min")),
        ("evalstop:", KDeclines()),
        ("evalstop:min_delta=1", KDeclines(min_delta=1.0)),
        ("never:mode=min", NeverStop(mode="min")),
        ("fixed-progress:at=0.5", FixedProgress(at=0.5)),
        ("loss-plateau:patience=5,min_rel_delta=1e-3", LossPlateau(patience=5, min_rel_delta=0.001)),
        (
            "slaq:threshold=0.05,window=3,n_warmup_evals=0",
            SlaqLoss(threshold=0.05, window=3, n_warmup_evals=0),
        ),
    ],
)
def test_parse_spec(spec: str, expected: Detector) -> None:
    assert parse_spec(spec) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [("3", 3), ("-1", -1), ("0.5", 0.5), ("1e-3", 0.001), ("true", True), ("False", False), ("best", "best")],
)
def test_parse_value_order(text: str, expected: object) -> None:
    value = parse_value(text)
    assert value == expected and type(value) is type(expected)


def test_unknown_detector_lists_valid_names() -> None:
    with pytest.raises(
        ValueError, match=r"Unknown detector 'evalstp'.*evalstop, fixed-progress, loss-plateau"
    ):
        parse_spec("evalstp:k=2")


def test_unknown_parameter_lists_valid_parameters() -> None:
    with pytest.raises(
        ValueError, match=r"Unknown parameter 'patience' for detector 'evalstop'.*k, min_delta"
    ):
        parse_spec("evalstop:patience=3")


@pytest.mark.parametrize(
    ("spec", "pattern"),
    [
        ("evalstop:k", "Malformed parameter 'k'"),
        ("evalstop:=3", "Malformed"),
        ("evalstop:k=2,k=3", "given twice"),
    ],
)
def test_malformed_specs(spec: str, pattern: str) -> None:
    with pytest.raises(ValueError, match=pattern):
        parse_spec(spec)


@pytest.mark.parametrize(
    ("spec", "pattern"),
    [
        ("evalstop:k=0", r"'k' parameter of KDeclines must be an int >= 1 and <= 1000000\. Got 0 instead"),
        ("evalstop:k=2.5", r"The 'k' parameter of KDeclines .* Got 2\.5 instead"),
        ("evalstop:against=worst", r"The 'against' parameter of KDeclines .* Got 'worst' instead"),
        ("fixed-progress:at=true", r"The 'at' parameter of FixedProgress .* Got True instead"),
    ],
)
def test_bad_values_raise_the_constructor_error(spec: str, pattern: str) -> None:
    with pytest.raises(InvalidParameterError, match=pattern):
        parse_spec(spec)


@pytest.mark.parametrize(
    ("detector", "spec"),
    [
        (KDeclines(), "evalstop"),
        (KDeclines(k=3, against="best", min_delta=0.01), "evalstop:k=3,min_delta=0.01,against=best"),
        (FixedProgress(at=0.5, mode="min"), "fixed-progress:at=0.5,mode=min"),
        (SlaqLoss(threshold=1e-3), "slaq:threshold=0.001"),
    ],
)
def test_format_spec(detector: Detector, spec: str) -> None:
    assert format_spec(detector) == spec
    assert parse_spec(spec) == detector
