"""Ray Jobs: stop a submitted job through the dashboard's Jobs REST API.

Talks plain HTTP (``POST /api/jobs/{id}/stop``, ``GET /api/jobs/{id}``) so the service needs no
Ray install and no client/cluster version match. With Ray token authentication (``RAY_AUTH_MODE=
token``, default for local clusters from Ray 2.59) set the ``token`` setting or ``RAY_AUTH_TOKEN``.
Ray's own stop sends SIGTERM to the entrypoint's process group and SIGKILL after
``RAY_JOB_STOP_WAIT_TIME_S`` (cluster side, default 3 s).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from typing import Annotated, Any
from urllib.parse import quote

from pydantic import AfterValidator, Field, ValidationInfo, model_validator

from evalstop.service.adapters._base import (
    AdapterError,
    Backend,
    EnforcementAdapter,
    JobRef,
    NotOwned,
    scope_section,
    unknown_job,
)
from evalstop.service.adapters._common import (
    fail_for_status,
    import_httpx,
    json_body,
    send,
    setting_float,
    setting_str,
    write_pin_marker,
)
from evalstop.service.adapters._scope import Entry, ScopeSection, declared
from evalstop.service.errors import InvalidInput

log = logging.getLogger("evalstop.service.adapters.ray")
TERMINAL = frozenset({"STOPPED", "SUCCEEDED", "FAILED"})
RAY_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,200}$")
#: Where a Ray submission id may continue a declared prefix: ``raysubmit_pa`` covers
#: ``raysubmit_pa`` and ``raysubmit_pa_1``, never ``raysubmit_pab_1``.
RAY_SEPARATORS = "_-.:"


def ray_id_within(ref: str, prefix: str) -> bool:
    """``ref`` continues ``prefix`` on a segment boundary: it equals the prefix, or the prefix
    ends with a separator (``_-.:``), or the character after it is one. An empty prefix covers
    nothing."""
    if not prefix.strip() or not ref.startswith(prefix):
        return False
    rest = ref[len(prefix):]
    return not rest or prefix[-1] in RAY_SEPARATORS or rest[0] in RAY_SEPARATORS


def _ray_prefix(value: str, info: ValidationInfo) -> str:
    if declared(info) and not RAY_ID.match(value):
        raise ValueError(f"must be a non-empty Ray submission id prefix (letters, digits, '_.:-'), "
                         f"got {value!r}")
    return value


class RayScope(ScopeSection):
    job_id_prefixes: list[Annotated[str, AfterValidator(_ray_prefix)]] = Field(
        default_factory=list, description="Submission id prefixes, matched on whole segments.")
    metadata: dict[Entry, str] = Field(default_factory=dict,
                                     description="Metadata the Ray job must have been submitted with.")

    @model_validator(mode="after")
    def _something(self) -> RayScope:
        if not (self.job_id_prefixes or self.metadata):
            raise ValueError("a ray scope must name job_id_prefixes or metadata")
        return self


class RayBackend(Backend):
    """A job is a Ray submission id within the scope's prefixes (its metadata is checked against
    Ray by the adapter); a rewind resubmits the ``entrypoint`` as ``<ref>-r<N>``."""

    scope = RayScope
    resubmit_text = "entrypoint"

    def canonical_ref(self, ref: str) -> str:
        if not RAY_ID.match(ref.strip()):
            raise InvalidInput(f"external_ref: a Ray submission id (letters, digits, '_.:-'). Got {ref!r}.")
        return ref.strip()

    def check_reference(
        self, tenant: str, section: Any, ref: str, options: Mapping[str, Any], settings: Mapping[str, Any]
    ) -> None:
        if section.job_id_prefixes and not any(ray_id_within(ref, p) for p in section.job_id_prefixes):
            raise InvalidInput(f"external_ref: Ray job {ref!r} is outside tenant {tenant!r}'s scope "
                               f"(job id prefixes {section.job_id_prefixes}).")


BACKEND = RayBackend()


def ray_submission_id(current_ref: str, number: int) -> str:
    """The next attempt's submission id: the current one with ``-r<N>`` (inside the same prefix)."""
    return f"{current_ref}-r{number}"


def ray_id_allowed(scope: Mapping[str, Any] | None, submission_id: str) -> bool:
    """The submission id lies in the tenant's Ray prefixes (or the scope names none)."""
    if scope is None:
        return True
    section = scope.get("ray")
    if not isinstance(section, Mapping):
        return False
    prefixes = list(section.get("job_id_prefixes") or ())
    return not prefixes or any(ray_id_within(submission_id, p) for p in prefixes)


class RayJobsAdapter(EnforcementAdapter):
    name = "ray"

    def __init__(self, settings: Mapping[str, Any]) -> None:
        self.address = setting_str(self.name, settings, "address").rstrip("/")
        self.timeout_s = setting_float(self.name, settings, "timeout_s", 10.0)
        self.pin_dir: str | None = settings.get("pin_dir")
        token = settings.get("token") or os.environ.get("RAY_AUTH_TOKEN")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        httpx = import_httpx(self.name)
        self._client = httpx.Client(base_url=self.address, timeout=self.timeout_s, headers=headers)

    def __repr__(self) -> str:
        return f"RayJobsAdapter(address={self.address!r})"

    def _path(self, job: JobRef, suffix: str = "") -> str:
        if not job.external_ref:
            raise AdapterError(f"job {job.job_id}: empty Ray submission id", retryable=False)
        return f"/api/jobs/{quote(job.external_ref, safe='')}{suffix}"

    def info(self, job: JobRef) -> dict[str, Any] | None:
        """Ray's record of the job (status, metadata...), or None if Ray does not know it."""
        what = f"ray status of job {job.job_id} ({job.external_ref})"
        resp = send(self._client, "GET", self._path(job), what=what)
        if resp.status_code == 404:
            return None
        fail_for_status(resp, what)
        reply = json_body(resp, what)
        return reply if isinstance(reply, dict) else {}

    def status(self, job: JobRef) -> str | None:
        """The Ray job status (``RUNNING``, ``STOPPED``...), or None if Ray does not know it."""
        reply = self.info(job)
        status = reply.get("status") if reply is not None else None
        return str(status) if status is not None else None

    def check_owner(self, job: JobRef, *, must_exist: bool = False) -> None:
        """The submission id has one of the scope's prefixes (on a segment boundary), and the job
        was submitted with every ``metadata`` key/value the scope names
        (``ray job submit --metadata-json``). Ray is asked only when the scope names metadata.
        A job Ray does not know passes, also at registration when the scope has prefixes (the
        id lies in the tenant's own namespace of ids, so it may register before it submits);
        with metadata alone, nothing shows an unknown id is the tenant's, so ``must_exist``
        refuses it."""
        scope = scope_section(job, self.name)
        if scope is None:
            return
        prefixes = tuple(scope.get("job_id_prefixes") or ())
        if prefixes and not any(ray_id_within(job.external_ref, p) for p in prefixes):
            raise NotOwned(f"job {job.job_id}: Ray job {job.external_ref!r} lacks the prefixes "
                           f"{list(prefixes)}")
        wanted = dict(scope.get("metadata") or {})
        reply = self.info(job) if wanted else None
        if reply is None:
            if wanted and must_exist and not prefixes:
                raise NotOwned(unknown_job(job, "Ray", "ray job submit"))
            return
        metadata = reply.get("metadata") or {}
        wrong = sorted(k for k, v in wanted.items() if metadata.get(k) != v)
        if wrong:
            raise NotOwned(f"job {job.job_id}: Ray job {job.external_ref!r} has metadata {wrong} other than "
                           f"tenant {job.tenant!r}'s scope {wanted}")

    def _stop(self, job: JobRef, verb: str) -> None:
        what = f"ray {verb} of job {job.job_id} ({job.external_ref})"
        resp = send(self._client, "POST", self._path(job, "/stop"), what=what)
        if resp.status_code == 404:
            log.warning("%s: Ray does not know the job; nothing to stop", what)
            return
        fail_for_status(resp, what)

    def pin_checkpoint(self, job: JobRef, checkpoint_uri: str | None) -> None:
        if checkpoint_uri is not None:
            write_pin_marker(job, checkpoint_uri, self.name, self.pin_dir)

    def signal(self, job: JobRef) -> None:
        self._stop(job, "signal")

    def hard_stop(self, job: JobRef) -> None:
        status = self.status(job)
        if status is not None and status not in TERMINAL:
            self._stop(job, "hard stop")

    def is_stopped(self, job: JobRef) -> bool:
        status = self.status(job)
        return status is None or status in TERMINAL

    def resubmit(self, job: JobRef, template: Mapping[str, Any], text: str, number: int) -> str:
        """Submit ``text`` as the entrypoint of a new Ray job ``<ref>-r<N>`` (inside the tenant's
        prefixes), with the metadata its scope requires and the template's ``env`` as its
        ``runtime_env`` variables; a job of that id already there is the one submitted before.
        Then the new job is checked like any other (``check_owner``)."""
        new = JobRef(job.job_id, job.tenant, ray_submission_id(job.external_ref, number), job.options,
                     scope=job.scope)
        if not ray_id_allowed(job.scope, new.external_ref):
            raise NotOwned(f"job {job.job_id}: resubmission id {new.external_ref!r} is outside tenant "
                           f"{job.tenant!r}'s Ray prefixes")
        if self.info(new) is None:
            section = scope_section(job, self.name) or {}
            metadata = {"evalstop_job": job.job_id, "evalstop_attempt": str(number),
                        **dict(section.get("metadata") or {})}
            body: dict[str, Any] = {"entrypoint": text, "submission_id": new.external_ref,
                                    "metadata": metadata}
            if template.get("env"):  # the template's variables only (Ray's runtime_env)
                body["runtime_env"] = {"env_vars": dict(template["env"])}
            what = f"ray resubmit of job {job.job_id} ({new.external_ref})"
            resp = send(self._client, "POST", "/api/jobs/", what=what, json=body)
            if not 200 <= resp.status_code < 300 and self.info(new) is None:  # a lost reply: it is there
                fail_for_status(resp, what)
        self.check_owner(new)
        return new.external_ref

    def close(self) -> None:
        self._client.close()
