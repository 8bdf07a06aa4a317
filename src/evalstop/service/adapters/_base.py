"""The contract shared by the service and every backend: :class:`Backend`, what registration
checks (scope section, reference, resubmission template), and :class:`EnforcementAdapter`, what
the worker calls to stop a job.

The worker calls, in this order and possibly more than once (every call is idempotent):
``pin_checkpoint`` -> ``signal`` -> (after the job's grace period, if still running)
``hard_stop`` -> ``is_stopped`` (reconcile). "Already stopped" / "already pinned" is success.
A transient failure raises :class:`AdapterError` with ``retryable=True``; the worker retries
with backoff. The service never deletes user checkpoints.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from evalstop.service.adapters._scope import ScopeSection


@dataclass(frozen=True)
class JobRef:
    """Where a job runs: ``external_ref`` is its id on that system (Ray submission id, Slurm
    job id, Kubernetes ``namespace/name``, webhook key); ``options`` are adapter settings from
    the job's registration (e.g. ``{"kind": "JobSet"}``)."""

    job_id: str
    tenant: str
    external_ref: str
    options: Mapping[str, Any] = field(default_factory=dict)
    #: The tenant's declared scope (:class:`evalstop.service.scopes.TenantScope` dumped). The
    #: service always sets it ({} = nothing allowed); None means a trusted caller without
    #: tenants (library use): no ownership check, pins wherever the URI points.
    scope: Mapping[str, Any] | None = None


class AdapterError(RuntimeError):
    """A failed adapter call. The message is what the tenant sees in its job's delivery errors:
    evalstop's own words, the job's id and reference, the tenant's own scope. ``detail`` is what
    the backend said (Slurm's stderr, an HTTP error reply's body): it may name other tenants'
    jobs, accounts or users, so it goes to the service log for the operator and never into the
    message (docs/tenants.md, "Delivery errors")."""

    def __init__(self, message: str, *, retryable: bool, detail: str = "") -> None:
        super().__init__(message)
        self.retryable = retryable
        self.detail = detail


class NotOwned(AdapterError):
    """The backend says the job is not the tenant's (another account, namespace, metadata): the
    stop is refused for good."""

    def __init__(self, message: str) -> None:
        super().__init__(message, retryable=False)


def unknown_job(job: JobRef, backend: str, submitted_by: str) -> str:
    """Why registration refuses a job the backend does not know (yet)."""
    return (f"{backend} does not know job {job.external_ref!r} (yet), so it cannot show that the job is "
            f"tenant {job.tenant!r}'s; register it after {submitted_by} has created it")


def scope_section(job: JobRef, target: str) -> Mapping[str, Any] | None:
    """The ``target`` section of the job's scope; None when the caller is unscoped (library use).
    A scoped job without that section is refused."""
    if job.scope is None:
        return None
    section = job.scope.get(target)
    if not isinstance(section, Mapping):
        raise NotOwned(f"job {job.job_id}: tenant {job.tenant!r} has no {target} scope")
    return section


class Backend:
    """What the service checks for a backend when a job registers, before any adapter is built.
    An adapter module declares its backend as ``BACKEND``; a module without one (dry-run) is a
    backend with the defaults below: no scope section, any reference, no resubmission."""

    #: The model of the tenant's scope section named after the backend (``{"slurm": {...}}``);
    #: None: the scope has no such section (the adapter acts on nothing of a tenant's, or, as a
    #: plugin, checks ``JobRef.scope`` itself).
    scope: type[ScopeSection] | None = None
    #: The resubmission template's field holding the command (Ray ``entrypoint``, Slurm
    #: ``script``); "": the backend cannot resubmit a job.
    resubmit_text: str = ""
    #: The template's fields besides the command and ``env``.
    resubmit_fields: frozenset[str] = frozenset()

    def canonical_ref(self, ref: str) -> str:
        """The one spelling of a job's reference (the one-live-job-per-reference rule compares
        these); InvalidInput naming ``external_ref`` when it is not one of this backend's."""
        return ref.strip()

    def check_reference(
        self, tenant: str, section: Any, ref: str, options: Mapping[str, Any], settings: Mapping[str, Any]
    ) -> None:
        """InvalidInput naming the field unless ``ref`` (and the job's target ``options``) lie in
        the tenant's ``section`` (an instance of :attr:`scope`). ``settings``: the service's
        settings of this backend's adapter (the webhook's URL, for a job that names none)."""

    def check_template(self, template: Mapping[str, Any], section: Any, tenant: str) -> dict[str, Any]:
        """The template's :attr:`resubmit_fields` as stored, each checked against the tenant's
        ``section`` (None: the tenant has none); InvalidInput naming the field otherwise."""
        return {}


class EnforcementAdapter(ABC):
    name: str = ""
    #: Setting names ending in ``_file`` that the adapter reads itself, at any depth (a path it
    #: re-reads); every other ``NAME_file`` is read once into ``NAME`` before the adapter is built
    #: (settings.resolve_file_keys). A factory function may carry the same attribute.
    path_settings: frozenset[str] = frozenset()

    @abstractmethod
    def pin_checkpoint(self, job: JobRef, checkpoint_uri: str | None) -> None:
        """Make sure ``checkpoint_uri`` survives the stop (tag, label, copy-protect)."""

    @abstractmethod
    def signal(self, job: JobRef) -> None:
        """Ask the job to stop gracefully (SIGTERM-like)."""

    @abstractmethod
    def hard_stop(self, job: JobRef) -> None:
        """Stop it for good (SIGKILL / delete)."""

    @abstractmethod
    def is_stopped(self, job: JobRef) -> bool:
        """Reconcile: True once the job no longer holds its resources."""

    def check_owner(self, job: JobRef, *, must_exist: bool = False) -> None:  # noqa: B027 - overridden
        """Raise :class:`NotOwned` unless the backend says the job lies in ``job.scope``. The
        worker calls this before every action that changes the job: there a job the backend no
        longer knows passes (nothing to act on). Registration calls it with ``must_exist``: where
        the adapter asks the backend (the scope names something only the backend can tell), a
        job the backend does not know (yet) is refused, so nobody registers another's next job.
        Messages name the tenant's scope, never what the backend says about another's job."""

    def resubmit(self, job: JobRef, template: Mapping[str, Any], text: str, number: int) -> str:
        """Submit the job's next attempt (rewind ``number``): ``text`` is the rendered entrypoint
        or script, ``template`` the job's stored template (``service/resubmit.py``). Return the
        new job's reference, inside ``job.scope``. Idempotent (a repeat finds the job submitted
        before). Engines that cannot resubmit refuse for good."""
        raise AdapterError(f"the {self.name or type(self).__name__} adapter cannot resubmit a job",
                           retryable=False)

    def can_resubmit_for(self, tenant: str) -> str | None:
        """Why this adapter's settings refuse to resubmit ``tenant``'s jobs, or None. Registration
        asks it of a job with a resubmission template. The default asks the adapter's
        ``submit_as`` (the Slurm adapters' per-tenant user) when it has one."""
        submit_as = getattr(self, "submit_as", None)
        if submit_as is None:
            return None
        try:
            submit_as.for_job(JobRef("", tenant, ""))
        except AdapterError as exc:
            return str(exc).removeprefix("job : ")
        return None

    def close(self) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Release what the adapter holds (HTTP connection pools); call at shutdown."""
