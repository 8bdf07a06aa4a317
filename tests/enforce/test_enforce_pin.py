from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalstop.service.adapters import JobRef
from evalstop.service.adapters._common import PIN_MARKER, local_path, write_pin_marker

JOB = JobRef("job-9", "acme", "ref-9")


def test_local_dir_gets_marker_once(tmp_path: Path) -> None:
    ckpt = tmp_path / "checkpoint-300"
    ckpt.mkdir()
    (marker,) = write_pin_marker(JOB, ckpt.as_uri(), "ray", None)
    assert marker == ckpt / PIN_MARKER
    first = json.loads(marker.read_text())
    assert (first["checkpoint_uri"], first["job_id"], first["adapter"]) == (ckpt.as_uri(), "job-9", "ray")
    write_pin_marker(JOB, ckpt.as_uri(), "ray", None)  # idempotent: not rewritten
    assert json.loads(marker.read_text())["pinned_at"] == first["pinned_at"]


def test_single_file_checkpoint_gets_a_sibling_marker(tmp_path: Path) -> None:
    ckpt = tmp_path / "model.safetensors"
    ckpt.write_bytes(b"weights")
    (marker,) = write_pin_marker(JOB, str(ckpt), "slurm", None)
    assert marker == tmp_path / ("model.safetensors" + PIN_MARKER) and ckpt.read_bytes() == b"weights"


def test_remote_uri_is_recorded_in_pin_dir(tmp_path: Path) -> None:
    (record,) = write_pin_marker(JOB, "s3://bucket/run/ckpt-7", "ray", str(tmp_path / "pins"))
    assert record == tmp_path / "pins" / "acme" / "job-9.json"
    assert json.loads(record.read_text())["checkpoint_uri"] == "s3://bucket/run/ckpt-7"


def test_remote_uri_without_pin_dir_warns(caplog: pytest.LogCaptureFixture) -> None:
    assert write_pin_marker(JOB, "gs://b/c", "ray", None) == []
    assert "no pin_dir is set" in caplog.text


@pytest.mark.parametrize(("uri", "expected"), [
    ("/data/ckpt", Path("/data/ckpt")), ("file:///data/my%20ckpt", Path("/data/my ckpt")),
    ("s3://b/k", None), ("relative/path", None),
])
def test_local_path(uri: str, expected: Path | None) -> None:
    assert local_path(uri) == expected
