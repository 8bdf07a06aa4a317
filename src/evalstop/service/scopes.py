"""What a tenant may act on: its scope, declared by the operator.

The scope holds one section per backend that has one (each backend's adapter module declares
its section's model, :attr:`~.adapters.Backend.scope`: ``slurm``, ``ray``, ``kubernetes``,
``webhook``), and ``checkpoint_prefixes``. A tenant without a backend's section cannot register
jobs on it. The scope is checked twice: at registration on the reference itself, by the backend
(:meth:`~.adapters.Backend.check_reference`: a Kubernetes namespace, a Ray submission-id prefix,
a webhook URL prefix), and at enforcement time by the adapter against what the backend says
about the job (its Slurm account, user and partition; its Ray metadata; its Kubernetes
namespace and labels). Checkpoint URI prefixes confine where pin markers may be written
(:mod:`.adapters._pinfs`) and which ``checkpoint_uri`` a tenant may post.

Dry-run and plugin targets have no section: dry-run acts on nothing, and a plugin receives the
whole scope in ``JobRef.scope`` to check as it sees fit.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    ValidationError,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    model_serializer,
    model_validator,
)

from . import adapters
from .adapters._scope import (
    STORED,
    ScopeSection,
    as_uri,
    checkpoint_allowed,
    declared,
    has_traversal,
    local_roots,
)
from .errors import InvalidInput

__all__ = ["STORED", "TenantScope", "canonical_ref", "check_registration", "checkpoint_allowed",
           "has_traversal", "local_roots", "parse_scope", "sections"]


def sections() -> dict[str, type[ScopeSection]]:
    """The scope section of every registered backend that has one, by backend name."""
    return {name: rules.scope for name, rules in adapters.backends().items() if rules.scope is not None}


def _section_schemas(schema: dict[str, Any]) -> None:
    """The OpenAPI schema lists the backends' sections (validated by :class:`TenantScope`)."""
    properties = schema.setdefault("properties", {})
    assert isinstance(properties, dict)
    for name, model in sections().items():
        properties[name] = {"anyOf": [model.model_json_schema(), {"type": "null"}], "default": None}


def _checkpoint_prefix(value: str, info: ValidationInfo) -> str:
    if has_traversal(value):  # refused however the scope was stored: a pin must never climb out
        raise ValueError(f"checkpoint prefix {value!r} must not contain '..' or '.' segments")
    if not declared(info):
        return value
    parts = urlsplit(as_uri(value))
    below_root = parts.path.strip("/") if parts.scheme == "file" else parts.netloc
    if not parts.scheme or not below_root or any(c.isspace() for c in value):
        raise ValueError(f"must name a directory below a root (file:///data/a/, /data/a, "
                         f"s3://bucket/), got {value!r}")
    return value


def _errors(exc: ValidationError, *where: str) -> list[dict[str, Any]]:
    """``exc``'s errors as raw details, each located below ``where``."""
    return [{"type": e["type"], "loc": (*where, *e["loc"]), "input": e["input"],
             **({"ctx": e["ctx"]} if "ctx" in e else {})} for e in exc.errors()]


class TenantScope(ScopeSection):
    """The operator's declaration (``PUT /v1/tenants/{name}/scope``): ``checkpoint_prefixes``,
    and a section for each backend, validated by the backend's own model (:func:`sections`)."""

    model_config = ConfigDict(extra="forbid", frozen=True, json_schema_extra=_section_schemas)

    checkpoint_prefixes: list[Annotated[str, AfterValidator(_checkpoint_prefix)]] = Field(
        default_factory=list,
        description="URI prefixes (file:///data/a/, s3://bucket-a/) of the tenant's checkpoints.")
    _sections: dict[str, ScopeSection] = PrivateAttr(default_factory=dict)

    @model_validator(mode="wrap")
    @classmethod
    def _backends(cls, data: Any, handler: ValidatorFunctionWrapHandler, info: ValidationInfo) -> Any:
        """Each backend's section through its model; any other key is refused as usual."""
        if not isinstance(data, Mapping):
            return handler(data)
        known = sections()
        found, errors = {}, []
        for name, model in known.items():
            if data.get(name) is None:
                continue
            try:
                found[name] = model.model_validate(data[name], context=info.context)
            except ValidationError as exc:
                errors += _errors(exc, name)
        try:
            scope = handler({k: v for k, v in data.items() if k not in known})
        except ValidationError as exc:
            errors += _errors(exc)
        if errors:  # every entry named at once, each at its place
            raise ValidationError.from_exception_data(cls.__name__, errors)  # type: ignore[arg-type]
        scope._sections.update(found)
        return scope

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler, info: SerializationInfo) -> dict[str, Any]:
        shown = {name: None if name not in self._sections else self._sections[name].model_dump(mode=info.mode)
                 for name in sections()}
        if info.exclude_none:
            shown = {name: value for name, value in shown.items() if value is not None}
        return {**shown, **handler(self)}

    def section(self, target: str) -> ScopeSection | None:
        """The tenant's section for the backend ``target``, if the scope declares one."""
        return self._sections.get(target)


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
    """The one spelling of a reference, as the target's backend writes it (the live-reference
    constraint compares these strings)."""
    rules = adapters.backend(target)
    return external_ref.strip() if rules is None else rules.canonical_ref(external_ref)


def check_registration(
    tenant: str, scope: TenantScope | None, target: str, ref: str, options: Mapping[str, Any],
    settings: Mapping[str, Any],
) -> None:
    """Raise InvalidInput naming the scope when ``tenant`` may not register ``ref`` on ``target``
    (``settings``: the service's settings of the target's adapter)."""
    rules = adapters.backend(target)
    if rules is None or rules.scope is None:
        return
    section = scope.section(target) if scope is not None else None
    if section is None:
        raise InvalidInput(f"target: tenant {tenant!r} has no {target} scope; an operator must declare one "
                           f"(PUT /v1/tenants/{tenant}/scope) before it can register {target} jobs.")
    rules.check_reference(tenant, section, ref, options, settings)
