"""Run sweep tasks as Ray tasks on an existing Ray cluster (``--ray-address`` / ``RAY_ADDRESS``).

Imported only when an address is given: Ray is the optional extra ``evalstop[ray]``. The driver
connects with ``ray.init(address=...)``; the evalstop package is shipped to the workers through
``runtime_env={"py_modules": [...]}``, so the cluster runs exactly the driver's code (the cache
key includes that code's version) and needs only numpy and scipy installed. Results come back to
the driver, which writes the cache, so a cluster needs no shared file system.

Token authentication (Ray >= 2.52; on by default for local clusters from 2.59): Ray reads the
token from ``RAY_AUTH_TOKEN``, ``RAY_AUTH_TOKEN_PATH`` or its default file; set the same
``RAY_AUTH_MODE``/token in the driver's environment as the cluster uses. Nothing here reads or
stores a token.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .task import Row, Task, run_point

#: Tasks in flight per cluster CPU: enough to keep workers busy, few enough to stay responsive.
_IN_FLIGHT_PER_CPU = 4


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise SystemExit(
            "a Ray address was given but Ray is not installed: pip install -e '.[ray]'"
        ) from None
    return ray


def run_on_ray(tasks: Sequence[Task], address: str, done: Callable[[Task, list[Row]], None],
               ship_code: bool = True) -> None:
    """Run ``tasks`` on the Ray cluster at ``address``; call ``done`` as each one finishes."""
    ray = import_ray()
    import evalstop

    runtime_env = {"py_modules": [str(Path(evalstop.__file__).parent)]} if ship_code else None
    started_here = not ray.is_initialized()
    if started_here:
        ray.init(address=address, runtime_env=runtime_env, log_to_driver=False)
    try:
        remote = ray.remote(num_cpus=1, max_retries=2)(run_point)
        capacity = max(1, int(ray.cluster_resources().get("CPU", 1)) * _IN_FLIGHT_PER_CPU)
        queue = list(tasks)
        in_flight: dict[Any, Task] = {}
        while queue or in_flight:
            while queue and len(in_flight) < capacity:
                task = queue.pop(0)
                in_flight[remote.remote(task.point, task.seed)] = task
            ready, _ = ray.wait(list(in_flight), num_returns=1)
            for ref in ready:
                done(in_flight.pop(ref), ray.get(ref))
    finally:
        if started_here:
            ray.shutdown()
