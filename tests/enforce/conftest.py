"""Fixtures shared by the enforcement tests: a private Ray head and a Jobs API client of it
(test_enforce_ray.py, test_enforce_resubmit.py), and a private single-node Slurm
(test_enforce_slurm.py, test_enforce_resubmit.py) with slurmrestd on a unix socket. Each module
that asks gets its own."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from evalstop.testbed.cluster import Proc
from evalstop.testbed.ray_head import private_head
from evalstop.testbed.slurm_cluster import SlurmCluster, missing, private_cluster


@pytest.fixture(scope="module")
def ray_head() -> Iterator[Proc]:
    """A Ray head on loopback with 2 slots and token authentication on."""
    pytest.importorskip("ray", reason="needs the ray extra: pip install -e '.[ray]'")
    with private_head("evs-ray-", 2) as head:  # returns once a job has run on it
        yield head


@pytest.fixture(scope="module")
def ray_client(ray_head: Proc) -> Any:
    """A ``JobSubmissionClient`` of ``ray_head``, with its token."""
    from ray.job_submission import JobSubmissionClient  # the ray extra: only where a test asks

    # RAY_ADDRESS / RAY_API_SERVER_ADDRESS would override the address we pass: hide them here.
    saved = {k: os.environ.pop(k) for k in ("RAY_ADDRESS", "RAY_API_SERVER_ADDRESS") if k in os.environ}
    try:
        auth = {"Authorization": f"Bearer {ray_head.info['token']}"}
        return JobSubmissionClient(ray_head.info["address"], headers=auth)
    finally:
        os.environ.update(saved)


@pytest.fixture(scope="module")
def slurm() -> Iterator[SlurmCluster]:
    """A real single-node Slurm (root and the slurm-wlm/munge packages, else skipped)."""
    if reason := missing():
        pytest.skip(reason)
    with private_cluster("evs-slurm-") as cluster:
        yield cluster


@pytest.fixture(scope="module")
def rest_socket(slurm: SlurmCluster) -> Path:
    """slurmrestd of ``slurm`` on a unix socket (``rest_auth/local``: the caller's Unix user)."""
    sock = slurm.start_rest()
    if sock is None:
        pytest.skip("slurmrestd not installed: apt-get install slurmrestd")
    return sock
