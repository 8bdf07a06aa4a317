"""Start an engine by name (:mod:`.engine` says what an engine is). The implementations are
imported only for the engine asked for: Ray's needs the ``ray`` extra, Slurm's the Slurm
daemons."""

from __future__ import annotations

from pathlib import Path

from .engine import Engine

ENGINES = ("ray", "slurm")


def start_engine(
    kind: str, root: Path, slots: int, *, run_id: str = "", ray_address: str | None = None
) -> Engine:
    """Start a private ``kind`` cluster with ``slots`` slots, its state under ``root``; with
    ``ray_address`` (Ray only), use that existing cluster's ``slots`` slots instead."""
    if ray_address and kind != "ray":
        raise ValueError(f"The 'ray_address' parameter needs engine 'ray'. Got engine {kind!r} instead.")
    if kind == "ray":
        from .ray_engine import RayEngine

        if ray_address:
            return RayEngine.connect(ray_address, slots, run_id)
        return RayEngine.start(root, slots, run_id)
    if kind == "slurm":
        from .slurm_engine import SlurmEngine

        return SlurmEngine.start(root, slots, run_id)
    raise ValueError(f"The 'engine' parameter must be one of {', '.join(ENGINES)}. Got {kind!r} instead.")
