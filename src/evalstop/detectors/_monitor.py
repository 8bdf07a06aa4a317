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
- What the job does when the rule fires is its ``policy`` (an ``OnDetect``; the default stops).
  Under ``OnDetect(on_detect="rewind", ...)`` ``action`` says "rewind" while rewinds are left:
  the caller goes back to the best checkpoint, applies the correction and calls ``rewind()``,
  which puts the rule back in its state right after the best eval (evals after it no longer
  count; the next accepted eval is any step after the best one). ``log`` lists every detection,
  rewind and the final stop (``_rewind.py``).
- With ``confirm`` (a ``Confirm``; None, the default, decides on the rule alone) a firing rule
  raises an *alarm* instead: the monitor keeps the state the rule would stop with as ``pending``
  and its own state as it was before the alarm eval; ``next_eval()`` asks for a confirmation eval
  (``confirm``: its size in routine evals, at the alarm's step) and ``accepts`` nothing else. The
  caller answers with ``observe_confirmation``. If the confirmation agrees (``Confirm.agrees``) the
  pending state becomes the state: the monitor stops at the alarm eval, ``fired_now`` is set, and
  the reason says how it was confirmed. If not, the alarm is cleared: the pending state is
  dropped, so the rule goes on from its state before the alarm eval, as if that eval (taken for a
  noise spike) had not been run; the next accepted eval is any step after it. ``evals_used``
  counts every routine eval run (cleared ones too) and each confirmation at its size.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from ._base import Detector, Eval, RuleEvidence, State, Verdict, copy_state, is_valid, sign_of
from ._cadence import DEFAULT_CADENCE, CadencePolicy, NextEval, format_cadence, parse_cadence
from ._confirm import Confirm
from ._noise import finite_items
from ._policy import STOP, OnDetect
from ._rewind import Rewind, decision_log, rewind_entry, snapshot
from ._spec import DEFAULT_SPEC, detector_for, format_spec, parse_spec

#: Version of the ``to_json`` layout.
FORMAT = 1




class Monitor:
    """``Monitor(detector)`` watches one job; ``detector`` is a Detector, a spec string, or None
    for ``DEFAULT_SPEC``. ``cadence`` (a policy or its spec; default ``every:1``) and
    ``eval_interval`` (steps between eval opportunities, if known) shape ``next_eval()``;
    ``policy`` (an ``OnDetect`` or its JSON dict; None stops) says what a detection does;
    ``confirm`` (a ``Confirm`` or its JSON dict; None: no confirmation) makes every detection an
    alarm to confirm first."""

    __slots__ = (
        "best_checkpoint", "best_ref", "best_state", "cadence", "confirm", "confirmations", "detector",
        "eval_interval", "fired_now", "last_step", "n_ignored", "pending", "policy", "rewinds", "state",
    )

    def __init__(
        self,
        detector: Detector | str | None = None,
        cadence: CadencePolicy | str | None = None,
        eval_interval: int | None = None,
        *,
        policy: OnDetect | Mapping[str, Any] | None = None,
        confirm: Confirm | Mapping[str, Any] | None = None,
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
        self.policy = STOP if policy is None else OnDetect.from_json(policy)
        #: one entry per rewind done (``_rewind.rewind_entry``); the rule state right after the
        #: best eval (kept only under a rewind policy)
        self.rewinds: tuple[dict[str, Any], ...] = ()
        self.best_state: State | None = None
        self.confirm = Confirm.from_json(confirm)
        #: the alarm awaiting its confirmation: {"state": the rule's state with the stop,
        #: "step": the alarm eval's step, "checkpoint": its checkpoint, "ref": its best_ref}
        self.pending: dict[str, Any] | None = None
        #: the best eval's {"stderr", "items"} (kept only with ``confirm``: what it is tested against)
        self.best_ref: dict[str, Any] | None = None
        #: one entry per confirmation eval run: {"step", "score", "agreed", "how"}
        self.confirmations: tuple[dict[str, Any], ...] = ()

    # -- what callers read -----------------------------------------------------------------
    @property
    def fired(self) -> bool:
        """Whether the rule has fired (now or at an earlier eval)."""
        return self.state["stop"] is not None

    @property
    def verdict(self) -> Verdict:
        """The verdict over every eval observed so far (the final one once fired); while an
        alarm awaits its confirmation, CONTINUE with a reason that says so."""
        verdict = self.detector.verdict(self.state)
        pending = self.pending
        if pending is None:
            return verdict
        why = f"alarm at step {pending['step']} ({pending['state']['stop'][2]})"
        return replace(verdict, reason=f"{why}; awaiting a confirmation eval")

    @property
    def sign(self) -> float:
        """1.0 when the rule's higher scores are better (mode max, and rules without a mode), -1.0
        for mode min."""
        return sign_of(getattr(self.detector, "mode", "max"))

    @property
    def evals_used(self) -> int:
        """Evals run, in routine-eval units: every routine eval folded or cleared (and a pending
        alarm's), plus each confirmation at its size."""
        cleared = sum(not c["agreed"] for c in self.confirmations) + (self.pending is not None)
        size = 0 if self.confirm is None else self.confirm.size
        return self.n_evals + cleared + size * len(self.confirmations)

    @property
    def n_evals(self) -> int:
        """Evals folded into the rule (ignored ones excluded)."""
        n: int = self.state["n"]
        return n

    def accepts(self, step: int) -> bool:
        """Whether ``observe`` would fold an eval at ``step`` (not fired, and a new step)."""
        return not self.fired and self.pending is None and (self.last_step is None or step > self.last_step)

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
        eval (from the job's start before any), at ``step`` when ``eval_interval`` is known.
        While an alarm awaits confirmation: ``confirm`` (the eval's size) at the alarm's step."""
        if self.pending is not None and self.confirm is not None:
            return NextEval(0, self.pending["step"], True, False, self.confirm.size)
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
        if self.confirm is not None:
            return self._fold_each(evals, checkpoints)
        state, step = self.state, self.detector.step
        keep = self.policy.rewinds
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
            if keep and state["best_index"] == index:
                self.best_state = snapshot(state, index)
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

    def _fold_each(self, evals: Iterable[Eval], checkpoints: Sequence[str | None] | None) -> bool:
        """``fold`` one ``observe`` at a time (with ``confirm``: the evals after an alarm are
        ignored, the caller must confirm it first)."""
        fired = False
        for i, ev in enumerate(evals):
            self.observe(ev, None if checkpoints is None else checkpoints[i])
            fired = fired or self.fired_now
        self.fired_now = fired
        return fired

    def _fold(self, ev: Eval, checkpoint: str | None) -> bool:
        self.last_step = ev.step
        if self.confirm is not None:
            return self._fold_alarm(ev, checkpoint)
        state = self.state
        fired = self.detector.advance(state, ev)
        if state["best_index"] == state["n"] - 1:
            self._new_best(state, checkpoint, fired)
        self.fired_now = fired
        return fired

    def _new_best(self, state: State, checkpoint: str | None, fired: bool) -> None:
        self.best_checkpoint = checkpoint
        if self.policy.rewinds and not fired:
            self.best_state = snapshot(state, state["n"] - 1)

    def _fold_alarm(self, ev: Eval, checkpoint: str | None) -> bool:
        """``_fold`` under ``confirm``: a firing eval becomes a pending alarm (module doc)."""
        before = copy_state(self.state)
        state = self.state
        fired = self.detector.advance(state, ev)
        best = state["best_index"] == state["n"] - 1
        ref = _ref_of(ev) if best else None
        self.fired_now = False
        if fired:
            self.pending = {"state": state, "step": ev.step, "checkpoint": checkpoint, "ref": ref}
            self.state = before
            return False
        if best:
            self.best_ref = ref
            self._new_best(state, checkpoint, False)
        return False

    def observe_confirmation(self, ev: Eval) -> Verdict:
        """Fold in the confirmation eval of the pending alarm (at its step; ``ItemEval`` for a
        paired test): stop if it agrees, clear the alarm if not (module docstring). A
        confirmation that was not asked for (no alarm pending, or another step) is ignored and
        counted in ``n_ignored``."""
        self.fired_now = False
        pending, confirm = self.pending, self.confirm
        if pending is None or confirm is None or ev.step != pending["step"]:
            self.n_ignored += 1
            return self.verdict
        self.pending = None
        best, ref = self.state["best_score"], self.best_ref or {}
        agreed, how = False, "no best eval to compare with"
        if best is not None:
            agreed, how = confirm.agrees(self.sign, best, ref.get("stderr"), ref.get("items"), ev)
        score = ev.score if is_valid(ev.score) else None
        entry = {"step": ev.step, "score": score, "agreed": agreed, "how": how}
        self.confirmations = (*self.confirmations, entry)
        if agreed:
            state = self.state = pending["state"]
            state["stop"][2] = f"{state['stop'][2]}; confirmed ({how})"
            if state["best_index"] == state["n"] - 1:
                self.best_ref = pending["ref"]
                self._new_best(state, pending["checkpoint"], True)
            self.fired_now = True
        return self.verdict

    # -- on a detection: stop or rewind ----------------------------------------------------
    @property
    def action(self) -> str | None:
        """None while the rule has not fired; then "rewind" if the policy has a rewind left and
        there is a best eval to go back to, else "stop"."""
        if not self.fired:
            return None
        left = self.policy.rewinds and len(self.rewinds) < self.policy.max_rewinds
        return "rewind" if left and self.best_state is not None else "stop"

    @property
    def n_rewinds(self) -> int:
        return len(self.rewinds)

    def rewind(self) -> Rewind:
        """Go back to the best eval (call it once the job is back on the best checkpoint, with
        the correction applied); return what was done. Raises ValueError unless ``action`` is
        "rewind"."""
        if self.action != "rewind" or self.best_state is None:
            raise ValueError(f"Monitor.rewind: the action is {self.action!r}, not 'rewind' (fired="
                             f"{self.fired}, rewinds {len(self.rewinds)} of {self.policy.max_rewinds}).")
        number = len(self.rewinds) + 1
        entry = rewind_entry(self.verdict, self.best_checkpoint, self.policy.correction, number)
        self.rewinds = (*self.rewinds, entry)
        self.state = copy_state(self.best_state)
        self.last_step = self.state["best_step"]
        self.fired_now = False
        return Rewind.from_entry(entry)

    def stop_instead(self) -> None:
        """The job cannot rewind (say, no checkpoint was saved): no rewinds are left, ``action``
        is "stop" and the log ends with the stop."""
        self.policy = replace(self.policy, max_rewinds=len(self.rewinds))

    @property
    def log(self) -> list[dict[str, Any]]:
        """Every detection, every rewind (with its checkpoint and correction) and the final stop,
        in order (built from the rewinds and the current verdict)."""
        return decision_log(self.rewinds, self.verdict, self.best_checkpoint, self.action)

    # -- persistence -----------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        """The monitor as a dict of JSON values (``json.dumps(..., allow_nan=False)`` accepts it)."""
        return {
            "format": FORMAT, "detector": format_spec(self.detector), "state": copy_state(self.state),
            "best_checkpoint": self.best_checkpoint, "last_step": self.last_step,
            "fired_now": self.fired_now, "n_ignored": self.n_ignored,
            "cadence": format_cadence(self.cadence), "eval_interval": self.eval_interval,
            "policy": self.policy.to_json(), "rewinds": [dict(r) for r in self.rewinds],
            "best_state": None if self.best_state is None else copy_state(self.best_state),
            "confirm": None if self.confirm is None else self.confirm.to_json(),
            "pending": None if self.pending is None else _copy_pending(self.pending),
            "best_ref": None if self.best_ref is None else _copy_ref(self.best_ref),
            "confirmations": [dict(c) for c in self.confirmations],
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
            rule = detector_for(spec)
        else:
            rule = detector_for(detector) if isinstance(detector, str) else detector
            if format_spec(rule) != spec and detector_for(spec) != rule:
                raise ValueError(f"The saved monitor runs detector {spec!r}, not {format_spec(rule)!r}.")
        monitor = cls(rule, str(data.get("cadence") or DEFAULT_CADENCE), data.get("eval_interval"),
                      policy=OnDetect.from_json(data.get("policy")), confirm=data.get("confirm"))
        state, best_state, pending = data["state"], data.get("best_state"), data.get("pending")
        if pending is not None and not (isinstance(pending, Mapping) and "step" in pending):
            raise ValueError(f"The saved monitor's pending alarm must be a dict with a state and a step. "
                             f"Got {pending!r}.")
        expected = set(monitor.state)
        for saved in (state, best_state, None if pending is None else pending.get("state")):
            if saved is not None and (not isinstance(saved, Mapping) or set(saved) != expected):
                raise ValueError(
                    f"The saved state of detector {data['detector']!r} must have the keys "
                    f"{sorted(expected)}. Got {saved!r}."
                )
        monitor.state = copy_state(dict(state))
        monitor.best_state = None if best_state is None else copy_state(dict(best_state))
        monitor.rewinds = tuple(dict(r) for r in data.get("rewinds") or ())
        monitor.best_checkpoint = data.get("best_checkpoint")
        monitor.last_step = data.get("last_step")
        monitor.fired_now = bool(data.get("fired_now", False))
        monitor.n_ignored = int(data.get("n_ignored", 0))
        monitor.pending = None if pending is None else _copy_pending(pending)
        best_ref = data.get("best_ref")
        monitor.best_ref = None if best_ref is None else _copy_ref(best_ref)
        monitor.confirmations = tuple(dict(c) for c in data.get("confirmations") or ())
        return monitor

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Monitor) and self.to_json() == other.to_json()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        status = "fired" if self.fired else "confirming" if self.pending is not None else "watching"
        return f"Monitor({format_spec(self.detector)!r}, {status}, n_evals={self.n_evals})"


def _ref_of(ev: Eval) -> dict[str, Any]:
    """What a confirmation is tested against at this (best) eval: its stderr and items."""
    stderr = ev.stderr if ev.stderr is not None and math.isfinite(ev.stderr) else None
    items = finite_items(ev)
    return {"stderr": stderr, "items": None if items is None else list(items)}


def _copy_ref(ref: Mapping[str, Any]) -> dict[str, Any]:
    items = ref.get("items")
    return {"stderr": ref.get("stderr"), "items": None if items is None else list(items)}


def _copy_pending(pending: Mapping[str, Any]) -> dict[str, Any]:
    ref = pending.get("ref")
    return {
        "state": copy_state(dict(pending["state"])), "step": pending["step"],
        "checkpoint": pending.get("checkpoint"), "ref": None if ref is None else _copy_ref(ref),
    }
