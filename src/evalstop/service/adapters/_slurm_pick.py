"""The registry's ``slurm``: slurmrestd when ``rest_url``/``rest_socket`` is set, else the CLI
(a module of its own: the REST adapter builds on the CLI adapter's helpers)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from evalstop.service.adapters._base import EnforcementAdapter
from evalstop.service.adapters._slurm import SlurmAdapter
from evalstop.service.adapters._slurm_rest import SlurmRestAdapter
from evalstop.service.adapters._slurm_submit import BACKEND

__all__ = ["BACKEND", "make_slurm_adapter"]


def make_slurm_adapter(settings: Mapping[str, Any]) -> EnforcementAdapter:
    """The Slurm adapter ``settings`` ask for."""
    if settings.get("rest_url") or settings.get("rest_socket"):
        return SlurmRestAdapter(settings)
    return SlurmAdapter(settings)


#: ``token_file`` stays a path (``resolve_file_keys`` does not read it): a tenant's JWT in
#: ``submit_as`` is re-read at each resubmission, so a rotated token file is picked up; the
#: adapter's own top-level ``token_file`` is read when the adapter is built.
make_slurm_adapter.path_settings = frozenset({"token_file"})  # type: ignore[attr-defined]
