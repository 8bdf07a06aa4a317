"""A ``rewind`` reply of the EvalStop service, as the remote client reads it (docs/rewind.md).

The service answers ``{"decision": "rewind", "attempt": 1, "rewind": {"number": 1, "attempt":
1, "step": 40, "to_step": 24, "checkpoint_uri": "/runs/a/checkpoint-24", "correction":
"kl_coef*=2", "reason": "..."}}`` when the job must go back to its best checkpoint, apply the
correction and continue. The client then sends ``attempt`` with every later score, so that a
score of the old attempt still in flight (or retried) is told apart from the new attempt's
score at the same step. A reply repeating a rewind already done (the same ``attempt``) is no
new order.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..detectors import Correction


@dataclass(frozen=True)
class RewindOrder:
    """What the service asks: go back to ``checkpoint_uri`` (saved at ``to_step``), apply
    ``correction``, and report the next evals as attempt ``attempt``."""

    number: int
    attempt: int
    step: int | None
    to_step: int | None
    checkpoint_uri: str | None
    correction: str
    reason: str
    #: the service stops this run and resubmits the job itself: the run ends, no rewind here
    resubmit: bool = False

    @property
    def parsed(self) -> Correction:
        return Correction.parse(self.correction, "the service's rewind reply")

    @classmethod
    def from_answer(cls, answer: Mapping[str, Any]) -> RewindOrder | None:
        """The order in a score reply (None unless its decision is "rewind"); raises ValueError
        for a malformed one (the client then treats the reply as a failing service)."""
        if answer.get("decision") != "rewind":
            return None
        data = answer.get("rewind")
        if not isinstance(data, Mapping):
            raise ValueError(f"a 'rewind' reply without its rewind object: {dict(answer)!r}")
        try:
            order = cls(int(data["number"]), int(data["attempt"]), _opt_int(data.get("step")),
                        _opt_int(data.get("to_step")), _opt_str(data.get("checkpoint_uri")),
                        str(data["correction"]), str(data.get("reason", "")), data.get("resubmit") is True)
            order.parsed  # noqa: B018 - validates the correction spec now
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"a malformed rewind object {dict(data)!r}: {exc}") from None
        return order

    def to_json(self) -> dict[str, Any]:
        return {"number": self.number, "attempt": self.attempt, "step": self.step, "to_step": self.to_step,
                "checkpoint_uri": self.checkpoint_uri, "correction": self.correction, "reason": self.reason,
                "resubmit": self.resubmit}


def _opt_int(value: Any) -> int | None:
    return None if value is None else int(value)


def _opt_str(value: Any) -> str | None:
    return None if value is None else str(value)
