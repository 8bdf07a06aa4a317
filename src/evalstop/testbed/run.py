"""Run both arms of the testbed on one private cluster (Ray or Slurm) and one ``evalstop serve``."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import tempfile
from pathlib import Path
from typing import Any

from .._validation import check_choice
from .arm import run_arm, warm_up
from .cluster import pids_naming, start_service, stop
from .engine import ENGINES, start_engine
from .simcheck import compare
from .simcheck import markdown as sim_markdown
from .summary import markdown, summarise
from .workload import WorkloadSpec, make_plan

ARMS = ("shadow", "enforced")


def run_testbed(
    spec: WorkloadSpec,
    slots: int,
    out: Path,
    *,
    engine: str = "ray",
    command: str = "",
    timeout_s: float = 1800.0,
) -> dict[str, Any]:
    """Start the cluster (``engine``: ray or slurm), run the shadow then the enforced arm over the
    same trace, clean up, and write ``raw.json``, ``summary.json`` and ``summary.md`` to ``out``."""
    if slots < 1:
        raise ValueError(f"The 'slots' parameter of run_testbed must be an int >= 1. Got {slots!r} instead.")
    check_choice("run_testbed", "engine", engine, ENGINES)
    out = out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    plan = make_plan(spec)
    root = Path(tempfile.mkdtemp(prefix="evs-tb-"))  # short: unix socket paths have a length limit
    raw: dict[str, list[dict[str, Any]]] = {}
    warm_up_s = float("nan")
    try:
        cluster = start_engine(engine, root, slots)
        try:
            server = start_service(out, cluster.adapter_settings())
            try:
                warm_up_s = warm_up(cluster, plan)
                for arm in ARMS:
                    raw[arm] = run_arm(arm, plan, out, cluster, server, timeout_s=timeout_s)
            finally:
                stop(server)
        finally:
            cluster.close()
    finally:
        for arm in ARMS:  # a job still alive after its cluster went away: ours, by pid
            for pid in pids_naming(str(out / arm) + "/"):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        shutil.rmtree(root, ignore_errors=True)
    (out / "raw.json").write_text(json.dumps(raw, indent=1))
    summary = summarise(raw)
    summary["spec"] = {**spec.__dict__, "slots": slots, "engine": engine}
    summary["warm_up_s"] = warm_up_s
    summary["engine_root"] = str(root)  # the cluster's state, removed (its daemons named it)
    summary["plan"] = [j.to_json() for j in plan]
    summary["simulator"] = compare(summary, raw, slots)
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    text = markdown(summary, command) + sim_markdown(summary["simulator"])
    (out / "summary.md").write_text(text + _figures(summary, raw, out))
    return summary


def _figures(summary: dict[str, Any], raw: dict[str, list[dict[str, Any]]], out: Path) -> str:
    """Write the PNGs if matplotlib (the ``plot`` extra) is there; the Markdown that shows them."""
    try:
        from .figures import jct_cdf, job_curves
    except ModuleNotFoundError:
        return "\n(no figures: pip install -e '.[plot]')\n"
    jct_cdf(summary, out / "jct_cdf.png")
    job_curves(summary, raw, out / "curves.png")
    return "\n![JCT CDF](jct_cdf.png)\n\n![Each job's curves and stop](curves.png)\n"
