"""The tables of the simulate config and of the study specs, declared once (see ``evalstop._schema``).

``[workload]`` keys are read off :class:`~evalstop.workloads.WorkloadConfig` and ``[sim]`` keys
off :class:`~evalstop.sim.cluster.SimConfig`, so a new field is a new key everywhere. A loader
that accepts more (a new input such as a trace file) adds a :class:`Key` to its table here.
"""

from __future__ import annotations

import dataclasses
from typing import Any, cast

from .._schema import Key, Table, unique
from ..schedulers import SCHEDULERS
from ..sim.cluster import SimConfig
from ..workloads import PRESETS, WorkloadConfig
from ..workloads.model import KINDS
from .policies import PolicySpec

__all__ = [
    "POLICY", "SIM", "SIMULATE", "STUDY", "WORKLOAD", "check_policies", "check_workload",
    "workload_keys",
]

_ANNOTATION_TYPES: dict[str, dict[str, Any]] = {
    "int": {"types": ("integer",)},
    "float": {"types": ("number",)},
    "bool": {"types": ("boolean",)},
    "str": {"types": ("string",)},
    "tuple[float, float]": {"types": ("array",), "items": "number", "length": 2},
}


def _fields_as_keys(cls: type, skip: tuple[str, ...] = ()) -> tuple[Key, ...]:
    keys = []
    for f in dataclasses.fields(cls):
        if f.name in skip or str(f.type) not in _ANNOTATION_TYPES:
            continue
        spec = dict(_ANNOTATION_TYPES[str(f.type)])
        if str(f.type) == "tuple[float, float]":
            spec["description"] = f"[low, high] range; default {list(cast(Any, f.default))}"
        else:
            spec["description"] = f"default {f.default!r}"
        keys.append(Key(f.name, **spec))
    return tuple(keys)


def workload_keys(*extra: Key) -> Table:
    """``[workload]``: a preset, then any WorkloadConfig field (plus ``extra`` keys)."""
    preset = Key("preset", ("string",), "the preset the other keys change", enum=tuple(sorted(PRESETS)))
    return Table("[workload]", (preset, *_fields_as_keys(WorkloadConfig), *extra),
                 "the workload: a preset, then any field to change")


#: ``[workload] trace``: a user's own job list (``workloads.jobs_csv``).
JOBS_CSV = (
    Key("trace", ("string",), "a jobs.csv of your own jobs (job_id,submit_s,gpus,duration_s"
        "[,kind,tenant]), instead of generated arrivals; columns in docs/studies.md"),
    Key("curves", ("string",), "with trace: eval curves of its jobs in the `evalstop replay` format "
        "(job_id,step,score[,progress,loss,items]); jobs without one keep drawn curves"),
    Key("curves_truth", ("string",), "with curves: their ground truth, an `evalstop bank` truth.csv "
        "(job_id,hacking[,true_gold]); default: taken from the curves"),
    Key("curves_for_all_jobs", ("boolean",),
        "with curves: a job without a curve is an error (default false)"),
)
WORKLOAD = workload_keys(*JOBS_CSV)
SIM = Table("[sim]", _fields_as_keys(SimConfig), "simulator settings")
POLICY = Table("[[policy]]", (
    Key("label", ("string",), "the row's name in tables (unique; default: the base scheduler)"),
    Key("base", ("string",), "base scheduler (default srtf)", enum=tuple(sorted(SCHEDULERS))),
    Key("base_params", ("object",), "keyword parameters of the base scheduler"),
    Key("detector", ("string",), "stopping rule spec, e.g. 'cusum' or 'evalstop:k=2,against=best'"),
    Key("watch", ("string", "array"), f"job kinds the rule watches: \"all\" or a list of {list(KINDS)}",
        items="string", enum=("all", *KINDS)),
    Key("oracle", ("boolean",), "stop each hacking job at its true best checkpoint (simulator only)"),
    Key("cadence", ("string",), "which evals the watched jobs run: 'every:3', 'adaptive:every=3,dense=1' "
        "(default every eval; needs a detector)"),
), "one policy: a base scheduler, optionally wrapped by a stopping rule")
SIMULATE = Table("evalstop simulate config", (
    Key("seeds", ("array",), "workload seeds, non-empty, each >= 0 (default [1])", items="integer"),
    Key("workload", ("object",), table=workload_keys(
        Key("bank", ("string",), "an `evalstop bank` directory whose runs the RLHF jobs replay"),
        *JOBS_CSV)),
    Key("sim", ("object",), table=SIM),
    Key("policy", ("array",), "the policies to compare: at least one [[policy]] table", table=POLICY,
        required=True),
), "the TOML file of `evalstop simulate CONFIG.toml` (`evalstop simulate --example`)")

TRACE = Table("[trace]", (
    Key("path", ("string",), "a Philly-format trace (.csv or .csv.gz); default: the packaged one"),
    Key("min_duration_s", ("number",), "drop shorter jobs (default 600)"),
    Key("max_duration_s", ("number",), "drop longer jobs (default 172800)"),
), "arrivals, sizes and durations from the Philly trace")
SWEEP = Table("[sweep]", (
    Key("param", ("string",), "the swept parameter: workload.X, sim.X, trace.X, detector.X or policy.X",
        required=True),
    Key("values", ("array",), "its values, one point each", required=True),
    Key("label", ("string",), "axis label"),
    Key("unit", ("string",), "axis unit"),
    Key("tick_labels", ("array",), "one label per value", items="string"),
    Key("with", ("object",), "other parameters that change with it: name = list as long as values"),
    Key("log_x", ("boolean",), "log-scale x axis"),
), "the swept parameter of a study")
CLAIM = Table("[[claim]]", (
    Key("name", ("string",), "the claim", required=True),
    Key("paper", ("string",), "the paper's value, as text", required=True),
    Key("kind", ("string",), "how it is checked", required=True,
        enum=("value", "change", "at_least", "at_most", "change_within")),
    Key("metric", ("string",), "the metric it is about", required=True),
    Key("policy", ("string",), "a policy label (default: the treatment)"),
    *(Key(k, ("number",)) for k in ("target", "tolerance", "threshold", "low", "high", "x_min", "x_max")),
    Key("unit", ("string",), "\"%\" prints values x 100"),
    Key("note", ("string",), "why we believe it misses, when it does"),
), "one claim of the paper, checked against the study's results")
BANK = Table("[bank]", (
    Key("runs_per_family", ("integer",), "runs of each numpy bank family (default 5)"),
    Key("seed", ("integer",), "seed of the numpy bank (default 0)"),
    Key("trl", ("boolean",), "add the shipped TRL GRPO runs (default true)"),
), "RLHF jobs replay bank runs (`workloads.bank.BankSpec`) instead of generated curves")
STUDY = Table("study spec", (
    Key("name", ("string",), "the study's name", required=True),
    Key("title", ("string",)), Key("description", ("string",)),
    Key("extends", ("string",), "another study whose document this one is merged over"),
    Key("order", ("integer",), "sort key of --list and the report (default 100)"),
    Key("role", ("string",), "how to read its claims", enum=("paper", "transfer", "beyond", "extra")),
    Key("seeds", ("integer",), "seeds (>= 2; default 30)"),
    Key("baseline", ("string",), "a policy label"), Key("treatment", ("string",), "a policy label"),
    Key("jct_cdf", ("boolean",), "keep per-job JCTs for a CDF figure"),
    Key("figures", ("array",), "figure kinds", items="string"),
    Key("workload", ("object",), table=WORKLOAD), Key("trace", ("object",), table=TRACE),
    Key("sim", ("object",), table=SIM),
    Key("policy", ("array",), "the policies (at least one)", table=POLICY, required=True),
    Key("sweep", ("object",), table=SWEEP), Key("claim", ("array",), table=CLAIM),
    Key("notes", ("object",), "claim name = why we believe it misses here"),
    Key("bank", ("object",), table=BANK),
), "a study of src/evalstop/experiments/specs/ (docs/studies.md)")


def check_workload(doc: Any, error: type[Exception], table: Table = WORKLOAD) -> None:
    table.check(doc, error)


def check_policies(docs: Any, error: type[Exception]) -> None:
    """Every ``[[policy]]`` table is well formed, ``watch`` names real job kinds, labels are unique."""
    if not isinstance(docs, list) or not docs:
        raise error("at least one [[policy]] table is required")
    labels = []
    for i, doc in enumerate(docs):
        where = f"[[policy]] #{i + 1}"
        if not isinstance(doc, dict):
            raise error(f"{where} must be a table. Got {doc!r} instead.")
        watch = doc.get("watch", "all")  # absent: the default kinds, which are real ones
        if watch != "all" and (not isinstance(watch, list) or any(w not in KINDS for w in watch)):
            bad = [w for w in watch if w not in KINDS] if isinstance(watch, list) else watch
            raise error(f"{where}: 'watch' must be \"all\" or a list of job kinds from {list(KINDS)}. "
                        f"Got {bad!r} instead.")
        POLICY.check(doc, error, where)
        labels.append(PolicySpec.from_doc(doc).label)
    dupes = unique(labels)
    if dupes:
        raise error(f"policy labels must be unique: {dupes} appear(s) more than once; give each "
                    "[[policy]] its own 'label'")
