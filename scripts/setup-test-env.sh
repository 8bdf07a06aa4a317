#!/usr/bin/env bash
# Build the test environment from scratch: a venv with every extra, plus whatever system
# packages the tests need (each scripts/setup.d/*.sh adds its own, in name order).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/pip install -q --upgrade pip
for step in scripts/setup.d/*.sh; do
  [ -e "$step" ] || continue
  echo "setup: $step" >&2
  bash "$step"
done
.venv/bin/pip install -q -e '.[dev]'
