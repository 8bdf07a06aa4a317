"""One declaration per config table: the loaders check with it, docs/schema/*.json is made from it."""

from __future__ import annotations

import json
import runpy
import tomllib
from pathlib import Path

import jsonschema
import pytest

from evalstop.experiments.simulate_cmd import EXAMPLE
from evalstop.experiments.spec import _resolve, _studies_dir, study_names
from evalstop.service.pull import POLLERS
from evalstop.service.pull.schema import KINDS

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "docs" / "schema"


def test_docs_schema_is_current() -> None:
    script = runpy.run_path(str(ROOT / "scripts" / "write_schemas.py"))
    assert script["main"](["--check"]) == 0, "run: python scripts/write_schemas.py"


def test_every_shipped_study_and_the_simulate_example_validate_against_the_schema() -> None:
    study = json.loads((SCHEMA / "study.json").read_text())
    for name in study_names():
        jsonschema.validate(_resolve(_studies_dir() / f"{name}.toml", seen=()), study)
    simulate = json.loads((SCHEMA / "simulate.json").read_text())
    jsonschema.validate(tomllib.loads(EXAMPLE), simulate)
    with pytest.raises(jsonschema.ValidationError, match="rhlf"):
        jsonschema.validate(tomllib.loads(EXAMPLE.replace('watch = ["rlhf"]', 'watch = ["rhlf"]')), simulate)


def test_pull_kinds_follow_the_pollers() -> None:
    assert set(KINDS) == set(POLLERS)
