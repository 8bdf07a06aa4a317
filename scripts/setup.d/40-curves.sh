#!/usr/bin/env bash
# Noise-aware rules, curve bank and validation (issue 4): tests/test_detectors_noise.py drives
# the real Hugging Face EarlyStoppingCallback (transformers, which needs torch: only the local CPU
# wheel torch==2.13.0, any other torch pulls multi-GB CUDA wheels); tests/test_validate.py draws
# the bank figure (matplotlib, the 'plot' extra). Idempotent.
set -euo pipefail
cd "$(dirname "$0")/../.."
if ! .venv/bin/python -c 'import torch' >/dev/null 2>&1; then
  .venv/bin/pip install -q torch==2.13.0
fi
.venv/bin/pip install -q -e '.[plot]' transformers
