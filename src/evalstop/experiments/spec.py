"""Named experiments ("studies") as TOML specs, validated on load.

A study is a set of policies run over seeded workloads at one or more *points* (the values of a
swept parameter). Every point is a fully resolved :class:`PointSpec`; the runner executes
``(point, seed)`` tasks and the analysis compares policies within each point, seed by seed.

The studies shipped with evalstop live in ``experiments/specs/*.toml``. A spec may
``extends = "other-study"``: the other study's document is merged under it (tables merge key by
key, everything else is replaced). Unknown keys are rejected with their names, at every level.
See ``docs/studies.md`` for the format.
"""

from __future__ import annotations

import hashlib
import json
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

from ..detectors import parse_spec
from ..detectors._spec import format_spec, parameter_names
from ..sim.cluster import SimConfig
from ..workloads import PRESETS, WorkloadConfig
from ..workloads.bank import BankSpec
from ..workloads.jobs_csv import TraceFiles
from ..workloads.model import check_shapes_fit
from ..workloads.philly import TraceSpec
from .config_schema import CLAIM, POLICY, STUDY, SWEEP, TRACE, WORKLOAD, check_policies
from .policies import PolicySpec, parse_watch

__all__ = [
    "ClaimSpec", "PointSpec", "SpecError", "StudySpec", "load_studies", "load_study", "parse_study",
    "study_names",
]

# The keys of each table come from its one declaration (config_schema.py, also the JSON Schema).
_TOP, _POLICY, _SWEEP, _TRACE, _CLAIM = (set(t.names()) for t in (STUDY, POLICY, SWEEP, TRACE, CLAIM))
CLAIM_KINDS = ("value", "change", "at_least", "at_most", "change_within")
ROLES = ("paper", "transfer", "beyond", "extra")
_TUPLE_FIELDS = ("quality_start", "rlhf_gain", "healthy_rate", "lora_rate", "lora_gain", "dpo_rate",
                 "dpo_gain", "dpo_plateau_from", "loss_tau")
_PARAM_PREFIXES = ("workload.", "sim.", "trace.", "detector.", "policy.")


class SpecError(ValueError):
    """A study spec with an unknown key or a bad value; the message names it."""


@dataclass(frozen=True)
class ClaimSpec:
    """One claim of the paper (or one we add), checked against the study's results.

    ``kind``: ``value`` (mean of ``metric`` within ``tolerance`` of ``target``), ``change``
    (relative change vs the baseline within ``tolerance`` of ``target`` and p < 0.05),
    ``at_least`` / ``at_most`` (mean vs ``threshold`` at every point with x in
    [``x_min``, ``x_max``]), ``change_within`` (relative change in [``low``, ``high``], widened
    by ``tolerance``, and p < 0.05 at every point). ``unit`` "%" prints values x 100."""

    name: str
    paper: str
    kind: str
    metric: str
    policy: str | None = None
    target: float | None = None
    tolerance: float = 0.0
    threshold: float | None = None
    low: float | None = None
    high: float | None = None
    x_min: float | None = None
    x_max: float | None = None
    unit: str = "%"
    note: str = ""


@dataclass(frozen=True)
class PointSpec:
    """Everything one ``(point, seed)`` task needs. Its :meth:`key` is its content hash."""

    workload: WorkloadConfig
    sim: SimConfig
    policies: tuple[PolicySpec, ...]
    trace: TraceSpec | None = None
    jct_cdf: bool = False
    bank: BankSpec | None = None
    #: ``[workload] trace = "jobs.csv"``: the user's own job list, with its optional curves
    #: (``workloads.jobs_csv.TraceFiles``).
    jobs_csv: TraceFiles | None = None

    def key(self) -> str:
        doc = asdict(self)
        if self.bank is not None:
            doc["bank_digest"] = self.bank.digest()
        del doc["jobs_csv"]  # absent from the key unless set: keys of other points are unchanged
        if self.jobs_csv is not None:
            doc["jobs_csv_digest"] = self.jobs_csv.digest()
        if self.trace is not None:
            from ..workloads.philly import trace_digest

            doc["trace"]["path"] = None  # where the file is does not matter, what it holds does
            doc["trace_digest"] = trace_digest(self.trace)
        text = json.dumps(doc, sort_keys=True, default=list)
        return hashlib.sha256(text.encode()).hexdigest()[:20]


@dataclass(frozen=True)
class StudySpec:
    name: str
    title: str
    description: str
    role: str
    seeds: int
    baseline: str
    treatment: str
    policies: tuple[PolicySpec, ...]
    points: tuple[PointSpec, ...]
    x_values: tuple[Any, ...]  # one per point
    x_param: str | None
    x_label: str
    x_unit: str
    tick_labels: tuple[str, ...] | None
    log_x: bool
    figures: tuple[str, ...]
    claims: tuple[ClaimSpec, ...]
    uses_trace: bool
    source: str = field(default="", compare=False)


# -- loading ---------------------------------------------------------------------------------
def _studies_dir() -> Path:
    return Path(str(resources.files("evalstop.experiments") / "specs"))


def study_names() -> list[str]:
    """The shipped studies, in the order of their file names."""
    return [p.stem for p in sorted(_studies_dir().glob("*.toml"), key=_order)]


def _order(path: Path) -> tuple[int, str]:
    """Studies sort by their ``order`` key (default 100), then by name."""
    order = tomllib.loads(path.read_text()).get("order", 100)
    return (order if isinstance(order, int) else 100), path.stem


def load_studies(names: Sequence[str] | None = None) -> list[StudySpec]:
    known = study_names()
    chosen = list(names) if names else known
    unknown = [n for n in chosen if n not in known]
    if unknown:
        raise SpecError(f"unknown study {unknown}; valid studies: {known}")
    return [load_study(_studies_dir() / f"{n}.toml") for n in chosen]


def load_study(path: Path) -> StudySpec:
    """Load, merge (``extends``) and validate the study at ``path``."""
    try:
        doc = _resolve(path, seen=())
        return parse_study(doc, source=str(path))
    except (SpecError, ValueError, TypeError) as exc:
        raise SpecError(f"{path.name}: {exc}") from None


def _resolve(path: Path, seen: tuple[str, ...]) -> dict[str, Any]:
    try:
        doc = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"not valid TOML: {exc}") from None
    parent = doc.pop("extends", None)
    if parent is None:
        return doc
    if not isinstance(parent, str) or parent in seen:
        raise SpecError(f"'extends' must name another study, without cycles. Got {parent!r} instead.")
    parent_path = path.with_name(f"{parent}.toml")
    if not parent_path.is_file():
        raise SpecError(f"'extends' names study {parent!r}, which does not exist")
    return _merge(_resolve(parent_path, (*seen, path.stem)), doc)


def _merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _merge(dict(out[key]), value)
        else:
            out[key] = value
    return out


def parse_study(doc: Mapping[str, Any], source: str = "") -> StudySpec:
    """Validate a merged study document and resolve its points."""
    doc = dict(doc)
    check_policies(doc.get("policy"), SpecError)  # first: its messages are the most specific
    STUDY.check(doc, SpecError, "top level")
    name = _str(doc, "name")
    policies = tuple(_policy(i, p) for i, p in enumerate(_list(doc, "policy")))
    if not policies:
        raise SpecError("at least one [[policy]] table is required")
    labels = [p.label for p in policies]
    if len(set(labels)) != len(labels):
        raise SpecError(f"policy labels must be unique. Got {labels} instead.")
    baseline = doc.get("baseline", labels[0])
    treatment = doc.get("treatment", labels[min(1, len(labels) - 1)])
    for key, label in (("baseline", baseline), ("treatment", treatment)):
        if label not in labels:
            raise SpecError(f"{key} {label!r} is not a policy label; labels: {labels}")
    seeds = doc.get("seeds", 30)
    if not isinstance(seeds, int) or isinstance(seeds, bool) or seeds < 2:
        raise SpecError(f"'seeds' must be an int >= 2. Got {seeds!r} instead.")
    role = doc.get("role", "paper")
    if role not in ROLES:
        raise SpecError(f"'role' must be one of {list(ROLES)}. Got {role!r} instead.")
    workload_doc = dict(doc.get("workload", {}))
    preset = workload_doc.pop("preset", "paper")
    if preset not in PRESETS:
        raise SpecError(f"workload.preset must be one of {sorted(PRESETS)}. Got {preset!r} instead.")
    base_dir = Path(source).parent if source else Path(".")
    other = "a [trace] table" if doc.get("trace") is not None else ""
    jobs_csv = TraceFiles.from_config(workload_doc, base_dir, other)
    trace_doc = doc.get("trace")
    if trace_doc is not None:
        _reject_unknown("[trace]", trace_doc, _TRACE)
    sim_doc = dict(doc.get("sim", {}))
    _reject_unknown("[sim]", sim_doc, set(SimConfig.__dataclass_fields__))
    bank_doc = doc.get("bank")
    try:
        bank = None if bank_doc is None else BankSpec(**bank_doc)
    except (TypeError, ValueError) as exc:
        raise SpecError(f"[bank]: {exc}") from None
    base = _Base(PRESETS[preset], workload_doc, trace_doc, sim_doc, policies, bool(doc.get("jct_cdf", False)),
                 bank, jobs_csv)
    base.point({})  # validate the unswept configuration
    sweep = doc.get("sweep")
    x_param, x_label, x_unit, ticks, log_x = None, "", "", None, False
    if sweep is None:
        assignments: list[dict[str, Any]] = [{}]
        x_values: tuple[Any, ...] = (None,)
    else:
        _reject_unknown("[sweep]", sweep, _SWEEP)
        x_param = _str(sweep, "param")
        values = _list(sweep, "values")
        if not values:
            raise SpecError("sweep.values must not be empty")
        assignments = [{x_param: v} for v in values]
        for other, other_values in dict(sweep.get("with", {})).items():
            if not isinstance(other_values, list) or len(other_values) != len(values):
                raise SpecError(f"sweep.with.{other} must be a list as long as sweep.values ({len(values)})")
            for a, v in zip(assignments, other_values, strict=True):
                a[other] = v
        x_values = tuple(values)
        x_label = str(sweep.get("label", x_param))
        x_unit = str(sweep.get("unit", ""))
        log_x = bool(sweep.get("log_x", False))
        if "tick_labels" in sweep:
            ticks = tuple(str(t) for t in sweep["tick_labels"])
            if len(ticks) != len(values):
                raise SpecError("sweep.tick_labels must be as long as sweep.values")
    points = tuple(base.point(a) for a in assignments)
    claims = _with_notes(tuple(_claim(i, c, labels) for i, c in enumerate(_list(doc, "claim"))),
                         doc.get("notes", {}))
    figures = tuple(str(f) for f in doc.get("figures", []))
    return StudySpec(
        name=name, title=str(doc.get("title", name)), description=str(doc.get("description", "")),
        role=role, seeds=seeds, baseline=baseline, treatment=treatment, policies=policies,
        points=points, x_values=x_values, x_param=x_param, x_label=x_label, x_unit=x_unit,
        tick_labels=ticks, log_x=log_x, figures=figures, claims=claims,
        uses_trace=trace_doc is not None, source=source,
    )


@dataclass(frozen=True)
class _Base:
    preset: WorkloadConfig
    workload: Mapping[str, Any]
    trace: Mapping[str, Any] | None
    sim: Mapping[str, Any]
    policies: tuple[PolicySpec, ...]
    jct_cdf: bool
    bank: BankSpec | None = None
    jobs_csv: TraceFiles | None = None

    def point(self, assignment: Mapping[str, Any]) -> PointSpec:
        workload, sim = dict(self.workload), dict(self.sim)
        trace = None if self.trace is None else dict(self.trace)
        policies = list(self.policies)
        for param, value in assignment.items():
            if not param.startswith(_PARAM_PREFIXES):
                raise SpecError(f"sweep parameter {param!r} must start with one of {list(_PARAM_PREFIXES)}")
            group, _, key = param.partition(".")
            if group == "workload":
                workload[key] = value
            elif group == "sim":
                sim[key] = value
            elif group == "trace":
                if trace is None:
                    raise SpecError(f"sweep parameter {param!r} needs a [trace] table")
                trace[key] = value
            elif group == "detector":
                policies = [_set_detector_param(p, key, value) for p in policies]
            else:
                policies = [_set_policy_field(p, key, value) for p in policies]
        WORKLOAD.check(workload, SpecError)
        for key in _TUPLE_FIELDS:
            if key in workload:
                workload[key] = tuple(workload[key])
        try:
            config = self.preset.with_(**workload)
        except ValueError as exc:
            raise SpecError(f"[workload]: {exc}") from None
        for p in policies:
            p.build()  # names and parameters are checked now, not mid-sweep
        if self.jobs_csv is not None:
            self.jobs_csv.check(config.total_gpus)  # every row of every file checked now, not mid-sweep
        elif trace is None:
            try:
                check_shapes_fit(config)  # sizes drawn from the shapes: they must fit the cluster
            except ValueError as exc:
                raise SpecError(f"[workload]: {exc}") from None
        return PointSpec(config, SimConfig(**sim), tuple(policies),
                         None if trace is None else TraceSpec(**trace), self.jct_cdf, self.bank,
                         self.jobs_csv)


def _set_detector_param(policy: PolicySpec, key: str, value: Any) -> PolicySpec:
    """Set ``key`` on the policy's k-declines detector (other detectors are left alone)."""
    if policy.detector is None or not policy.detector.startswith("evalstop"):
        return policy
    detector = parse_spec(policy.detector)
    if key not in parameter_names(type(detector)):
        raise SpecError(f"sweep parameter 'detector.{key}': the evalstop detector has no parameter {key!r}")
    params = {n: getattr(detector, n) for n in parameter_names(type(detector))}
    params[key] = value
    return replace(policy, detector=format_spec(type(detector)(**params)))


def _set_policy_field(policy: PolicySpec, key: str, value: Any) -> PolicySpec:
    if key not in ("base", "base_params", "watch"):
        raise SpecError(f"sweep parameter 'policy.{key}' is not one of policy.base, policy.base_params, "
                        "policy.watch")
    if key == "watch":
        return replace(policy, watch=_watch(value))
    return replace(policy, base=value) if key == "base" else replace(policy, base_params=value)


def _policy(i: int, doc: Mapping[str, Any]) -> PolicySpec:
    _reject_unknown(f"[[policy]] #{i + 1}", doc, _POLICY)
    try:
        spec = PolicySpec.from_doc(doc)
    except ValueError as exc:
        raise SpecError(f"[[policy]] #{i + 1}: {exc}") from None
    try:
        spec.build()
    except (ValueError, TypeError) as exc:
        raise SpecError(f"[[policy]] #{i + 1} ({spec.label}): {exc}") from None
    return spec


def _watch(value: Any) -> tuple[str, ...] | None:
    try:
        return parse_watch(value)
    except ValueError as exc:
        raise SpecError(str(exc)) from None


def _claim(i: int, doc: Mapping[str, Any], labels: Sequence[str]) -> ClaimSpec:
    where = f"[[claim]] #{i + 1}"
    _reject_unknown(where, doc, _CLAIM)
    kind = doc.get("kind")
    if kind not in CLAIM_KINDS:
        raise SpecError(f"{where}: 'kind' must be one of {list(CLAIM_KINDS)}. Got {kind!r} instead.")
    needs = {"value": ("target",), "change": ("target",), "at_least": ("threshold",),
             "at_most": ("threshold",), "change_within": ("low", "high")}[kind]
    for key in ("name", "paper", "metric", *needs):
        if key not in doc:
            raise SpecError(f"{where}: {kind!r} claim needs {key!r}")
    policy = doc.get("policy")
    if policy is not None and policy not in labels:
        raise SpecError(f"{where}: policy {policy!r} is not a policy label; labels: {list(labels)}")
    return ClaimSpec(**{k: doc[k] for k in doc})


def _with_notes(claims: tuple[ClaimSpec, ...], notes: Mapping[str, Any]) -> tuple[ClaimSpec, ...]:
    """``[notes]`` maps a claim name to why we believe it misses here (a study that extends
    another one explains its own misses without restating the claims)."""
    if not isinstance(notes, Mapping):
        raise SpecError(f"'notes' must be a table of claim name = text. Got {notes!r} instead.")
    names = {c.name for c in claims}
    unknown = sorted(set(notes) - names)
    if unknown:
        raise SpecError(f"[notes] names unknown claim(s) {unknown}; claims: {sorted(names)}")
    return tuple(replace(c, note=str(notes[c.name])) if c.name in notes else c for c in claims)


def _reject_unknown(where: str, doc: Mapping[str, Any], known: set[str]) -> None:
    if not isinstance(doc, Mapping):
        raise SpecError(f"{where} must be a table. Got {doc!r} instead.")
    unknown = sorted(set(doc) - known)
    if unknown:
        raise SpecError(f"unknown key(s) {unknown} in {where}; valid keys: {sorted(known)}")


def _str(doc: Mapping[str, Any], key: str) -> str:
    value = doc.get(key)
    if not isinstance(value, str) or not value:
        raise SpecError(f"{key!r} must be a non-empty string. Got {value!r} instead.")
    return value


def _list(doc: Mapping[str, Any], key: str) -> list[Any]:
    value = doc.get(key, [])
    if not isinstance(value, list):
        raise SpecError(f"{key!r} must be a list. Got {value!r} instead.")
    return value
