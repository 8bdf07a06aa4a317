"""Walk a job's eval opportunities through its monitor's cadence policy.

A dense history lists every eval the job could have run (one per opportunity, in order).
:class:`CadenceWalk` is the one place that decides which of them the job runs: the first is the
policy's first opportunity, each next one ``Monitor.next_eval().after`` opportunities after the
last eval run, and none after the rule has fired. It is what the job would have done had it
followed the hints. ``walk`` runs it over a list (the simulator, ``watch``); ``offer`` takes the
opportunities one at a time (``evalstop replay --cadence``, whose rows of many jobs interleave).

A monitor with confirmation evals (``Monitor(confirm=...)``) may answer an eval with an alarm.
The walk then asks its ``confirm`` source (``confirm(ev)``: the confirmation eval at ``ev``'s
checkpoint) and folds the answer in before it moves on, so the next opportunity is counted from
the alarm eval once the alarm is settled. A walk without a source stops at an alarm: nothing
can answer it, and the monitor accepts no other eval meanwhile.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from ._base import Eval
from ._monitor import Monitor


class CadenceWalk:
    """One job's walk: ``due`` is the (0-based) opportunity its cadence asks for next, ``seen``
    how many opportunities ``offer`` has been given; ``confirm`` answers the monitor's alarms
    (module docstring)."""

    __slots__ = ("confirm", "due", "monitor", "seen")

    def __init__(self, monitor: Monitor, confirm: Callable[[Eval], Eval] | None = None) -> None:
        self.monitor = monitor
        self.confirm = confirm
        self.due = monitor.next_eval().after - 1
        self.seen = 0

    def take(self, ev: Eval) -> None:
        """Fold in ``ev``, the eval at opportunity ``due`` (and its confirmation, if it raised an
        alarm), and move ``due`` to the next one the cadence asks for."""
        monitor = self.monitor
        monitor.observe(ev)
        after = monitor.next_eval().after
        if not after:  # an alarm waits for its confirmation
            after = self._settle(ev)
        self.due += after

    def _settle(self, ev: Eval) -> int:
        """Answer the alarm ``ev`` raised; the opportunities to the next eval (none: no source)."""
        if self.confirm is None:
            return 0
        self.monitor.observe_confirmation(self.confirm(ev))
        return self.monitor.next_eval().after

    def offer(self, ev: Eval) -> bool:
        """The job's next opportunity, in order: fold ``ev`` in if the cadence asks for it (and
        the rule has not fired); whether it did."""
        index = self.seen
        self.seen = index + 1
        if index != self.due or self.monitor.fired:
            return False
        self.take(ev)
        return True

    def walk(self, evals: Sequence[Eval]) -> Iterator[int]:
        """The indices of ``evals`` the cadence asks for, in order, up to the rule's stop. Each
        is yielded *before* its eval is folded in, so the caller sees the monitor as the eval
        finds it."""
        monitor, n = self.monitor, len(evals)
        observe, next_eval = monitor.observe, monitor.next_eval  # ``take``, with its lookups hoisted
        due = self.due
        while due < n and not monitor.fired:
            yield due
            self.seen = due + 1
            observe(evals[due])
            after = next_eval().after
            if not after:  # an alarm: settle it, or stop if nothing can
                after = self._settle(evals[due])
                if not after:
                    return
            due += after
            self.due = due


def watch(monitor: Monitor, evals: Sequence[Eval]) -> list[int]:
    """Observe the evals of ``evals`` that ``monitor``'s policy asks for; return their indices."""
    return list(CadenceWalk(monitor).walk(evals))
