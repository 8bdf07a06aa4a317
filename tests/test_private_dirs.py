"""The tests' private Ray head and Slurm cluster leave no temporary directory behind, also when
the engine never comes up (the old fixtures made the directory outside their ``try``)."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

import pytest

from evalstop.testbed import ray_head, slurm_cluster


def _ours(prefix: str) -> set[Path]:
    return set(Path(tempfile.gettempdir()).glob(prefix + "*"))


@pytest.mark.parametrize("module, start, context", [
    (ray_head, "start_ray", ray_head.private_head),
    (slurm_cluster, "start_cluster", slurm_cluster.private_cluster),
])
def test_a_head_or_cluster_that_never_comes_up_leaves_no_directory(
    monkeypatch: pytest.MonkeyPatch, module: object, start: str,
    context: Callable[[str], AbstractContextManager[object]],
) -> None:
    seen: list[Path] = []

    def fails(root: Path, *args: object, **kwargs: object) -> object:
        seen.append(root)
        assert root.is_dir()
        raise RuntimeError("never became ready")

    monkeypatch.setattr(module, start, fails)
    prefix = "evs-dirtest-"
    before = _ours(prefix)
    with pytest.raises(RuntimeError, match="never became ready"), context(prefix):
        pass
    assert seen and not seen[0].exists()
    assert _ours(prefix) == before
