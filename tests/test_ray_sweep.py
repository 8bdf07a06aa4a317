"""The Ray path of the sweep runner, for real: a private local Ray head started by the test
(token authentication on, its temp dir and HOME under the test's tmp dir), then
``evalstop reproduce --study ... --ray-address`` in a subprocess, compared with the local pool.

The head is the testbed's (:mod:`evalstop.testbed.ray_head`): ready once a job has run on it,
stopped by pid, never by ``ray stop``, which would also stop other people's Ray.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("ray", reason="the Ray path needs the ray extra: pip install -e '.[ray]'")

from evalstop.testbed.ray_head import head_env, private_head

pytestmark = pytest.mark.slow
EVALSTOP = [sys.executable, "-m", "evalstop.cli"]


@pytest.fixture(scope="module")
def ray_head() -> Iterator[tuple[str, dict[str, str]]]:
    with private_head("evs-sw-", 2) as head:  # returns once a job has run on it
        yield head.info["gcs"], head_env(head)


def _reproduce(out: Path, env: dict[str, str], *extra: str) -> dict:
    cmd = [*EVALSTOP, "reproduce", "--study", "k", "--seeds", "2", "--out", str(out), "--no-report", *extra]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads((out / "study-k" / "results.json").read_text())  # --study: its own folder


def _rows(out: Path) -> list[dict]:
    rows = [json.loads(line) for line in (out / "study-k" / "rows.jsonl").read_text().splitlines()]
    return sorted(rows, key=lambda r: (r["point"], r["seed"], r["policy"]))


def test_sweep_on_ray_matches_the_local_pool(ray_head: tuple[str, dict[str, str]], tmp_path: Path) -> None:
    address, env = ray_head
    on_ray = _reproduce(tmp_path / "ray", env, "--ray-address", address)
    assert on_ray["backend"] == "ray"
    assert on_ray["tasks"] == {"cached": 0, "ran": 12}  # 6 values of k x 2 seeds
    local_env = {k: v for k, v in env.items() if not k.startswith("RAY_")}
    local = _reproduce(tmp_path / "local", local_env, "--workers", "2")
    assert local["backend"].startswith("process pool")
    assert _rows(tmp_path / "ray") == _rows(tmp_path / "local")  # same code, same seeds, same rows


def test_ray_address_from_the_environment_and_cache_reuse(ray_head: tuple[str, dict[str, str]],
                                                          tmp_path: Path) -> None:
    address, env = ray_head
    first = _reproduce(tmp_path / "out", {**env, "RAY_ADDRESS": address})
    assert first["backend"] == "ray" and first["tasks"]["ran"] == 12
    again = _reproduce(tmp_path / "out", {**env, "RAY_ADDRESS": address})
    assert again["tasks"] == {"cached": 12, "ran": 0}  # nothing sent to the cluster


def test_wrong_token_fails_loudly(ray_head: tuple[str, dict[str, str]], tmp_path: Path) -> None:
    address, env = ray_head
    bad = {**env, "RAY_AUTH_TOKEN": "not-the-token"}
    cmd = [*EVALSTOP, "reproduce", "--study", "k", "--seeds", "2", "--out", str(tmp_path), "--no-report",
           "--no-cache", "--ray-address", address]
    done = subprocess.run(cmd, env=bad, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode != 0
    assert not (tmp_path / "study-k" / "results.json").exists()
