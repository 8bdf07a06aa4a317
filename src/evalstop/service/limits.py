"""What a tenant's stopping rule may cost: its parameters against the operator's maxima.

A rule names the constructor parameters that size its state or its work per eval
(``Detector.size_params``: mann-kendall's ``max_window``, slaq's ``window``). The state is
rewritten on every score, so an unbounded window lets one tenant's posts slow every other
tenant's commits; the rate limit counts scores, not the work behind each. Each such parameter
must be at most ``rule_max_window`` (a service setting), else the registration is 422 naming
the parameter, its value and the limit. The check (:func:`~.domain.check_rule_cost`) runs in
:func:`~.domain.register_job`, so library callers get it too.

Within those bounds the rule's work is still charged to the tenant, as scores are: each score's
token covers ``rule_ms_per_score`` of its rule's CPU time, and every further slice costs one
more token, taken from the tenant's bucket after the request (:func:`charge_rule_work`).

A job's free-form JSON (``target_options``, ``resubmit``) is stored and sent back on every job
listing, to its tenant and to the operator: it is at most ``OPTIONS_MAX_DEPTH`` deep and
``max_options_bytes`` long as compact JSON (:func:`check_options`), and holds no NUL (a database
text cannot). A value stored before these bounds is shown as a note (:func:`readable_options`),
so that one job cannot break the listing of the others.
"""

from __future__ import annotations

import json
from typing import Any

from .context import ServiceContext
from .domain import check_rule_cost
from .errors import InvalidInput
from .fairness import rule_work_tokens

__all__ = ["OPTIONS_MAX_DEPTH", "charge_rule_work", "check_options", "check_rule_cost", "readable_options"]

#: The deepest nesting of a job's JSON options (a dict holding a dict is depth 2).
OPTIONS_MAX_DEPTH = 32


def check_options(field: str, value: Any, max_bytes: int) -> None:
    """Raise InvalidInput naming ``field`` and the limit when ``value`` nests deeper than
    ``OPTIONS_MAX_DEPTH``, holds a NUL, or takes more than ``max_bytes`` as compact JSON."""
    problem = _options_problem(value, max_bytes)
    if problem is not None:
        raise InvalidInput(f"{field}: {problem}")


def readable_options(value: Any) -> Any:
    """``value`` as a reply may carry it: a stored value nested past the bound becomes a note
    saying so (its size is not measured again: the registration did, and the body limit holds)."""
    if value is None or _options_problem(value, None) is None:
        return value
    return {"unreadable": f"stored before the service's bounds (depth {OPTIONS_MAX_DEPTH}); not shown"}


def _options_problem(value: Any, max_bytes: int | None) -> str | None:
    """What is wrong with ``value`` (walked without recursion, so no depth can overflow a stack)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > OPTIONS_MAX_DEPTH:
            return f"nests deeper than {OPTIONS_MAX_DEPTH} levels (the limit)."
        if isinstance(item, dict):
            for key, inner in item.items():
                if "\x00" in str(key):
                    return "a key holds a NUL character (a database cannot store one in text)."
                stack.append((inner, depth + 1))
        elif isinstance(item, list):
            stack.extend((inner, depth + 1) for inner in item)
        elif isinstance(item, str) and "\x00" in item:
            return "a value holds a NUL character (a database cannot store one in text)."
    if max_bytes is None:
        return None
    size = len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())
    if size > max_bytes:
        return (f"takes {size} bytes as JSON, over the service's limit of {max_bytes} "
                f"(setting max_options_bytes, EVALSTOP_MAX_OPTIONS_BYTES).")
    return None


def charge_rule_work(ctx: ServiceContext, tenant: str, n_scores: int, rule_cpu_s: float) -> None:
    """Charge the tenant's bucket for the rule CPU its request used beyond what its ``n_scores``
    tokens cover (the bucket may go into debt of up to one burst; the next request waits)."""
    owed = rule_work_tokens(n_scores, rule_cpu_s, ctx.settings.rule_ms_per_score)
    policy = ctx.policies.cached(tenant)
    if owed > 0 and policy is not None:  # admitted just before, so its policy is cached
        ctx.buckets.charge(tenant, owed, policy.limits)
