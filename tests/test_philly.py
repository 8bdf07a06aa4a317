"""The Philly trace loader: filtering, windows, kinds by GPU-hours bucket, load scaling."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from evalstop.experiments.spec import load_studies
from evalstop.experiments.suite import run_suite
from evalstop.workloads import PRESETS
from evalstop.workloads.philly import TraceSpec, default_trace_path, generate_from_trace, load_trace

TRACE = default_trace_path()
CONFIG = PRESETS["paper"].with_(n_jobs=400)


def test_trace_loads_sorted_with_a_stable_digest() -> None:
    trace = load_trace(str(TRACE))
    assert trace.submit_s.size == trace.gpus.size > 80_000
    assert np.all(np.diff(trace.submit_s) >= 0) and trace.submit_s[0] == 0
    assert len(trace.digest) == 16 and load_trace(str(TRACE)).digest == trace.digest


def test_window_is_filtered_and_kinds_follow_gpu_hours() -> None:
    spec = TraceSpec()
    w = generate_from_trace(CONFIG, spec, seed=1)
    assert len(w.jobs) == 400
    durations = np.array([t.duration_s for t in w.truth])
    assert durations.min() >= spec.min_duration_s and durations.max() <= spec.max_duration_s
    assert max(j.gpus for j in w.jobs) <= CONFIG.total_gpus
    kinds = [j.kind for j in w.jobs]
    assert kinds.count("lora") == 40 and kinds.count("dpo") == 40 and kinds.count("rlhf") == 320
    cost = {k: [j.gpus * t.duration_s for j, t in zip(w.jobs, w.truth, strict=True) if j.kind == k]
            for k in ("lora", "dpo", "rlhf")}
    assert max(cost["lora"]) <= min(cost["dpo"]) and max(cost["dpo"]) <= min(cost["rlhf"])
    assert not any(t.hacking for j, t in zip(w.jobs, w.truth, strict=True) if j.kind != "rlhf")


def test_arrivals_keep_order_and_hit_the_offered_load() -> None:
    w = generate_from_trace(CONFIG, TraceSpec(), seed=2)
    arrivals = np.array([j.arrival_s for j in w.jobs])
    assert arrivals[0] == 0 and np.all(np.diff(arrivals) >= 0)
    work = sum(j.gpus * t.duration_s for j, t in zip(w.jobs, w.truth, strict=True))
    assert work / (CONFIG.total_gpus * arrivals[-1]) == pytest.approx(CONFIG.offered_load)


def test_seeds_pick_different_windows_deterministically() -> None:
    a, again, b = (generate_from_trace(CONFIG, TraceSpec(), s) for s in (5, 5, 6))
    assert a == again
    assert [t.duration_s for t in a.truth] != [t.duration_s for t in b.truth]


def test_trace_spec_validates_and_names_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"'max_duration_s' parameter of TraceSpec"):
        TraceSpec(min_duration_s=100.0, max_duration_s=50.0)
    with pytest.raises(FileNotFoundError, match=r"nowhere\.csv"):
        TraceSpec(path=str(tmp_path / "nowhere.csv")).resolve()


def test_bad_csv_is_rejected(tmp_path: Path) -> None:
    path = tmp_path / "bad.csv"
    path.write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="expected columns"):
        load_trace(str(path))


def test_a_trace_study_without_its_trace_is_skipped_with_the_reason(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    study = next(s for s in load_studies(["headline-philly"]))
    missing = str(tmp_path / "absent.csv")
    monkeypatch.setenv("EVALSTOP_PHILLY", missing)
    doc = run_suite([study], tmp_path / "out", seeds=2, workers=1, show_progress=False)
    assert doc["studies"]["headline-philly"]["status"] == "skipped"
    assert "absent.csv" in doc["studies"]["headline-philly"]["reason"]
    assert doc["tasks"] == {"cached": 0, "ran": 0}
