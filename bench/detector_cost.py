"""What one eval costs a stopping rule, and whether that grows with the job's history.

For every registered rule (default parameters) and each history length H, the rule's state is
built by folding H evals of a long noisy curve that rises, falls, recovers and plateaus (with
NaNs and a falling loss: ``evalstop.testing.long_noisy_history``), ignoring stops so that the
state keeps growing if it would. Then ``update(state, next eval)`` is timed on the states after
H, H+1, ..., H+9 evals (``update`` does not change its input, so each is timed many times; the
stop flag is cleared so a fired rule still does its work). It prints the mean cost per eval in
microseconds at each H, the ratio of the cost at the longest history to the cost at the
shortest (target: <= 3 for every rule; 1.0 = flat), and the size of the state as JSON.
A row ``<DEFAULT_SPEC> + adaptive`` times the default rule's update plus the adaptive cadence's
next-eval hint (``Detector.elevated`` and ``Adaptive.after``), what a monitor adds per eval.
A row ``<DEFAULT_SPEC> + adaptive + confirm`` adds what a monitor with confirmation evals does
per eval: it keeps the state before the eval (the alarm's rollback), and when the rule fires it
tests the eval as a confirmation against the best eval (``Confirm.agrees``).

    .venv/bin/python bench/detector_cost.py                  # H = 10, 1000, 10000, 100000
    .venv/bin/python bench/detector_cost.py --histories 10,1000 --json
"""

from __future__ import annotations

import argparse
import json
import sys
import timeit
from collections.abc import Sequence
from typing import Any

DEFAULT_HISTORIES = "10,1000,10000,100000"
#: Consecutive states timed at each history length, and update calls per state and repeat.
N_STATES, N_CALLS, N_REPEATS = 10, 200, 5


def states_at(detector: Any, evals: Sequence[Any], lengths: Sequence[int]) -> dict[int, list[Any]]:
    """The rule's states after H, H+1, ..., H+N_STATES-1 evals for each H (stops ignored)."""
    wanted = {h + j for h in lengths for j in range(N_STATES)}
    state = detector.start()
    saved: dict[int, Any] = {}
    for index, ev in enumerate(evals[: max(wanted) + 1]):
        if index in wanted:
            saved[index] = json.loads(json.dumps(state))  # a snapshot, as a service would load it
        state["n"] = index + 1
        detector.step(state, index, ev)
    return {h: [saved[h + j] for j in range(N_STATES)] for h in lengths}


def cost_us(detector: Any, states: Sequence[Any], evals: Sequence[Any], first: int) -> float:
    """Mean wall time of one ``update`` over ``states`` (state j gets eval first + j), in us."""
    total = 0.0
    for j, state in enumerate(states):
        state["stop"] = None
        ev = evals[first + j]
        def call(s: Any = state, e: Any = ev) -> Any:
            return detector.update(s, e)

        times = timeit.repeat(call, number=N_CALLS, repeat=N_REPEATS)
        best = min(times)
        total += best / N_CALLS
    return 1e6 * total / len(states)


class WithCadence:
    """A rule plus a cadence policy's hint after every update (what ``Monitor.next_eval`` adds)."""

    def __init__(self, detector: Any, policy: Any) -> None:
        self.detector, self.policy = detector, policy
        self.state_window = detector.state_window
        self.start, self.step = detector.start, detector.step

    def update(self, state: Any, ev: Any) -> Any:
        new, verdict = self.detector.update(state, ev)
        return new, verdict, self.policy.after(self.detector.elevated(new))


class WithConfirm:
    """A rule (maybe with a cadence hint) plus what a monitor with ``confirm`` adds per eval."""

    def __init__(self, detector: Any, confirm: Any) -> None:
        from evalstop.detectors._base import copy_state

        self.detector, self.confirm, self.copy = detector, confirm, copy_state
        self.state_window = detector.state_window
        self.start, self.step = detector.start, detector.step

    def update(self, state: Any, ev: Any) -> Any:
        before = self.copy(state)
        out = self.detector.update(state, ev)
        new = out[0]
        if new["stop"] is not None and new["best_score"] is not None:
            return out, before, self.confirm.agrees(1.0, new["best_score"], None, None, ev)
        return out, before


def parse_rule(spec: str) -> Any:
    """``spec``, ``spec + cadence``, ``spec + confirm`` or ``spec + cadence + confirm``."""
    from evalstop.detectors import Confirm, parse_cadence, parse_spec

    rule, *extras = (part.strip() for part in spec.split("+"))
    detector: Any = parse_spec(rule)
    for extra in extras:
        detector = WithConfirm(detector, Confirm()) if extra == "confirm" else \
            WithCadence(detector, parse_cadence(extra))
    return detector


def measure(specs: Sequence[str], lengths: Sequence[int]) -> list[dict[str, Any]]:
    from evalstop.testing import long_noisy_history

    evals = long_noisy_history(max(lengths) + N_STATES + 1, seed=3)
    rows = []
    for spec in specs:
        detector = parse_rule(spec)
        states = states_at(detector, evals, lengths)
        costs = {h: cost_us(detector, states[h], evals, h) for h in lengths}
        size = len(json.dumps(states[max(lengths)][0], allow_nan=False))
        rows.append({
            "rule": spec, "state_window": detector.state_window, "us_per_eval": costs,
            "ratio": costs[max(lengths)] / costs[min(lengths)], "state_json_bytes": size,
        })
    return rows


def format_table(rows: Sequence[dict[str, Any]], lengths: Sequence[int]) -> str:
    width = max(16, *(len(r["rule"]) + 1 for r in rows))
    head = f"{'rule':<{width}}" + "".join(f"{'H=' + str(h):>11}" for h in lengths)
    ratio = f"ratio {max(lengths)}/{min(lengths)}"
    head += f"{ratio:>18}{'state_window':>14}{'state_bytes':>13}"
    lines = ["per-eval update cost (us) at history H", head]
    for r in rows:
        line = f"{r['rule']:<{width}}" + "".join(f"{r['us_per_eval'][h]:>11.2f}" for h in lengths)
        line += f"{r['ratio']:>18.2f}{r['state_window']:>14}{r['state_json_bytes']:>13}"
        lines.append(line)
    worst = max(rows, key=lambda r: r["ratio"])
    lines.append(f"\nworst ratio: {worst['rule']} {worst['ratio']:.2f} (target <= 3)")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    from evalstop.detectors import DEFAULT_SPEC, REGISTRY

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--histories", default=DEFAULT_HISTORIES,
                        help=f"comma-separated history lengths (default {DEFAULT_HISTORIES})")
    parser.add_argument("--rule", action="append",
                        help="spec, 'spec + cadence', 'spec + confirm' or 'spec + cadence + confirm', to "
                             "measure (repeatable; default: every rule, and the default rule with the "
                             "adaptive cadence, without and with confirmation evals)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of the table")
    args = parser.parse_args(argv)
    lengths = sorted({int(h) for h in args.histories.split(",") if h.strip()})
    if not lengths or lengths[0] < 1:
        raise SystemExit(f"--histories needs positive lengths. Got {args.histories!r}.")
    default = [*sorted(REGISTRY), f"{DEFAULT_SPEC} + adaptive", f"{DEFAULT_SPEC} + adaptive + confirm"]
    rows = measure(args.rule or default, lengths)
    print(json.dumps(rows, indent=2) if args.json else format_table(rows, lengths))
    return 0


if __name__ == "__main__":
    sys.exit(main())
