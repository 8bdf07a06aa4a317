"""Every table of the service (SQLAlchemy Core), in one ``metadata``. Only the store package
reads or writes them; the migrations (``migrations/versions``) build exactly this schema."""

from __future__ import annotations

import sqlalchemy as sa

metadata = sa.MetaData()

tenants = sa.Table(
    "tenants",
    metadata,
    sa.Column("name", sa.String(64), primary_key=True),
    sa.Column("token_hash", sa.String(64), nullable=False, unique=True),
    sa.Column("shadow", sa.Boolean, nullable=False, default=False),
    sa.Column("created_at", sa.Float, nullable=False),
    #: what the tenant may act on (:class:`~evalstop.service.scopes.TenantScope`); NULL = nothing
    sa.Column("scope", sa.JSON, nullable=True),
    #: rate limit and size quota overrides (:class:`~evalstop.service.fairness.Quota`); NULL = defaults
    sa.Column("quota", sa.JSON, nullable=True),
    #: token rotation and revocation (store/tenant.py): the token replaced by the last
    #: rotation, valid until ``previous_valid_until`` (its grace); and when the token was revoked
    sa.Column("previous_token_hash", sa.String(64), nullable=True, index=True),
    sa.Column("previous_valid_until", sa.Float, nullable=True),
    sa.Column("token_revoked_at", sa.Float, nullable=True),
    #: the default on-detect policy of the tenant's jobs (``OnDetect.to_json()``); NULL = stop
    sa.Column("on_detect", sa.JSON(none_as_null=True), nullable=True),
)

#: Each tenant's token bucket where replicas share it (PostgreSQL; ``fairness.SharedTokenBuckets``):
#: the tokens left at ``at`` (seconds, the database's clock).
tenant_buckets = sa.Table(
    "tenant_buckets",
    metadata,
    sa.Column("tenant", sa.String(64), sa.ForeignKey("tenants.name"), primary_key=True),
    sa.Column("tokens", sa.Float, nullable=False),
    sa.Column("at", sa.Float, nullable=False),
)

jobs = sa.Table(
    "jobs",
    metadata,
    sa.Column("id", sa.String(32), primary_key=True),
    sa.Column("tenant", sa.String(64), sa.ForeignKey("tenants.name"), nullable=False, index=True),
    sa.Column("name", sa.String(200), nullable=False),
    sa.Column("external_ref", sa.String(500), nullable=False),
    sa.Column("target", sa.String(64), nullable=False),
    sa.Column("target_options", sa.JSON, nullable=False),
    sa.Column("detector", sa.String(500), nullable=False),
    sa.Column("metric", sa.String(200), nullable=False),
    sa.Column("mode", sa.String(3), nullable=False),
    sa.Column("grace_period_s", sa.Float, nullable=False),
    sa.Column("gpus", sa.Integer, nullable=False),
    sa.Column("expected_duration_s", sa.Float, nullable=True),
    sa.Column("shadow", sa.Boolean, nullable=False, default=False),
    sa.Column("override", sa.String(16), nullable=True),
    #: running -> stopping (a stop is in the outbox) -> stopped (reconciled) | stop_failed
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("last_step", sa.BigInteger, nullable=True),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("stopped_at", sa.Float, nullable=True),
    #: The job's Monitor (``Monitor.to_json()``): its rule state, best eval and checkpoint.
    #: NULL: rebuilt once from the stored scores (service/monitoring.py).
    sa.Column("monitor_state", sa.JSON(none_as_null=True), nullable=True),
    #: The job's eval cadence policy (a ``detectors._cadence`` spec; rows before 0006: every:n=1,
    #: every eval) and the steps between its eval opportunities (NULL: unknown; hints count
    #: opportunities only).
    sa.Column("cadence", sa.String(200), nullable=False, server_default="every:n=1"),
    sa.Column("eval_interval", sa.BigInteger, nullable=True),
    #: the job's on-detect policy as registered (its tenant's default when it named none); the
    #: monitor carries it too. NULL: stop (registered before policies existed)
    sa.Column("on_detect", sa.JSON(none_as_null=True), nullable=True),
    #: how a rewind resubmits the job on its engine (``service/rewind.py``); NULL: in place
    sa.Column("resubmit", sa.JSON(none_as_null=True), nullable=True),
    # an external reference belongs to one live job of a tenant (stopped jobs release it); per
    # tenant, so a tenant can neither squat another's reference nor learn that it is in use
    sa.Index("uq_jobs_live_ref", "tenant", "target", "external_ref", unique=True,
             sqlite_where=sa.text("state != 'stopped'"), postgresql_where=sa.text("state != 'stopped'")),
)

scores = sa.Table(
    "scores",
    metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True),
    sa.Column("job_id", sa.String(32), sa.ForeignKey("jobs.id"), nullable=False),
    sa.Column("metric", sa.String(200), nullable=False),
    sa.Column("step", sa.BigInteger, nullable=False),
    sa.Column("value", sa.Float, nullable=False),
    sa.Column("checkpoint_uri", sa.String(2000), nullable=True),
    sa.Column("progress", sa.Float, nullable=True),
    sa.Column("loss", sa.Float, nullable=True),
    sa.Column("ts", sa.Float, nullable=True),
    sa.Column("received_at", sa.Float, nullable=False),
    #: the value's standard error as the client reported it (NULL: not given)
    sa.Column("score_stderr", sa.Float, nullable=True),
    #: the attempt (rewinds before it) the client said the score belongs to; NULL: not said
    sa.Column("attempt", sa.Integer, nullable=True),
    sa.UniqueConstraint("job_id", "metric", "step", name="uq_scores_job_metric_step"),
)

decisions = sa.Table(
    "decisions",
    metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True),
    sa.Column("job_id", sa.String(32), sa.ForeignKey("jobs.id"), nullable=False),
    #: "detector" (the rule fired) or "override" (stop_now): at most one of each per job.
    sa.Column("source", sa.String(16), nullable=False),
    sa.Column("decision", sa.String(16), nullable=False),
    sa.Column("shadow", sa.Boolean, nullable=False),
    sa.Column("enforced", sa.Boolean, nullable=False),
    sa.Column("reason", sa.String(1000), nullable=False),
    sa.Column("detector", sa.String(500), nullable=False),
    sa.Column("step", sa.BigInteger, nullable=True),
    sa.Column("n_evals", sa.Integer, nullable=False),
    sa.Column("best_step", sa.BigInteger, nullable=True),
    sa.Column("best_score", sa.Float, nullable=True),
    sa.Column("best_checkpoint_uri", sa.String(2000), nullable=True),
    sa.Column("created_at", sa.Float, nullable=False),
    #: a rewind decision's correction, and the job's new reference when it was resubmitted
    sa.Column("correction", sa.String(500), nullable=True),
    sa.Column("new_ref", sa.String(500), nullable=True),
    sa.UniqueConstraint("job_id", "source", name="uq_decisions_job_source"),
)

outbox = sa.Table(
    "outbox",
    metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True),
    sa.Column("decision_id", sa.BigInteger, sa.ForeignKey("decisions.id"), nullable=False, unique=True),
    sa.Column("job_id", sa.String(32), sa.ForeignKey("jobs.id"), nullable=False),
    #: pin -> signal -> grace -> hard_stop -> reconcile -> done | failed
    sa.Column("phase", sa.String(16), nullable=False),
    sa.Column("attempts", sa.Integer, nullable=False, default=0),
    sa.Column("next_attempt_at", sa.Float, nullable=False),
    sa.Column("lease_until", sa.Float, nullable=True),
    sa.Column("lease_owner", sa.String(32), nullable=True),
    #: fencing token: bumped by every claim; a worker's writes carry the value it claimed with
    sa.Column("lease_epoch", sa.BigInteger, nullable=False, default=0, server_default="0"),
    sa.Column("signalled_at", sa.Float, nullable=True),
    sa.Column("last_error", sa.String(1000), nullable=True),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("delivered_at", sa.Float, nullable=True),
    sa.Index("ix_outbox_due", "phase", "next_attempt_at"),
)


#: Who changed a job by hand (overrides, stop retries), from the API or the console: one row per
#: accepted change, written in the change's own transaction.
audit = sa.Table(
    "audit",
    metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True),
    sa.Column("job_id", sa.String(32), sa.ForeignKey("jobs.id"), nullable=False, index=True),
    #: the authenticated caller: "operator" or "tenant:NAME" (tenant names hold no ':')
    sa.Column("principal", sa.String(80), nullable=False),
    #: the name the person gave at console sign-in (self-declared), else the principal
    sa.Column("actor", sa.String(200), nullable=False),
    #: "stop_now" | "never_stop" | "resume" | "retry_stop"
    sa.Column("action", sa.String(32), nullable=False),
    sa.Column("reason", sa.String(1000), nullable=False),
    sa.Column("channel", sa.String(16), nullable=False),  # "api" | "console"
    sa.Column("created_at", sa.Float, nullable=False),
)

#: The delivery history of each outbox row: every phase it entered and every failed attempt.
delivery_events = sa.Table(
    "delivery_events",
    metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True),
    sa.Column("outbox_id", sa.BigInteger, sa.ForeignKey("outbox.id"), nullable=False),
    sa.Column("job_id", sa.String(32), sa.ForeignKey("jobs.id"), nullable=False, index=True),
    sa.Column("phase", sa.String(16), nullable=False),
    sa.Column("attempts", sa.Integer, nullable=False),
    sa.Column("error", sa.String(1000), nullable=True),
    sa.Column("created_at", sa.Float, nullable=False),
)


# -- tokens and console sessions (store/tenant.py, store/session.py) ---------------------------------
#: Every rotation and revocation of a tenant's API token, and every console sign-out of the
#: tenant's sessions: who, when, why, through what.
token_events = sa.Table(
    "token_events",
    metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True),
    sa.Column("tenant", sa.String(64), sa.ForeignKey("tenants.name"), nullable=False, index=True),
    sa.Column("action", sa.String(16), nullable=False),  # "rotate" | "revoke" | "sign_out"
    sa.Column("principal", sa.String(80), nullable=False),  # "operator" or "tenant:NAME"
    sa.Column("actor", sa.String(200), nullable=False),
    sa.Column("reason", sa.String(1000), nullable=False),
    sa.Column("channel", sa.String(16), nullable=False),
    sa.Column("grace_s", sa.Float, nullable=False),
    sa.Column("created_at", sa.Float, nullable=False),
)

#: Console sessions, server-side: the cookie carries the random id; the row holds only its sha256.
console_sessions = sa.Table(
    "console_sessions",
    metadata,
    sa.Column("id_hash", sa.String(64), primary_key=True),
    sa.Column("tenant", sa.String(64), nullable=True, index=True),  # NULL: operator
    #: sha256 of the token signed in with (an operator session ends when the admin token changes)
    sa.Column("token_hash", sa.String(64), nullable=False),
    sa.Column("name", sa.String(80), nullable=False),
    sa.Column("csrf", sa.String(64), nullable=False),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("expires_at", sa.Float, nullable=False, index=True),
    sa.Column("revoked_at", sa.Float, nullable=True),
)

#: Random secrets shared by every replica, generated once by whichever replica needs one first
#: (``console-session``: the key that signs console cookies).
service_secrets = sa.Table(
    "service_secrets",
    metadata,
    sa.Column("name", sa.String(64), primary_key=True),
    sa.Column("value", sa.String(128), nullable=False),
    sa.Column("created_at", sa.Float, nullable=False),
)

#: The scores of an attempt a rewind discarded (the steps after the best eval), moved out of
#: ``scores`` so that the next attempt may send the same steps again (``service/rewind.py``).
rewound_scores = sa.Table(
    "rewound_scores",
    metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True),
    sa.Column("job_id", sa.String(32), sa.ForeignKey("jobs.id"), nullable=False, index=True),
    sa.Column("attempt", sa.Integer, nullable=False),
    sa.Column("metric", sa.String(200), nullable=False),
    sa.Column("step", sa.BigInteger, nullable=False),
    sa.Column("value", sa.Float, nullable=False),
    sa.Column("checkpoint_uri", sa.String(2000), nullable=True),
    sa.Column("score_stderr", sa.Float, nullable=True),
    sa.Column("received_at", sa.Float, nullable=False),
    sa.Column("rewound_at", sa.Float, nullable=False),
)
