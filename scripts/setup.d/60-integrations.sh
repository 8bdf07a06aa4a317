#!/usr/bin/env bash
# Integrations (HF Trainer/TRL, Ray Tune, Optuna) and their tests: torch FIRST, pinned to the CPU
# wheel this machine provides (an unpinned torch pulls a multi-GB CUDA build), then the extras, so
# transformers/trl/accelerate find torch already installed and do not pull another one.
set -euo pipefail
cd "$(dirname "$0")/../.."
.venv/bin/pip install -q torch==2.13.0
.venv/bin/pip install -q -e '.[hf,tune,optuna]'
# Fail here, not in the tests, if a dependency replaced the pinned torch.
.venv/bin/python -c "import torch; assert torch.__version__.startswith('2.13.0'), torch.__version__"
