"""The one shape of a score on its way in: :class:`ScoreIn`, frozen, from the route (or a puller)
through ingest to the store.

Its fields are validated once, when it is built (by FastAPI from the request body, or by the
caller): a finite JSON number, a step >= 0, lengths. What depends on the service's settings or on
the whole batch (``max_step``, ``max_batch``, step order) is checked by ingest. A new field is
one line here (plus its column in :mod:`.store.tables` and a migration): the store writes every
field of the model, and the reply of ``GET /scores`` lists the columns.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StrictInt, field_validator

from ..detectors import Eval

#: A JSON number and nothing else: no "0.5" strings, no booleans (true is not 1.0). Ints are fine.
StrictNumber = Annotated[float, Field(strict=True, allow_inf_nan=False)]


class ScoreIn(BaseModel):
    """One eval score as a client or a puller reports it. ``metric`` None = the job's metric."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True)

    step: StrictInt = Field(ge=0, description="Training step of the eval; increasing per metric.")
    value: StrictNumber
    checkpoint_uri: str | None = Field(default=None, max_length=2000)
    ts: StrictNumber | None = None
    metric: str | None = Field(default=None, min_length=1, max_length=200,
                               description="Defaults to the job's watched metric.")
    progress: Annotated[StrictNumber, Field(ge=0, le=1)] | None = None
    loss: StrictNumber | None = None
    score_stderr: Annotated[StrictNumber, Field(ge=0)] | None = Field(
        default=None, description="The value's standard error (e.g. the sd of per-prompt scores over "
        "sqrt(n)); rules that measure noise use it for this eval. 0 or absent: the rule's own estimate.")
    attempt: Annotated[StrictInt, Field(ge=0, le=1_000_000)] | None = Field(
        default=None, description="The job's attempt (rewinds before it) this eval belongs to; "
        "None: the current one (docs/rewind.md).")

    @field_validator("checkpoint_uri", "metric")
    @classmethod
    def _no_nul(cls, text: str | None) -> str | None:
        if text is not None and "\x00" in text:
            raise ValueError("must not contain a NUL character (databases cannot store one in text)")
        return text

    def to_eval(self) -> Eval:
        """The eval a detector observes."""
        return Eval(self.step, self.value, self.progress, self.loss, self.score_stderr)
