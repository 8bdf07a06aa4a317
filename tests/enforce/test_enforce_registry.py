from __future__ import annotations

import pytest

from evalstop.service.adapters import JobRef, get_adapter
from evalstop.service.adapters._dryrun import Action, DryRunAdapter
from evalstop.testing.adapter_contract import check_stop_sequence


def test_records_each_intended_action_once_in_order() -> None:
    adapter = get_adapter("dry-run", {})
    assert isinstance(adapter, DryRunAdapter)
    job = JobRef("job-1", "acme", "ray:raysubmit_1")
    check_stop_sequence(adapter, job, "s3://b/ckpt-3")
    assert adapter.actions == [
        Action("pin", "job-1", "ray:raysubmit_1", "s3://b/ckpt-3"),
        Action("signal", "job-1", "ray:raysubmit_1"),
        Action("hard_stop", "job-1", "ray:raysubmit_1"),
    ]


def test_pin_without_checkpoint_records_nothing_and_job_is_running() -> None:
    adapter = DryRunAdapter()
    job = JobRef("job-2", "acme", "x")
    adapter.pin_checkpoint(job, None)
    assert adapter.actions == [] and adapter.is_stopped(job) is False


def test_unknown_adapter_name_lists_choices() -> None:
    with pytest.raises(ValueError, match="The 'name' parameter of get_adapter must be one of 'dry-run'"):
        get_adapter("yarn", {})


MINIMAL = {
    "ray": {"address": "http://127.0.0.1:8265", "token": "tok-SECRET"},
    "slurm": {},
    "kubernetes": {"api_url": "https://127.0.0.1:6443", "token": "tok-SECRET"},
    "webhook": {"url": "http://127.0.0.1:9/hook", "secret": "tok-SECRET"},
    "dry-run": {},
}


def test_every_registered_adapter_builds_and_keeps_secrets_out_of_repr() -> None:
    from evalstop.service.adapters import ADAPTERS, EnforcementAdapter

    assert set(MINIMAL) == set(ADAPTERS)
    for name, settings in MINIMAL.items():
        adapter = get_adapter(name, settings)
        assert isinstance(adapter, EnforcementAdapter) and adapter.name == name
        assert "SECRET" not in repr(adapter)
        adapter.close()


def test_importing_the_service_packages_stays_light() -> None:
    import subprocess
    import sys

    code = ("import sys, evalstop.service.adapters, evalstop.service.pull; "
            "print(sorted(m for m in ('ray', 'mlflow', 'tensorboard', 'httpx') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
