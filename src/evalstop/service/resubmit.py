"""A rewind on an engine that cannot rewind in place: stop the job, then resubmit it from its
best checkpoint with the correction (Ray Jobs, Slurm; docs/rewind.md, "Resubmission").

**The template** is fixed at registration (``JobIn.resubmit``) and checked then:

- Ray: ``{"entrypoint": "python train.py --resume {checkpoint} --correction {correction}"}``;
- Slurm: ``{"script": "#!/bin/bash\\n...{checkpoint}...", "account": "a", "partition": "p"}``
  (account and partition default to the first the tenant's scope lists).

Both take ``env``: ``{"NAME": "value"}``, the only variables the new job gets from evalstop
(names ``[A-Z_][A-Z0-9_]*``, none starting ``EVALSTOP_``; at most :data:`MAX_ENV_VARS`
variables and :data:`MAX_ENV_BYTES` bytes). Nothing of the service's own environment
reaches the job (docs/enforcement.md, "Resubmission").

The only placeholders are ``{checkpoint}`` (the best eval's checkpoint URI) and
``{correction}`` (the rewind's correction spec, every change in it: ``ref=best,kl_coef*=2`` asks
the new job to take ``{checkpoint}`` as its KL reference too; ``evalstop.detectors.Correction.parse``
reads it); ``{{``/``}}`` are literal braces. Each value is
substituted shell-quoted (``shlex.quote``), and a value with a control character is refused, so
nothing the tenant posts reaches a shell unquoted. The rest of the template is the tenant's own
command, as it was when the tenant submitted the job itself.

**Delivery** is an outbox row of the rewind decision: ``pin -> signal -> grace -> hard_stop ->
reconcile`` stops the running attempt exactly as a stop does, then ``resubmit`` submits the next
attempt through the adapter, checked against the tenant's scope before (the Ray submission id's
prefix; the Slurm account and partition) and after (the adapter's ``check_owner`` on the new
job; a new job outside the scope is cancelled and the delivery fails). Resubmission is
idempotent: the new job has a name derived from the job and the rewind number (each backend
names it: Ray's submission id ``<ref>-r<N>``, Slurm's job name ``evalstop-<job id>-r<N>``),
looked up before submitting again. **The same job row** then carries the new reference (``external_ref``), the
decision records it (``new_ref``) and the audit trail gets a ``resubmit`` row: one job, one
curve, one monitor, across its attempts.
"""

from __future__ import annotations

import re
import shlex
import string
from collections.abc import Mapping
from typing import Any

from . import adapters
from .errors import InvalidInput
from .scopes import TenantScope

PLACEHOLDERS = ("checkpoint", "correction")
MAX_TEMPLATE = 20_000
ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]*")
#: words ``sbatch --export`` reads as modes, not as variable names
EXPORT_WORDS = frozenset({"ALL", "NONE", "NIL"})
MAX_ENV_VARS = 64
MAX_ENV_BYTES = 16_384


def check_template(
    target: str, template: Mapping[str, Any], scope: TenantScope | None, tenant: str
) -> dict[str, Any]:
    """The template as stored; InvalidInput naming the field and value unless ``target``'s backend
    can resubmit and every field is allowed by the tenant's scope (the backend checks its own)."""
    rules = adapters.backend(target)
    if rules is None or not rules.resubmit_text:
        can = sorted(name for name, b in adapters.backends().items() if b.resubmit_text)
        raise InvalidInput(f"resubmit: target {target!r} cannot resubmit a job; only {can} can "
                           f"(other targets rewind in place or stop).")
    fields = {rules.resubmit_text, "env", *rules.resubmit_fields}
    unknown = sorted(set(template) - fields)
    if unknown:
        raise InvalidInput(f"resubmit: unknown field(s) {unknown} for target {target!r}; valid: "
                           f"{sorted(fields)}.")
    text_field = rules.resubmit_text
    text = template.get(text_field)
    if not isinstance(text, str) or not text.strip() or len(text) > MAX_TEMPLATE:
        raise InvalidInput(f"resubmit.{text_field}: a non-empty string of at most {MAX_TEMPLATE} characters "
                           f"is required. Got {text!r}.")
    _check_placeholders(f"resubmit.{text_field}", text)
    stored: dict[str, Any] = {text_field: text}
    if "env" in template:
        stored["env"] = check_env(template["env"])
    section = scope.section(target) if scope is not None else None
    stored.update(rules.check_template(template, section, tenant))
    return stored


def check_env(env: Any) -> dict[str, str]:
    """The template's ``env`` as stored; InvalidInput naming the bad variable otherwise."""
    if not isinstance(env, Mapping) or len(env) > MAX_ENV_VARS:
        raise InvalidInput(f"resubmit.env: a mapping of at most {MAX_ENV_VARS} variables NAME -> string. "
                           f"Got {_short(env)}.")
    for name, value in env.items():
        if not isinstance(name, str) or not ENV_NAME.fullmatch(name) or name in EXPORT_WORDS:
            raise InvalidInput(f"resubmit.env: variable names match [A-Z_][A-Z0-9_]* and are not "
                               f"{sorted(EXPORT_WORDS)}. Got {_short(name)}.")
        if name.startswith("EVALSTOP_"):
            raise InvalidInput(f"resubmit.env: {name!r}: names starting 'EVALSTOP_' are the service's "
                               f"own settings and are never passed to a job.")
        if not isinstance(value, str) or "\0" in value or not _utf8(value):
            raise InvalidInput(f"resubmit.env.{name}: a UTF-8 string without NUL characters. "
                               f"Got {_short(value)}.")
    size = sum(len(f"{name}={value}\0".encode()) for name, value in env.items())
    if size > MAX_ENV_BYTES:
        raise InvalidInput(f"resubmit.env: at most {MAX_ENV_BYTES} bytes in all (NAME=value, UTF-8). "
                           f"Got {size}.")
    return dict(env)


def _utf8(value: str) -> bool:
    try:
        value.encode()
    except UnicodeEncodeError:  # a lone surrogate (JSON "\\ud800")
        return False
    return True


def _short(value: Any) -> str:
    shown = repr(value)
    return shown if len(shown) <= 80 else shown[:77] + "..."


def _check_placeholders(where: str, text: str) -> None:
    try:
        parts = list(string.Formatter().parse(text))
    except ValueError as exc:
        raise InvalidInput(f"{where}: {exc} (write a literal brace as '{{{{' or '}}}}').") from None
    for _, name, spec, conversion in parts:
        if name is None:
            continue
        if name not in PLACEHOLDERS or spec or conversion:
            shown = "{" + name + (f"!{conversion}" if conversion else "") + (f":{spec}" if spec else "") + "}"
            raise InvalidInput(f"{where}: unknown placeholder {shown!r}; the placeholders are "
                               f"{{checkpoint}} and {{correction}} (literal braces: '{{{{', '}}}}').")


def render(text: str, checkpoint: str | None, correction: str) -> str:
    """``text`` with each placeholder replaced by its value, shell-quoted. ValueError for a
    value with a control character (or a missing checkpoint the text needs)."""
    values = {"checkpoint": checkpoint, "correction": correction}
    for name, value in values.items():
        if value is not None and any(ord(c) < 32 or ord(c) == 127 for c in value):
            raise ValueError(f"the {name} {value!r} holds a control character; it is not resubmitted")
    needed = {name for _, name, _, _ in string.Formatter().parse(text) if name}
    if "checkpoint" in needed and checkpoint is None:
        raise ValueError("the rewind has no checkpoint URI (the client posted none with the best eval)")
    return text.format(**{k: shlex.quote(v) for k, v in values.items() if v is not None})
