"""Request and response bodies of the HTTP API (pydantic). Routes convert them to domain calls."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    StrictBool,
    StrictInt,
    Tag,
)

from ..detectors import DEFAULT_CADENCE, DEFAULT_SPEC
from .fairness import Quota
from .limits import readable_options
from .scopes import TenantScope, parse_scope
from .score import ScoreIn as ScoreIn  # the score body is the domain's own type (re-exported)

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
#: A JSON number and nothing else ("5" and true are refused), finite.
StrictFloat = Annotated[float, Field(strict=True, allow_inf_nan=False)]


def _no_nul(text: str) -> str:
    if "\x00" in text:
        raise ValueError("must not contain a NUL character (a database cannot store one in text)")
    return text


#: Request text: no NUL (PostgreSQL refuses one in text; the request would otherwise be a 500).
Text = Annotated[str, AfterValidator(_no_nul)]
#: A stored job's JSON options as a reply shows them (:func:`.limits.readable_options`).
StoredOptions = Annotated[dict[str, Any], BeforeValidator(readable_options)]


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class TenantIn(Body):
    name: str = Field(pattern=NAME_PATTERN, description="Tenant name: letters, digits, '.', '_', '-'.")
    shadow: StrictBool = False
    scope: TenantScope | None = Field(default=None, description="What the tenant may act on; none: nothing.")
    quota: Quota | None = None


def _as_stored(value: Any) -> Any:
    """A scope read from the database loads even if it predates a newer entry check."""
    return parse_scope(value, stored=True) if isinstance(value, Mapping) else value


class TenantOut(BaseModel):
    name: str
    shadow: bool
    created_at: float
    scope: Annotated[TenantScope | None, BeforeValidator(_as_stored)] = None
    quota: Quota | None = None
    token_revoked: bool = Field(default=False, description="The tenant's token is revoked (until an "
                                "operator rotates it).")
    token_revoked_at: float | None = Field(default=None, description="When it was revoked.")
    token_rotated_at: float | None = Field(default=None, description="The token's last rotation (null: "
                                           "never rotated since the tenant was created).")
    token_grace_until: float | None = Field(default=None, description="Until when the token the last "
                                            "rotation replaced stays valid (null: no grace running).")


class ScopeIn(Body):
    scope: TenantScope | None


class QuotaIn(Body):
    quota: Quota | None


class TenantCreated(TenantOut):
    token: str = Field(description="The tenant's API token. Shown once; only its hash is stored.")


class Toggle(Body):
    enabled: StrictBool


class OverrideIn(Body):
    override: Literal["never_stop", "stop_now"] | None
    reason: Text = Field(default="", max_length=1000, description="Why (kept in the job's audit trail).")


class RetryIn(Body):
    reason: Text = Field(default="", max_length=1000, description="Why (kept in the job's audit trail).")


class JobIn(Body):
    external_ref: Text = Field(min_length=1, max_length=500,
                              description="The job's id on the system that runs it.")
    target: str = Field(pattern=NAME_PATTERN, description="Enforcement adapter name (ray, slurm, ...).")
    target_options: dict[str, Any] = Field(default_factory=dict)
    name: Text = Field(default="", max_length=200)
    tenant: str | None = Field(default=None, pattern=NAME_PATTERN,
                               description="Operators only: the tenant that owns the job.")
    detector: Text = Field(default=DEFAULT_SPEC, min_length=1, max_length=500)
    metric: Text = Field(default="score", min_length=1, max_length=200)
    mode: Literal["max", "min"] = "max"
    grace_period_s: StrictFloat = Field(default=60.0, ge=0, le=86_400)
    gpus: StrictInt = Field(default=1, ge=1, le=1_000_000)
    expected_duration_s: StrictFloat | None = Field(default=None, gt=0, le=1e8)
    shadow: StrictBool = False
    cadence: Text = Field(default=DEFAULT_CADENCE, min_length=1, max_length=200,
                         description="When an eval is worth running: every:N or adaptive:every=N,dense=M, "
                                     "in eval opportunities (docs/service.md, 'The eval hint').")
    eval_interval: StrictInt | None = Field(default=None, ge=1, le=2**53,
                                            description="Training steps between eval opportunities; "
                                                        "given, the hint names a step too.")
    on_detect: Literal["stop", "rewind"] | None = Field(
        default=None, description="At a detection: stop, or rewind to the best checkpoint (docs/rewind.md). "
        "None: the tenant's default.")
    max_rewinds: StrictInt | None = Field(
        default=None, ge=0, le=1000,
        description="Rewinds before a detection stops the job (default 1; at most the service's "
                    "max_rewinds).")
    correction: Text | None = Field(default=None, max_length=500,
                                   description="A rewind's correction spec, e.g. 'kl_coef*=2,lr*=0.5'.")
    resubmit: dict[str, Any] | None = Field(
        default=None, description="Ray/Slurm: how a rewind resubmits the job (docs/rewind.md).")


class OnDetectIn(Body):
    """A tenant's default on-detect policy (``OnDetect``: on_detect, max_rewinds, correction);
    null: stop."""

    on_detect: dict[str, Any] | None


class OnDetectOut(BaseModel):
    tenant: str
    on_detect: dict[str, Any] | None


class Delivery(BaseModel):
    phase: str
    attempts: int
    last_error: str | None
    delivered_at: float | None


class JobOut(BaseModel):
    id: str
    tenant: str
    name: str
    external_ref: str
    target: str
    target_options: StoredOptions
    detector: str
    metric: str
    mode: str
    grace_period_s: float
    gpus: int
    expected_duration_s: float | None
    shadow: bool
    cadence: str = "every:n=1"
    eval_interval: int | None = None
    override: str | None
    state: str
    released: bool = Field(default=False, description=(
        "The job was released by hand after its stop failed: state stays 'stopped' (it is closed), "
        "but no stop was delivered, so it is not counted as reclaimed."))
    created_at: float
    stopped_at: float | None
    n_evals: int = 0
    last_step: int | None = None
    on_detect: dict[str, Any] | None = None
    resubmit: StoredOptions | None = None
    deliveries: list[Delivery] = Field(default_factory=list)


class ScoreBatch(Body):
    scores: list[ScoreIn]


def _body_kind(value: Any) -> str:
    if isinstance(value, ScoreBatch) or (isinstance(value, dict) and "scores" in value):
        return "batch"
    return "one"


ScoresBody = Annotated[
    Annotated[ScoreIn, Tag("one")] | Annotated[ScoreBatch, Tag("batch")], Discriminator(_body_kind)
]


class ScoreOut(BaseModel):
    metric: str
    step: int
    value: float
    checkpoint_uri: str | None
    progress: float | None
    loss: float | None
    ts: float | None
    received_at: float
    score_stderr: float | None = None


class NextEvalOut(BaseModel):
    """The monitor's hint after this request's scores (``NextEval.to_dict()``)."""

    after: int = Field(description="Run the next eval this many eval opportunities after the latest one.")
    step: int | None = Field(description="That opportunity's training step (null: the job has no "
                                         "eval_interval).")
    elevated: bool = Field(description="The rule's evidence is elevated (a decline may have started).")
    done: bool = Field(description="The rule has fired: no further eval is needed.")


class RewindOut(BaseModel):
    number: int
    attempt: int = Field(description="The attempt that starts with this rewind (send it with its scores).")
    step: int | None = Field(description="The step whose eval fired the rule.")
    to_step: int | None = Field(description="The best eval's step: continue from there.")
    checkpoint_uri: str | None = Field(description="The best eval's checkpoint.")
    correction: str
    reason: str
    resubmit: bool = Field(description="The service stops this job and resubmits it from the checkpoint "
                           "(Ray, Slurm): the client stops instead of rewinding in place.")


class JobRegistered(JobOut):
    """The registration reply: the job, and when its first eval is worth running."""

    next_eval: NextEvalOut | None = Field(
        default=None, description="The fresh monitor's hint for the job's first eval (the job's cadence; "
        "the same field as the score reply's next_eval).")


class IngestOut(BaseModel):
    job_id: str
    accepted: int = Field(description="Scores newly stored.")
    duplicates: int = Field(description="Scores already stored with the same value (no-ops).")
    decision: Literal["continue", "stop", "rewind"] = Field(
        description="rewind: go back to rewind.checkpoint_uri, apply rewind.correction, continue "
        "(docs/rewind.md).")
    state: str
    reason: str
    decided_now: bool
    shadow_stop: bool = Field(description="A stop was decided in shadow mode (recorded, not enforced).")
    stop_step: int | None
    n_evals: int
    best_step: int | None
    best_score: float | None
    best_checkpoint_uri: str | None
    next_eval: NextEvalOut | None = Field(
        default=None, description="When the next eval is worth running (the job's cadence and its rule's "
        "evidence); null once a stop is decided and enforced, or the job no longer runs.")
    attempt: int = Field(default=0, description="The job's attempt now: the rewinds it has had.")
    rewind: RewindOut | None = Field(default=None, description="With decision 'rewind': what to do.")
    stale: list[int] = Field(default_factory=list, description="Indexes of this request's scores of an "
                             "earlier attempt: not stored, not judged (counted in duplicates too).")


class DecisionOut(BaseModel):
    id: int
    job_id: str
    source: str
    decision: str
    shadow: bool
    enforced: bool
    reason: str
    detector: str
    step: int | None
    n_evals: int
    best_step: int | None
    best_score: float | None
    best_checkpoint_uri: str | None
    created_at: float
    correction: str | None = None
    new_ref: str | None = None


# -- token rotation and revocation (service/tokens.py) ------------------------------------------
class TokenRotateIn(Body):
    grace_s: StrictFloat = Field(
        default=0.0, ge=0, le=86_400,
        description="Seconds the replaced token stays valid (0: none; at most a day).")
    reason: Text = Field(default="", max_length=1000, description="Why (kept in the tenant's token audit).")


class TokenRevokeIn(Body):
    reason: Text = Field(default="", max_length=1000, description="Why (kept in the tenant's token audit).")


class TokenRotated(BaseModel):
    name: str
    token: str = Field(description="The tenant's new API token. Shown once; only its hash is stored.")
    previous_valid_until: float | None = Field(
        description="Until when the replaced token is still accepted (null: no grace).")


class TokenRevoked(BaseModel):
    name: str
    revoked_at: float


class TokenEventOut(BaseModel):
    action: Literal["rotate", "revoke", "sign_out"]
    principal: str
    actor: str
    reason: str
    channel: str
    grace_s: float
    created_at: float
