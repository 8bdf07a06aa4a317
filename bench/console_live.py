"""What one poll of the console's live job page costs, changed and unchanged.

Builds an in-process service on a temporary SQLite file, registers one job, posts N evals, signs
in to the console and times (best of 5) the full job page, the live fragment
(``?partial=live``) and the live poll while nothing changed (``&since=<digest>``: 204). Prints
bytes and milliseconds; compare the ratios, not the absolute times, on a busy machine.

    .venv/bin/python bench/console_live.py              # N = 20000
    .venv/bin/python bench/console_live.py --evals 2000
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from typing import Any

from console_service import best_of, service, sign_in, tenant


def job_with_evals(client: Any, n: int) -> tuple[str, str]:
    """A tenant's token and the id of its job with ``n`` evals."""
    token = tenant(client)
    auth = {"Authorization": f"Bearer {token}"}
    body = {"external_ref": "b1", "target": "dry-run", "detector": "never"}
    job = client.post("/v1/jobs", json=body, headers=auth).json()["id"]
    for start in range(0, n, 1000):
        scores = [{"step": s + 1, "value": 0.5 + (s % 7) / 100} for s in range(start, min(n, start + 1000))]
        client.post(f"/v1/jobs/{job}/scores", json={"scores": scores}, headers=auth).raise_for_status()
    return token, job


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--evals", type=int, default=20_000, help="evals posted to the job (default 20000)")
    n = parser.parse_args(argv).evals
    with service() as client:
        token, job = job_with_evals(client, n)
        sign_in(client, token)
        url = f"/ui/jobs/{job}"
        full, t_full = best_of(client, url, {})
        live, t_live = best_of(client, url, {"partial": "live"})
        digest = re.search(r'data-token="([0-9a-f]+)"', live.text)
        assert digest is not None
        quiet, t_quiet = best_of(client, url, {"partial": "live", "since": digest.group(1)})
    print(f"job with {n} evals, best of 5:")
    print(f"  full page            {len(full.content):>8} B {t_full:>9.1f} ms")
    print(f"  live fragment        {len(live.content):>8} B {t_live:>9.1f} ms")
    print(f"  live, unchanged ({quiet.status_code}) {len(quiet.content):>8} B {t_quiet:>9.1f} ms")
    print(f"  fragment / unchanged: {t_live / t_quiet:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
