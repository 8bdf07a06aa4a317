"""Issue 23 (item 3): a rewind on Ray Jobs and Slurm is a stop plus a resubmission, through the
service core (ingest, outbox, worker) against the real local engines."""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi", reason="needs the service extra: pip install -e '.[service]'")

import sqlalchemy as sa
from slurm_cluster import SlurmCluster

from evalstop.service import controls, domain
from evalstop.service.adapters import AdapterError, JobRef, NotOwned, get_adapter
from evalstop.service.context import ServiceContext
from evalstop.service.ingest import ScoreIn, ingest_scores
from evalstop.service.settings import ServiceSettings
from evalstop.service.store.tables import audit

pytestmark = pytest.mark.slow
HANG_S = 600.0
#: a checkpoint URI a tenant could post: quotes, $(...), backticks, ';' and a space
NASTY = "/ckpt/it's $(touch {out}/pwned) `touch {out}/pwned2`; #/checkpoint-2"

TRAINER = """
import json, signal, sys, time, pathlib
out = pathlib.Path(sys.argv[1])
args = sys.argv[2:]
def on_term(*_):
    (out / ("term-new" if args else "term-old")).write_text("bye")
    sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
(out / ("args.json" if args else "ready")).write_text(json.dumps(args))
time.sleep(600)
"""


def _wait(predicate: Callable[[], bool], what: str, timeout_s: float = HANG_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def _rewind(ctx: ServiceContext, job_id: str, checkpoint: str) -> dict[str, Any]:
    """Four evals: k=2 fires at step 4; the best is step 2 (its checkpoint ``checkpoint``)."""
    items = [ScoreIn(step=1, value=0.5), ScoreIn(step=2, value=0.7, checkpoint_uri=checkpoint),
             ScoreIn(step=3, value=0.6), ScoreIn(step=4, value=0.5)]
    result = ingest_scores(ctx.store, job_id, "acme", items)
    assert result.decision == "rewind" and result.rewind is not None and result.rewind["resubmit"]
    return result.rewind


def _deliver(ctx: ServiceContext, job_id: str, old_ref: str) -> dict[str, Any]:
    def moved() -> bool:
        ctx.worker.run_once()
        job = domain.get_job(ctx.store, job_id, "acme")
        assert job["state"] != "stop_failed", job["deliveries"]
        return bool(job["external_ref"] != old_ref)

    _wait(moved, "the resubmission")
    return domain.get_job(ctx.store, job_id, "acme")


def _audit(ctx: ServiceContext, job_id: str) -> list[tuple[str, str]]:
    with ctx.store.reading() as conn:
        rows = conn.execute(sa.select(audit.c.action, audit.c.reason).where(audit.c.job_id == job_id)).all()
    return [(r.action, r.reason) for r in rows]


# -- Ray ------------------------------------------------------------------------------------------
def test_ray_rewind_stops_the_job_and_submits_the_next_attempt(
    ray_head: Any, ray_client: Any, tmp_path: Path
) -> None:
    script = tmp_path / "trainer.py"
    script.write_text(TRAINER)
    ray_client.submit_job(entrypoint=f"{sys.executable} {script} {tmp_path}", submission_id="acme-train",
                          metadata={"team": "a"})
    _wait(lambda: (tmp_path / "ready").exists(), "the first attempt to start")
    settings = ServiceSettings(database_url=f"sqlite:///{tmp_path / 'e.db'}", run_worker=False,
                               adapter_settings={"ray": {"address": ray_head.info["address"],
                                                         "token": ray_head.info["token"]}})
    ctx = ServiceContext.build(settings)
    domain.create_tenant(ctx.store, "acme", scope={"ray": {"job_id_prefixes": ["acme"],
                                                           "metadata": {"team": "a"}}})
    template = {"entrypoint": f"{sys.executable} {script} {tmp_path} {{checkpoint}} {{correction}}"}
    spec = domain.JobSpec(external_ref="acme-train", target="ray", detector="evalstop:k=2",
                          grace_period_s=30, on_detect="rewind", correction="kl_coef*=2", resubmit=template)
    job_id = domain.register_job(ctx.store, "acme", spec, ctx.adapters.check)["id"]
    checkpoint = NASTY.format(out=tmp_path)
    rewind = _rewind(ctx, job_id, checkpoint)
    assert (rewind["checkpoint_uri"], rewind["correction"]) == (checkpoint, "kl_coef*=2")

    job = _deliver(ctx, job_id, "acme-train")
    assert job["external_ref"] == "acme-train-r1" and job["state"] == "running"  # the same job, attempt 1
    assert ray_client.get_job_status("acme-train").value == "STOPPED"
    assert (tmp_path / "term-old").read_text() == "bye"  # the first attempt got SIGTERM
    _wait(lambda: (tmp_path / "args.json").exists(), "the second attempt to start")
    assert json.loads((tmp_path / "args.json").read_text()) == [checkpoint, "kl_coef*=2"]  # one word each
    assert not (tmp_path / "pwned").exists() and not (tmp_path / "pwned2").exists()
    info = ray_client.get_job_info("acme-train-r1")
    assert info.metadata["team"] == "a" and info.metadata["evalstop_attempt"] == "1"
    decisions = domain.list_decisions(ctx.store, job_id, "acme")
    got = [(d["source"], d["decision"], d["new_ref"]) for d in decisions]
    assert got == [("rewind-1", "rewind", "acme-train-r1")]
    assert [a for a, _ in _audit(ctx, job_id)] == ["resubmit"]
    # a repeat of the delivery finds the job it submitted (idempotent), and a scope that would
    # not allow the new id is refused before anything is submitted
    adapter = ctx.adapters.get("ray")
    scope = {"ray": {"job_id_prefixes": ["acme"], "metadata": {"team": "a"}}}
    old = JobRef(job_id, "acme", "acme-train", scope=scope)
    assert adapter.resubmit(old, template, "true", 1) == "acme-train-r1"
    narrow = JobRef(job_id, "acme", "acme-train", scope={"ray": {"job_id_prefixes": ["acme-train-r9"]}})
    with pytest.raises(NotOwned, match="outside tenant 'acme'"):
        adapter.resubmit(narrow, template, "true", 2)
    assert ray_client.get_job_status("acme-train-r1").value == "RUNNING"
    with pytest.raises(RuntimeError):
        ray_client.get_job_status("acme-train-r2")
    ray_client.stop_job("acme-train-r1")
    ctx.store.dispose()


# -- Slurm ----------------------------------------------------------------------------------------
SCRIPT = """#!/bin/bash
#SBATCH --output={out}/slurm-%j.out
printf '%s\\n' {{checkpoint}} {{correction}} > {out}/args.txt
sleep 600
"""


def _first_attempt(
    slurm: SlurmCluster, tmp_path: Path, submit: dict[str, Any] | None = None, **settings: Any
) -> tuple[str, ServiceContext]:
    """A first attempt running under account 'alpha' (its Slurm id), and a service (no worker
    thread) whose Slurm adapter talks to ``slurm``, resubmitting as ``submit`` says (default:
    as the service's own user, root here)."""
    first = tmp_path / "first.sh"
    first.write_text("#!/bin/bash\nsleep 600\n")
    old_id = slurm.sbatch(first, "--account=alpha")
    submit = {"submit_as_service_user": True} if submit is None else submit
    db, adapters = f"sqlite:///{tmp_path / 'e.db'}", {"slurm": {"slurm_conf": str(slurm.conf), **submit}}
    ctx = ServiceContext.build(ServiceSettings(database_url=db, run_worker=False, adapter_settings=adapters,
                                               **settings))
    return old_id, ctx


def _rewound(ctx: ServiceContext, old_id: str, resubmit: dict[str, Any]) -> str:
    """Register acme's Slurm job ``old_id`` with the ``resubmit`` template and rewind it."""
    spec = domain.JobSpec(external_ref=old_id, target="slurm", detector="evalstop:k=2", grace_period_s=5,
                          on_detect="rewind", correction="lr*=0.5", resubmit=resubmit)
    job_id = str(domain.register_job(ctx.store, "acme", spec, ctx.adapters.check)["id"])
    _rewind(ctx, job_id, "/ckpt/checkpoint-2")
    return job_id


def _refused(ctx: ServiceContext, job_id: str) -> str:
    """Run the worker until the delivery fails for good; its error."""
    def failed() -> bool:
        ctx.worker.run_once()
        return bool(domain.get_job(ctx.store, job_id, "acme")["state"] == "stop_failed")

    _wait(failed, "the refused resubmission", 120)
    return str(domain.get_job(ctx.store, job_id, "acme")["deliveries"][0]["last_error"])


def test_slurm_rewind_stops_the_job_and_sbatches_the_next_attempt(
    slurm: SlurmCluster, tmp_path: Path
) -> None:
    old_id, ctx = _first_attempt(slurm, tmp_path)
    domain.create_tenant(ctx.store, "acme", scope={"slurm": {"accounts": ["alpha"], "partitions": ["debug"]}})
    template = {"script": SCRIPT.format(out=tmp_path)}
    spec = domain.JobSpec(external_ref=old_id, target="slurm", detector="evalstop:k=2", grace_period_s=5,
                          on_detect="rewind", correction="lr*=0.5", resubmit=template)
    job_id = domain.register_job(ctx.store, "acme", spec, ctx.adapters.check)["id"]
    checkpoint = NASTY.format(out=tmp_path)
    _rewind(ctx, job_id, checkpoint)

    job = _deliver(ctx, job_id, old_id)
    new_id = job["external_ref"]
    assert new_id.isdigit() and new_id != old_id and job["state"] == "running"
    adapter = ctx.adapters.get("slurm")
    assert adapter.is_stopped(JobRef(job_id, "acme", old_id))
    _wait(lambda: (tmp_path / "args.txt").exists(), "the second attempt to start", 60)
    assert (tmp_path / "args.txt").read_text().splitlines() == [checkpoint, "lr*=0.5"]
    assert not (tmp_path / "pwned").exists() and not (tmp_path / "pwned2").exists()
    shown = slurm.run("scontrol", "show", "job", "-o", new_id).stdout
    assert "Account=alpha" in shown and "Partition=debug" in shown
    assert f"JobName=evalstop-{job_id}-r1" in shown
    assert [d["new_ref"] for d in domain.list_decisions(ctx.store, job_id, "acme")] == [new_id]
    assert _audit(ctx, job_id)[0][0] == "resubmit" and new_id in _audit(ctx, job_id)[0][1]
    # idempotent: a repeat finds the job by its name; an account the scope no longer allows is refused
    old = JobRef(job_id, "acme", old_id, scope={"slurm": {"accounts": ["alpha"]}})
    assert adapter.resubmit(old, {**template, "account": "alpha"}, "#!/bin/bash\ntrue\n", 1) == new_id
    with pytest.raises(NotOwned, match="account 'beta' is outside"):
        adapter.resubmit(old, {**template, "account": "beta"}, "#!/bin/bash\ntrue\n", 2)
    slurm.run("scancel", new_id)
    ctx.store.dispose()


def test_a_stop_decided_before_the_resubmission_cancels_it(slurm: SlurmCluster, tmp_path: Path) -> None:
    old_id, ctx = _first_attempt(slurm, tmp_path)
    domain.create_tenant(ctx.store, "acme", scope={"slurm": {"accounts": ["alpha"]}})
    spec = domain.JobSpec(external_ref=old_id, target="slurm", detector="evalstop:k=2", grace_period_s=5,
                          on_detect="rewind", correction="lr*=0.5",
                          resubmit={"script": SCRIPT.format(out=tmp_path)})
    job_id = domain.register_job(ctx.store, "acme", spec, ctx.adapters.check)["id"]
    _rewind(ctx, job_id, "/ckpt/checkpoint-2")
    domain.set_override(ctx.store, job_id, "acme", "stop_now", reason="enough")

    def settled() -> bool:
        ctx.worker.run_once()
        return all(d["phase"] == "done" for d in domain.get_job(ctx.store, job_id, "acme")["deliveries"])

    _wait(settled, "both deliveries", 120)
    job = domain.get_job(ctx.store, job_id, "acme")
    assert job["external_ref"] == old_id and job["state"] == "stopped"
    assert not (tmp_path / "args.txt").exists()
    assert slurm.run("squeue", "--noheader", f"--name=evalstop-{job_id}-r1").stdout.strip() == ""
    ctx.store.dispose()


def test_a_refused_resubmission_fails_and_a_retry_resubmits(slurm: SlurmCluster, tmp_path: Path) -> None:
    """The operator narrows the tenant's accounts after registration: the stop goes through but
    the resubmission under account 'beta' is refused (the job is stop_failed, nothing was
    submitted); with the scope restored, a retry of the delivery resubmits and the job runs.
    The refusal is final at its first attempt (NotOwned is not retryable); a stop that Slurm is
    still completing at the reconcile is retried as usual (with one attempt it failed at load 7)."""
    old_id, ctx = _first_attempt(slurm, tmp_path)
    scope = {"slurm": {"accounts": ["alpha", "beta"]}}
    domain.create_tenant(ctx.store, "acme", scope=scope)
    spec = domain.JobSpec(external_ref=old_id, target="slurm", detector="evalstop:k=2", grace_period_s=5,
                          on_detect="rewind", correction="lr*=0.5",
                          resubmit={"script": SCRIPT.format(out=tmp_path), "account": "beta"})
    job_id = domain.register_job(ctx.store, "acme", spec, ctx.adapters.check)["id"]
    _rewind(ctx, job_id, "/ckpt/checkpoint-2")
    domain.set_tenant_policy(ctx.store, "acme", scope={"slurm": {"accounts": ["alpha"]}})

    def state() -> str:
        ctx.worker.run_once()
        return str(domain.get_job(ctx.store, job_id, "acme")["state"])

    _wait(lambda: state() == "stop_failed", "the refused resubmission", 120)
    job = domain.get_job(ctx.store, job_id, "acme")
    assert job["external_ref"] == old_id
    assert "resubmission account 'beta' is outside tenant 'acme'" in job["deliveries"][0]["last_error"]
    assert ctx.adapters.get("slurm").is_stopped(JobRef(job_id, "acme", old_id))  # the stop went through
    named = ["squeue", "--noheader", "--states=all", f"--name=evalstop-{job_id}-r1", "--format=%i"]
    assert slurm.run(*named).stdout.split() == []  # nothing submitted
    domain.set_tenant_policy(ctx.store, "acme", scope=scope)
    controls.retry_stop(ctx.store, job_id, controls.Actor(None), "scope fixed")
    _wait(lambda: state() == "running", "the retried resubmission", 120)
    job = domain.get_job(ctx.store, job_id, "acme")
    assert job["external_ref"] == slurm.run(*named).stdout.split()[0]
    assert job["deliveries"][0]["phase"] == "done"
    assert "Account=beta" in slurm.run("scontrol", "show", "job", "-o", job["external_ref"]).stdout
    _wait(lambda: (tmp_path / "args.txt").exists(), "the second attempt to start", 60)
    slurm.run("scancel", job["external_ref"])
    ctx.store.dispose()


ENV_SCRIPT = """#!/bin/bash
#SBATCH --output={out}/env-%j.out
env
"""
#: what the service's environment holds in a real deployment (compose, Kubernetes)
DB_PASSWORD, ADMIN_TOKEN = "pw-s3cret-db", "adm-s3cret-0123456789abcdef0123456789"
SERVICE_ENV = {"EVALSTOP_ADMIN_TOKEN": ADMIN_TOKEN,
               "EVALSTOP_DATABASE_URL": f"postgresql://evalstop:{DB_PASSWORD}@db:5432/evalstop",
               "EVALSTOP_ADAPTER_SETTINGS": json.dumps({"slurm": {"token": "rest-s3cret"}})}


@pytest.fixture
def shared_dir(slurm: SlurmCluster) -> Iterator[Path]:
    """A directory the Slurm user 'nobody' can write (its job's output), and a cluster
    directory it can enter (slurmd runs its script from the spool there)."""
    slurm.root.chmod(0o755)
    out = Path(tempfile.mkdtemp(prefix="evs-shared-"))
    out.chmod(0o1777)
    yield out
    shutil.rmtree(out, ignore_errors=True)


def test_a_resubmitted_job_gets_none_of_the_service_environment(
    slurm: SlurmCluster, tmp_path: Path, shared_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The service runs with its admin token, database URL and adapter settings in its
    environment; the job it resubmits (as the tenant's Slurm user) prints its environment:
    none of them is there, the variable the template declares is."""
    for name, value in SERVICE_ENV.items():
        monkeypatch.setenv(name, value)
    old_id, ctx = _first_attempt(slurm, tmp_path, {"submit_as": {"acme": "nobody"}})
    # the first attempt is root's (the test submits it); the next runs as nobody
    scope = {"slurm": {"accounts": ["alpha"], "users": ["nobody", "root"]}}
    domain.create_tenant(ctx.store, "acme", scope=scope)
    template = {"script": ENV_SCRIPT.format(out=shared_dir), "env": {"RUN_MODE": "resumed, with=commas"}}
    spec = domain.JobSpec(external_ref=old_id, target="slurm", detector="evalstop:k=2", grace_period_s=5,
                          on_detect="rewind", correction="lr*=0.5", resubmit=template)
    job_id = domain.register_job(ctx.store, "acme", spec, ctx.adapters.check)["id"]
    _rewind(ctx, job_id, "/ckpt/checkpoint-2")
    new_id = _deliver(ctx, job_id, old_id)["external_ref"]
    out = shared_dir / f"env-{new_id}.out"
    _wait(lambda: out.exists() and "SLURM_JOB_ID=" in out.read_text(), "the job's environment", 60)
    lines = out.read_text().splitlines()
    assert "RUN_MODE=resumed, with=commas" in lines and f"SLURM_JOB_ID={new_id}" in lines
    assert "SLURM_JOB_USER=nobody" in lines  # the tenant's Slurm user, not the service's
    assert [line for line in lines if line.startswith("EVALSTOP_")] == []
    for secret in (DB_PASSWORD, ADMIN_TOKEN, "rest-s3cret"):
        assert secret not in out.read_text()
    ctx.store.dispose()


def test_a_tenant_without_a_slurm_user_is_refused_in_one_line(slurm: SlurmCluster, tmp_path: Path) -> None:
    """No 'submit_as' entry for the tenant (and no opt-in to the service's user): the stop goes
    through, the resubmission is refused for good, naming the setting, and nothing is submitted."""
    old_id, ctx = _first_attempt(slurm, tmp_path, {"submit_as": {"other": "nobody"}})
    domain.create_tenant(ctx.store, "acme", scope={"slurm": {"accounts": ["alpha"]}})
    job_id = _rewound(ctx, old_id, {"script": SCRIPT.format(out=tmp_path)})
    error = _refused(ctx, job_id)
    assert "tenant 'acme' has no Slurm user to resubmit as" in error and "'submit_as' setting" in error
    assert "\n" not in error
    assert ctx.adapters.get("slurm").is_stopped(JobRef(job_id, "acme", old_id))  # the stop went through
    named = ["squeue", "--noheader", "--states=all", f"--name=evalstop-{job_id}-r1", "--format=%i"]
    assert slurm.run(*named).stdout.split() == []
    ctx.store.dispose()


def test_a_held_job_outside_the_scope_is_cancelled_before_it_runs(
    slurm: SlurmCluster, tmp_path: Path, shared_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The scope allows Slurm user 'root' only (the first attempt's), the tenant is mapped to
    'nobody': the new job is submitted held, the check fails, the job is cancelled while held
    and never runs, even with a controller slow to answer the check (2 s here: long enough
    for an unheld job to start)."""
    old_id, ctx = _first_attempt(slurm, tmp_path, {"submit_as": {"acme": "nobody"}})
    domain.create_tenant(ctx.store, "acme", scope={"slurm": {"accounts": ["alpha"], "users": ["root"]}})
    script = f"#!/bin/bash\n#SBATCH --output={shared_dir}/held-%j.out\ntouch {shared_dir}/it-ran\n"
    adapter = ctx.adapters.get("slurm")
    run = adapter.run  # type: ignore[attr-defined]

    def slow_controller(argv: list[str], *args: Any, **kwargs: Any) -> Any:
        if argv[:3] == ["scontrol", "show", "job"] and argv[-1] != old_id:
            time.sleep(2.0)
        return run(argv, *args, **kwargs)

    monkeypatch.setattr(adapter, "run", slow_controller)
    job_id = _rewound(ctx, old_id, {"script": script})
    error = _refused(ctx, job_id)
    assert "the user of Slurm job" in error and "outside tenant 'acme'" in error, error
    named = ["squeue", "--noheader", "--states=all", f"--name=evalstop-{job_id}-r1", "--format=%i %T %u"]
    (new_id, new_state, user), = [line.split() for line in slurm.run(*named).stdout.splitlines()]
    assert (new_state, user) == ("CANCELLED", "nobody")
    time.sleep(2.0)  # a job that had been released would have run by now
    assert not (shared_dir / "it-ran").exists()
    assert "RunTime=00:00:00" in slurm.run("scontrol", "show", "job", "-o", new_id).stdout
    ctx.store.dispose()


# -- Slurm through slurmrestd ---------------------------------------------------------------------
def test_slurmrestd_resubmits_held_and_releases_only_a_job_in_scope(
    slurm: SlurmCluster, rest_socket: Path, shared_dir: Path
) -> None:
    """Over slurmrestd (rest_auth/local: the service's own user, opted into): the job is
    submitted held with only the template's variables, released once in scope, and runs; with
    a scope that does not list its user it is cancelled while held and never runs. A tenant
    without a mapping is refused before anything is sent."""
    adapter = get_adapter("slurm", {"rest_socket": str(rest_socket), "submit_as_service_user": True})
    script = f"#!/bin/bash\nenv > {shared_dir}/env-$SLURM_JOB_ID\nsleep 600\n"
    template = {"script": script, "env": {"RUN_MODE": "resumed, with=commas"}}
    ok = JobRef("j-rest", "acme", "1", scope={"slurm": {"users": ["root"]}})
    new_id = adapter.resubmit(ok, template, script, 1)
    out = shared_dir / f"env-{new_id}"
    _wait(lambda: out.exists() and "SLURM_JOB_ID=" in out.read_text(), "the released job", 60)
    lines = out.read_text().splitlines()
    assert "RUN_MODE=resumed, with=commas" in lines and not [x for x in lines if x.startswith("EVALSTOP_")]
    assert adapter.resubmit(ok, template, script, 1) == new_id  # idempotent: found by name and user
    slurm.run("scancel", new_id)
    refused = JobRef("j-rest2", "acme", "1", scope={"slurm": {"users": ["nobody"]}})
    with pytest.raises(NotOwned, match="the user of Slurm job"):
        adapter.resubmit(refused, template, script, 1)
    named = ["squeue", "--noheader", "--states=all", "--name=evalstop-j-rest2-r1", "--format=%i %T"]
    (held_id, state), = [line.split() for line in slurm.run(*named).stdout.splitlines()]
    time.sleep(2.0)
    assert state == "CANCELLED" and not (shared_dir / f"env-{held_id}").exists()
    strict = get_adapter("slurm", {"rest_socket": str(rest_socket)})
    with pytest.raises(AdapterError, match="'submit_as' setting"):
        strict.resubmit(ok, template, script, 2)
    adapter.close()
    strict.close()


def test_slurmrestd_resubmits_as_the_tenants_user_with_its_token(
    slurm: SlurmCluster, shared_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """slurmrestd with JWT auth: the tenant's job is submitted with its Slurm user's token (read
    from a file) and runs as that user; the token is in no log line, repr or error."""
    sock = slurm.start_rest("jwt")
    if sock is None:
        pytest.skip("slurmrestd not installed: apt-get install slurmrestd")
    token = slurm.token("nobody")
    token_file = tmp_path / "nobody.jwt"
    token_file.write_text(token + "\n")
    submit_as = {"acme": {"user": "nobody", "token_file": str(token_file)},
                 "mallory": {"user": "nobody", "token": "bogus-jwt"}}
    settings = {"rest_socket": str(sock), "submit_as": submit_as}
    adapter = get_adapter("slurm", settings)
    script = f"#!/bin/bash\nid -un > {shared_dir}/user-$SLURM_JOB_ID\nsleep 600\n"
    job = JobRef("j-jwt", "acme", "1", scope={"slurm": {"users": ["nobody"]}})
    caplog.set_level("DEBUG")
    new_id = adapter.resubmit(job, {"script": script}, script, 1)
    out = shared_dir / f"user-{new_id}"
    _wait(lambda: out.exists() and out.read_text().strip() != "", "the tenant's job", 60)
    assert out.read_text().strip() == "nobody"
    assert "UserId=nobody(" in slurm.run("scontrol", "show", "job", "-o", new_id).stdout
    with pytest.raises(AdapterError) as info:
        adapter.resubmit(JobRef("j-jwt2", "mallory", "1"), {"script": script}, script, 1)
    for text in (caplog.text, repr(adapter), repr(adapter.submit_as), str(info.value)):  # type: ignore[attr-defined]
        assert token not in text and "bogus-jwt" not in text
    slurm.run("scancel", new_id)
    adapter.close()
