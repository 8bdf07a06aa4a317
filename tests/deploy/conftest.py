"""The image, built once per session for the container and compose tests, by the command
docs/deploy.md gives (deploy/container/build.sh, "no registry at all")."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from ._podman import IMAGE, LIMITS, ROOT, RUN_OPTS, missing_tools, podman

SENTINEL_INDEX = "https://pip-index-sentinel.invalid/simple"
#: docs/deploy.md's no-registry build (test_docs_deploy checks the doc gives exactly these)
BUILD_OPTIONS = ["--debian-base", "--wheels-from-host"]


@pytest.fixture(scope="session")
def image() -> Iterator[dict[str, float]]:
    """Build the base (kept in podman's storage) and the image with build.sh; yield the figures.
    The sentinel index URL must reach no layer of the image (test_container looks for it)."""
    why = missing_tools()
    if why is not None:
        if os.environ.get("CI") == "true" and os.geteuid() == 0:
            pytest.fail(f"the container test must run in CI: {why}")
        pytest.skip(why)
    t0 = time.monotonic()
    build = subprocess.run(
        ["bash", str(ROOT / "deploy" / "container" / "build.sh"), *BUILD_OPTIONS, *RUN_OPTS, *LIMITS,
         "--tag", IMAGE, "--", "--build-arg", f"PIP_INDEX_URL={SENTINEL_INDEX}"],
        capture_output=True, text=True, timeout=2400, env={**os.environ, "PYTHON": sys.executable})
    assert build.returncode == 0, (build.stdout + build.stderr)[-4000:]
    t_built = time.monotonic()
    size = int(podman("image", "inspect", "--format", "{{.Size}}", IMAGE).stdout.strip())
    yield {"build_s": t_built - t0, "image_mb": size / 1e6}
