"""The image, built once per session for the container and compose tests."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ._podman import BASE_IMAGE, IMAGE, LIMITS, ROOT, RUN_OPTS, build_context, missing_tools, podman

WHEEL_CACHE = Path("/var/tmp/evalstop-ci-wheels")
SENTINEL_INDEX = "https://pip-index-sentinel.invalid/simple"


@pytest.fixture(scope="session")
def image() -> Iterator[dict[str, float]]:
    """Build the base (cached in podman's storage) and the image; yield the build figures."""
    why = missing_tools()
    if why is not None:
        if os.environ.get("CI") == "true" and os.geteuid() == 0:
            pytest.fail(f"the container test must run in CI: {why}")
        pytest.skip(why)
    t0 = time.monotonic()
    subprocess.run(["bash", str(ROOT / "deploy" / "container" / "debian-base.sh"), BASE_IMAGE], check=True,
                   capture_output=True, timeout=900)
    t_base = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="evalstop-ctx-") as ctx:
        build_context(Path(ctx), WHEEL_CACHE, sys.executable)
        t_wheels = time.monotonic()
        podman("build", *RUN_OPTS, *LIMITS, "--format", "docker", "--build-arg", f"BASE={BASE_IMAGE}",
               "--build-arg", "PIP_NO_INDEX=1", "--build-arg", f"PIP_INDEX_URL={SENTINEL_INDEX}",
               "-f", f"{ctx}/deploy/container/Containerfile", "-t", IMAGE, ctx, timeout=1800)
    t_built = time.monotonic()
    size = int(podman("image", "inspect", "--format", "{{.Size}}", IMAGE).stdout.strip())
    yield {"base_s": t_base - t0, "wheels_s": t_wheels - t_base, "build_s": t_built - t_wheels,
           "image_mb": size / 1e6}
