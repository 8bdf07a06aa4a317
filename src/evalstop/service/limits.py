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
"""

from __future__ import annotations

from .context import ServiceContext
from .domain import check_rule_cost
from .fairness import rule_work_tokens

__all__ = ["charge_rule_work", "check_rule_cost"]


def charge_rule_work(ctx: ServiceContext, tenant: str, n_scores: int, rule_cpu_s: float) -> None:
    """Charge the tenant's bucket for the rule CPU its request used beyond what its ``n_scores``
    tokens cover (the bucket may go into debt of up to one burst; the next request waits)."""
    owed = rule_work_tokens(n_scores, rule_cpu_s, ctx.settings.rule_ms_per_score)
    policy = ctx.policies.cached(tenant)
    if owed > 0 and policy is not None:  # admitted just before, so its policy is cached
        ctx.buckets.charge(tenant, owed, policy.limits)
