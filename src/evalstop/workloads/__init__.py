"""Workload models: curve shapes and the seeded job generator."""

from .model import KINDS, PRESETS, KindShape, Workload, WorkloadConfig, generate
from .records import JobSpec, JobTruth

__all__ = ["KINDS", "PRESETS", "JobSpec", "JobTruth", "KindShape", "Workload", "WorkloadConfig", "generate"]
