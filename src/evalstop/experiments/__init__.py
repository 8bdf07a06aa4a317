"""Experiment specs, sweeps, statistics and reports."""
