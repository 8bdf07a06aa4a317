"""Study specs, the sweep runner (pure tasks, cache, resume, pool) and the claim checks."""

from __future__ import annotations

import io
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from evalstop.experiments.analysis import analyse_study, check_claim
from evalstop.experiments.spec import ClaimSpec, SpecError, load_studies, load_study, parse_study, study_names
from evalstop.experiments.sweep import Cache, Progress, Task, code_version, execute, run_point

SMALL = """
name = "small"
seeds = 2
[workload]
preset = "paper"
n_jobs = 150
[[policy]]
label = "SRTF-Est"
base = "srtf"
[[policy]]
label = "EvalStop"
base = "srtf"
detector = "evalstop:k=2,against=best"
[sweep]
param = "detector.k"
values = [1, 2]
"""


def small(**replace: Any) -> Any:
    doc = tomllib.loads(SMALL)
    doc.update(replace)
    return parse_study(doc)


# -- specs -----------------------------------------------------------------------------------
def test_every_shipped_study_loads_and_the_paper_studies_are_there() -> None:
    studies = {s.name: s for s in load_studies()}
    assert set(studies) == set(study_names())
    for name in ("headline", "composition", "noise", "base-rate", "k", "load", "rlhf-share",
                 "cluster-size", "cadence", "headline-realistic", "headline-philly"):
        assert name in studies, name
    assert studies["headline"].seeds >= 30
    assert [p.workload.total_gpus for p in studies["cluster-size"].points] == [16, 64, 256, 1024, 4096]
    assert studies["headline-realistic"].points[0].workload.evals_per_job == 20  # the realistic preset
    inherited = studies["headline-realistic"].claims  # via extends; [notes] explains the misses here
    assert [c.name for c in inherited] == [c.name for c in studies["headline"].claims]
    assert inherited[0].note and not studies["headline"].claims[0].note
    assert studies["headline-philly"].uses_trace and studies["headline-philly"].seeds == 10


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"colour": "red"}, "colour"),
        ({"policy": [{"base": "srtf", "detectr": "evalstop"}]}, "detectr"),
        ({"sweep": {"param": "detector.k", "values": [1], "valuez": 2}}, "valuez"),
        ({"sim": {"preempt_overhead": 1.0}}, "preempt_overhead"),
        ({"workload": {"n_jbos": 5}}, "n_jbos"),
        ({"trace": {"pth": "x"}}, "pth"),
        ({"claim": [{"name": "c", "paper": "p", "kind": "value", "metric": "recall", "target": 1,
                     "tolerence": 1}]}, "tolerence"),
        ({"claim": [{"name": "c", "paper": "p", "kind": "guess", "metric": "recall"}]}, "guess"),
        ({"claim": [{"name": "c", "paper": "p", "kind": "value", "metric": "recall"}]}, "target"),
        ({"seeds": 1}, "seeds"),
        ({"baseline": "nobody"}, "nobody"),
        ({"sweep": {"param": "colour.k", "values": [1]}}, "colour.k"),
        ({"sweep": {"param": "detector.kk", "values": [1]}}, "kk"),
        ({"sweep": {"param": "workload.eval_noise", "values": [-1.0]}}, "eval_noise"),
        ({"policy": [{"base": "nosuch"}]}, "nosuch"),
        ({"notes": {"no such claim": "why"}}, "no such claim"),
    ],
)
def test_bad_specs_name_the_bad_key_or_value(change: dict[str, Any], match: str) -> None:
    with pytest.raises(SpecError, match=match):
        small(**change)


def test_sweep_parameters_reach_the_right_place() -> None:
    study = small()
    assert [p.policies[1].detector for p in study.points] == [
        "evalstop:k=1,against=best", "evalstop:against=best"]
    assert study.points[0].policies[0].detector is None  # the baseline has no detector to change
    bases = small(sweep={"param": "policy.base", "values": ["fifo", "las"]})
    assert [[q.base for q in p.policies] for p in bases.points] == [["fifo", "fifo"], ["las", "las"]]
    paired = small(sweep={"param": "workload.total_gpus", "values": [16, 32],
                          "with": {"workload.n_jobs": [100, 200]}})
    assert [(p.workload.total_gpus, p.workload.n_jobs) for p in paired.points] == [(16, 100), (32, 200)]


def test_extends_merges_tables_and_rejects_cycles(tmp_path: Path) -> None:
    (tmp_path / "base.toml").write_text(SMALL)
    (tmp_path / "child.toml").write_text('extends = "base"\nname = "child"\n[workload]\nn_jobs = 99\n')
    child = load_study(tmp_path / "child.toml")
    assert child.points[0].workload.n_jobs == 99 and child.points[0].workload.total_gpus == 64
    assert len(child.points) == 2  # the sweep came from the parent
    (tmp_path / "a.toml").write_text('extends = "b"\nname = "a"\n')
    (tmp_path / "b.toml").write_text('extends = "a"\nname = "b"\n')
    with pytest.raises(SpecError, match="cycles"):
        load_study(tmp_path / "a.toml")


def test_point_key_is_a_content_hash() -> None:
    a, b = small().points
    assert a.key() != b.key()
    assert small().points[0].key() == a.key()


# -- runner ----------------------------------------------------------------------------------
def test_run_point_is_pure_and_uses_common_random_numbers() -> None:
    point = small().points[1]
    first, again, other = run_point(point, 3), run_point(point, 3), run_point(point, 4)
    assert first == again
    assert first != other
    assert first[0]["n_hacking"] == first[1]["n_hacking"]  # both policies saw the same jobs
    assert first[0]["policy"] == "SRTF-Est" and first[1]["n_killed"] > 0 == first[0]["n_killed"]


def _tasks(seeds: range = range(1, 3)) -> list[Task]:
    return [Task(p.key(), p, s) for p in small().points for s in seeds]


def test_cache_makes_a_repeat_free_and_an_interrupted_sweep_resume(tmp_path: Path) -> None:
    tasks = _tasks(range(1, 4))  # 2 points x 3 seeds
    cache = Cache(tmp_path)
    partial, counts = execute(tasks[:2], cache, workers=1)
    assert counts == {"cached": 0, "ran": 2}  # "interrupted" after two tasks
    full, counts = execute(tasks, cache, workers=1)
    assert counts == {"cached": 2, "ran": 4}
    repeat, counts = execute(tasks, cache, workers=1)
    assert counts == {"cached": 6, "ran": 0}
    assert repeat == full and all(full[k] == v for k, v in partial.items())


def test_cache_is_keyed_by_code_version(tmp_path: Path) -> None:
    task = _tasks()[0]
    Cache(tmp_path, version="1+old").put(task.key, task.seed, [{"policy": "x"}])
    assert Cache(tmp_path, version="1+old").get(task.key, task.seed) == [{"policy": "x"}]
    assert Cache(tmp_path, version="1+new").get(task.key, task.seed) is None
    assert code_version().startswith("0.") and "+" in code_version()


def test_pool_and_serial_give_the_same_rows() -> None:
    serial, _ = execute(_tasks(), Cache(None), workers=1)
    pooled, _ = execute(_tasks(), Cache(None), workers=2)
    assert serial == pooled


def test_duplicate_points_across_studies_run_once(tmp_path: Path) -> None:
    tasks = _tasks() + _tasks()
    _, counts = execute(tasks, Cache(tmp_path), workers=1)
    assert counts == {"cached": 0, "ran": 4}


def test_progress_line_shows_count_and_eta() -> None:
    out = io.StringIO()
    progress = Progress(4, "sweep", stream=out, every_s=0.0)
    progress.advance()
    progress.advance(3)
    lines = out.getvalue().splitlines()
    assert "1/4 (25 %)" in lines[0] and "ETA" in lines[0]
    assert "4/4 (100 %)" in lines[-1]


# -- claims ----------------------------------------------------------------------------------
def _stat(mean: float) -> dict[str, Any]:
    return {"mean": mean, "lo": mean - 0.01, "hi": mean + 0.01, "n": 30}


def _cmp(rel: float, p: float) -> dict[str, Any]:
    return {"rel_change": rel, "rel_change_ci_lo": rel - 0.01, "rel_change_ci_hi": rel + 0.01,
            "p_ttest": p, "p_wilcoxon": p}


def _study(xs: list[Any], precision: list[float], jct: list[tuple[float, float]]) -> dict[str, Any]:
    return {
        "name": "s", "role": "paper", "treatment": "T", "x_param": "workload.eval_noise", "x_values": xs,
        "tick_labels": None,
        "summary": [{"T": {"precision": _stat(v)}} for v in precision],
        "comparisons": [{"T": {"jct_mean_s": _cmp(r, p)}} for r, p in jct],
    }


@pytest.mark.parametrize(
    ("claim", "reproduced", "verdict"),
    [
        (ClaimSpec("c", "98 %", "value", "precision", target=0.98, tolerance=0.02), True, "reproduced"),
        (ClaimSpec("c", "90 %", "value", "precision", target=0.90, tolerance=0.02), False,
         "off by +7.0 points"),
        (ClaimSpec("c", "-10 %", "change", "jct_mean_s", target=-0.10, tolerance=0.03), True, "reproduced"),
        (ClaimSpec("c", "-30 %", "change", "jct_mean_s", target=-0.30, tolerance=0.03), False,
         "off by +20.0"),
        (ClaimSpec("c", ">= 91 %", "at_least", "precision", threshold=0.91, x_max=0.05), False,
         "1.0 points below 91.0 % at workload.eval_noise=0.05"),
        (ClaimSpec("c", ">= 91 %", "at_least", "precision", threshold=0.91, x_max=0.03), True, "reproduced"),
        (ClaimSpec("c", "-9..-25 %", "change_within", "jct_mean_s", low=-0.25, high=-0.09, tolerance=0.0),
         False, "not reproduced on workload.eval_noise=0.05"),
    ],
)
def test_claim_verdicts(claim: ClaimSpec, reproduced: bool, verdict: str) -> None:
    study = _study([0.0, 0.03, 0.05], [0.99, 0.97, 0.90], [(-0.10, 0.001), (-0.12, 0.001), (-0.05, 0.001)])
    if claim.kind in ("value", "change"):  # single-point claims read the first point
        study = _study([None], [0.97], [(-0.10, 0.001)])
    result = check_claim(claim, study)
    assert result["reproduced"] is reproduced
    assert verdict in result["verdict"]


def test_a_change_that_is_not_significant_is_not_reproduced() -> None:
    claim = ClaimSpec("c", "-10 %", "change", "jct_mean_s", target=-0.10, tolerance=0.03)
    result = check_claim(claim, _study([None], [0.97], [(-0.10, 0.3)]))
    assert not result["reproduced"] and "not significant" in result["verdict"]


def test_analyse_study_pairs_by_seed_and_checks_claims() -> None:
    study = small(claim=[{"name": "k=1 stops something", "paper": "-", "kind": "at_least",
                          "policy": "EvalStop", "metric": "recall", "threshold": 0.5}])
    rows_by_point = [[dict(r, seed=s) for s in (1, 2) for r in run_point(p, s)] for p in study.points]
    result = analyse_study(study, rows_by_point, [1, 2])
    assert result["comparisons"][0]["EvalStop"]["jct_mean_s"]["n"] == 2
    assert result["summary"][1]["SRTF-Est"]["n_killed"]["mean"] == 0
    assert result["claims"][0]["reproduced"] is True and result["claims"][0]["study"] == "small"


@pytest.fixture
def default_sigint() -> Iterator[None]:
    """Python's own SIGINT handler for the test (an earlier test's library, Ray Tune, may have
    left its own installed in this process), and whatever was there back afterwards."""
    import signal

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.mark.usefixtures("default_sigint")
def test_ctrl_c_during_a_pool_wait_is_raised_at_the_next_check_only() -> None:
    """A KeyboardInterrupt raised inside ``concurrent.futures.wait`` could leave a future's lock
    held and hang the process at exit; under ``sigint_deferred`` Ctrl-C only sets a flag, the
    caller's check raises it, and the default handler is back afterwards."""
    import signal

    from evalstop.experiments.runner import sigint_deferred

    with sigint_deferred() as interrupted:
        interrupted()  # nothing pressed yet
        signal.raise_signal(signal.SIGINT)  # delivered now: with the default handler this raises
        with pytest.raises(KeyboardInterrupt):
            interrupted()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    with pytest.raises(KeyboardInterrupt), sigint_deferred():  # pressed after the last check:
        signal.raise_signal(signal.SIGINT)  # raised on the way out


@pytest.mark.usefixtures("default_sigint")
def test_sigint_deferred_leaves_other_handlers_and_threads_alone() -> None:
    import signal
    import threading

    from evalstop.experiments.runner import sigint_deferred

    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with sigint_deferred() as interrupted:
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
            signal.raise_signal(signal.SIGINT)
            interrupted()  # ignored stays ignored
    finally:
        signal.signal(signal.SIGINT, previous)
    seen: list[object] = []

    def in_a_thread() -> None:
        with sigint_deferred() as check:
            seen.append(signal.getsignal(signal.SIGINT))
            check()

    thread = threading.Thread(target=in_a_thread)
    thread.start()
    thread.join()
    assert seen == [signal.default_int_handler]
