"""Issue 23 (d): a rewound job in the simulator keeps its GPUs and continues from its best eval."""

from __future__ import annotations

import pytest

from evalstop.detectors import Monitor, OnDetect
from evalstop.experiments.policies import PolicySpec
from evalstop.experiments.rewind_cmd import format_platform
from evalstop.experiments.rewind_platform import (
    COMPARED,
    PostRewind,
    calibrate,
    platform_study,
    rewound_workload,
)
from evalstop.schedulers import EvalStop
from evalstop.workloads import PRESETS, generate


def _setup() -> tuple[object, EvalStop]:
    workload = generate(PRESETS["paper"].with_(n_jobs=60), 3)
    scheduler, _ = PolicySpec(label="EvalStop", detector="default").build()
    assert isinstance(scheduler, EvalStop)
    return workload, scheduler


@pytest.mark.parametrize("model", [PostRewind(rehack=0.0, gain=0.1), PostRewind(rehack=1.0, gain=0.0)])
def test_a_rewound_job_continues_from_its_best_eval(model: PostRewind) -> None:
    workload, scheduler = _setup()
    rewound, n = rewound_workload(workload, scheduler, model)  # type: ignore[arg-type]
    assert n > 0
    changed = 0
    for spec, truth, new, new_truth in zip(workload.jobs, workload.truth, rewound.jobs, rewound.truth,  # type: ignore[attr-defined]
                                           strict=True):
        monitor = Monitor(scheduler.detector, policy=OnDetect("rewind", correction="kl_coef*=2"))
        monitor.observe_many(spec.evals)
        if spec.kind != "rlhf" or monitor.action != "rewind":
            assert (new, new_truth) == (spec, truth)
            continue
        changed += 1
        v = monitor.verdict
        b, d = v.best_index, v.stop_index
        assert b is not None and d is not None
        stretch = spec.evals[d].progress + 1.0 - spec.evals[b].progress
        assert new_truth.duration_s == pytest.approx(truth.duration_s * stretch)
        assert len(new.evals) == len(spec.evals) and [e.score for e in new.evals[: b + 1]] == \
            [e.score for e in spec.evals[: b + 1]]
        # the rule restarts where Monitor.rewind puts it: its state right after the best eval
        monitor.rewind()
        replayed = Monitor(scheduler.detector)
        replayed.observe_many(new.evals[: b + 1])
        assert replayed.state == monitor.state
        after = new_truth.true_at_evals[b + 1:]
        if model.rehack == 1.0:
            assert after == truth.true_at_evals[b + 1:]
        else:
            assert after[-1] == pytest.approx(truth.true_at_evals[b] + 0.1)
        assert new.evals[-1].progress == pytest.approx(1.0)
    assert changed == n


def test_calibrate_reads_the_rewound_runs() -> None:
    rows = [{"stop": {"quality": 0.5}, "rewind-kl": {"rewound": True, "hacked_again": h, "quality": q}}
            for h, q in [(True, 0.3), (False, 0.6), (False, 0.7), (True, 0.2)]]
    model = calibrate({"rows": rows}, "rewind-kl")
    assert model.rehack == 0.5 and model.gain == pytest.approx(0.15)
    with pytest.raises(ValueError, match="'rehack' parameter of PostRewind"):
        PostRewind(rehack=1.5)


def test_the_platform_study_compares_each_rewind_arm_with_stop_paired_by_seed() -> None:
    models = {"never": PostRewind(rehack=0.0, gain=0.0)}
    config = PRESETS["paper"].with_(n_jobs=80, total_gpus=16)
    rows = platform_study(config, 3, models)
    changes = rows["rewind (never)"]["vs_stop"]
    assert set(changes) == set(COMPARED) and "vs_stop" not in rows["stop"]
    gpu = changes["gpu_hours"]
    assert gpu["n"] == 3 and gpu["rel_change"] > 0  # a rewound job trains on: more GPU-hours
    assert gpu["rel_change_ci_lo"] <= gpu["rel_change"] <= gpu["rel_change_ci_hi"]
    study = {"seeds": 3, "config": "c", "models": {"never": vars(models["never"])}, "rows": rows}
    text = format_platform(study)
    assert "Change against stop, paired by seed" in text and "| rewind (never) | +" in text
    assert "vs_stop" not in platform_study(config, 1, models)["rewind (never)"]  # one seed: no CI
