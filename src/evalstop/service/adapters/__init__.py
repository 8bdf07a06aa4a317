"""Enforcement adapters: stop a job on the system that runs it.

``get_adapter(name, settings)`` builds one; every adapter module imports its client lazily.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from evalstop._validation import check_choice
from evalstop.service.adapters._base import AdapterError, EnforcementAdapter, JobRef, NotOwned

__all__ = ["ADAPTERS", "AdapterError", "EnforcementAdapter", "JobRef", "NotOwned", "get_adapter"]

# name -> (module, class or factory); modules are imported only when an adapter is built.
ADAPTERS: dict[str, tuple[str, str]] = {
    "ray": ("evalstop.service.adapters._ray", "RayJobsAdapter"),
    "slurm": ("evalstop.service.adapters._slurm_pick", "make_slurm_adapter"),
    "kubernetes": ("evalstop.service.adapters._kubernetes", "KubernetesAdapter"),
    "webhook": ("evalstop.service.adapters._webhook", "WebhookAdapter"),
    "dry-run": ("evalstop.service.adapters._dryrun", "DryRunAdapter"),
}


def get_adapter(name: str, settings: Mapping[str, Any]) -> EnforcementAdapter:
    """Build the adapter registered as ``name`` from its ``settings`` (validated by the adapter;
    ``NAME_file`` keys read into ``NAME`` first, :func:`~evalstop.service.settings.resolve_file_keys`)."""
    from evalstop.service.settings import resolve_file_keys

    check_choice("get_adapter", "name", name, ADAPTERS)
    module_name, class_name = ADAPTERS[name]
    cls = getattr(importlib.import_module(module_name), class_name)
    adapter: EnforcementAdapter = cls(resolve_file_keys(name, settings, getattr(cls, "path_settings", ())))
    return adapter
