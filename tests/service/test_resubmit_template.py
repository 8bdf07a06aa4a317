"""Resubmission templates (issue 23, item 3): checked at registration, rendered shell-quoted."""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from evalstop.service import resubmit
from evalstop.service.adapters._ray import ray_id_allowed, ray_submission_id
from evalstop.service.app import create_app
from evalstop.service.errors import InvalidInput

from ._support import ADMIN, Api, make_settings

SCOPE = {"ray": {"job_id_prefixes": ["acme"]}, "slurm": {"accounts": ["alpha"], "partitions": ["debug"]}}


@pytest.fixture
def api(sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Api]:
    engines = {"ray": {"address": "http://127.0.0.1:9"}, "slurm": {"submit_as": {"acme": "acme"}}}
    with TestClient(create_app(make_settings(sqlite_url, adapter_settings=engines))) as client:
        api = Api(client)
        # No engine runs here: the backend's ownership check at registration (Slurm must know the
        # job) is tested against the real Slurm in test_attacks.py; these tests are the template's.
        monkeypatch.setattr(api.ctx.adapters, "check_registration", lambda target, ref: None)
        yield api


def _register(api: Api, token: str, **body: object) -> object:
    payload = {"external_ref": "acme-1", "target": "ray", "on_detect": "rewind", "correction": "lr*=0.5",
               **body}
    return api.client.post("/v1/jobs", json=payload, headers=api.as_(token))


def test_templates_are_checked_at_registration(api: Api) -> None:
    token = api.tenant("acme", scope=SCOPE)
    refused = [
        ({"target": "recording", "external_ref": "x", "resubmit": {"entrypoint": "run"}}, "cannot resubmit"),
        ({"resubmit": {"entrypoint": "python t.py {home}"}}, "unknown placeholder '{home}'"),
        ({"resubmit": {"entrypoint": "python t.py {checkpoint!r}"}}, "unknown placeholder '{checkpoint!r}'"),
        ({"resubmit": {"entrypoint": "python t.py {checkpoint:>9}"}}, "unknown placeholder"),
        ({"resubmit": {"entrypoint": "python t.py {"}}, "literal brace"),
        ({"resubmit": {"entrypoint": ""}}, "resubmit.entrypoint"),
        ({"resubmit": {"entrypoint": "run", "image": "x"}}, "unknown field(s) ['image']"),
        ({"resubmit": {"entrypoint": "run", "env": {"EVALSTOP_ADMIN_TOKEN": "x"}}},
         "names starting 'EVALSTOP_'"),
        ({"resubmit": {"entrypoint": "run", "env": {"a b": "1"}}}, "resubmit.env: variable names match"),
        ({"resubmit": {"entrypoint": "run"}, "on_detect": "stop", "correction": None},
         "needs on_detect='rewind'"),
        ({"target": "slurm", "external_ref": "12", "resubmit": {"script": "run", "account": "beta"}},
         "resubmit.account: 'beta' is outside tenant 'acme'"),
        ({"target": "slurm", "external_ref": "12", "resubmit": {"script": "run", "partition": "gpu"}},
         "resubmit.partition: 'gpu' is outside"),
        ({"target": "slurm", "external_ref": "12", "resubmit": {"script": "x", "account": "--uid=0"}},
         "resubmit.account"),
    ]
    for body, says in refused:
        r = _register(api, token, **body)
        assert r.status_code == 422 and says in r.text, (body, r.text)  # type: ignore[attr-defined]
    script = "#!/bin/bash\nrun {checkpoint}"
    r = _register(api, token, target="slurm", external_ref="12", resubmit={"script": script})
    assert r.status_code == 201, r.text  # type: ignore[attr-defined]
    stored = r.json()["resubmit"]  # type: ignore[attr-defined]
    assert stored == {"script": "#!/bin/bash\nrun {checkpoint}", "account": "alpha", "partition": "debug"}
    r = _register(api, token, resubmit={"entrypoint": "python t.py {checkpoint} --fix {correction} {{x}}"})
    assert r.status_code == 201 and r.json()["resubmit"]["entrypoint"].endswith("{{x}}")  # type: ignore[attr-defined]
    assert api.client.get("/v1/jobs", headers=api.as_(ADMIN)).status_code == 200


def test_rendered_values_reach_the_shell_as_one_quoted_word_each(tmp_path: object) -> None:
    nasty = "/ck/it's $(touch /tmp/evalstop-pwned) `id`; rm -rf ~ #/checkpoint-2"
    text = resubmit.render("printf '%s\\n' {checkpoint} {correction} {{literal}}", nasty, "kl_coef*=2")
    out = subprocess.run(["bash", "-c", text], capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == [nasty, "kl_coef*=2", "{literal}"]
    assert shlex.quote(nasty) in text
    for bad in ("/ck/a\nrm -rf /", "/ck/\x00"):
        with pytest.raises(ValueError, match="control character"):
            resubmit.render("run {checkpoint}", bad, "lr*=0.5")
    with pytest.raises(ValueError, match="no checkpoint URI"):
        resubmit.render("run {checkpoint}", None, "lr*=0.5")
    assert resubmit.render("run --fix {correction}", None, "lr*=0.5") == "run --fix 'lr*=0.5'"
    reset = resubmit.render("run --fix {correction}", None, "ref=best,kl_coef*=2")
    assert shlex.split(reset) == ["run", "--fix", "ref=best,kl_coef*=2"]


def test_ray_ids_stay_in_the_prefix() -> None:
    assert ray_submission_id("acme-1", 2) == "acme-1-r2"
    assert ray_id_allowed({"ray": {"job_id_prefixes": ["acme"]}}, "acme-1-r1")
    assert not ray_id_allowed({"ray": {"job_id_prefixes": ["acme-1-r2"]}}, "acme-1-r1")
    assert not ray_id_allowed({}, "acme-1-r1")
    with pytest.raises(InvalidInput, match="cannot resubmit"):
        resubmit.check_template("kubernetes", {"entrypoint": "x"}, None, "acme")
