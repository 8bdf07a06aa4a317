"""``jobs.csv``: a user's own job list, checked row by row before the run, then simulated."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalstop._validation import InvalidParameterError
from evalstop.schedulers import FIFO
from evalstop.sim.cluster import simulate
from evalstop.workloads import PRESETS
from evalstop.workloads.jobs_csv import load_jobs_csv

CONFIG = PRESETS["paper"].with_(total_gpus=8)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "jobs.csv"
    path.write_text(text)
    return path


def test_the_file_fixes_arrivals_sizes_durations_and_ids(tmp_path: Path) -> None:
    path = write(tmp_path, "job_id,submit_s,gpus,duration_s,kind,tenant\n"
                           "7,10,8,100,lora,1\n3,0,4,50,,\n5,20,4,30,dpo,2\n")
    workload = load_jobs_csv(path, CONFIG, seed=1)
    assert [(j.job_id, j.arrival_s, j.gpus, j.kind, j.tenant) for j in workload.jobs] == [
        (3, 0.0, 4, "rlhf", 0), (7, 10.0, 8, "lora", 1), (5, 20.0, 4, "dpo", 2)
    ]
    assert [t.duration_s for t in workload.truth] == [50.0, 100.0, 30.0]
    result = simulate(workload, FIFO())
    # job 7 needs all 8 GPUs: it waits for job 3 (ends at 50), then job 5 waits for it (ends 150)
    assert [(o.job_id, o.start_s, o.end_s) for o in result.outcomes] == [
        (3, 0.0, 50.0), (7, 50.0, 150.0), (5, 150.0, 180.0)
    ]
    again = load_jobs_csv(path, CONFIG, seed=1)
    assert again == workload and load_jobs_csv(path, CONFIG, seed=2).jobs != workload.jobs


@pytest.mark.parametrize(
    ("rows", "match"),
    [
        ("1,0,4,10\n1,5,4,10\n", r"line 3: job_id='1' is a duplicate"),
        ("1,0,16,10\n", r"line 2: gpus='16' must be 1 to the cluster's total_gpus=8"),
        ("1,0,0,10\n", r"line 2: gpus='0' must be 1 to"),
        ("1,0,2,0\n", r"line 2: duration_s='0' must be > 0"),
        ("1,0,2,-5\n", r"line 2: duration_s='-5' must be > 0"),
        ("1,0,2,nan\n", r"line 2: duration_s='nan' must be finite"),
        ("1,-1,2,10\n", r"line 2: submit_s='-1' must be >= 0"),
        ("1,0,two,10\n", r"line 2: gpus='two' must be an integer"),
    ],
)
def test_a_bad_row_is_rejected_up_front_naming_the_line_and_value(
    tmp_path: Path, rows: str, match: str
) -> None:
    path = write(tmp_path, "job_id,submit_s,gpus,duration_s\n" + rows)
    with pytest.raises(InvalidParameterError, match=match):
        load_jobs_csv(path, CONFIG, seed=0)


def test_a_bad_header_or_kind_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(InvalidParameterError, match=r"Missing \['duration_s'\], unknown \['size'\]"):
        load_jobs_csv(write(tmp_path, "job_id,submit_s,gpus,size\n1,0,1,1\n"), CONFIG, seed=0)
    with pytest.raises(InvalidParameterError, match=r"kind='ppo' must be one of rlhf, lora, dpo"):
        load_jobs_csv(write(tmp_path, "job_id,submit_s,gpus,duration_s,kind\n1,0,1,1,ppo\n"), CONFIG, seed=0)
    with pytest.raises(InvalidParameterError, match=r"no jobs"):
        load_jobs_csv(write(tmp_path, "job_id,submit_s,gpus,duration_s\n"), CONFIG, seed=0)


def test_evalstop_simulate_runs_a_trace_config_and_rejects_a_bad_row_before_running(tmp_path: Path) -> None:
    import subprocess
    import sys

    rows = "".join(f"{i},{i * 60},{1 + i % 4},{1800 + 97 * i}\n" for i in range(40))
    write(tmp_path, "job_id,submit_s,gpus,duration_s\n" + rows)
    config = tmp_path / "sim.toml"
    config.write_text('seeds = [1, 2]\n[workload]\ntrace = "jobs.csv"\ntotal_gpus = 8\n'
                      '[[policy]]\nlabel = "FIFO"\nbase = "fifo"\n')
    cli = [sys.executable, "-m", "evalstop.cli", "simulate", str(config), "--json"]
    done = subprocess.run(cli, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert '"policy": "FIFO"' in done.stdout
    write(tmp_path, "job_id,submit_s,gpus,duration_s\n" + rows + "40,0,9,10\n")
    done = subprocess.run(cli, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2
    assert "line 42: gpus='9' must be 1 to the cluster's total_gpus=8" in done.stderr


STUDY = """name = "mine"
seeds = 2
[workload]
trace = "jobs.csv"
total_gpus = 8
[[policy]]
label = "FIFO"
base = "fifo"
[[policy]]
label = "SRTF-Est"
base = "srtf"
"""


def test_a_study_spec_runs_on_a_jobs_csv_and_keys_it_by_content(tmp_path: Path) -> None:
    from evalstop.experiments.spec import SpecError, load_study
    from evalstop.experiments.sweep import run_point

    rows = "".join(f"{i},{i * 30},{1 + i % 8},{3600 + 97 * i}\n" for i in range(30))
    write(tmp_path, "job_id,submit_s,gpus,duration_s\n" + rows)
    (tmp_path / "mine.toml").write_text(STUDY)
    study = load_study(tmp_path / "mine.toml")
    (point,) = study.points
    result = run_point(point, 1)
    assert [row["policy"] for row in result] == ["FIFO", "SRTF-Est"]
    assert all(row["n_jobs"] == 30 for row in result)
    key = point.key()
    write(tmp_path, "job_id,submit_s,gpus,duration_s\n" + rows + "30,900,1,60\n")
    assert load_study(tmp_path / "mine.toml").points[0].key() != key
    write(tmp_path, "job_id,submit_s,gpus,duration_s\n" + rows + "30,900,9,60\n")
    with pytest.raises(SpecError, match=r"line 32: gpus='9' must be 1 to the cluster's total_gpus=8"):
        load_study(tmp_path / "mine.toml")


def test_a_small_cluster_takes_a_jobs_csv_but_refuses_synthetic_sizes_up_front(tmp_path: Path) -> None:
    """The preset's shapes (8-GPU RLHF jobs) are not drawn when a jobs.csv brings the sizes, so a
    2-GPU cluster is fine there; without the file the same cluster is refused before any run."""
    import subprocess
    import sys

    from evalstop.experiments.spec import SpecError, load_study

    write(tmp_path, "job_id,submit_s,gpus,duration_s\n1,0,2,100\n2,5,1,50\n")
    config = tmp_path / "sim.toml"
    body = 'seeds = [1]\n[workload]\n{trace}total_gpus = 2\n[[policy]]\nlabel = "FIFO"\nbase = "fifo"\n'
    config.write_text(body.format(trace='trace = "jobs.csv"\n'))
    cli = [sys.executable, "-m", "evalstop.cli", "simulate", str(config), "--json"]
    done = subprocess.run(cli, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    config.write_text(body.format(trace=""))
    done = subprocess.run(cli, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2
    assert "asks for 8 GPUs per rlhf job, more than total_gpus=2" in done.stderr
    study = tmp_path / "mine.toml"
    study.write_text('name = "mine"\nseeds = 2\n[workload]\ntrace = "jobs.csv"\ntotal_gpus = 2\n'
                     '[[policy]]\nlabel = "FIFO"\nbase = "fifo"\n')
    assert len(load_study(study).points) == 1
    study.write_text(
        'name = "mine"\nseeds = 2\n[workload]\ntotal_gpus = 2\n[[policy]]\nlabel = "FIFO"\nbase = "fifo"\n'
    )
    with pytest.raises(SpecError, match=r"\[workload\]: .*8 GPUs per rlhf job, more than total_gpus=2"):
        load_study(study)
