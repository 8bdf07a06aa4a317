"""Enforcement adapters: stop a job on the system that runs it."""
