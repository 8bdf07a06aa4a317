"""What one auto-refresh of the console's job list costs at N jobs.

Builds an in-process service on a temporary SQLite file, registers N jobs (each with a few
evals; every 7th one's rule fires), signs in as the operator and fetches, best of 5, what the
list page's 3 s refresh fetches: ``/ui/jobs?partial=rows`` with the default filters (newest
first), and the same sorted by decision. Prints bytes, rows and milliseconds. Run it on an
export of an older commit (``PYTHONPATH=old/src``) to compare; compare ratios on a busy machine.

    .venv/bin/python bench/console_list.py              # N = 1000
    .venv/bin/python bench/console_list.py --jobs 5000
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from console_service import ADMIN, best_of, service, sign_in, tenant


def register(client: Any, n: int) -> None:
    auth = {"Authorization": f"Bearer {tenant(client)}"}
    for i in range(n):
        body = {"external_ref": f"bench-{i}", "target": "dry-run", "name": f"bench-job-{i:05d}",
                "detector": "evalstop:k=2"}
        job = client.post("/v1/jobs", json=body, headers=auth).json()["id"]
        fall = 0.1 if i % 7 == 0 else -0.05  # every 7th job declines twice: the rule fires
        scores = [{"step": 100 * (s + 1) + i, "value": 0.5 + 0.1 * s - (fall * max(0, s - 1))}
                  for s in range(4)]
        client.post(f"/v1/jobs/{job}/scores", json={"scores": scores}, headers=auth).raise_for_status()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=1000, help="jobs registered (default 1000)")
    n = parser.parse_args(argv).jobs
    with service() as client:
        register(client, n)
        sign_in(client, ADMIN)
        print(f"{n} jobs, one refresh of the job list, best of 5:")
        for label, params in (("newest first", {}), ("by decision", {"sort": "decision", "dir": "asc"})):
            reply, ms = best_of(client, "/ui/jobs", {"partial": "rows", **params})
            rows = reply.text.count("<tr data-job-id=")
            print(f"  {label:<14} {len(reply.content):>8} B {rows:>5} rows {ms:>8.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
