#!/usr/bin/env bash
# `evalstop watch --log wandb` and tests/watch/test_wandb_log.py: the wandb package, whose message
# classes decode W&B run files and whose offline mode writes them in the tests (no network, no login).
set -euo pipefail
cd "$(dirname "$0")/../.."
.venv/bin/pip install -q -e '.[watch-wandb]'
# Fail here, not in the tests, if a dependency replaced the pinned torch.
.venv/bin/python -c "import torch; assert torch.__version__.startswith('2.13.0'), torch.__version__"
