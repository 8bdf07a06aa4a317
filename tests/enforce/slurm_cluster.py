"""The private single-node Slurm of the enforcement tests: the testbed's (one copy, in src)."""

from evalstop.testbed.slurm_cluster import (
    BINARIES,
    SlurmCluster,
    exe,
    free_port,
    missing,
    private_cluster,
    start_cluster,
)

__all__ = ["BINARIES", "SlurmCluster", "exe", "free_port", "missing", "private_cluster", "start_cluster"]
