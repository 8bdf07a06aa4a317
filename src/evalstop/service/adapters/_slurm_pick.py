"""The registry's ``slurm``: slurmrestd when ``rest_url``/``rest_socket`` is set, else the CLI
(a module of its own: the REST adapter builds on the CLI adapter's helpers)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from evalstop.service.adapters._base import EnforcementAdapter
from evalstop.service.adapters._slurm import SlurmAdapter
from evalstop.service.adapters._slurm_rest import SlurmRestAdapter


def make_slurm_adapter(settings: Mapping[str, Any]) -> EnforcementAdapter:
    """The Slurm adapter ``settings`` ask for."""
    if settings.get("rest_url") or settings.get("rest_socket"):
        return SlurmRestAdapter(settings)
    return SlurmAdapter(settings)
