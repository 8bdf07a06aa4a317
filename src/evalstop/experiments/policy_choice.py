"""The leave-one-bank-out choice of the default rule's parameters, shipped with the package.

The search (``python -m evalstop.experiments.rule_search``) runs every candidate of
``cadence_policy.policy_specs()`` on every bank run at three cadences: minutes of CPU. Its
outcome is a handful of spec strings, so ``rule-search.toml`` (next to this module) records
them: the spec chosen for each held-out bank, the spec chosen on all banks, a digest of the
candidate grid and a digest of each bank's runs (evals and labels). ``evalstop validate``
reads the file when both digests match the banks it was given and scores the recorded specs
afresh (every number it prints is computed, none is read from the file); when they do not
match (another bank, a changed grid) or with ``--search``, it runs the search itself.
``rule_search --write-choice`` rewrites the file after a search.

The TRL GRPO bank of the validation is the shipped ``data/trl-bank`` (21 runs, seed 0, which
the simulator also replays) plus ``data/trl-bank-validation`` (28 more runs of the same
generator with seed 1, used by this validation only), so that one run is not a tenth of the
bank's detectable runs. Its job ids get an ``@seed1`` suffix: the same generator names the
runs of every seed alike.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..workloads.bank import BankRun, read_bank
from ..workloads.trl_runs import SHIPPED
from .cadence_policy import bank_of
from .holdout import Case

CHOICE_FILE = Path(__file__).with_name("rule-search.toml")
VALIDATION_TRL = SHIPPED.parent / "trl-bank-validation"
#: Bumped when the meaning of the file's fields changes.
VERSION = 1


def validation_trl_bank(directory: Path = VALIDATION_TRL) -> list[BankRun]:
    """The extra TRL GRPO runs used by validation only, job ids suffixed with their seed."""
    seed = json.loads((directory / "meta.json").read_text())["seed"]
    return [dataclasses.replace(r, job_id=f"{r.job_id}@seed{seed}") for r in read_bank(directory)]


def digest(cases: Sequence[Case]) -> str:
    """What the runs hold (ids, labels, evals), with floats written to 9 significant digits."""
    h = hashlib.sha256()

    def num(x: float | None) -> str:
        return "" if x is None else f"{x:.9g}"

    for c in cases:
        evals = ";".join(f"{e.step},{num(e.score)},{num(e.progress)},{num(e.stderr)}" for e in c.evals)
        truth = ";".join(num(q) for q in c.true_quality)
        h.update(f"{c.job_id}|{c.family}|{c.label}|{c.peak_index}|{evals}|{truth}\n".encode())
    return h.hexdigest()[:16]


def bank_digests(cases: Sequence[Case]) -> dict[str, str]:
    banks = sorted({bank_of(c.family) for c in cases})
    return {b: digest([c for c in cases if bank_of(c.family) == b]) for b in banks}


def grid_digest(specs: Sequence[str]) -> str:
    return hashlib.sha256("\n".join(specs).encode()).hexdigest()[:16]


def read_choice(
    cases: Sequence[Case], specs: Sequence[str], path: Path = CHOICE_FILE
) -> dict[str, Any] | None:
    """``{"chosen": {bank: spec}, "final": spec}`` from ``path`` when it was made on these
    banks among these candidates; None otherwise (or when there is no file)."""
    if not path.is_file():
        return None
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    if (data.get("version") != VERSION or data.get("grid") != grid_digest(specs)
            or data.get("banks") != bank_digests(cases)):
        return None
    chosen = dict(data["chosen"])
    final = chosen.pop("final")
    return {"chosen": chosen, "final": final}


def write_choice(
    held_out: Mapping[str, Any], cases: Sequence[Case], specs: Sequence[str], path: Path = CHOICE_FILE
) -> None:
    """Record a search's choice (``held_out``: the ``held_out`` entry of ``rule_search.held_out``)."""
    lines = [
        "# The leave-one-bank-out choice among cadence_policy.policy_specs(), written by",
        "# python -m evalstop.experiments.rule_search --cache DIR --write-choice",
        "# (read by evalstop validate; see evalstop/experiments/policy_choice.py).",
        f"version = {VERSION}",
        f"grid = {json.dumps(grid_digest(specs))}",
        f"candidates = {len(specs)}",
        "",
        "[banks]",
        *(f"{b} = {json.dumps(d)}" for b, d in bank_digests(cases).items()),
        "",
        "[chosen]",
        *(f"{json.dumps(b)} = {json.dumps(s)}" for b, s in held_out["chosen"].items()),
        f"final = {json.dumps(held_out['final'])}",
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
