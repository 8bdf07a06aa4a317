"""``evalstop testbed``: EvalStop on a real scheduler with real (small) training jobs.

A seeded workload (Poisson arrivals, a mix of reward-hacking and healthy policy-gradient runs)
is submitted as Ray jobs, one slot each, in arrival order (FIFO) to a private local Ray head.
Each job reports its watched eval to a real ``evalstop serve`` (remote mode) and records a
gold evaluation the rule never sees. The trace runs twice: shadow (decisions logged) and
enforced (the service stops jobs through the Ray Jobs adapter; the freed slot goes to the
next queued job). See docs/testbed.md.
"""

from .workload import JobPlan, WorkloadSpec, make_plan

__all__ = ["JobPlan", "WorkloadSpec", "make_plan"]
