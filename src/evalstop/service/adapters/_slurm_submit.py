"""Slurm's rules (both Slurm adapters): the scope section, the job id, the resubmission's
account, partition and name; who a resubmission runs as, and what is checked before it may run.

``submit_as`` (an adapter setting) maps a tenant to the Slurm user its jobs run as: the CLI
adapter submits with ``sbatch --uid=<user>`` (the service must run as root or SlurmUser), the
slurmrestd adapter with that user's JWT (``{"user": "u", "token_file": "/run/secrets/u.jwt"}``,
or ``"token"``). A tenant without a mapping is refused, unless the operator sets
``submit_as_service_user: true`` (unsafe: the tenant's script then runs with the service
account's file access). A new job is submitted held; :func:`check_submitted` decides whether it
may be released (docs/enforcement.md, "Resubmission: who the job runs as").
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import Field, model_validator

from evalstop._validation import InvalidParameterError
from evalstop.service.adapters._base import (
    AdapterError,
    Backend,
    JobRef,
    NotOwned,
    scope_section,
    unknown_job,
)
from evalstop.service.adapters._scope import Entry, ScopeSection
from evalstop.service.errors import InvalidInput

USER_NAME = re.compile(r"[A-Za-z0-9_.][A-Za-z0-9_.@-]{0,63}")


class SlurmScope(ScopeSection):
    accounts: list[Entry] = Field(default_factory=list)
    users: list[Entry] = Field(default_factory=list)
    partitions: list[Entry] = Field(default_factory=list)

    @model_validator(mode="after")
    def _something(self) -> SlurmScope:
        if not (self.accounts or self.users or self.partitions):
            raise ValueError("a slurm scope must name at least one of accounts, users, partitions")
        return self


class SlurmBackend(Backend):
    """A job is a Slurm job id (``1234``, ``1234_7``; its account, user and partition are checked
    against Slurm by the adapter); a rewind resubmits the ``script`` as job
    ``evalstop-<job id>-r<N>`` in the template's account and partition (default: the first the
    scope lists), both within the scope."""

    scope = SlurmScope
    resubmit_text = "script"
    resubmit_fields = frozenset({"account", "partition"})

    def canonical_ref(self, ref: str) -> str:
        """``01234`` and ``1234`` are the same job."""
        head, sep, tail = ref.strip().partition("_")
        if not head.isdigit() or (sep and not tail.isdigit()):
            raise InvalidInput(f"external_ref: a Slurm job id like '1234' or '1234_7'. Got {ref!r}.")
        return str(int(head)) + (f"_{int(tail)}" if sep else "")

    def check_template(self, template: Mapping[str, Any], section: Any, tenant: str) -> dict[str, Any]:
        stored: dict[str, Any] = {}
        for key, allowed in (("account", section.accounts if section else []),
                             ("partition", section.partitions if section else [])):
            value = template.get(key, allowed[0] if allowed else None)
            bad = not isinstance(value, str) or not value or value.startswith("-") or \
                any(c.isspace() for c in value)
            if value is not None and bad:
                raise InvalidInput(f"resubmit.{key}: a Slurm {key} name. Got {value!r}.")
            if allowed and value not in allowed:
                raise InvalidInput(f"resubmit.{key}: {value!r} is outside tenant {tenant!r}'s scope "
                                   f"({key}s {list(allowed)}).")
            if value is not None:
                stored[key] = value
        return stored


BACKEND = SlurmBackend()


def slurm_job_name(job_id: str, number: int) -> str:
    """The name of the job's attempt ``number``: a repeated resubmission finds it by this name."""
    return f"evalstop-{job_id}-r{number}"


@dataclass(frozen=True)
class Submitter:
    """The Slurm user a tenant's jobs run as; ``user`` None is the service's own user."""

    user: str | None
    token: str | None = field(default=None, repr=False)
    token_file: str | None = None

    def read_token(self) -> str | None:
        """The JWT (the file is read at every submission, so a rotated token is picked up)."""
        if self.token_file is None:
            return self.token
        try:
            token = Path(self.token_file).read_text().strip()
        except OSError as exc:
            raise AdapterError(f"slurm: cannot read the token file of Slurm user {self.user!r}: "
                               f"{type(exc).__name__}", retryable=True) from None
        if not token:
            raise AdapterError(f"slurm: the token file of Slurm user {self.user!r} is empty", retryable=False)
        return token


class SubmitAs:
    """The ``submit_as`` / ``submit_as_service_user`` settings, checked once at start-up."""

    def __init__(self, settings: Mapping[str, Any], *, tokens: bool) -> None:
        mapping = settings.get("submit_as", {})
        if not isinstance(mapping, Mapping):
            raise _bad("submit_as", mapping, "a mapping {tenant: slurm user}")
        self.by_tenant = {str(t): _submitter(str(t), v, tokens) for t, v in mapping.items()}
        self.service_user = settings.get("submit_as_service_user", False)
        if not isinstance(self.service_user, bool):
            raise _bad("submit_as_service_user", self.service_user, "true or false")

    def __repr__(self) -> str:
        return f"SubmitAs(tenants={sorted(self.by_tenant)}, service_user={self.service_user})"

    def for_job(self, job: JobRef) -> Submitter:
        """The job's tenant's Slurm user; a permanent error naming the setting if there is none."""
        found = self.by_tenant.get(job.tenant)
        if found is not None:
            return found
        if self.service_user:
            return Submitter(None)
        raise AdapterError(f"job {job.job_id}: tenant {job.tenant!r} has no Slurm user to resubmit as; the "
                           f"operator maps it in the slurm adapter's 'submit_as' setting "
                           f"({{{job.tenant!r}: '<slurm user>'}}, docs/enforcement.md)", retryable=False)


def _submitter(tenant: str, value: Any, tokens: bool) -> Submitter:
    entry = {"user": value} if isinstance(value, str) else value
    what = "a Slurm user name" if not tokens else '{"user": ..., "token_file": ...} (or "token")'
    if not isinstance(entry, Mapping) or set(entry) - {"user", "token", "token_file"}:
        raise _bad(f"submit_as.{tenant}", "<hidden>" if isinstance(entry, Mapping) else value, what)
    user = entry.get("user")
    if not isinstance(user, str) or not USER_NAME.fullmatch(user):
        raise _bad(f"submit_as.{tenant}.user", user, "a Slurm user name ([A-Za-z0-9_.][A-Za-z0-9_.@-]*)")
    token, token_file = entry.get("token"), entry.get("token_file")
    if tokens and not (isinstance(token, str) and token) and not (isinstance(token_file, str) and token_file):
        raise _bad(f"submit_as.{tenant}", "<no token>", 'a "token" or "token_file" for slurmrestd')
    if not tokens and (token or token_file):
        raise _bad(f"submit_as.{tenant}", "<a token>", "a user name only (the CLI submits with --uid)")
    return Submitter(user, token if isinstance(token, str) else None,
                     token_file if isinstance(token_file, str) else None)


def _bad(key: str, value: Any, allowed: str) -> InvalidParameterError:
    return InvalidParameterError(f"The {key!r} setting of the slurm adapter must be {allowed}. "
                                 f"Got {value!r} instead.")


def resubmit_options(job: JobRef, template: Mapping[str, Any]) -> dict[str, str]:
    """The template's account and partition, each re-checked against the tenant's scope now."""
    scope = scope_section(job, "slurm")
    options = {}
    for key, listed in (("account", "accounts"), ("partition", "partitions")):
        value = template.get(key)
        allowed = list((scope or {}).get(listed) or ())
        if allowed and value not in allowed:
            raise NotOwned(f"job {job.job_id}: resubmission {key} {value!r} is outside tenant "
                           f"{job.tenant!r}'s scope ({listed} {allowed})")
        if value:
            options[key] = str(value)
    return options


def check_submitted(job: JobRef, records: Sequence[Mapping[str, str]], submitter: Submitter) -> None:
    """Before release: the held job runs as ``submitter``'s user, and its account, user and
    partition lie in the tenant's scope; else :class:`NotOwned`."""
    if not records:
        raise AdapterError(f"job {job.job_id}: Slurm no longer knows the new job {job.external_ref}",
                           retryable=True)
    wrong = [r.get("user") for r in records if submitter.user is not None and r.get("user") != submitter.user]
    if wrong:
        raise NotOwned(f"job {job.job_id}: Slurm job {job.external_ref} does not run as Slurm user "
                       f"{submitter.user!r}, the one tenant {job.tenant!r} is mapped to")
    check_slurm_owner(job, records, must_exist=True)


def check_slurm_owner(job: JobRef, records: Sequence[Mapping[str, str]], *, must_exist: bool = False) -> None:
    """Refuse unless every record (one per array task) has an account, user and partition the
    tenant's slurm scope allows (an empty list in the scope allows any; a record without the
    field never matches a list, also one with an empty entry). With ``must_exist``, no record
    (Slurm does not know the job) is refused too."""
    scope = scope_section(job, "slurm")
    if scope is None:
        return
    if must_exist and not records:
        raise NotOwned(unknown_job(job, "Slurm", "sbatch"))
    for record in records:
        for key, allowed in (("account", scope.get("accounts")), ("user", scope.get("users")),
                             ("partition", scope.get("partitions"))):
            if allowed and (not record.get(key) or record.get(key) not in allowed):
                raise NotOwned(f"job {job.job_id}: the {key} of Slurm job {job.external_ref} is outside "
                               f"tenant {job.tenant!r}'s scope ({key}s {list(allowed)})")
