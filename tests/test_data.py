"""The data shipped in ``evalstop/data`` is byte-for-byte the upstream data, with its notice."""

from __future__ import annotations

import hashlib
from pathlib import Path

from evalstop import data
from evalstop.workloads.philly import default_trace_path, load_trace

DATA_DIR = Path(data.__file__).parent
#: SHA-256 of the upstream ``philly/philly.csv`` (petuum/adaptdl, osdi21-artifact), pinned here
#: as well as in SHA256SUMS so that changing the data needs two deliberate edits.
PHILLY_SHA256 = "ebffb3dd1589bdf4e7bcd74496201c5ded1d557d498ee14f560463f37ec353da"


def test_the_philly_trace_matches_its_checksum() -> None:
    sums = data.checksums()
    assert sums["philly/philly.csv"] == PHILLY_SHA256
    assert hashlib.sha256(data.read_philly_bytes()).hexdigest() == PHILLY_SHA256


def test_every_supervised_curve_matches_its_checksum() -> None:
    sums = {k.removeprefix("supervised-curves/"): v for k, v in data.checksums().items()
            if k.startswith("supervised-curves/")}
    files = dict(data.supervised_csvs())
    assert len(files) == 40 and set(files) == set(sums)
    for name, content in files.items():
        assert hashlib.sha256(content).hexdigest() == sums[name], name


def test_the_license_and_notice_ship_beside_the_data() -> None:
    assert "Apache License" in (DATA_DIR / "LICENSE-APACHE-2.0.txt").read_text(encoding="utf-8")
    notice = (DATA_DIR / "NOTICE.md").read_text(encoding="utf-8")
    assert "petuum/adaptdl" in notice and "Apache-2.0" in notice


def test_the_default_trace_is_the_packaged_one() -> None:
    assert default_trace_path() == data.philly_path()
    assert load_trace(str(data.philly_path())).submit_s.size == 82_247
