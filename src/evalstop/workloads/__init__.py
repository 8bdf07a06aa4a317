"""Workload models: curve shapes and the seeded job generator."""

from .model import KINDS, PRESETS, JobSpec, JobTruth, KindShape, Workload, WorkloadConfig, generate

__all__ = ["KINDS", "PRESETS", "JobSpec", "JobTruth", "KindShape", "Workload", "WorkloadConfig", "generate"]
