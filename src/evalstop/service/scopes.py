"""What a tenant may act on: its target scope, declared by the operator.

A tenant without a section for a target (``slurm``, ``ray``, ``kubernetes``, ``webhook``) cannot
register jobs on it. The scope is checked twice: at registration on the reference itself (a
Kubernetes namespace, a Ray submission-id prefix, a webhook URL prefix, a Slurm job id), and at
enforcement time by the adapter against what the backend says about the job (its Slurm account,
user and partition; its Ray metadata; its Kubernetes namespace and labels). Checkpoint URI
prefixes confine where pin markers may be written (:mod:`.adapters._pinfs`) and which
``checkpoint_uri`` a tenant may post.

Dry-run and plugin targets have no section: dry-run acts on nothing, and a plugin receives the
whole scope in ``JobRef.scope`` to check as it sees fit.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from posixpath import normpath
from typing import Any
from urllib.parse import unquote, urlsplit

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .errors import InvalidInput

SCOPED_TARGETS = ("kubernetes", "ray", "slurm", "webhook")
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
K8S_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
RAY_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,200}$")


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class KubernetesScope(_Section):
    namespaces: list[str] = Field(min_length=1, description="Namespaces the tenant's jobs live in.")
    labels: dict[str, str] = Field(default_factory=dict,
                                   description="Labels every target object must carry (a selector).")


class SlurmScope(_Section):
    accounts: list[str] = Field(default_factory=list)
    users: list[str] = Field(default_factory=list)
    partitions: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _something(self) -> SlurmScope:
        if not (self.accounts or self.users or self.partitions):
            raise ValueError("a slurm scope must name at least one of accounts, users, partitions")
        return self


class RayScope(_Section):
    job_id_prefixes: list[str] = Field(default_factory=list)
    metadata: dict[str, str] = Field(default_factory=dict,
                                     description="Metadata the Ray job must have been submitted with.")

    @model_validator(mode="after")
    def _something(self) -> RayScope:
        if not (self.job_id_prefixes or self.metadata):
            raise ValueError("a ray scope must name job_id_prefixes or metadata")
        return self


class WebhookScope(_Section):
    url_prefixes: list[str] = Field(min_length=1)


class TenantScope(_Section):
    """The operator's declaration (``PUT /v1/tenants/{name}/scope``)."""

    kubernetes: KubernetesScope | None = None
    slurm: SlurmScope | None = None
    ray: RayScope | None = None
    webhook: WebhookScope | None = None
    checkpoint_prefixes: list[str] = Field(
        default_factory=list,
        description="URI prefixes (file:///data/a/, s3://bucket-a/) of the tenant's checkpoints.")

    @model_validator(mode="after")
    def _clean_prefixes(self) -> TenantScope:
        for prefix in self.checkpoint_prefixes:
            if has_traversal(prefix):
                raise ValueError(f"checkpoint prefix {prefix!r} must not contain '..' or '.' segments")
        return self


def parse_scope(raw: Mapping[str, Any] | None) -> TenantScope | None:
    return None if raw is None else TenantScope.model_validate(raw)


# -- registration ---------------------------------------------------------------------------------
def canonical_ref(target: str, external_ref: str) -> str:
    """The one spelling of a reference, so ``01234`` and ``1234`` are the same Slurm job (the
    live-reference constraint compares these strings)."""
    ref = external_ref.strip()
    if target == "slurm":
        head, sep, tail = ref.partition("_")
        if not head.isdigit() or (sep and not tail.isdigit()):
            raise InvalidInput(f"external_ref: a Slurm job id like '1234' or '1234_7'. Got {external_ref!r}.")
        return str(int(head)) + (f"_{int(tail)}" if sep else "")
    if target == "kubernetes":
        namespace, sep, name = ref.partition("/")
        if not (sep and DNS_LABEL.match(namespace) and K8S_NAME.match(name)):
            raise InvalidInput(f"external_ref: a Kubernetes 'namespace/name'. Got {external_ref!r}.")
    if target == "ray" and not RAY_ID.match(ref):
        raise InvalidInput(f"external_ref: a Ray submission id (letters, digits, '_.:-'). "
                           f"Got {external_ref!r}.")
    return ref


def check_registration(
    tenant: str, scope: TenantScope | None, target: str, ref: str, options: Mapping[str, Any],
    default_webhook_url: str | None,
) -> None:
    """Raise InvalidInput naming the scope when ``tenant`` may not register ``ref`` on ``target``."""
    if target not in SCOPED_TARGETS:
        return
    section = getattr(scope, target) if scope is not None else None
    if section is None:
        raise InvalidInput(f"target: tenant {tenant!r} has no {target} scope; an operator must declare one "
                           f"(PUT /v1/tenants/{tenant}/scope) before it can register {target} jobs.")
    if isinstance(section, KubernetesScope):
        namespace = ref.partition("/")[0]
        if namespace not in section.namespaces:
            raise InvalidInput(f"external_ref: namespace {namespace!r} is outside tenant {tenant!r}'s scope "
                               f"(namespaces {section.namespaces}).")
    elif isinstance(section, RayScope):
        if section.job_id_prefixes and not ref.startswith(tuple(section.job_id_prefixes)):
            raise InvalidInput(f"external_ref: Ray job {ref!r} is outside tenant {tenant!r}'s scope "
                               f"(job id prefixes {section.job_id_prefixes}).")
    elif isinstance(section, WebhookScope):
        url = options.get("url", default_webhook_url)
        if not isinstance(url, str) or not any(url_within(url, p) for p in section.url_prefixes):
            raise InvalidInput(f"target_options.url: {url!r} is outside tenant {tenant!r}'s scope "
                               f"(URL prefixes {section.url_prefixes}).")


def url_within(url: str, prefix: str) -> bool:
    """``url`` is under ``prefix``: same scheme, host and port, no credentials, and the path
    continues the prefix's at a ``/`` (``/hooks`` does not cover ``/hooks-evil``)."""
    try:
        u, p = urlsplit(url), urlsplit(prefix)
        same_origin = (u.scheme.lower(), u.hostname, u.port) == (p.scheme.lower(), p.hostname, p.port)
    except ValueError:
        return False
    if not same_origin or u.username or u.password or any(c in url for c in "\r\n\t "):
        return False
    if has_traversal(u.path):
        return False
    base = p.path.rstrip("/")
    return u.path == base or u.path.startswith(base + "/")


# -- checkpoints ----------------------------------------------------------------------------------
def has_traversal(uri: str) -> bool:
    """A ``..`` or ``.`` segment, also percent-encoded (``%2e%2e``), or a NUL byte."""
    for text in (uri, unquote(uri)):
        if "\x00" in text or any(seg in (".", "..") for seg in text.split("/")[1:]):
            return True
    return False


def checkpoint_allowed(uri: str, prefixes: Sequence[str]) -> bool:
    """``uri`` is under one of ``prefixes`` (compared on ``/`` boundaries, after refusing any
    traversal). Plain paths are compared as ``file://`` URIs."""
    if has_traversal(uri):
        return False
    as_uri = _as_uri(uri)
    for prefix in prefixes:
        base = _as_uri(prefix).rstrip("/")
        if as_uri == base or as_uri.startswith(base + "/"):
            return True
    return False


def local_roots(prefixes: Sequence[str]) -> list[str]:
    """The filesystem directories among ``prefixes`` (``file://`` or absolute paths)."""
    roots = []
    for prefix in prefixes:
        uri = _as_uri(prefix)
        if uri.startswith("file://"):
            roots.append(normpath(unquote(urlsplit(uri).path)))
    return roots


def _as_uri(text: str) -> str:
    return "file://" + text if text.startswith("/") else text
