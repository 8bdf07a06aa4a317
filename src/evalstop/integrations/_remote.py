"""Remote mode: report each eval to the platform's EvalStop service and obey its decision.

The expected API (``evalstop.service``)::

    POST {url}/v1/jobs/{job_id}/scores
    Authorization: Bearer {token}
    {"step": 120, "value": 0.61, "progress": 0.4, "loss": 1.9, "metric": "eval_gold",
     "checkpoint_uri": "/runs/a/checkpoint-120", "score_stderr": 0.02}
    -> 200 {"decision": "continue" | "stop", "reason": "...", "stop_step": int | null,
            "best_step": int | null, "best_score": float | null, "shadow_stop": bool,
            "next_eval": {"after": int, "step": int | null, "elevated": bool, "done": bool}, ...}

``next_eval`` (``NextEval.to_dict()``, optional) says when the next eval is worth running;
``RemoteHistory.next_eval()`` returns it (None when the reply carries none or it is malformed).
The registration reply (``POST {url}/v1/jobs``) carries the same field for the job's first eval:
``RemoteJob.register`` keeps it as ``first_eval`` (or pass the reply's ``next_eval`` yourself),
and ``RemoteHistory.next_eval()`` returns it until the first score's reply.
``score_stderr`` is sent when the eval carries a finite standard error.

The service runs the job's rule; ``decision`` is "stop" once a stop is decided and enforced (a
shadow-mode stop answers "continue"), and "rewind" when the job's policy rewinds it: the reply's
``rewind`` object says where to go back to and what to correct (``_service_rewind_order.py``);
``RemoteHistory.take_rewind()`` hands it to the caller, which calls ``rewound(order)`` once done.
The client is the Python standard library only. It fails safe: a NaN/inf score is not sent
(the service refuses non-finite values) and counts as invalid; an unreachable service or an
error answer warns and the job continues.
"""

from __future__ import annotations

import json
import math
import os
import urllib.error
import urllib.parse
import urllib.request
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from .._validation import check_float
from ..detectors import Decision, Eval, NextEval, Verdict
from ._common import eval_row
from ._service_rewind_order import RewindOrder

TOKEN_ENV = "EVALSTOP_TOKEN"


@dataclass(frozen=True)
class RemoteJob:
    """Where a job reports: the service's base ``url``, the job's id there and an API token
    (default: the ``EVALSTOP_TOKEN`` environment variable)."""

    url: str
    job_id: str
    token: str | None = field(default=None, repr=False)
    timeout_s: float = 10.0
    #: The registration reply's ``next_eval`` (a dict, as sent): when the first eval is worth running.
    first_eval: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if not self.url.startswith(("http://", "https://")):
            raise ValueError(
                f"The 'url' parameter of RemoteJob must be an http(s) URL. Got {self.url!r} instead."
            )
        if not self.job_id:
            raise ValueError(
                f"The 'job_id' parameter of RemoteJob must be a job id. Got {self.job_id!r} instead."
            )
        check_float("RemoteJob", "timeout_s", self.timeout_s, low=0.0, low_open=True)

    @classmethod
    def register(
        cls, url: str, token: str | None = None, timeout_s: float = 10.0, **job: Any
    ) -> RemoteJob:
        """Register a job (``POST {url}/v1/jobs`` with ``job``: ``external_ref``, ``target``,
        ``cadence``, ...); the RemoteJob for it, with the reply's first-eval hint. Raises
        OSError/ValueError on failure (a registration the caller must see, unlike a score)."""
        base = cls(url, "unregistered", token, timeout_s)
        try:
            answer = base._request(f"{url.rstrip('/')}/v1/jobs", job)
        except urllib.error.HTTPError as exc:  # say why: the service names the field and value
            raise ValueError(f"EvalStop refused the registration: HTTP {exc.code}: "
                             f"{exc.read().decode(errors='replace')[:500]}") from exc
        if not isinstance(answer.get("id"), str):
            raise ValueError(f"unexpected answer from {url}/v1/jobs: {answer!r}")
        hint = answer.get("next_eval")
        return cls(url, answer["id"], token, timeout_s, hint if isinstance(hint, dict) else None)

    @property
    def scores_url(self) -> str:
        job = urllib.parse.quote(self.job_id, safe="")
        return f"{self.url.rstrip('/')}/v1/jobs/{job}/scores"

    def post(self, payload: dict[str, Any]) -> dict[str, Any]:
        """POST one score; the decoded answer. Raises OSError/ValueError on failure."""
        answer = self._request(self.scores_url, payload)
        if answer.get("decision") not in ("continue", "stop", "rewind"):
            raise ValueError(f"unexpected answer from {self.scores_url}: {answer!r}")
        return answer

    def _request(self, url: str, payload: dict[str, Any]) -> dict[str, Any]:
        token = self.token or os.environ.get(TOKEN_ENV)
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        body = json.dumps(payload).encode()
        request = urllib.request.Request(url, data=body, headers=headers, method="POST")
        with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
            answer = json.loads(response.read().decode())
        if not isinstance(answer, dict):
            raise ValueError(f"unexpected answer from {url}: {answer!r}")
        return answer


class RemoteHistory:
    """A job's eval history whose verdicts come from the service (same interface as EvalHistory).

    The service's job monitor is the one that decides: this client runs no rule. It keeps only
    what it answers its caller with: the verdict and best eval of the service's latest reply, its
    ``next_eval`` hint, a rewind order not yet taken, the evals it saw (for the record file), and
    what never reached the service (non-finite scores, failed posts). A remote verdict names
    steps, not positions: ``stop_index`` and ``best_index`` are None (the service counts the evals
    it was sent)."""

    def __init__(
        self, job: RemoteJob, metric: str | None = None, checkpoint_uri: Callable[[int], str] | None = None
    ) -> None:
        """``checkpoint_uri(step)`` names the checkpoint that holds ``step`` if it is kept: the
        service pins the best eval's checkpoint."""
        self.job, self.metric, self.checkpoint_uri = job, metric, checkpoint_uri
        self.evals: list[Eval] = []
        self.verdict = Verdict(Decision.CONTINUE, "no evals yet")
        self.n_failed = 0
        self.fired_now = False
        # before the first reply: the registration's hint for the first eval, if the job has one
        self._next_eval: NextEval | None = None if job.first_eval is None else _hint(job.first_eval)
        #: the job's attempt (rewinds done), sent with every score; a rewind order not yet taken
        self.attempt = 0
        self._rewind: RewindOrder | None = None
        self._resume_after = -1  # a caller whose step counter goes on after a rewind: its step then

    def add(self, ev: Eval) -> Verdict | None:
        """Send ``ev`` and take the service's answer; None (nothing sent) for a step that does not
        follow the last one (or comes before a rewind's resume point), or once the service has
        stopped the job (its verdict is final)."""
        seen = (self.evals and ev.step <= self.evals[-1].step) or ev.step <= self._resume_after
        if seen or self.verdict.stopped:
            return None
        self.fired_now = False
        self.evals.append(ev)
        if not math.isfinite(ev.score):
            self.verdict = replace(self.verdict, n_invalid=self.verdict.n_invalid + 1)
            return self.verdict
        try:
            answer = self.job.post(self._payload(ev))
            order = RewindOrder.from_answer(answer)
        except (OSError, ValueError) as exc:
            self.n_failed += 1
            warnings.warn(f"EvalStop service unreachable or failing ({exc}); the job continues.",
                          stacklevel=2)
            return self.verdict
        self.verdict = _verdict(answer, self.verdict.n_invalid)
        self.fired_now = self.verdict.stopped
        self._next_eval = _hint(answer.get("next_eval"))
        if order is not None and order.attempt > self.attempt:
            self._rewind = order
        return self.verdict

    def _payload(self, ev: Eval) -> dict[str, Any]:
        payload: dict[str, Any] = {"step": ev.step, "value": ev.score}
        if ev.progress is not None and math.isfinite(ev.progress):
            payload["progress"] = min(max(ev.progress, 0.0), 1.0)
        if ev.loss is not None and math.isfinite(ev.loss):
            payload["loss"] = ev.loss
        if ev.stderr is not None and math.isfinite(ev.stderr) and ev.stderr >= 0.0:
            payload["score_stderr"] = ev.stderr
        if self.metric:
            payload["metric"] = self.metric
        if self.checkpoint_uri is not None:
            payload["checkpoint_uri"] = self.checkpoint_uri(ev.step)
        if self.attempt:  # attempt 0 is the default (and a service without rewinds knows no field)
            payload["attempt"] = self.attempt
        return payload

    def next_eval(self) -> NextEval | None:
        """The service's hint from its latest reply, or before any the registration's
        (``RemoteJob.first_eval``); None if it gave none (e.g. the job is stopped)."""
        return self._next_eval

    def take_rewind(self) -> RewindOrder | None:
        """The rewind the service asked for in its latest replies (once), or None."""
        order, self._rewind = self._rewind, None
        return order

    def rewound(self, order: RewindOrder, resume_after: int | None = None) -> None:
        """The caller went back to ``order``'s checkpoint: later scores are of its attempt, and
        the evals after its best step no longer count (a step may come again). A caller whose
        step counter keeps counting (the HF Trainer) gives its current step as ``resume_after``:
        an eval at or before it is then not the new attempt's (it is ignored)."""
        self.attempt = order.attempt
        self._resume_after = -1 if resume_after is None else resume_after
        self.fired_now = False
        if order.to_step is not None:
            self.evals = [ev for ev in self.evals if ev.step <= order.to_step]

    @property
    def last_is_best(self) -> bool:
        return bool(self.evals) and self.verdict.best_step == self.evals[-1].step

    def record(self) -> dict[str, Any]:
        v = self.verdict
        return {
            "detector": f"remote:{self.job.scores_url}",
            "decision": v.decision.value,
            "reason": v.reason,
            "stop_step": v.stop_step,
            "best_step": v.best_step,
            "best_score": v.best_score,
            "n_invalid": v.n_invalid,
            "n_failed_posts": self.n_failed,
            "attempt": self.attempt,
            "evals": [eval_row(ev) for ev in self.evals],
        }


def _verdict(answer: dict[str, Any], n_invalid: int) -> Verdict:
    """The service's reply as a Verdict: "stop" once a stop is decided and enforced (a shadow
    stop answers "continue"; a rewind answers "rewind", which goes on), at the reply's
    ``stop_step``, with its best eval."""
    stop = answer["decision"] == "stop"
    best_step, best_score = answer.get("best_step"), answer.get("best_score")
    stop_step = answer.get("stop_step")
    return Verdict(
        decision=Decision.STOP if stop else Decision.CONTINUE,
        reason=str(answer.get("reason", "")),
        stop_step=stop_step if stop and isinstance(stop_step, int) else None,
        best_step=best_step if isinstance(best_step, int) else None,
        best_score=float(best_score) if isinstance(best_score, (int, float)) else None,
        n_invalid=n_invalid,
    )


def _hint(data: Any) -> NextEval | None:
    if not isinstance(data, dict):
        return None
    try:
        return NextEval.from_dict(data)
    except (KeyError, TypeError, ValueError):
        warnings.warn(f"EvalStop service sent a malformed next_eval hint {data!r}; ignored.", stacklevel=3)
        return None


__all__ = ["TOKEN_ENV", "RemoteHistory", "RemoteJob"]
