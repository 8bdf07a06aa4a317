"""Find the enforcement adapter for a job's target name.

Plugins named in the settings (``{"name": "module:factory"}``) come first; every other name goes
to the built-in registry, ``evalstop.service.adapters.get_adapter(name, settings)``. One adapter
instance per name, built on first use.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Mapping
from typing import Any

from .adapters._base import AdapterError, EnforcementAdapter, JobRef, NotOwned
from .errors import BackendUnavailable, InvalidInput


class UnknownTarget(LookupError):
    """No adapter answers to this name."""


class TargetNotConfigured(UnknownTarget):
    """The adapter exists, but this service has no valid settings for it (EVALSTOP_ADAPTER_SETTINGS)."""


class AdapterRegistry:
    def __init__(
        self,
        plugins: Mapping[str, str] | None = None,
        settings: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        self.plugins = dict(plugins or {})
        self.settings = {k: dict(v) for k, v in (settings or {}).items()}
        self._cache: dict[str, EnforcementAdapter] = {}
        self._lock = threading.Lock()

    def get(self, name: str) -> EnforcementAdapter:
        with self._lock:
            adapter = self._cache.get(name)
            if adapter is None:
                adapter = self._cache[name] = self._build(name)
            return adapter

    def close(self) -> None:
        """Let every adapter built so far release what it holds (connection pools)."""
        with self._lock:
            adapters, self._cache = list(self._cache.values()), {}
        for adapter in adapters:
            close = getattr(adapter, "close", None)
            if callable(close):
                close()

    def check(self, name: str) -> None:
        """Raise InvalidInput naming ``name`` when no adapter can be built for it."""
        try:
            self.get(name)
        except UnknownTarget as exc:
            raise InvalidInput(f"target: {exc}") from None

    def check_registration(self, name: str, job: JobRef) -> None:
        """Ask the backend, at registration, whether ``job`` is the tenant's
        (``check_owner(must_exist=True)``): InvalidInput (422) naming ``external_ref`` when it
        is not or when the backend does not know it yet; BackendUnavailable (503) when the
        backend cannot be asked now."""
        try:
            self.get(name).check_owner(job, must_exist=True)
        except UnknownTarget as exc:
            raise InvalidInput(f"target: {exc}") from None
        except NotOwned as exc:
            reason = str(exc).removeprefix(f"job {job.job_id}: ")
            raise InvalidInput(f"external_ref: {reason}.") from None
        except AdapterError as exc:
            raise BackendUnavailable(f"external_ref: could not ask {name} whether job {job.external_ref!r} "
                                     f"is tenant {job.tenant!r}'s ({exc}); retry later.") from None

    def _build(self, name: str) -> EnforcementAdapter:
        options = self.settings.get(name, {})
        adapters = importlib.import_module("evalstop.service.adapters")
        if name not in self.plugins and name not in adapters.ADAPTERS:
            raise UnknownTarget(f"Unknown enforcement target {name!r}: one of {sorted(adapters.ADAPTERS)} "
                                f"or a plugin (plugins: {sorted(self.plugins)})")
        try:
            if name in self.plugins:
                module, _, attr = self.plugins[name].partition(":")
                factory = getattr(importlib.import_module(module), attr)
                # A plugin gets its settings as given: its own ``*_file`` keys may be paths it
                # reads itself (it can call settings.resolve_file_keys for secrets).
                adapter = factory(**options)
            else:
                adapter = adapters.get_adapter(name, options)
        except (KeyError, ValueError) as exc:
            raise TargetNotConfigured(
                f"Enforcement target {name!r} is not configured on this service: {exc}") from None
        if not isinstance(adapter, EnforcementAdapter):
            raise UnknownTarget(f"Target {name!r} did not build an EnforcementAdapter (got {type(adapter)}).")
        return adapter
