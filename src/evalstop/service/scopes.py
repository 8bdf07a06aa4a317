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
from typing import Annotated, Any
from urllib.parse import unquote, urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    model_validator,
)

from .errors import InvalidInput

SCOPED_TARGETS = ("kubernetes", "ray", "slurm", "webhook")
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
K8S_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
RAY_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,200}$")
#: Where a Ray submission id may continue a declared prefix: ``raysubmit_pa`` covers
#: ``raysubmit_pa`` and ``raysubmit_pa_1``, never ``raysubmit_pab_1``.
RAY_SEPARATORS = "_-.:"
#: Validation context for a scope read back from the database: entry checks added after it was
#: stored are skipped (an empty entry matches nothing anyway), so an old row still loads.
STORED = {"stored": True}


def _declared(info: ValidationInfo) -> bool:
    return not (isinstance(info.context, dict) and info.context.get("stored"))


def _entry(value: str, info: ValidationInfo) -> str:
    """A name in a scope list (a Slurm account, a label key): not empty, no whitespace."""
    if _declared(info) and (not value or value != value.strip() or any(c.isspace() for c in value)):
        raise ValueError(f"must be a non-empty name without whitespace, got {value!r}")
    return value


def _namespace(value: str, info: ValidationInfo) -> str:
    if _declared(info) and not DNS_LABEL.match(value):
        raise ValueError(f"must be a Kubernetes namespace (a DNS label), got {value!r}")
    return value


def _ray_prefix(value: str, info: ValidationInfo) -> str:
    if _declared(info) and not RAY_ID.match(value):
        raise ValueError(f"must be a non-empty Ray submission id prefix (letters, digits, '_.:-'), "
                         f"got {value!r}")
    return value


def _url_prefix(value: str, info: ValidationInfo) -> str:
    if _declared(info) and not _is_origin_url(value):
        raise ValueError(f"must be an http(s) URL with a host and no credentials, spaces or '..', "
                         f"got {value!r}")
    return value


def _is_origin_url(value: str) -> bool:
    try:
        parts = urlsplit(value)
        host, port = parts.hostname, parts.port
    except ValueError:
        return False
    return (parts.scheme.lower() in ("http", "https") and bool(host) and port != 0 and not parts.username
            and not parts.password and not any(c.isspace() for c in value) and not has_traversal(parts.path))


def _checkpoint_prefix(value: str, info: ValidationInfo) -> str:
    if has_traversal(value):  # refused however the scope was stored: a pin must never climb out
        raise ValueError(f"checkpoint prefix {value!r} must not contain '..' or '.' segments")
    if not _declared(info):
        return value
    parts = urlsplit(_as_uri(value))
    below_root = parts.path.strip("/") if parts.scheme == "file" else parts.netloc
    if not parts.scheme or not below_root or any(c.isspace() for c in value):
        raise ValueError(f"must name a directory below a root (file:///data/a/, /data/a, "
                         f"s3://bucket/), got {value!r}")
    return value


Entry = Annotated[str, AfterValidator(_entry)]
Namespace = Annotated[str, AfterValidator(_namespace)]
RayPrefix = Annotated[str, AfterValidator(_ray_prefix)]
UrlPrefix = Annotated[str, AfterValidator(_url_prefix)]
CheckpointPrefix = Annotated[str, AfterValidator(_checkpoint_prefix)]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class KubernetesScope(_Section):
    namespaces: list[Namespace] = Field(min_length=1, description="Namespaces the tenant's jobs live in.")
    labels: dict[Entry, str] = Field(default_factory=dict,
                                   description="Labels every target object must carry (a selector).")


class SlurmScope(_Section):
    accounts: list[Entry] = Field(default_factory=list)
    users: list[Entry] = Field(default_factory=list)
    partitions: list[Entry] = Field(default_factory=list)

    @model_validator(mode="after")
    def _something(self) -> SlurmScope:
        if not (self.accounts or self.users or self.partitions):
            raise ValueError("a slurm scope must name at least one of accounts, users, partitions")
        return self


class RayScope(_Section):
    job_id_prefixes: list[RayPrefix] = Field(
        default_factory=list, description="Submission id prefixes, matched on whole segments.")
    metadata: dict[Entry, str] = Field(default_factory=dict,
                                     description="Metadata the Ray job must have been submitted with.")

    @model_validator(mode="after")
    def _something(self) -> RayScope:
        if not (self.job_id_prefixes or self.metadata):
            raise ValueError("a ray scope must name job_id_prefixes or metadata")
        return self


class WebhookScope(_Section):
    url_prefixes: list[UrlPrefix] = Field(min_length=1)


class TenantScope(_Section):
    """The operator's declaration (``PUT /v1/tenants/{name}/scope``)."""

    kubernetes: KubernetesScope | None = None
    slurm: SlurmScope | None = None
    ray: RayScope | None = None
    webhook: WebhookScope | None = None
    checkpoint_prefixes: list[CheckpointPrefix] = Field(
        default_factory=list,
        description="URI prefixes (file:///data/a/, s3://bucket-a/) of the tenant's checkpoints.")


def parse_scope(raw: Mapping[str, Any] | None, *, stored: bool = False) -> TenantScope | None:
    """The scope as declared (every entry checked), or with ``stored`` as read back from the
    database (entry checks newer than the row skipped). Raises InvalidInput naming the entry."""
    if raw is None:
        return None
    try:
        return TenantScope.model_validate(raw, context=STORED if stored else None)
    except ValidationError as exc:
        where = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise InvalidInput(f"scope: {where}") from None


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
        if section.job_id_prefixes and not any(ray_id_within(ref, p) for p in section.job_id_prefixes):
            raise InvalidInput(f"external_ref: Ray job {ref!r} is outside tenant {tenant!r}'s scope "
                               f"(job id prefixes {section.job_id_prefixes}).")
    elif isinstance(section, WebhookScope):
        url = options.get("url", default_webhook_url)
        if not isinstance(url, str) or not any(url_within(url, p) for p in section.url_prefixes):
            raise InvalidInput(f"target_options.url: {url!r} is outside tenant {tenant!r}'s scope "
                               f"(URL prefixes {section.url_prefixes}).")


def ray_id_within(ref: str, prefix: str) -> bool:
    """``ref`` continues ``prefix`` on a segment boundary: it equals the prefix, or the prefix
    ends with a separator (``_-.:``), or the character after it is one. An empty prefix covers
    nothing."""
    if not prefix.strip() or not ref.startswith(prefix):
        return False
    rest = ref[len(prefix):]
    return not rest or prefix[-1] in RAY_SEPARATORS or rest[0] in RAY_SEPARATORS


def url_within(url: str, prefix: str) -> bool:
    """``url`` is under ``prefix``: same scheme, host and port, no credentials, and the path
    continues the prefix's at a ``/`` (``/hooks`` does not cover ``/hooks-evil``)."""
    try:
        u, p = urlsplit(url), urlsplit(prefix)
        same_origin = (u.scheme.lower(), u.hostname, u.port) == (p.scheme.lower(), p.hostname, p.port)
    except ValueError:
        return False
    if not same_origin or not p.hostname or u.username or u.password or any(c in url for c in "\r\n\t "):
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
        if base and (as_uri == base or as_uri.startswith(base + "/")):
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
