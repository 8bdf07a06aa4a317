"""One job's stopping rule: its state, the best eval and its checkpoint, and whether it has fired.

Every entry point (the simulator, ``evalstop replay``, the service and the training callbacks)
feeds a job's evals to one ``Monitor`` and acts when ``fired_now`` is set. The rules:

- Evals arrive in increasing ``step`` order. An eval whose step is not greater than the last
  one observed (a repeat, or a step backwards) is ignored: the state does not change, the
  current verdict is returned, ``fired_now`` is False and ``n_ignored`` counts it. A rule's past
  decisions are never rewritten.
- The monitor fires exactly once: ``fired_now`` is True only for the ``observe`` call whose
  eval tripped the rule. After that every eval is ignored and ``verdict`` stays the final one
  (its ``best_*`` name the best eval up to the stop; ``best_checkpoint`` is its checkpoint).
- A NaN/inf score never fires the rule (it is counted in ``verdict.n_invalid``).
- After each eval ``next_eval()`` says when the next one is worth running, by the monitor's
  cadence policy (``_cadence``; ``every:1`` unless given): a ``NextEval`` in opportunities, and
  in steps when ``eval_interval`` (the steps between eval opportunities) is known.
- ``to_json()`` gives a dict of JSON values (no NaN/inf), and ``Monitor.from_json`` rebuilds an
  equal monitor, so a service can persist it per job and a callback can save it in a checkpoint.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache
from typing import Any

from ._base import Detector, Eval, RuleEvidence, State, Verdict, copy_state
from ._cadence import DEFAULT_CADENCE, CadencePolicy, NextEval, format_cadence, parse_cadence
from ._spec import DEFAULT_SPEC, format_spec, parse_spec

#: Version of the ``to_json`` layout.
FORMAT = 1

#: Detectors are frozen and hashable: one object per spec serves every monitor that loads it.
_parse = lru_cache(maxsize=1024)(parse_spec)


class Monitor:
    """``Monitor(detector)`` watches one job; ``detector`` is a Detector, a spec string, or None
    for ``DEFAULT_SPEC``. ``cadence`` (a policy or its spec; default ``every:1``) and
    ``eval_interval`` (steps between eval opportunities, if known) shape ``next_eval()``."""

    __slots__ = (
        "best_checkpoint", "cadence", "detector", "eval_interval", "fired_now", "last_step", "n_ignored",
        "state",
    )

    def __init__(
        self,
        detector: Detector | str | None = None,
        cadence: CadencePolicy | str | None = None,
        eval_interval: int | None = None,
    ) -> None:
        if detector is None or isinstance(detector, str):
            detector = parse_spec(DEFAULT_SPEC if detector is None else detector)
        if not isinstance(detector, Detector):
            raise TypeError(f"Monitor needs a Detector or a spec string. Got {detector!r} instead.")
        self.detector = detector
        self.state: State = detector.start()
        self.best_checkpoint: str | None = None
        self.last_step: int | None = None
        self.fired_now = False
        self.n_ignored = 0
        if not isinstance(cadence, CadencePolicy):
            cadence = parse_cadence(cadence or DEFAULT_CADENCE)
        self.cadence = cadence
        if eval_interval is not None and (type(eval_interval) is not int or eval_interval < 1):
            raise ValueError(f"The 'eval_interval' parameter of Monitor must be an int >= 1. "
                             f"Got {eval_interval!r} instead.")
        self.eval_interval = eval_interval

    # -- what callers read -----------------------------------------------------------------
    @property
    def fired(self) -> bool:
        """Whether the rule has fired (now or at an earlier eval)."""
        return self.state["stop"] is not None

    @property
    def verdict(self) -> Verdict:
        """The verdict over every eval observed so far (the final one once fired)."""
        return self.detector.verdict(self.state)

    @property
    def n_evals(self) -> int:
        """Evals folded into the rule (ignored ones excluded)."""
        n: int = self.state["n"]
        return n

    def accepts(self, step: int) -> bool:
        """Whether ``observe`` would fold an eval at ``step`` (not fired, and a new step)."""
        return not self.fired and (self.last_step is None or step > self.last_step)

    def evidence(self) -> RuleEvidence:
        """What the rule's state says now (``Detector.evidence``): its statistic and limit, and
        the score line the next eval is compared against. The console draws this."""
        return self.detector.evidence(self.state)

    @property
    def elevated(self) -> bool:
        """Whether the rule's evidence is elevated (``Detector.elevated``)."""
        return self.detector.elevated(self.state)

    def next_eval(self) -> NextEval:
        """When the next eval is worth running (O(1)): ``after`` opportunities from the latest
        eval (from the job's start before any), at ``step`` when ``eval_interval`` is known."""
        elevated = self.elevated
        after = self.cadence.after(elevated) if self.n_evals else self.cadence.first
        interval = self.eval_interval
        step = None if interval is None else (self.last_step or 0) + after * interval
        return NextEval(after, step, elevated, self.fired)

    # -- feeding it ------------------------------------------------------------------------
    def observe(self, ev: Eval, checkpoint: str | None = None) -> Verdict:
        """Fold in the job's next eval, with the checkpoint saved at it (an opaque string, or
        None); return the verdict so far. See the module docstring for repeats and firing."""
        self.fired_now = False
        if not self.accepts(ev.step):
            self.n_ignored += 1
            return self.verdict
        self._fold(ev, checkpoint)
        return self.verdict

    def observe_many(self, evals: Iterable[Eval], checkpoints: Sequence[str | None] | None = None) -> Verdict:
        """``observe`` each eval in turn (with ``checkpoints[i]`` if given); ``fired_now`` says
        whether one of them fired the rule. Cheaper than calling ``observe`` in a loop."""
        self.fold(evals, checkpoints)
        return self.verdict

    def fold(self, evals: Iterable[Eval], checkpoints: Sequence[str | None] | None = None) -> bool:
        """``observe_many`` without building the verdict: returns ``fired_now`` (the simulator
        reads ``verdict`` only for the jobs whose rule fired)."""
        self.fired_now = False
        if self.fired:
            self.n_ignored += sum(1 for _ in evals)
            return False
        state, step = self.state, self.detector.step
        last = -math.inf if self.last_step is None else self.last_step
        index = state["n"]
        fired, n_ignored = False, 0
        rest = iter(evals)
        for i, ev in enumerate(rest):  # Detector.advance inlined: the simulator's fast path
            if ev.step <= last:
                n_ignored += 1
                continue
            last = ev.step
            reason = step(state, index, ev)
            if checkpoints is not None and state["best_index"] == index:
                self.best_checkpoint = checkpoints[i]
            index += 1
            if reason is not None:
                state["stop"] = [index - 1, ev.step, reason]
                fired = True
                n_ignored += len(evals) - i - 1 if isinstance(evals, Sequence) else sum(1 for _ in rest)
                break
        state["n"] = index
        if last != -math.inf:
            self.last_step = int(last)
        self.fired_now = fired
        self.n_ignored += n_ignored
        return fired

    def _fold(self, ev: Eval, checkpoint: str | None) -> bool:
        state = self.state
        self.last_step = ev.step
        fired = self.detector.advance(state, ev)
        if state["best_index"] == state["n"] - 1:
            self.best_checkpoint = checkpoint
        self.fired_now = fired
        return fired

    # -- persistence -----------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        """The monitor as a dict of JSON values (``json.dumps(..., allow_nan=False)`` accepts it)."""
        return {
            "format": FORMAT, "detector": format_spec(self.detector), "state": copy_state(self.state),
            "best_checkpoint": self.best_checkpoint, "last_step": self.last_step,
            "fired_now": self.fired_now, "n_ignored": self.n_ignored,
            "cadence": format_cadence(self.cadence), "eval_interval": self.eval_interval,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | str, detector: Detector | str | None = None) -> Monitor:
        """Rebuild a monitor from ``to_json()`` output (or its ``json.dumps`` text). With
        ``detector`` given, the saved rule must be the same one; raises ValueError naming what
        does not match."""
        if isinstance(data, str):
            data = json.loads(data)
        if not isinstance(data, Mapping) or data.get("format") != FORMAT:
            raise ValueError(f"Monitor.from_json needs a to_json() dict of format {FORMAT}. Got {data!r}.")
        spec = str(data["detector"])
        if detector is None:
            rule = _parse(spec)
        else:
            rule = _parse(detector) if isinstance(detector, str) else detector
            if format_spec(rule) != spec and _parse(spec) != rule:
                raise ValueError(f"The saved monitor runs detector {spec!r}, not {format_spec(rule)!r}.")
        monitor = cls(rule, str(data.get("cadence") or DEFAULT_CADENCE), data.get("eval_interval"))
        state = data["state"]
        expected = set(monitor.state)
        if not isinstance(state, Mapping) or set(state) != expected:
            raise ValueError(
                f"The saved state of detector {data['detector']!r} must have the keys "
                f"{sorted(expected)}. Got {state!r}."
            )
        monitor.state = copy_state(dict(state))
        monitor.best_checkpoint = data.get("best_checkpoint")
        monitor.last_step = data.get("last_step")
        monitor.fired_now = bool(data.get("fired_now", False))
        monitor.n_ignored = int(data.get("n_ignored", 0))
        return monitor

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Monitor) and self.to_json() == other.to_json()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        status = "fired" if self.fired else "watching"
        return f"Monitor({format_spec(self.detector)!r}, {status}, n_evals={self.n_evals})"
