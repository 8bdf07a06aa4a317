"""Rewind instead of stop, in the service (docs/rewind.md, "In the service").

- **The policy.** A job's ``on_detect``/``max_rewinds``/``correction`` (registration) override
  its tenant's default policy field by field (``resolve_policy``); ``max_rewinds`` is bounded by
  the operator's ``max_rewinds`` setting. The job's monitor carries the policy.
- **A detection with a rewind left** (ingest, in the score's transaction): a ``rewind`` decision
  is recorded (source ``rewind-N``, with the best checkpoint and the correction), the monitor
  goes back to its best eval (``Monitor.rewind``), and the scores after the best step move to
  ``rewound_scores``: the job's next attempt continues from the best step and reports those
  steps again. A detection with no rewind left is the final stop, as before.
- **Attempts.** Attempt N is the run after N rewinds (``Monitor.n_rewinds``). A score may say
  which attempt it belongs to (``attempt``): a score of an earlier attempt (a retry, or a post
  in flight when the rewind was decided) is not stored, counts as a duplicate, and its reply
  repeats the rewind (``decision: "rewind"``); a later attempt than the job's is a 409. A score
  that says nothing belongs to the current attempt.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, TypeVar

from .._validation import InvalidParameterError
from ..detectors import Monitor, OnDetect
from .errors import Conflict, InvalidInput
from .monitoring import decision_of
from .score import ScoreIn
from .store import Conn
from .store import decision as decision_store
from .store import rewound as rewound_store

Result = TypeVar("Result")

#: The default operator limit on ``max_rewinds`` (setting ``max_rewinds``).
MAX_REWINDS = 3


def parse_policy(data: Any, limit: int, what: str = "on_detect") -> OnDetect | None:
    """A stored or requested policy dict as an ``OnDetect`` (None stays None); 422 naming the
    parameter and value when it is invalid or over the operator's ``limit``."""
    if data is None:
        return None
    try:
        policy = OnDetect.from_json(data)
    except (InvalidParameterError, TypeError) as exc:
        raise InvalidInput(f"{what}: {exc}") from None
    _check_limit(policy, limit)
    return policy


def resolve_policy(
    default: OnDetect | None, limit: int, *, on_detect: str | None = None, max_rewinds: int | None = None,
    correction: str | None = None,
) -> OnDetect:
    """The job's policy: its tenant's ``default`` (None: stop) with the fields the registration
    gives. ``on_detect="stop"`` without a correction clears the default's correction."""
    base = default or OnDetect()
    fields: dict[str, Any] = base.to_json()
    if on_detect is not None:
        fields["on_detect"] = on_detect
        if on_detect == "stop" and correction is None:
            fields["correction"] = ""
    if max_rewinds is not None:
        fields["max_rewinds"] = max_rewinds
    if correction is not None:
        fields["correction"] = correction
    try:
        policy = OnDetect(**fields)
    except InvalidParameterError as exc:
        raise InvalidInput(str(exc)) from None
    _check_limit(policy, limit)
    return policy


def _check_limit(policy: OnDetect, limit: int) -> None:
    if policy.rewinds and policy.max_rewinds > limit:
        raise InvalidInput(f"max_rewinds: {policy.max_rewinds} is over the service's limit of {limit} "
                           f"(setting max_rewinds, EVALSTOP_MAX_REWINDS).")


def split_stale(
    items: Sequence[ScoreIn], attempt: int, began: int, offset: int = 0
) -> tuple[Sequence[ScoreIn], list[int]]:
    """The items of the job's current ``attempt``, and the indexes (plus ``offset``: the items'
    place in their request) of the items of an earlier attempt (dropped); a later attempt is a
    409 naming the item. An item saying none belongs to the attempt of its batch (``began``: the
    job's attempt when the batch's first unit ran), so the scores after a detection in a batch
    written in several units are not taken as the next attempt's."""
    if began == attempt and all(item.attempt is None for item in items):  # the common case: no copy
        return items, []
    kept: list[ScoreIn] = []
    stale: list[int] = []
    for i, item in enumerate(items, offset):
        said = began if item.attempt is None else item.attempt
        if said > attempt:
            raise Conflict(f"scores[{i}].attempt {said} is ahead of the job: it has had {attempt} "
                           f"rewind(s), so its current attempt is {attempt}.")
        if said == attempt:
            kept.append(item)
        else:
            stale.append(i)
    return kept, stale


def can_rewind(conn: Conn, job: Mapping[Any, Any], monitor: Monitor) -> bool:
    """False when the job is resubmitted on its engine but no checkpoint was posted with its
    best eval (there is nothing to resubmit from): the detection then stops the job."""
    return monitor.best_checkpoint is not None or rewound_store.resubmit_of(conn, job["id"]) is None


def rewind_now(conn: Conn, job: Mapping[Any, Any], monitor: Monitor, now: float) -> dict[str, Any]:
    """Record the rewind the monitor's rule asks for (with an outbox row when the job is
    resubmitted on its engine), rewind the monitor, move the discarded scores; return the
    reply's ``rewind`` object. The caller writes the monitor back."""
    verdict = monitor.verdict
    number = monitor.n_rewinds + 1
    resubmit = rewound_store.resubmit_of(conn, job["id"]) is not None
    decision = decision_of(job, monitor, source=f"rewind-{number}", shadow=False,
                           reason=verdict.reason[:1000], step=verdict.stop_step,
                           correction=monitor.policy.correction)
    decision_store.record_rewind(conn, job["id"], now, decision, enqueue=resubmit)
    done = monitor.rewind()
    if done.to_step is not None:
        rewound_store.move_after(conn, job["id"], done.to_step, number - 1, now)
    reply = reply_of(monitor)
    assert reply is not None
    return {**reply, "resubmit": resubmit}


def reply_of(monitor: Monitor) -> dict[str, Any] | None:
    """The latest rewind as the score reply's ``rewind`` object (None if the job has had none)."""
    if not monitor.rewinds:
        return None
    last = monitor.rewinds[-1]
    return {"number": last["number"], "attempt": last["number"], "step": last["step"],
            "to_step": last["to_step"], "checkpoint_uri": last["checkpoint"],
            "correction": last["correction"], "reason": last["reason"], "resubmit": False}


def shadow_note(monitor: Monitor) -> str:
    """What a shadow-mode job's reply says when its rule fires under a rewind policy."""
    return f"{monitor.verdict.reason} (shadow mode: rewind recorded, not enforced)"


def stale_reply(conn: Conn, job: Mapping[Any, Any], result: Result, monitor: Monitor, stale: int) -> Result:
    """``result`` (an ``IngestResult``) for a request that held scores of an earlier attempt:
    the rewind again."""
    reply = reply_of(monitor)
    if not stale or reply is None or getattr(result, "decision", None) == "stop":
        return result
    reply["resubmit"] = rewound_store.resubmit_of(conn, job["id"]) is not None
    return replace(result, decision="rewind", rewind=reply)  # type: ignore[type-var]
