"""Kubernetes: batch/v1 Job or JobSet, optionally admitted by Kueue, over the plain REST API.

Stop sequence: pin = annotate the object (``evalstop.io/pinned-checkpoint``); signal = Kueue-managed
(queue-name label or a ``workload`` option): set the Workload's ``spec.active=false`` so Kueue
evicts it and returns its quota, otherwise set ``spec.suspend=true`` (pods get SIGTERM and their
termination grace period); hard stop = DELETE with ``propagationPolicy=Background``; reconcile =
the object is gone, suspended or finished, and none of its pods is still running.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote

from pydantic import AfterValidator, Field, ValidationInfo

from evalstop.service.adapters._base import (
    AdapterError,
    Backend,
    EnforcementAdapter,
    JobRef,
    NotOwned,
    scope_section,
)
from evalstop.service.adapters._common import (
    RETRYABLE_STATUS,
    fail_for_status,
    import_httpx,
    json_body,
    send,
    setting_float,
    setting_str,
)
from evalstop.service.adapters._scope import Entry, ScopeSection, declared
from evalstop.service.errors import InvalidInput

SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
PIN_ANNOTATION = "evalstop.io/pinned-checkpoint"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
MERGE_PATCH = {"Content-Type": "application/merge-patch+json"}
RETRY_ON = RETRYABLE_STATUS | {409}
KINDS = {
    "Job": ("batch/v1", "jobs", "batch.kubernetes.io/job-name"),
    "JobSet": ("jobset.x-k8s.io/{jobset_version}", "jobsets", "jobset.sigs.k8s.io/jobset-name"),
}
FINISHED = frozenset({"Complete", "Completed", "Failed", "Suspended"})
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
K8S_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")


def _namespace(value: str, info: ValidationInfo) -> str:
    if declared(info) and not DNS_LABEL.match(value):
        raise ValueError(f"must be a Kubernetes namespace (a DNS label), got {value!r}")
    return value


class KubernetesScope(ScopeSection):
    namespaces: list[Annotated[str, AfterValidator(_namespace)]] = Field(
        min_length=1, description="Namespaces the tenant's jobs live in.")
    labels: dict[Entry, str] = Field(default_factory=dict,
                                   description="Labels every target object must carry (a selector).")


class KubernetesBackend(Backend):
    """A job is ``namespace/name``, in one of the scope's namespaces (its labels are checked
    against the API server by the adapter)."""

    scope = KubernetesScope

    def canonical_ref(self, ref: str) -> str:
        namespace, sep, name = ref.strip().partition("/")
        if not (sep and DNS_LABEL.match(namespace) and K8S_NAME.match(name)):
            raise InvalidInput(f"external_ref: a Kubernetes 'namespace/name'. Got {ref!r}.")
        return ref.strip()

    def check_reference(
        self, tenant: str, section: Any, ref: str, options: Mapping[str, Any], settings: Mapping[str, Any]
    ) -> None:
        namespace = ref.partition("/")[0]
        if namespace not in section.namespaces:
            raise InvalidInput(f"external_ref: namespace {namespace!r} is outside tenant {tenant!r}'s scope "
                               f"(namespaces {section.namespaces}).")


BACKEND = KubernetesBackend()


def _in_cluster_url() -> str | None:
    host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT")
    return f"https://{host}:{port}" if host and port else None


class KubernetesAdapter(EnforcementAdapter):
    name = "kubernetes"
    path_settings = frozenset({"token_file", "ca_file"})  # the projected token is re-read as it rotates

    def __init__(self, settings: Mapping[str, Any]) -> None:
        self.api_url = setting_str(self.name, settings, "api_url", _in_cluster_url()).rstrip("/")
        self.timeout_s = setting_float(self.name, settings, "timeout_s", 10.0)
        self.kueue_version = setting_str(self.name, settings, "kueue_version", "v1beta1")
        self.jobset_version = setting_str(self.name, settings, "jobset_version", "v1alpha2")
        self._token: str | None = settings.get("token")
        self._token_file = Path(settings.get("token_file", SA_DIR / "token"))
        ca = settings.get("ca_file", SA_DIR / "ca.crt")
        verify: Any = settings.get("verify", str(ca) if Path(ca).exists() else True)
        httpx = import_httpx(self.name)
        self._client = httpx.Client(base_url=self.api_url, timeout=self.timeout_s, verify=verify)

    def __repr__(self) -> str:
        return f"KubernetesAdapter(api_url={self.api_url!r})"

    # --- HTTP ---------------------------------------------------------------------------------
    def _headers(self) -> dict[str, str]:
        token = self._token
        if token is None and self._token_file.exists():  # re-read: bound tokens rotate
            token = self._token_file.read_text().strip()
        return {"Authorization": f"Bearer {token}"} if token else {}

    def _call(self, method: str, path: str, what: str, **kwargs: Any) -> dict[str, Any] | None:
        """The decoded reply, or None for 404 (the object is gone)."""
        headers = {**self._headers(), **kwargs.pop("headers", {})}
        resp = send(self._client, method, path, what=what, headers=headers, **kwargs)
        if resp.status_code == 404:
            return None
        fail_for_status(resp, what, retry_on=RETRY_ON)
        body = json_body(resp, what)
        if not isinstance(body, dict):
            raise AdapterError(f"{what}: reply is not a JSON object", retryable=True)
        return body

    # --- addressing ---------------------------------------------------------------------------
    def _split(self, job: JobRef) -> tuple[str, str]:
        namespace, sep, name = job.external_ref.partition("/")
        if not sep or not namespace or not name or "/" in name:
            raise AdapterError(f"job {job.job_id}: external_ref must be 'namespace/name', got "
                               f"{job.external_ref!r}", retryable=False)
        return quote(namespace, safe=""), quote(name, safe="")

    def _kind(self, job: JobRef) -> str:
        kind = str(job.options.get("kind", "Job"))
        if kind not in KINDS:
            raise AdapterError(f"job {job.job_id}: option 'kind' must be one of {sorted(KINDS)}, "
                               f"got {kind!r}", retryable=False)
        return kind

    def _object_path(self, job: JobRef) -> str:
        namespace, name = self._split(job)
        group, plural, _ = KINDS[self._kind(job)]
        group = group.format(jobset_version=self.jobset_version)
        return f"/apis/{group}/namespaces/{namespace}/{plural}/{name}"

    def _workloads_path(self, namespace: str) -> str:
        return f"/apis/kueue.x-k8s.io/{self.kueue_version}/namespaces/{namespace}/workloads"

    # --- steps --------------------------------------------------------------------------------
    def check_owner(self, job: JobRef, *, must_exist: bool = False) -> None:
        """The namespace is one of the scope's, and the object carries every label of the
        scope's selector (read from the API server, not from the registration; asked only when
        the scope names labels). An object not created yet passes, also at registration
        (``must_exist``): its namespace is the tenant's, and its labels are checked before
        every action."""
        scope = scope_section(job, self.name)
        if scope is None:
            return
        namespace = job.external_ref.partition("/")[0]
        if namespace not in (scope.get("namespaces") or ()):
            raise NotOwned(f"job {job.job_id}: namespace {namespace!r} is outside tenant "
                           f"{job.tenant!r}'s scope")
        wanted = dict(scope.get("labels") or {})
        if not wanted:
            return
        obj = self._call("GET", self._object_path(job), f"k8s owner check for job {job.job_id}")
        if obj is None:  # also at registration: the namespace already bounds the name (docs/service.md)
            return
        labels = obj.get("metadata", {}).get("labels") or {}
        wrong = sorted(k for k, v in wanted.items() if labels.get(k) != v)
        if wrong:
            raise NotOwned(f"job {job.job_id}: {job.external_ref} has labels {wrong} other than tenant "
                           f"{job.tenant!r}'s selector {wanted}")

    def pin_checkpoint(self, job: JobRef, checkpoint_uri: str | None) -> None:
        if checkpoint_uri is None:
            return
        annotations = {PIN_ANNOTATION: checkpoint_uri, "evalstop.io/job-id": job.job_id}
        patch = {"metadata": {"annotations": annotations}}
        self._call("PATCH", self._object_path(job), f"k8s pin for job {job.job_id}",
                   json=patch, headers=MERGE_PATCH)

    def signal(self, job: JobRef) -> None:
        what = f"k8s signal for job {job.job_id}"
        obj = self._call("GET", self._object_path(job), what)
        if obj is None:
            return
        workload = self._find_workload(job, obj)
        if workload is not None:
            namespace, _ = self._split(job)
            path = f"{self._workloads_path(namespace)}/{quote(workload, safe='')}"
            self._call("PATCH", path, what, json={"spec": {"active": False}}, headers=MERGE_PATCH)
        else:
            self._call("PATCH", self._object_path(job), what, json={"spec": {"suspend": True}},
                       headers=MERGE_PATCH)

    def _find_workload(self, job: JobRef, obj: Mapping[str, Any]) -> str | None:
        meta = obj.get("metadata", {})
        if "workload" in job.options:  # named at registration: it must be this object's Workload
            name = str(job.options["workload"])
            namespace, _ = self._split(job)
            found = self._call("GET", f"{self._workloads_path(namespace)}/{quote(name, safe='')}",
                               f"k8s workload of job {job.job_id}")
            if found is None:
                raise AdapterError(f"job {job.job_id}: Workload {name!r} not found", retryable=True)
            if not _owned_by(found, str(meta.get("uid", ""))):
                raise NotOwned(f"job {job.job_id}: Workload {name!r} does not belong to {job.external_ref}")
            return name
        if QUEUE_LABEL not in meta.get("labels", {}):
            return None
        namespace, _ = self._split(job)
        listing = self._call("GET", self._workloads_path(namespace), f"k8s workload of job {job.job_id}",
                             params={"labelSelector": f"{JOB_UID_LABEL}={meta.get('uid', '')}"})
        items = (listing or {}).get("items", [])
        if not items:
            raise AdapterError(f"job {job.job_id}: Kueue-managed but no Workload found yet", retryable=True)
        return str(items[0]["metadata"]["name"])

    def hard_stop(self, job: JobRef) -> None:
        self._call("DELETE", self._object_path(job), f"k8s delete for job {job.job_id}",
                   params={"propagationPolicy": "Background"})

    def is_stopped(self, job: JobRef) -> bool:
        what = f"k8s reconcile for job {job.job_id}"
        obj = self._call("GET", self._object_path(job), what)
        if obj is not None and not _finished(obj):
            return False
        return self._running_pods(job, what) == 0

    def _running_pods(self, job: JobRef, what: str) -> int:
        namespace, name = self._split(job)
        label = KINDS[self._kind(job)][2]
        listing = self._call("GET", f"/api/v1/namespaces/{namespace}/pods", what,
                             params={"labelSelector": f"{label}={name}"})
        pods = (listing or {}).get("items", [])
        return sum(1 for p in pods if p.get("status", {}).get("phase") not in ("Succeeded", "Failed"))

    def close(self) -> None:
        self._client.close()


def _owned_by(workload: Mapping[str, Any], uid: str) -> bool:
    """Kueue's Workload names its job as controlling owner and in the job-uid label."""
    meta = workload.get("metadata", {})
    refs = meta.get("ownerReferences") or []
    return bool(uid) and (any(r.get("uid") == uid and r.get("controller") for r in refs)
                          or (meta.get("labels") or {}).get(JOB_UID_LABEL) == uid)


def _finished(obj: Mapping[str, Any]) -> bool:
    if obj.get("spec", {}).get("suspend") is True:
        return True
    conditions = obj.get("status", {}).get("conditions") or []
    return any(c.get("type") in FINISHED and c.get("status") == "True" for c in conditions)
