"""Backends: one module each, holding its adapter (stop a job on the system that runs it) and
its :class:`Backend` (what registration checks: scope section, reference, resubmission).

``get_adapter(name, settings)`` builds an adapter, ``backend(name)`` reads a backend's rules,
``register(name, "module:factory")`` adds a backend. Every adapter module imports its client
(httpx, ...) lazily, when the adapter is built.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from evalstop._validation import check_choice
from evalstop.service.adapters._base import AdapterError, Backend, EnforcementAdapter, JobRef, NotOwned
from evalstop.service.adapters._scope import Entry, ScopeSection

__all__ = ["ADAPTERS", "AdapterError", "Backend", "EnforcementAdapter", "Entry", "JobRef", "NotOwned",
           "ScopeSection", "backend", "backends", "get_adapter", "register"]

#: name -> (module, class or factory); a module is imported when its adapter is built or its
#: backend's rules are first read (:func:`backend`).
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


def register(name: str, factory: str) -> None:
    """Add the backend ``name``: ``factory`` is ``"module:attr"``, the class or function that
    builds its adapter from its settings; the module's ``BACKEND`` (a :class:`Backend`, optional)
    declares its registration rules. A name already registered is refused."""
    module, sep, attr = factory.partition(":")
    if not name or name != name.strip() or not sep or not module or not attr:
        raise ValueError(f"register: name must be a non-empty word and factory 'module:attr'. "
                         f"Got {name!r}, {factory!r}.")
    if name in ADAPTERS:
        raise ValueError(f"register: backend {name!r} is already registered (one of {sorted(ADAPTERS)}).")
    ADAPTERS[name] = (module, attr)


def backend(name: str) -> Backend | None:
    """The registration rules of the backend ``name``; None when no backend has that name (a
    plugin target of the service's settings: unscoped)."""
    if name not in ADAPTERS:
        return None
    found = getattr(importlib.import_module(ADAPTERS[name][0]), "BACKEND", None)
    return found if isinstance(found, Backend) else _PLAIN


def backends() -> dict[str, Backend]:
    """Every registered backend's rules, by name."""
    return {name: rules for name in sorted(ADAPTERS) if (rules := backend(name)) is not None}


_PLAIN = Backend()
