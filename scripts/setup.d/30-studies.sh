#!/usr/bin/env bash
# Studies (issue 3): matplotlib for the report's figures, Ray for the scale-out path and its test
# (tests/test_ray_sweep.py starts a private local Ray head). Idempotent.
set -euo pipefail
.venv/bin/pip install -q -e '.[plot,ray]'
