"""``[workload] curves``: given eval curves for the jobs of a jobs.csv drive the stopping rule;
bad rows are refused up front naming the file, line and value; jobs without a curve are those
of the run without curves."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from evalstop._validation import InvalidParameterError
from evalstop.experiments.policies import PolicySpec
from evalstop.schedulers import FIFO
from evalstop.sim.cluster import SimConfig, simulate
from evalstop.sim.outcome import JobOutcome, SimResult
from evalstop.workloads import PRESETS, Workload
from evalstop.workloads.jobs_csv import TraceFiles, load_jobs_csv

CONFIG = PRESETS["paper"].with_(total_gpus=16)
K2 = PolicySpec("EvalStop", "fifo", {}, "evalstop:k=2,against=best", None, False)
#: Three 2-GPU jobs of 1000 s on 16 GPUs: none ever waits, so job j's eval at progress p is at
#: submit_j + p x 1000 s.
JOBS = "job_id,submit_s,gpus,duration_s,kind\n10,0,2,1000,rlhf\n20,50,2,1000,rlhf\n30,100,2,1000,lora\n"
#: Job 10 peaks at step 5 of 10 and declines twice (steps 6, 7); job 20 rises throughout.
PEAKED = (0.1, 0.2, 0.3, 0.4, 0.5, 0.45, 0.4, 0.35, 0.3, 0.25)
RISING = tuple(round(0.1 * s, 2) for s in range(1, 11))


def rows(job: int, scores: tuple[float, ...], steps: range | None = None) -> str:
    steps = steps or range(1, len(scores) + 1)
    return "".join(f"{job},{step},{score}\n" for step, score in zip(steps, scores, strict=True))


def files(tmp_path: Path, curves: str, truth: str | None = None, jobs: str = JOBS, **kw: bool) -> TraceFiles:
    (tmp_path / "jobs.csv").write_text(jobs)
    (tmp_path / "curves.csv").write_text(curves)
    truth_path = None
    if truth is not None:
        truth_path = tmp_path / "truth.csv"
        truth_path.write_text(truth)
    return TraceFiles(str(tmp_path / "jobs.csv"), str(tmp_path / "curves.csv"),
                      None if truth_path is None else str(truth_path), **kw)


def run(workload: Workload, policy: PolicySpec = K2) -> SimResult:
    scheduler, config = policy.build()
    return simulate(workload, scheduler, config)


def by_id(result: SimResult) -> dict[int, JobOutcome]:
    return {o.job_id: o for o in result.outcomes}


def test_a_declining_curve_is_stopped_at_its_kth_decline_and_a_rising_one_is_not(tmp_path: Path) -> None:
    rising = rows(20, RISING, range(100, 1001, 100))  # steps 100..1000: the same places
    trace = files(tmp_path, "job_id,step,score\n" + rows(10, PEAKED) + rising)
    workload = load_jobs_csv(trace, CONFIG, seed=1)
    out = by_id(run(workload))
    peaked, rising = out[10], out[20]
    # Steps 1..10 of 10 land at 10 %, ..., 100 %: the second decline (step 7) is at 0 + 700 s.
    assert peaked.killed and peaked.end_s == pytest.approx(700.0)
    assert peaked.stop_progress == pytest.approx(0.7)
    assert peaked.true_delivered == pytest.approx(0.5)  # its best eval, step 5
    assert not rising.killed and rising.end_s == pytest.approx(1050.0)
    # Without a truth file the observed curve is the truth: job 10 hacks (final 0.25 below its
    # peak 0.5, reached at half the run), job 20 does not.
    truth = {spec.job_id: t for spec, t in zip(workload.jobs, workload.truth, strict=True)}
    assert truth[10].hacking and truth[10].peak_progress == pytest.approx(0.5) and not truth[20].hacking
    assert truth[10].true_at_evals == PEAKED


def test_a_progress_column_places_the_evals(tmp_path: Path) -> None:
    """Uneven progress: the two declines are at 35 % and 40 % of the job's duration."""
    curve = "".join(f"10,{s},{v},{p}\n" for s, v, p in
                    [(1, 0.2, 0.2), (2, 0.5, 0.3), (3, 0.4, 0.35), (4, 0.3, 0.4), (5, 0.6, 1.0)])
    workload = load_jobs_csv(files(tmp_path, "job_id,step,score,progress\n" + curve), CONFIG, seed=1)
    killed = by_id(run(workload))[10]
    assert killed.killed and killed.end_s == pytest.approx(400.0)


def test_under_preemption_the_kill_is_at_the_attained_service_and_both_eval_paths_agree(
    tmp_path: Path
) -> None:
    """Every job takes all 8 GPUs and SRTF-Est preempts: job 10's second decline (step 7) comes
    when its attained service reaches 70 % of 1000 s, however its runs are cut; the fast path
    (kill planned at arrival) and the event path (one event per eval) give the same log."""
    jobs = "job_id,submit_s,gpus,duration_s\n10,0,8,1000\n20,300,8,200\n30,350,8,300\n"
    trace = files(tmp_path, "job_id,step,score\n" + rows(10, PEAKED), jobs=jobs)
    workload = load_jobs_csv(trace, CONFIG.with_(total_gpus=8, budget_error_sigma=0.0), seed=1)
    policy = PolicySpec("EvalStop + SRTF-Est", "srtf", {}, "evalstop:k=2,against=best", None, False)
    logs = set()
    for path in ("fast", "events"):
        scheduler, _ = policy.build()
        result = simulate(workload, scheduler, SimConfig(preempt_overhead_s=50.0, eval_path=path))
        killed = by_id(result)[10]
        assert killed.killed and killed.n_preemptions == 1 and killed.stop_progress == pytest.approx(0.7)
        # Runs 0..300 (300 s), waits for jobs 20 and 30 (300..800), restores 50 s, runs 400 s more.
        assert killed.end_s == pytest.approx(800.0 + 50.0 + 400.0)
        logs.add(result.event_log_hash)
    assert len(logs) == 1


def test_nan_scores_never_kill_a_job(tmp_path: Path) -> None:
    """A rising curve with missing and NaN evals (and a job whose every eval is NaN) runs to the end."""
    holes = "20,1,0.1\n20,2,\n20,3,nan\n20,4,0.4\n20,5,nan\n20,6,0.6\n"
    trace = files(tmp_path, "job_id,step,score\n" + holes + "10,1,nan\n10,2,nan\n10,3,nan\n")
    workload = load_jobs_csv(trace, CONFIG, seed=1)
    out = by_id(run(workload))
    assert not out[10].killed and not out[20].killed
    truth = {spec.job_id: t for spec, t in zip(workload.jobs, workload.truth, strict=True)}
    # Missing evals take the last valid score as the truth; an all-NaN curve is healthy.
    assert truth[20].true_at_evals == (0.1, 0.1, 0.1, 0.4, 0.4, 0.6) and not truth[10].hacking


def test_a_truth_file_sets_the_label_and_the_delivered_quality(tmp_path: Path) -> None:
    gold = ";".join(str(g) for g in (0.1, 0.2, 0.3, 0.4, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4))
    truth = f"job_id,family,label,hacking,true_gold\n10,mine,hacking,true,{gold}\n20,mine,healthy,false,\n"
    trace = files(tmp_path, "job_id,step,score\n" + rows(10, PEAKED) + rows(20, PEAKED), truth)
    workload = load_jobs_csv(trace, CONFIG, seed=1)
    out = by_id(run(workload))
    assert out[10].true_delivered == pytest.approx(0.9) and out[10].hacking
    # Job 20 has the same observed curve but the file says it does not hack: a false positive.
    assert out[20].killed and not out[20].hacking
    assert out[20].true_delivered == pytest.approx(0.5)


def test_jobs_without_a_curve_are_those_of_the_run_without_curves(tmp_path: Path) -> None:
    trace = files(tmp_path, "job_id,step,score\n" + rows(10, PEAKED))
    with_curves = load_jobs_csv(trace, CONFIG, seed=3)
    without = load_jobs_csv(trace.jobs, CONFIG, seed=3)
    for spec, truth, old_spec, old_truth in zip(with_curves.jobs, with_curves.truth, without.jobs,
                                                without.truth, strict=True):
        if spec.job_id == 10:
            assert spec.evals != old_spec.evals
            assert (spec.arrival_s, spec.budget_s, truth.duration_s) == (
                old_spec.arrival_s, old_spec.budget_s, old_truth.duration_s)
        else:
            assert (spec, truth) == (old_spec, old_truth)
    # With no rule watching, curves change nothing: the event logs are identical.
    assert run(with_curves, PolicySpec("FIFO", "fifo")).event_log_hash == run(without, PolicySpec(
        "FIFO", "fifo")).event_log_hash
    assert simulate(with_curves, FIFO()).event_log_hash == simulate(without, FIFO()).event_log_hash


def test_the_same_spec_gives_the_same_event_log_hash_in_another_process(tmp_path: Path) -> None:
    trace = files(tmp_path, "job_id,step,score\n" + rows(10, PEAKED) + rows(30, RISING))
    here = run(load_jobs_csv(trace, CONFIG, seed=5)).event_log_hash
    code = (
        "from evalstop.experiments.policies import PolicySpec\n"
        "from evalstop.sim.cluster import SimConfig, simulate\n"
        "from evalstop.workloads import PRESETS\n"
        "from evalstop.workloads.jobs_csv import TraceFiles, load_jobs_csv\n"
        f"w = load_jobs_csv(TraceFiles({trace.jobs!r}, {trace.curves!r}), "
        "PRESETS['paper'].with_(total_gpus=16), seed=5)\n"
        "s, c = PolicySpec('EvalStop', 'fifo', {}, 'evalstop:k=2,against=best', None, False).build()\n"
        "print(simulate(w, s, c).event_log_hash)\n"
    )
    hashes = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                             timeout=120).stdout.strip() for _ in range(2)}
    assert hashes == {here}


H, HP = "job_id,step,score\n", "job_id,step,score,progress\n"


@pytest.mark.parametrize(
    ("curves", "match"),
    [
        (H + "10,1,0.1\n99,1,0.2\n", r"curves\.csv, line 3: job_id='99' is not a job of the jobs\.csv"),
        (H + "ten,1,0.1\n", r"line 2: job_id='ten' is not a job"),
        (H + "10,2,0.1\n10,1,0.2\n", r"curves\.csv: line 3, job '10': step 1 goes backwards"),
        (H + "10,2,0.1\n10,2,0.2\n", r"line 3, job '10': step 2 appears twice"),
        (H, r"curves\.csv: no curves"),
        ("job_id,step\n10,1\n", r"missing required column\(s\) score"),
        (H + "10,1,high\n", r"line 2, job '10': score must be a number, got 'high'"),
        (H + "10,0,0.1\n10,1,0.2\n", r"line 2: step=0 must be >= 1 when there is no progress"),
        (HP + "10,1,0.1,0.5\n10,2,0.2,\n", r"line 3: job 10 has progress on some rows"),
        (HP + "10,1,0.1,0.5\n10,2,0.2,1.5\n", r"line 3: progress=1\.5 must be in \(0, 1\]"),
        (HP + "10,1,0.1,0.5\n10,2,0.2,0.4\n", r"line 3: progress=0\.4 must be in"),
        (HP + "10,1,0.1,nan\n", r"line 2: progress=nan must be in \(0, 1\]"),
    ],
)
def test_a_bad_curves_row_is_refused_naming_file_line_and_value(
    tmp_path: Path, curves: str, match: str
) -> None:
    with pytest.raises(InvalidParameterError, match=match):
        files(tmp_path, curves).check(CONFIG.total_gpus)


@pytest.mark.parametrize(
    ("truth", "match"),
    [
        ("job_id,hacking\n", r"truth\.csv: no truth row for job\(s\) \[10\]"),
        ("job_id,hacking\n10,maybe\n", r"truth\.csv, line 2: hacking='maybe' must be true or false"),
        ("job_id,hacking\n10,true\n20,false\n", r"line 3: job_id='20' is not a job of the curves file"),
        ("job_id,hacking\n10,true\n10,false\n", r"line 3: job_id='10' is a duplicate"),
        ("job_id,hacking,true_gold\n10,true,0.1;0.2\n", r"line 2: true_gold='0\.1;0\.2' must hold one value "
         r"per eval of job 10 \(10\), not 2"),
        ("job_id,hacking,true_gold\n10,true,0.1;x\n", r"true_gold='0\.1;x' must be numbers joined by ';'"),
        ("job_id,label\n10,hacking\n", r"Missing \['hacking'\], unknown \[\]"),
        ("job_id,hacking,color\n10,true\n", r"unknown \['color'\]"),
    ],
)
def test_a_bad_truth_row_is_refused(tmp_path: Path, truth: str, match: str) -> None:
    with pytest.raises(InvalidParameterError, match=match):
        files(tmp_path, "job_id,step,score\n" + rows(10, PEAKED), truth).check(CONFIG.total_gpus)


def test_curves_for_all_jobs_makes_a_missing_curve_an_error(tmp_path: Path) -> None:
    trace = files(tmp_path, "job_id,step,score\n" + rows(10, PEAKED), curves_for_all_jobs=True)
    with pytest.raises(InvalidParameterError, match=r"jobs\.csv: 2 job\(s\) have no curve .*job_id=20 "
                       r"\(line 3\), job_id=30 \(line 4\)"):
        trace.check(CONFIG.total_gpus)
    with pytest.raises(InvalidParameterError, match=r"need workload\.curves"):
        TraceFiles("jobs.csv", curves_for_all_jobs=True)


def test_evalstop_simulate_reads_curves_and_refuses_a_bad_row_before_running(tmp_path: Path) -> None:
    files(tmp_path, "job_id,step,score\n" + rows(10, PEAKED))
    config = tmp_path / "sim.toml"
    config.write_text('seeds = [1]\n[workload]\ntrace = "jobs.csv"\ncurves = "curves.csv"\n'
                      'total_gpus = 16\n[[policy]]\nlabel = "EvalStop"\nbase = "fifo"\n'
                      'detector = "evalstop:k=2,against=best"\nwatch = "all"\n')
    cli = [sys.executable, "-m", "evalstop.cli", "simulate", str(config), "--json"]
    done = subprocess.run(cli, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert '"recall": 1.0' in done.stdout and '"precision": 1.0' in done.stdout  # job 10, stopped
    (tmp_path / "curves.csv").write_text("job_id,step,score\n" + rows(10, PEAKED) + "11,1,0.5\n")
    done = subprocess.run(cli, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2
    assert "curves.csv, line 12: job_id='11' is not a job of the jobs.csv" in done.stderr
    config.write_text('[workload]\ncurves = "curves.csv"\n[[policy]]\nbase = "fifo"\n')
    done = subprocess.run(cli, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2 and "workload.curves needs workload.trace" in done.stderr


STUDY = """name = "mine"
seeds = 2
[workload]
trace = "jobs.csv"
curves = "curves.csv"
total_gpus = 16
[[policy]]
label = "FIFO"
base = "fifo"
[[policy]]
label = "EvalStop"
base = "fifo"
detector = "evalstop:k=2,against=best"
"""


def test_a_study_runs_on_given_curves_and_keys_them_by_content(tmp_path: Path) -> None:
    from evalstop.experiments.spec import SpecError, load_study
    from evalstop.experiments.sweep import run_point

    files(tmp_path, "job_id,step,score\n" + rows(10, PEAKED))
    (tmp_path / "mine.toml").write_text(STUDY)
    (point,) = load_study(tmp_path / "mine.toml").points
    fifo, evalstop = run_point(point, 1)
    assert fifo["recall"] == 0.0 and evalstop["recall"] == 1.0
    key = point.key()
    (tmp_path / "curves.csv").write_text("job_id,step,score\n" + rows(10, RISING))
    assert load_study(tmp_path / "mine.toml").points[0].key() != key
    (tmp_path / "curves.csv").write_text("job_id,step,score\n" + rows(10, PEAKED) + "10,3,0.1\n")
    with pytest.raises(SpecError, match=r"curves\.csv: line 12, job '10': step 3 goes backwards"):
        load_study(tmp_path / "mine.toml")
