"""Slurm: the standard client commands (``scontrol``, ``scancel``, ``squeue``) of a login node.

Stop sequence: pin = a marker beside a local checkpoint (and ``pin_dir``), plus the job's
``Comment`` (or ``AdminComment``) set to ``evalstop-pin:<uri>``; signal = cancel it if still
queued, else ``scancel --signal=TERM --full`` (the batch shell and every step); hard stop =
``scancel`` (Slurm sends SIGTERM, then SIGKILL after ``KillWait``); reconcile = ``squeue`` no
longer lists the job or lists it in a terminal state (COMPLETING still holds its nodes). An
unknown or finished job counts as stopped.

Every command runs with :func:`command_env` (``PATH``, locale, ``SLURM_CONF``), never the
service's environment; a resubmitted job gets ``--export=NONE``, or only the variables its
template declares (``--export=<names> --export-file=<fd>``).
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from evalstop.service.adapters._base import (
    AdapterError,
    EnforcementAdapter,
    JobRef,
    NotOwned,
)
from evalstop.service.adapters._common import command_env, setting_float, write_pin_marker
from evalstop.service.adapters._slurm_submit import (
    SubmitAs,
    Submitter,
    check_slurm_owner,
    check_submitted,
    resubmit_options,
    slurm_job_name,
)

log = logging.getLogger("evalstop.service.adapters.slurm")
TERMINAL = frozenset({"BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL",
                      "OUT_OF_MEMORY", "PREEMPTED", "REVOKED", "TIMEOUT"})
GONE_MARKERS = ("Invalid job id", "already finished", "Job/step already completing or completed")
TRANSIENT_MARKERS = ("Socket timed out", "Unable to contact slurm controller", "Connection refused",
                     "Slurm backup controller in standby mode", "Resource temporarily unavailable",
                     "retrying", "can not be altered now", "try again later")


#: Exit statuses that carry a Slurm error number. ``scontrol`` (and ``scancel`` for some
#: errors) exit with ``slurm_errno & 0xff``; ``1`` is the generic failure, classified by message.
#: 2017 ESLURM_INVALID_JOB_ID, 2021 ESLURM_ALREADY_DONE ("Job/step already completing or
#: completed") are "gone"; 2020 ESLURM_TRANSITION_STATE_NO_UPDATE ("can not be altered now") is
#: retryable. Messages recorded from the real Slurm (tests/enforce/test_enforce_slurm.py).
EXIT_CODES = {2017 & 0xFF: "gone", 2021 & 0xFF: "gone", 2020 & 0xFF: "retry"}


@dataclass(frozen=True)
class Result:
    returncode: int
    stdout: str
    stderr: str


def classify(what: str, result: Result) -> str:
    """``ok``, ``gone`` (the job is unknown or finished), or raise :class:`AdapterError`."""
    if result.returncode == 0 and not any(m in result.stderr for m in GONE_MARKERS):
        return "ok"
    text = f"{result.stdout} {result.stderr}"
    by_code = EXIT_CODES.get(result.returncode)
    if by_code == "gone" or any(m in text for m in GONE_MARKERS):
        return "gone"
    retryable = by_code == "retry" or any(m in text for m in TRANSIENT_MARKERS)
    known = next((m for m in TRANSIENT_MARKERS if m in text), "")  # evalstop's own constants
    raise AdapterError(f"{what}: exit {result.returncode}" + (f" ({known})" if known else ""),
                       retryable=retryable, detail=result.stderr.strip()[:300])


def slurm_job_id(job: JobRef) -> str:
    """``external_ref`` checked as a Slurm job id (``1234``, array task ``1234_7``)."""
    ref = job.external_ref
    head, _, tail = ref.partition("_")
    if not head.isdigit() or (tail and not tail.isdigit()):
        raise AdapterError(f"job {job.job_id}: external_ref must be a Slurm job id like '1234' or "
                           f"'1234_7', got {ref!r}", retryable=False)
    return ref


def parse_show_job(text: str) -> list[dict[str, str]]:
    """``scontrol show job -o`` (one line per job record) -> account, user, partition."""
    records = []
    for line in text.splitlines():
        fields = dict(part.split("=", 1) for part in line.split() if "=" in part)
        if "JobId" in fields:
            records.append({"account": fields.get("Account", ""),
                            "user": fields.get("UserId", "").split("(", 1)[0],
                            "partition": fields.get("Partition", "")})
    return records


class SlurmAdapter(EnforcementAdapter):
    name = "slurm"

    def __init__(self, settings: Mapping[str, Any]) -> None:
        self.timeout_s = setting_float(self.name, settings, "timeout_s", 30.0)
        self.bin_dir: str | None = settings.get("bin_dir")
        self.pin_dir: str | None = settings.get("pin_dir")
        self.pin_field = str(settings.get("pin_field", "Comment"))
        if self.pin_field not in ("Comment", "AdminComment"):
            raise ValueError(f"The 'pin_field' setting of the slurm adapter must be one of 'AdminComment', "
                             f"'Comment'. Got {self.pin_field!r} instead.")
        self.submit_as = SubmitAs(settings, tokens=False)
        conf = settings.get("slurm_conf")
        self._env = command_env({"SLURM_CONF": str(conf)} if conf else None)

    def __repr__(self) -> str:
        return f"SlurmAdapter(slurm_conf={self._env.get('SLURM_CONF')!r})"

    def run(self, argv: Sequence[str], stdin: str | None = None, pass_fds: Sequence[int] = ()) -> Result:
        """Run one Slurm command (``stdin``: its input; ``pass_fds``: descriptors it inherits); a
        missing binary is permanent, a timeout retryable."""
        exe = shutil.which(argv[0], path=self.bin_dir) if self.bin_dir else shutil.which(argv[0])
        if exe is None:
            raise AdapterError(f"slurm: command {argv[0]!r} not found (bin_dir={self.bin_dir!r})",
                               retryable=False)
        try:
            proc = subprocess.run([exe, *argv[1:]], capture_output=True, text=True, env=self._env,
                                  timeout=self.timeout_s, check=False, input=stdin,
                                  pass_fds=tuple(pass_fds))
        except subprocess.TimeoutExpired as exc:
            message = f"slurm: {argv[0]} timed out after {self.timeout_s} s"
            raise AdapterError(message, retryable=True) from exc
        return Result(proc.returncode, proc.stdout, proc.stderr)

    def _job_id(self, job: JobRef) -> str:
        return slurm_job_id(job)

    def check_owner(self, job: JobRef, *, must_exist: bool = False) -> None:
        if job.scope is None:
            return
        result = self.run(["scontrol", "show", "job", "-o", self._job_id(job)])
        gone = classify(f"slurm owner check for job {job.job_id}", result) == "gone"
        if gone and not must_exist:
            return
        check_slurm_owner(job, [] if gone else parse_show_job(result.stdout), must_exist=must_exist)

    def pin_checkpoint(self, job: JobRef, checkpoint_uri: str | None) -> None:
        if checkpoint_uri is None:
            return
        write_pin_marker(job, checkpoint_uri, self.name, self.pin_dir)
        argv = ["scontrol", "update", f"JobId={self._job_id(job)}",
                f"{self.pin_field}=evalstop-pin:{checkpoint_uri}"]
        if classify(f"slurm pin for job {job.job_id}", self.run(argv)) == "gone":
            log.info("slurm pin for job %s: job already finished; marker files only", job.job_id)

    def signal(self, job: JobRef) -> None:
        # A queued job holds nothing and has nothing to save: cancel it. (Signalling a PENDING
        # job makes scancel retry "Job can not be altered now" for ever.) Then SIGTERM the rest.
        job_id, what = self._job_id(job), f"slurm signal for job {job.job_id}"
        classify(what, self.run(["scancel", "--state=PENDING", job_id]))
        classify(what, self.run(["scancel", "--signal=TERM", "--full", "--state=RUNNING", job_id]))

    def hard_stop(self, job: JobRef) -> None:
        classify(f"slurm hard stop for job {job.job_id}", self.run(["scancel", self._job_id(job)]))

    def states(self, job: JobRef) -> list[str]:
        """The job's states as squeue reports them (one per array task); empty once forgotten."""
        argv = ["squeue", "--noheader", "--states=all", "--jobs", self._job_id(job), "--format=%T"]
        result = self.run(argv)
        if classify(f"slurm reconcile for job {job.job_id}", result) == "gone":
            return []
        return result.stdout.split()

    def is_stopped(self, job: JobRef) -> bool:
        return all(state in TERMINAL for state in self.states(job))

    def resubmit(self, job: JobRef, template: Mapping[str, Any], text: str, number: int) -> str:
        """``sbatch --hold`` the rendered ``text`` (on stdin: no file, no shell) as job
        ``evalstop-<job id>-r<N>``, as the tenant's Slurm user (``--uid``, the ``submit_as``
        setting), with the template's account and partition re-checked against the scope and
        only the template's ``env``. The held job is released only once Slurm shows it runs as
        that user inside the scope; else it is cancelled while held, and refused. A live job of
        that name and user is the one submitted before (released if the check passes)."""
        submitter = self.submit_as.for_job(job)
        options = [f"--{key}={value}" for key, value in resubmit_options(job, template).items()]
        if submitter.user is not None:
            options.append(f"--uid={submitter.user}")
        name = slurm_job_name(job.job_id, number)
        new_id = self._named(job, name, submitter)
        if new_id is None:
            options = ["--parsable", "--hold", f"--job-name={name}", *options]
            result = self.sbatch(options, text, template.get("env") or {})
            classify(f"slurm resubmit of job {job.job_id}", result)
            new_id = result.stdout.strip().split(";", 1)[0]
        new = JobRef(job.job_id, job.tenant, new_id, job.options, scope=job.scope)
        self._job_id(new)  # a job id, or a permanent error
        self._release_if_owned(new, submitter)
        return new_id

    def _release_if_owned(self, new: JobRef, submitter: Submitter) -> None:
        what = f"slurm resubmit check of job {new.job_id}"
        result = self.run(["scontrol", "show", "job", "-o", new.external_ref])
        gone = classify(what, result) == "gone"
        try:
            check_submitted(new, [] if gone else parse_show_job(result.stdout), submitter)
        except NotOwned:
            self.run(["scancel", new.external_ref])  # still held: it never ran
            raise
        classify(f"slurm release of job {new.job_id}", self.run(["scontrol", "release", new.external_ref]))

    def sbatch(self, options: Sequence[str], script: str, env: Mapping[str, str]) -> Result:
        """``sbatch`` the ``script`` (on stdin) so that the job's environment holds ``env`` and
        nothing of the service's: ``--export=NONE``, or the names of ``env`` with their values
        read from a pipe (``--export-file``: NUL-separated, so any value passes unparsed)."""
        if not env:
            return self.run(["sbatch", "--export=NONE", *options], stdin=script)
        data = b"".join(f"{k}={v}".encode() + b"\0" for k, v in env.items())
        read_fd, write_fd = os.pipe()
        try:
            with os.fdopen(write_fd, "wb") as pipe:  # MAX_ENV_BYTES (16 KiB) fits a pipe's buffer
                pipe.write(data)
            argv = ["sbatch", f"--export={','.join(env)}", f"--export-file={read_fd}", *options]
            return self.run(argv, stdin=script, pass_fds=(read_fd,))
        finally:
            os.close(read_fd)

    def _named(self, job: JobRef, name: str, submitter: Submitter) -> str | None:
        """The id of the live (not finished) job called ``name`` of ``submitter``'s user, if
        any: one cancelled because its check failed does not count, nor another user's."""
        user = f"--user={submitter.user}" if submitter.user is not None else "--me"
        argv = ["squeue", "--noheader", "--states=all", user, f"--name={name}", "--format=%i %T"]
        result = self.run(argv)
        classify(f"slurm resubmit lookup for job {job.job_id}", result)
        live = [line.split()[0] for line in result.stdout.splitlines()
                if len(line.split()) == 2 and line.split()[1] not in TERMINAL]
        return live[0] if live else None
