"""The simulator held against the testbed: the shadow arm's measured jobs through
:func:`evalstop.sim.simulate` under FIFO, compared with what the enforced arm did.

Each real job becomes one simulated job of its width (slots) on a cluster of ``slots`` GPUs:

- arrival: the trace's arrival time;
- duration: the training process's measured wall time in the shadow arm (first line to the
  engine's end time) plus a start-up overhead drawn from the start-up model (below);
- evals: the shadow arm's watched scores, each placed at its measured time since submission
  (start-up + time since the process started) plus ``stop_latency_s``, because the simulator
  frees a killed job's slots at the eval itself while the real stop takes that long to deliver;
- truth: hacking from the gold label, gold at each eval.

The start-up overhead model is what was measured: the shadow arm's per-job start-ups (from the
moment the job's slots were free, :func:`slot_ready_s`, to the training process's first line:
the dispatcher's turnaround, the engine's launch (Ray's job supervisor, or slurmd starting the
batch script), the process, the imports) with their dispatch times. Three ways to use them
(:func:`predict`): ``timed``, each job's start-up is the mean of the ``NEIGHBOURS`` measured
start-ups dispatched nearest in time to its simulated dispatch (the overhead of a shared machine
drifts with its load, and when the arms run at the same time the shadow arm has measured the
very moments the enforced arm ran in); ``sampled``, drawn per job from the measured ones in
``REPLICAS`` seeded replicas (the band: the replicas' 2.5-97.5 % range of mean JCT); and
``constant``, the mean.

The policies are ``FIFO()`` (against the shadow arm) and ``EvalStop(FIFO(), DEFAULT_SPEC)``
watching every job (against the enforced arm): the same rule the service ran.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .simjobs import POLICIES, SimJob, run_policy, slot_ready_s

__all__ = ["POLICIES", "StartupModel", "compare", "markdown", "predict", "slot_ready_s"]

REPLICAS = 100
NEIGHBOURS = 5
MODES = ("timed", "sampled", "constant")


@dataclass(frozen=True)
class StartupModel:
    """Measured start-ups: ``samples_s[i]`` seconds for a job dispatched at ``at_s[i]`` (seconds
    from the arm's start)."""

    samples_s: tuple[float, ...]
    at_s: tuple[float, ...] = ()
    k: int = NEIGHBOURS

    @property
    def mean_s(self) -> float:
        return float(np.mean(self.samples_s))

    @property
    def sd_s(self) -> float:
        return float(np.std(self.samples_s, ddof=1)) if len(self.samples_s) > 1 else 0.0

    def draw(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` start-ups drawn from the measured ones, with replacement."""
        return rng.choice(np.asarray(self.samples_s, dtype=float), size=n, replace=True)

    def at(self, times_s: np.ndarray) -> np.ndarray:
        """The start-up at each dispatch time: the mean of the ``k`` measured start-ups dispatched
        nearest in time (the overhead of a shared machine drifts with its load)."""
        if not self.at_s:
            return np.full(len(times_s), self.mean_s)
        at, xs = np.asarray(self.at_s, dtype=float), np.asarray(self.samples_s, dtype=float)
        k = min(self.k, at.size)
        nearest = np.argsort(np.abs(at[None, :] - np.asarray(times_s, dtype=float)[:, None]), axis=1)[:, :k]
        return np.asarray(xs[nearest].mean(axis=1), dtype=float)

    def describe(self) -> dict[str, float]:
        xs = np.asarray(self.samples_s, dtype=float)
        return {
            "mean_s": self.mean_s,
            "sd_s": self.sd_s,
            "min_s": float(xs.min()),
            "p50_s": float(np.median(xs)),
            "max_s": float(xs.max()),
            "n": len(xs),
            "k": self.k,
        }

    @classmethod
    def measured(cls, jobs: list[dict[str, Any]]) -> StartupModel:
        """From an arm's per-job outcomes: each job's overhead from the moment its slots were free
        (:func:`slot_ready_s`) to its process's first line, at its dispatch time."""
        rows = sorted(
            (j["dispatch_s"], j["proc_start_s"] - slot_ready_s(j, jobs))
            for j in jobs
            if j["proc_start_s"] is not None
        )
        return cls(tuple(float(x) for _, x in rows), tuple(float(t) for t, _ in rows))


def _ordered(shadow: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(shadow, key=lambda r: (r["arrival_s"], r["name"]))


def sim_jobs(
    shadow: list[dict[str, Any]],
    labels: dict[str, str],
    startups_s: Sequence[float],
    stop_latency_s: float,
) -> list[SimJob]:
    """The shadow arm's jobs in arrival order, job ``i`` with start-up ``startups_s[i]``."""
    jobs = []
    for r, startup_s in zip(_ordered(shadow), startups_s, strict=True):
        # A job whose process never started (the engine failed it at dispatch) held its slots for
        # its start-up only: no training, no evals.
        proc_s = r["end_s"] if r["proc_start_s"] is None else r["proc_start_s"]
        jobs.append(
            SimJob(
                arrival_s=float(r["arrival_s"]),
                width=int(r.get("slots", 1)),
                duration_s=float(startup_s) + (r["end_s"] - proc_s),
                steps=tuple(int(e["step"]) for e in r["evals"]),
                scores=tuple(float(e["score"]) for e in r["evals"]),
                gold=tuple(float(e["gold"]) for e in r["evals"]),
                eval_s=tuple(startup_s + e["t"] - proc_s + stop_latency_s for e in r["evals"]),
                hacking=labels[r["name"]] == "hacking",
            )
        )
    return jobs


def predict(
    shadow: list[dict[str, Any]],
    labels: dict[str, str],
    slots: int,
    model: StartupModel,
    stop_latency_s: float,
    policy: str,
    *,
    mode: str = "timed",
    replicas: int = REPLICAS,
    seed: int = 0,
) -> dict[str, Any]:
    """The simulated schedule with start-ups from ``model``; ``mode``:

    - ``timed``: each job's start-up is the model's at its simulated dispatch time (fixed point:
      simulate, look the start-ups up at the simulated starts, again, until they settle);
    - ``sampled``: ``replicas`` runs, each job's start-up drawn from the measured ones;
    - ``constant``: one run, every job the measured mean.

    Per job (by name): the mean over runs of the simulated start, end and JCT, and the share of
    runs that killed it; and each run's mean and p95 JCT and slot-hours."""
    n = len(shadow)
    runs: list[dict[int, Any]] = []
    if mode == "sampled":
        rng = np.random.default_rng(np.random.SeedSequence(seed).spawn(1)[0])
        for _ in range(replicas):
            runs.append(_run(shadow, labels, slots, model.draw(n, rng), stop_latency_s, policy))
    elif mode in ("timed", "constant"):
        startups = np.full(n, model.mean_s)
        run = _run(shadow, labels, slots, startups, stop_latency_s, policy)
        for _ in range(FIXED_POINT_ITERATIONS if mode == "timed" else 0):
            new = model.at(np.array([run[i].start_s for i in range(n)]))
            if np.max(np.abs(new - startups)) < 1e-6:
                break
            startups = new
            run = _run(shadow, labels, slots, startups, stop_latency_s, policy)
        runs.append(run)
    else:
        raise ValueError(f"The 'mode' parameter of predict must be one of {MODES}. Got {mode!r} instead.")
    return _gather([r["name"] for r in _ordered(shadow)], runs)


FIXED_POINT_ITERATIONS = 30


def _run(
    shadow: list[dict[str, Any]],
    labels: dict[str, str],
    slots: int,
    startups: np.ndarray,
    stop_latency_s: float,
    policy: str,
) -> dict[int, Any]:
    return run_policy(sim_jobs(shadow, labels, startups.tolist(), stop_latency_s), slots, policy)


def _gather(names: list[str], runs: list[dict[int, Any]]) -> dict[str, Any]:
    n = len(names)
    starts, ends, arrivals, kills, widths = (np.zeros((len(runs), n)) for _ in range(5))
    for k, outcomes in enumerate(runs):
        for i in range(n):
            o = outcomes[i]
            starts[k, i], ends[k, i], arrivals[k, i] = o.start_s, o.end_s, o.arrival_s
            kills[k, i], widths[k, i] = o.killed, o.gpus
    jct = ends - arrivals
    return {
        "jobs": {
            name: {
                "start_s": float(starts[:, i].mean()),
                "end_s": float(ends[:, i].mean()),
                "jct_s": float(jct[:, i].mean()),
                "killed": float(kills[:, i].mean()),
            }
            for i, name in enumerate(names)
        },
        "replica_jct_mean_s": jct.mean(axis=1).tolist(),
        "replica_jct_p95_s": np.percentile(jct, 95, axis=1).tolist(),
        "replica_slot_hours": (((ends - starts) * widths).sum(axis=1) / 3600).tolist(),
    }


def compare(summary: dict[str, Any], raw: dict[str, list[dict[str, Any]]], slots: int) -> dict[str, Any]:
    """Simulated vs real: JCT, per-job start time, slot-hours saved, stops (see the module doc).
    The headline start-up model is ``timed`` when the arms ran at the same time (the shadow arm
    measured the overhead of the very moments the enforced arm ran in), else ``sampled``."""
    from .summary import labels_from

    enforced = {j["name"]: j for j in summary["jobs"]["enforced"]}
    model = StartupModel.measured(summary["jobs"]["shadow"])
    latencies = [
        j["end_s"] - j["stop_decided_s"]
        for j in enforced.values()
        if j["enforced_stop"] and j["stop_decided_s"] is not None
    ]
    stop_latency_s = float(np.mean(latencies)) if latencies else 0.0
    labels = labels_from(raw["shadow"])
    headline = "timed" if summary.get("spec", {}).get("concurrent") else "sampled"
    out: dict[str, Any] = {
        "startup_model": model.describe(),
        "startup_mode": headline,
        "startup_s": model.mean_s,
        "stop_latency_s": stop_latency_s,
        "replicas": REPLICAS,
    }
    for arm, policy in POLICIES:
        real = {j["name"]: j for j in summary["jobs"][arm]}
        errors = {
            mode: _errors(
                real, predict(raw["shadow"], labels, slots, model, stop_latency_s, policy, mode=mode)
            )
            for mode in MODES
        }
        out[arm] = errors[headline] | {
            "modes": {mode: {k: e[k] for k in _BRIEF} for mode, e in errors.items()},
            "constant_startup": {k: errors["constant"][k] for k in _BRIEF},
        }
    # Diagnostic: the same prediction with the enforced arm's own measured start-ups, to separate
    # the model's error from a start-up overhead that changed between the arms.
    own = StartupModel.measured(list(enforced.values()))
    own_pred = predict(raw["shadow"], labels, slots, own, stop_latency_s, "EvalStop(FIFO)", mode=headline)
    out["enforced"]["own_startup_model"] = own.describe()
    out["enforced"]["jct_mean_error_own_startup"] = _errors(enforced, own_pred)["jct_mean_error"]
    out["slot_hours_saved"] = {
        "real": summary["comparison"]["slot_hours_saved"],
        "sim": out["shadow"]["sim_slot_hours"] - out["enforced"]["sim_slot_hours"],
    }
    return out


_BRIEF = (
    "sim_jct_mean_s",
    "jct_mean_error",
    "jct_p95_error",
    "start_error_mean_s",
    "start_error_mean_abs_s",
    "start_error_max_abs_s",
    "sim_jct_mean_band_s",
)


def _errors(real: dict[str, dict[str, Any]], pred: dict[str, Any]) -> dict[str, Any]:
    sim = pred["jobs"]
    names = list(sim)
    real_jct = np.array([real[n]["jct_s"] for n in names])
    sim_jct = np.array([sim[n]["jct_s"] for n in names])
    start_err = np.array([sim[n]["start_s"] - real[n]["dispatch_s"] for n in names])
    band = np.percentile(pred["replica_jct_mean_s"], [2.5, 97.5])
    real_mean, real_p95 = float(real_jct.mean()), float(np.percentile(real_jct, 95))
    return {
        "real_jct_mean_s": real_mean,
        "sim_jct_mean_s": float(sim_jct.mean()),
        "sim_jct_mean_band_s": [float(band[0]), float(band[1])],
        "jct_mean_error": float(sim_jct.mean()) / real_mean - 1,
        "real_jct_p95_s": real_p95,
        "sim_jct_p95_s": float(np.mean(pred["replica_jct_p95_s"])),
        "jct_p95_error": float(np.mean(pred["replica_jct_p95_s"])) / real_p95 - 1,
        "start_error_mean_s": float(start_err.mean()),
        "start_error_mean_abs_s": float(np.abs(start_err).mean()),
        "start_error_max_abs_s": float(np.abs(start_err).max()),
        "start_errors_s": {n: float(e) for n, e in zip(names, start_err, strict=True)},
        "sim_slot_hours": float(np.mean(pred["replica_slot_hours"])),
        "sim_stopped": sorted(n for n in names if sim[n]["killed"] >= 0.5),
        "sim_jobs": sim,
        "real_stopped": sorted(n for n in names if real[n]["enforced_stop"]),
    }


_MODE_TEXT = {
    "timed": "each job's start-up is the mean of the {k} shadow start-ups dispatched nearest in time to "
    "its simulated dispatch",
    "sampled": "each job's start-up is drawn from the shadow arm's measured ones ({replicas} seeded "
    "replicas; the band is the replicas' 2.5-97.5 % range of mean JCT)",
    "constant": "every job's start-up is the shadow arm's mean",
}


def markdown(check: dict[str, Any]) -> str:
    m = check["startup_model"]
    mode = check.get("startup_mode", "sampled")
    lines = [
        "",
        "## In-sample diagnostic: the simulator fitted on this run",
        "",
        "Not a prediction: the start-up model below is the shadow arm of this very run, and the stop "
        "latency its enforced arm's.",
        "",
        f"Start-up overhead, measured in the shadow arm (slots free to the process's first line, "
        f"{m['n']} jobs): mean {m['mean_s']:.2f} s, sd {m['sd_s']:.2f} s, range {m['min_s']:.2f}-"
        f"{m['max_s']:.2f} s. Model **{mode}**: "
        + _MODE_TEXT[mode].format(k=m.get("k", NEIGHBOURS), replicas=check["replicas"])
        + f". Stop latency {check['stop_latency_s']:.2f} s (enforced arm mean, decision to engine end).",
        "",
        "| arm (sim policy) | real JCT mean | sim JCT mean [band] | error | real p95 | sim p95 | error | "
        "start-time error mean / mean abs / max abs |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for arm, policy in POLICIES:
        c = check[arm]
        lo, hi = c["sim_jct_mean_band_s"]
        band = f" [{lo:.1f}, {hi:.1f}]" if hi > lo else ""
        lines.append(
            f"| {arm} ({policy}) | {c['real_jct_mean_s']:.1f} | "
            f"{c['sim_jct_mean_s']:.1f}{band} | {c['jct_mean_error']:+.1%} | "
            f"{c['real_jct_p95_s']:.1f} | {c['sim_jct_p95_s']:.1f} | {c['jct_p95_error']:+.1%} | "
            f"{c['start_error_mean_s']:+.2f} / {c['start_error_mean_abs_s']:.2f} / "
            f"{c['start_error_max_abs_s']:.2f} s |"
        )
    lines += [
        "",
        "Every start-up model against the enforced arm:",
        "",
        "| start-up model | sim JCT mean | mean JCT error | p95 JCT error | start-time error mean abs |",
        "|---|---|---|---|---|",
    ]
    for name, c in check["enforced"].get("modes", {}).items():
        lines.append(
            f"| {name} | {c['sim_jct_mean_s']:.1f} | {c['jct_mean_error']:+.1%} | "
            f"{c['jct_p95_error']:+.1%} | {c['start_error_mean_abs_s']:.2f} s |"
        )
    saved = check["slot_hours_saved"]
    e = check["enforced"]
    same = e["sim_stopped"] == e["real_stopped"]
    own = e["own_startup_model"]
    lines += [
        "",
        f"Slot-hours saved: real {saved['real']:.4f}, simulated {saved['sim']:.4f}. "
        f"Simulated stops {'match' if same else 'differ from'} the real ones "
        f"({len(e['sim_stopped'])} vs {len(e['real_stopped'])}).",
        "",
        f"Diagnostic: with the enforced arm's own start-ups (mean {own['mean_s']:.2f} s, "
        f"sd {own['sd_s']:.2f} s) "
        f"instead of the shadow arm's, the enforced prediction's mean JCT error is "
        f"{e['jct_mean_error_own_startup']:+.1%}.",
        "",
    ]
    return "\n".join(lines)
