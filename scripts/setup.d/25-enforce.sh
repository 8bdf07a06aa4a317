#!/usr/bin/env bash
# Enforcement adapters and pull ingest (issue 5): Ray, MLflow, TensorBoard, httpx in the venv;
# a real single-node Slurm (slurm-wlm, slurmrestd, munge from Debian) for tests/enforce/test_enforce_slurm.py.
set -euo pipefail
cd "$(dirname "$0")/../.."
.venv/bin/pip install -q -e '.[ray,pull,service]'
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  if ! command -v slurmctld >/dev/null 2>&1 || ! command -v slurmd >/dev/null 2>&1 \
     || ! command -v slurmrestd >/dev/null 2>&1 || ! command -v munged >/dev/null 2>&1; then
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q slurm-wlm slurmrestd munge
  fi
else
  echo "setup 25-enforce: not root or no apt-get; the real-Slurm tests will be skipped" >&2
fi
