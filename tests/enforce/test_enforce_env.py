"""What a command the service runs, and the job it submits, get of the service's environment:
the builder (``command_env``), the template's ``env``, and the ``sbatch`` command line (a
stand-in ``sbatch`` that records its argv, environment and export file; the real Slurm is in
test_enforce_resubmit.py)."""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path

import pytest

from evalstop.service.adapters import get_adapter
from evalstop.service.adapters._common import COMMAND_ENV, DEFAULT_PATH, command_env
from evalstop.service.errors import InvalidInput
from evalstop.service.resubmit import MAX_ENV_BYTES, MAX_ENV_VARS, check_env

SECRETS = {"EVALSTOP_ADMIN_TOKEN": "adm-0123456789abcdef",
           "EVALSTOP_DATABASE_URL": "postgresql://evalstop:pw-s3cret@db/evalstop",
           "EVALSTOP_ADAPTER_SETTINGS": '{"ray": {"token": "t"}}',
           "AWS_SECRET_ACCESS_KEY": "aws-s3cret", "LD_PRELOAD": "/tmp/x.so", "HOME": "/srv/evalstop",
           "SBATCH_EXPORT": "ALL", "SLURM_CONF": "/etc/other/slurm.conf"}


@pytest.fixture
def service_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {**SECRETS, "PATH": "/opt/slurm/bin:/usr/bin", "LANG": "C.UTF-8"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("LC_ALL", raising=False)
    monkeypatch.delenv("TZ", raising=False)


def test_commands_keep_only_path_and_locale(service_env: None, monkeypatch: pytest.MonkeyPatch) -> None:
    assert command_env() == {"PATH": "/opt/slurm/bin:/usr/bin", "LANG": "C.UTF-8"}
    assert command_env({"SLURM_CONF": "/etc/slurm/x.conf"})["SLURM_CONF"] == "/etc/slurm/x.conf"
    monkeypatch.delenv("PATH")
    assert command_env() == {"PATH": DEFAULT_PATH, "LANG": "C.UTF-8"}
    assert set(COMMAND_ENV) == {"PATH", "LANG", "LC_ALL", "TZ"}


def test_the_slurm_adapter_runs_its_commands_with_that_environment(service_env: None) -> None:
    adapter = get_adapter("slurm", {"slurm_conf": "/etc/slurm/x.conf"})
    assert adapter._env == {"PATH": "/opt/slurm/bin:/usr/bin", "LANG": "C.UTF-8",  # type: ignore[attr-defined]
                            "SLURM_CONF": "/etc/slurm/x.conf"}
    assert "SLURM_CONF" not in get_adapter("slurm", {})._env  # type: ignore[attr-defined]


@pytest.mark.parametrize(("env", "says"), [
    ([["A", "1"]], "a mapping of at most"),
    ({f"V{i}": "x" for i in range(MAX_ENV_VARS + 1)}, f"at most {MAX_ENV_VARS} variables"),
    ({"lower": "1"}, "variable names match"),
    ({"1A": "1"}, "variable names match"),
    ({"A-B": "1"}, "variable names match"),
    ({"A=B": "1"}, "variable names match"),
    ({"ALL": "1"}, "are not ['ALL', 'NIL', 'NONE']"),
    ({"EVALSTOP_ADMIN_TOKEN": "x"}, "'EVALSTOP_ADMIN_TOKEN': names starting 'EVALSTOP_'"),
    ({"A": 1}, "resubmit.env.A: a UTF-8 string"),
    ({"A": "a\x00b"}, "resubmit.env.A: a UTF-8 string without NUL"),
    ({"A": "\ud800"}, "resubmit.env.A: a UTF-8 string"),
    ({"A": "x" * MAX_ENV_BYTES}, f"at most {MAX_ENV_BYTES} bytes"),
    ({"A": "é" * (MAX_ENV_BYTES // 2)}, f"at most {MAX_ENV_BYTES} bytes"),  # bytes, not characters
])
def test_template_env_is_refused_with_the_variable_named(env: object, says: str) -> None:
    with pytest.raises(InvalidInput, match=r"^resubmit\.env") as info:
        check_env(env)
    assert says in str(info.value) and "\n" not in str(info.value)


def test_template_env_accepts_ordinary_variables() -> None:
    env = {"RUN_MODE": "resumed, with=commas", "_X": "", "HF_HOME": "/scratch/é"}
    assert check_env(env) == env


FAKE_SBATCH = """#!/bin/sh
# a stand-in for sbatch: record argv, environment and the --export-file descriptor's content
{python} - "$@" <<'PY'
import json, os, sys
args = sys.argv[1:]
export = [a.split("=", 1)[1] for a in args if a.startswith("--export-file=")]
data = os.read(int(export[0]), 65536).decode() if export else None
json.dump({{"argv": args, "env": dict(os.environ), "export_file": data}}, open("{out}", "w"))
PY
echo 4242
"""


def test_sbatch_gets_export_none_or_the_declared_variables_only(
    service_env: None, tmp_path: Path
) -> None:
    out = tmp_path / "sbatch.json"
    fake = tmp_path / "sbatch"
    fake.write_text(FAKE_SBATCH.format(python=sys.executable, out=out))
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    adapter = get_adapter("slurm", {"bin_dir": str(tmp_path), "slurm_conf": "/etc/slurm/x.conf"})
    adapter.sbatch(["--parsable"], "#!/bin/bash\nenv\n", {})  # type: ignore[attr-defined]
    seen = json.loads(out.read_text())
    assert seen["argv"][0] == "--export=NONE" and seen["export_file"] is None
    leaked = set(seen["env"]) & set(SECRETS)
    assert leaked <= {"SLURM_CONF"} and seen["env"]["SLURM_CONF"] == "/etc/slurm/x.conf", leaked
    env = {"RUN_MODE": "resumed, with=commas", "B": "x=y"}
    adapter.sbatch(["--parsable"], "#!/bin/bash\nenv\n", env)  # type: ignore[attr-defined]
    seen = json.loads(out.read_text())
    assert seen["argv"][0] == "--export=RUN_MODE,B" and seen["argv"][1].startswith("--export-file=")
    assert seen["export_file"] == "RUN_MODE=resumed, with=commas\0B=x=y\0"
    assert "RUN_MODE" not in seen["env"]  # the values reach the job, not sbatch's own environment


# -- who a resubmission runs as (the submit_as settings) ------------------------------------------
@pytest.mark.parametrize(("settings", "says"), [
    ({"submit_as": ["acme"]}, "'submit_as' setting of the slurm adapter must be a mapping"),
    ({"submit_as": {"acme": "-u0"}}, "'submit_as.acme.user' setting"),
    ({"submit_as": {"acme": "a b"}}, "'submit_as.acme.user' setting"),
    ({"submit_as": {"acme": {"user": "u", "token": "t"}}}, "a user name only (the CLI submits with --uid)"),
    ({"submit_as_service_user": "yes"}, "'submit_as_service_user' setting of the slurm adapter must be true"),
])
def test_submit_as_settings_are_checked_at_start(settings: dict[str, object], says: str) -> None:
    with pytest.raises(ValueError, match=r"^The '") as info:
        get_adapter("slurm", settings)
    assert says in str(info.value)


def test_a_tenant_without_a_mapping_is_refused_unless_the_operator_opts_in() -> None:
    from evalstop.service.adapters import AdapterError, JobRef

    job = JobRef("j1", "acme", "12")
    adapter = get_adapter("slurm", {"submit_as": {"other": "bob"}})
    with pytest.raises(AdapterError, match=r"tenant 'acme' has no Slurm user .*'submit_as' setting") as info:
        adapter.resubmit(job, {"script": "x"}, "#!/bin/bash\n", 1)
    assert not info.value.retryable and "\n" not in str(info.value)
    assert get_adapter("slurm", {"submit_as_service_user": True}).submit_as.for_job(job).user is None  # type: ignore[attr-defined]
    mapped = get_adapter("slurm", {"submit_as": {"acme": "alice"}}).submit_as  # type: ignore[attr-defined]
    assert mapped.for_job(job).user == "alice"


def test_a_tenants_token_file_stays_a_path_and_is_read_at_each_submission(tmp_path: Path) -> None:
    """Through ``get_adapter`` (which reads ``*_file`` secrets), a ``submit_as`` token file is
    kept as a path, so a rotated JWT is picked up; the adapter's own token file is read."""
    from evalstop.service.adapters import JobRef

    pytest.importorskip("httpx")
    own, alice = tmp_path / "own.jwt", tmp_path / "alice.jwt"
    own.write_text("service-jwt\n")
    alice.write_text("first\n")
    adapter = get_adapter("slurm", {"rest_url": "http://127.0.0.1:9", "user": "svc", "token_file": str(own),
                                    "submit_as": {"acme": {"user": "alice", "token_file": str(alice)}}})
    submitter = adapter.submit_as.for_job(JobRef("j1", "acme", "12"))  # type: ignore[attr-defined]
    assert submitter.read_token() == "first"
    alice.write_text("rotated\n")
    assert submitter.read_token() == "rotated"
    assert adapter._client.headers["X-SLURM-USER-TOKEN"] == "service-jwt"  # type: ignore[attr-defined]
