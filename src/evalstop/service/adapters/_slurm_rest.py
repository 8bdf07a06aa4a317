"""Slurm through ``slurmrestd``: the same stop sequence as the CLI adapter, over its REST API.

Settings: ``rest_url`` (``http://host:6820``) or ``rest_socket`` (a unix socket, for
``rest_auth/local``); ``user`` + ``token`` for JWT auth (``X-SLURM-USER-NAME`` /
``X-SLURM-USER-TOKEN``); ``api_version`` (default ``v0.0.38``, Slurm 22.05); ``pin_dir``;
``submit_as`` (per tenant: ``{"user": ..., "token_file": ...}``, the JWT a resubmission is
sent with; never logged) or ``submit_as_service_user`` (``_slurm_submit.py``).
slurmrestd reports failures as HTTP 500 with an ``errors`` list; they are classified like the
CLI's messages (unknown or finished job = gone, "can not be altered now" = retryable).
"""

from __future__ import annotations

import getpass
from collections.abc import Mapping
from typing import Any

from evalstop.service.adapters._base import AdapterError, EnforcementAdapter, JobRef, NotOwned
from evalstop.service.adapters._common import (
    DEFAULT_PATH,
    fail_for_status,
    import_httpx,
    json_body,
    send,
    setting_float,
    setting_str,
    write_pin_marker,
)
from evalstop.service.adapters._slurm import TERMINAL, Result, classify, slurm_job_id
from evalstop.service.adapters._slurm_submit import (
    SubmitAs,
    Submitter,
    check_slurm_owner,
    check_submitted,
    resubmit_options,
    slurm_job_name,
)


class SlurmRestAdapter(EnforcementAdapter):
    name = "slurm"

    def __init__(self, settings: Mapping[str, Any]) -> None:
        self.api_version = setting_str(self.name, settings, "api_version", "v0.0.38")
        self.timeout_s = setting_float(self.name, settings, "timeout_s", 30.0)
        self.pin_dir: str | None = settings.get("pin_dir")
        httpx = import_httpx(self.name)
        self.submit_as = SubmitAs(settings, tokens=True)
        #: the Slurm user the adapter's own calls run as (rest_auth/local: the service's Unix user)
        self.service_user = str(settings.get("user") or getpass.getuser())
        headers = {}
        token = settings.get("token")
        if not token and settings.get("token_file"):  # kept as a path (make_slurm_adapter.path_settings)
            from evalstop.service.settings import read_secret_file

            token = read_secret_file(f"{self.name}.token_file", settings["token_file"])
        if token:
            headers = {"X-SLURM-USER-NAME": setting_str(self.name, settings, "user"),
                       "X-SLURM-USER-TOKEN": str(token)}
        if settings.get("rest_socket"):
            self.base = "http://slurmrestd"
            transport = httpx.HTTPTransport(uds=str(settings["rest_socket"]))
        else:
            self.base = setting_str(self.name, settings, "rest_url").rstrip("/")
            transport = None
        self._client = httpx.Client(base_url=self.base, transport=transport, headers=headers,
                                    timeout=self.timeout_s)

    def __repr__(self) -> str:
        return f"SlurmRestAdapter(base={self.base!r}, api_version={self.api_version!r})"

    def _call(self, method: str, job: JobRef | None, what: str, **kwargs: Any) -> tuple[str, Any]:
        """``("ok", body)`` or ``("gone", body)``; raise for anything else. ``job`` None: the
        job list (``GET``) or a submission (``POST``)."""
        tail = "job/submit" if method == "POST" else "jobs"
        path = f"/slurm/{self.api_version}/" + (tail if job is None else f"job/{slurm_job_id(job)}")
        resp = send(self._client, method, path, what=what, **kwargs)
        if resp.status_code not in (200, 500):
            fail_for_status(resp, what)
        body = json_body(resp, what)
        errors = (body.get("errors") or []) if isinstance(body, dict) else []
        text = "; ".join(f"{e.get('error', '')}: {e.get('description', '')}" for e in errors
                         if isinstance(e, dict))
        if resp.status_code == 500 and not errors:
            raise AdapterError(f"{what}: HTTP 500 without an error list", retryable=True)
        if resp.status_code == 200 and isinstance(body, dict) and body.get("job_id") is not None:
            return "ok", body  # a submission; its errors list holds notices ("Job is in held state")
        return classify(what, Result(1 if errors else 0, "", text)), body

    def states(self, job: JobRef) -> list[str]:
        """The job's states (one per array task); empty once Slurm has forgotten it."""
        outcome, body = self._call("GET", job, f"slurm reconcile for job {job.job_id}")
        if outcome == "gone":
            return []
        states = []
        for entry in body.get("jobs", []):
            state = entry.get("job_state")  # a string up to v0.0.39, a list of flags after
            states.append(str(state[0] if isinstance(state, list) and state else state))
        return states

    def check_owner(self, job: JobRef, *, must_exist: bool = False) -> None:
        if job.scope is None:
            return
        outcome, body = self._call("GET", job, f"slurm owner check for job {job.job_id}")
        if outcome == "gone" and not must_exist:
            return
        check_slurm_owner(job, [] if outcome == "gone" else _records(body), must_exist=must_exist)

    def pin_checkpoint(self, job: JobRef, checkpoint_uri: str | None) -> None:
        if checkpoint_uri is None:
            return
        write_pin_marker(job, checkpoint_uri, self.name, self.pin_dir)
        self._call("POST", job, f"slurm pin for job {job.job_id}",
                   json={"comment": f"evalstop-pin:{checkpoint_uri}"})

    def signal(self, job: JobRef) -> None:
        states = self.states(job)
        if all(s in TERMINAL for s in states):
            return
        if all(s == "PENDING" for s in states):  # queued: nothing to save, cancel it outright
            self._call("DELETE", job, f"slurm signal for job {job.job_id}")
        else:
            self._call("DELETE", job, f"slurm signal for job {job.job_id}", params={"signal": "TERM"})

    def hard_stop(self, job: JobRef) -> None:
        self._call("DELETE", job, f"slurm hard stop for job {job.job_id}", params={"signal": "KILL"})

    def is_stopped(self, job: JobRef) -> bool:
        return all(state in TERMINAL for state in self.states(job))

    def resubmit(self, job: JobRef, template: Mapping[str, Any], text: str, number: int) -> str:
        """The CLI adapter's resubmission over slurmrestd: submitted held (``"hold": true``) as
        job ``evalstop-<job id>-r<N>`` with the tenant's Slurm user and token (``submit_as``),
        environment the template's ``env`` only (``PATH`` defaults to a fixed system one),
        released (``"hold": false``) once the check passes, else cancelled while held."""
        submitter = self.submit_as.for_job(job)
        headers = self._headers(submitter)
        name = slurm_job_name(job.job_id, number)
        new_id = self._named(job, name, submitter, headers)
        if new_id is None:
            desc = {"name": name, "hold": True, "current_working_directory": "/tmp",
                    "environment": {"PATH": DEFAULT_PATH, **(template.get("env") or {})},
                    **resubmit_options(job, template)}
            _, body = self._call("POST", None, f"slurm resubmit of job {job.job_id}", headers=headers,
                                 json={"script": text, "job": desc})
            new_id = str(body.get("job_id"))
        new = JobRef(job.job_id, job.tenant, new_id, job.options, scope=job.scope)
        outcome, body = self._call("GET", new, f"slurm resubmit check of job {job.job_id}", headers=headers)
        try:
            check_submitted(new, [] if outcome == "gone" else _records(body), submitter)
        except NotOwned:
            self._call("DELETE", new, f"slurm cancel of job {job.job_id}", headers=headers)
            raise
        self._call("POST", new, f"slurm release of job {job.job_id}", headers=headers, json={"hold": False})
        return new_id

    def _headers(self, submitter: Submitter) -> dict[str, str]:
        """The tenant's user and JWT; none (the adapter's own) for the service's user."""
        token = submitter.read_token()
        if submitter.user is None or token is None:
            return {}
        return {"X-SLURM-USER-NAME": submitter.user, "X-SLURM-USER-TOKEN": token}

    def _named(self, job: JobRef, name: str, submitter: Submitter, headers: dict[str, str]) -> str | None:
        """The live job called ``name`` of the submitting user (the resubmission made before)."""
        user = submitter.user or self.service_user
        _, body = self._call("GET", None, f"slurm resubmit lookup for job {job.job_id}", headers=headers)
        for entry in body.get("jobs", []) if isinstance(body, dict) else []:
            state = entry.get("job_state")
            state = state[0] if isinstance(state, list) and state else state
            if entry.get("name") == name and entry.get("user_name") == user and state not in TERMINAL:
                return str(entry.get("job_id"))
        return None

    def close(self) -> None:
        self._client.close()


def _records(body: Any) -> list[dict[str, str]]:
    """A job reply's records (one per array task): account, user, partition."""
    return [{"account": str(e.get("account") or ""), "user": str(e.get("user_name") or ""),
             "partition": str(e.get("partition") or "")} for e in body.get("jobs", [])]
