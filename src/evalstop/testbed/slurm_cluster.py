"""A private single-node Slurm (munged + slurmctld + slurmd, all in the foreground).

Everything lives in one directory with free ports and its own ``slurm.conf`` (``SLURM_CONF``
points the client commands at it); the daemons are our child processes and are stopped by their
handles. The node declares ``cpus`` CPUs whatever the machine has (``config_overrides``) and
allocates them one by one (``CR_CPU``), so a job asking for one CPU takes one slot. Needs root
and Debian's ``slurm-wlm`` and ``munge`` packages (``scripts/setup.d/25-enforce.sh``). Used by
the testbed's Slurm engine (:func:`start_cluster`) and by the tests (:func:`private_cluster`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

BINARIES = ("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "scancel", "squeue", "scontrol", "sinfo")
SEARCH_PATH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])


def exe(name: str) -> str:
    """The full path of a Slurm/munge binary (daemons live in /usr/sbin, maybe off PATH)."""
    return shutil.which(name, path=SEARCH_PATH) or name


def missing() -> str | None:
    """Why a private Slurm cannot run here, or None."""
    absent = [b for b in BINARIES if shutil.which(b, path=SEARCH_PATH) is None]
    if absent:
        return f"Slurm/munge not installed ({', '.join(absent)}): apt-get install slurm-wlm munge"
    if os.geteuid() != 0:
        return "a private slurmd needs root"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class SlurmCluster:
    root: Path
    cpus: int = 2
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def run(self, *argv: str, timeout_s: float = 30.0) -> subprocess.CompletedProcess[str]:
        """One client command against this cluster (not checked: the caller reads the result)."""
        return subprocess.run(
            [exe(argv[0]), *argv[1:]], env=self.env, capture_output=True, text=True,
            timeout=timeout_s, check=False,
        )

    def sbatch(self, script: Path, *options: str) -> str:
        argv = [exe("sbatch"), "--parsable", "-o", str(self.root / "job-%j.out"), *options, str(script)]
        out = subprocess.run(argv, env=self.env, capture_output=True, text=True, check=True, timeout=30)
        return out.stdout.strip().split(";")[0]

    def start_rest(self, auth: str = "local") -> Path | None:
        """Start slurmrestd on a unix socket (``rest_auth/local``, or ``jwt``: every request
        carries a user name and that user's token, see :meth:`token`); None if it is not
        installed."""
        if shutil.which("slurmrestd", path=SEARCH_PATH) is None:
            return None
        sock = self.root / f"slurmrestd-{auth}.sock"
        env = {**self.env, "SLURMRESTD_SECURITY": "disable_user_check"}  # we run it as root
        if auth == "jwt":
            env["SLURM_JWT"] = "daemon"  # slurmrestd's switch to checking each request's token
        log = open(self.root / f"slurmrestd-{auth}.log", "wb")  # noqa: SIM115 - lives as long as the daemon
        argv = [exe("slurmrestd"), "-a", f"rest_auth/{auth}", "-s", "v0.0.38", f"unix:{sock}"]
        self.procs.append(subprocess.Popen(argv, env=env, stdout=log, stderr=log))
        _wait_for(sock.exists, 30, "the slurmrestd socket", self.root)
        return sock

    def token(self, user: str, lifespan_s: int = 3600) -> str:
        """A JWT for ``user`` (``scontrol token``, as root)."""
        out = self.run("scontrol", "token", f"username={user}", f"lifespan={lifespan_s}")
        if out.returncode != 0 or not out.stdout.startswith("SLURM_JWT="):
            raise RuntimeError(f"scontrol token username={user}: {out.stderr.strip()}")
        return out.stdout.strip().split("=", 1)[1]

    def stop(self) -> None:
        """Cancel every job of this private cluster (a failed run may leave one running; its
        slurmstepd would outlive slurmd), wait for them to end, then stop the daemons."""
        if self.procs and all(p.poll() is None for p in self.procs):
            self.run("scancel", "--full", "--signal=KILL", f"--user={os.getuid()}")
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and _jobs_left(self):
                time.sleep(0.3)
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
        for proc in reversed(self.procs):
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _write_jwt_key(root: Path) -> Path:
    """The HS256 key slurmctld signs and checks JWTs with (``AuthAltTypes=auth/jwt``)."""
    key = root / "jwt_hs256.key"
    key.write_bytes(os.urandom(32))
    key.chmod(0o600)
    return key


def start_cluster(root: Path, cpus: int = 2, timeout_s: float = 60.0) -> SlurmCluster:
    """Start munged, slurmctld and slurmd under ``root`` with one node of ``cpus`` CPUs."""
    if cpus < 1:
        raise ValueError(f"The 'cpus' parameter of start_cluster must be an int >= 1. Got {cpus!r} instead.")
    for sub in ("state", "spool", "munge"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    (root / "munge").chmod(0o711)
    key, sock = root / "munge" / "munge.key", root / "munge" / "munge.socket"
    subprocess.run([exe("mungekey"), "-c", "-f", "-k", str(key)], check=True, capture_output=True)
    cluster = SlurmCluster(root, cpus)
    _write_conf(cluster, sock)
    log = open(root / "daemons.log", "wb")  # noqa: SIM115 - lives as long as the daemons
    munge = root / "munge"
    try:
        cluster.procs.append(subprocess.Popen(
            [exe("munged"), "-F", "--force", f"--socket={sock}", f"--key-file={key}",
             f"--log-file={munge / 'munged.log'}", f"--pid-file={munge / 'munged.pid'}",
             f"--seed-file={munge / 'munged.seed'}"], stdout=log, stderr=log))
        _wait_for(sock.exists, timeout_s, "munged socket", root)
        for daemon in ("slurmctld", "slurmd"):
            argv = [exe(daemon), "-D", "-f", str(cluster.conf)]
            cluster.procs.append(subprocess.Popen(argv, env=cluster.env, stdout=log, stderr=log))
        _wait_for(lambda: _node_idle(cluster), timeout_s, "an idle Slurm node", root)
    except BaseException:
        cluster.stop()
        raise
    return cluster


@contextlib.contextmanager
def private_cluster(prefix: str = "evs-slurm-", cpus: int = 2) -> Iterator[SlurmCluster]:
    """:func:`start_cluster` in a fresh temporary directory (named ``prefix…``); on exit the
    cluster is stopped and the directory removed. The caller checks :func:`missing` first."""
    root = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        cluster = start_cluster(root, cpus)
        try:
            yield cluster
        finally:
            cluster.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _write_conf(cluster: SlurmCluster, sock: Path) -> None:
    root, host = cluster.root, socket.gethostname()
    cluster.conf.write_text("\n".join([
        "ClusterName=evalstoptest", f"SlurmctldHost={host}(127.0.0.1)",
        f"SlurmctldPort={free_port()}", f"SlurmdPort={free_port()}", "SlurmUser=root", "SlurmdUser=root",
        "AuthType=auth/munge", f"AuthInfo=socket={sock}", "CredType=cred/munge",
        "AuthAltTypes=auth/jwt", f"AuthAltParameters=jwt_key={_write_jwt_key(root)}",
        f"StateSaveLocation={root / 'state'}", f"SlurmdSpoolDir={root / 'spool'}",
        f"SlurmctldPidFile={root / 'slurmctld.pid'}", f"SlurmdPidFile={root / 'slurmd.pid'}",
        f"SlurmctldLogFile={root / 'slurmctld.log'}", f"SlurmdLogFile={root / 'slurmd.log'}",
        "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "SwitchType=switch/none",
        "MpiDefault=none", "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none", "JobCompType=jobcomp/none",
        "SchedulerType=sched/builtin", "SelectType=select/cons_tres", "SelectTypeParameters=CR_CPU",
        "SlurmdParameters=config_overrides", "SchedulerParameters=batch_sched_delay=0,sched_min_interval=0",
        "ReturnToService=2", "KillWait=2", "MinJobAge=300",
        f"NodeName={host} NodeAddr=127.0.0.1 CPUs={cluster.cpus} RealMemory=1000 State=UNKNOWN",
        "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP", ""]))


def _jobs_left(cluster: SlurmCluster) -> bool:
    out = cluster.run("squeue", "--noheader", "--format=%i", timeout_s=10)
    return out.returncode == 0 and bool(out.stdout.strip())


def _node_idle(cluster: SlurmCluster) -> bool:
    out = cluster.run("sinfo", "--noheader", "--format=%t", timeout_s=10)
    return out.returncode == 0 and out.stdout.strip() == "idle"


def _wait_for(ready: Callable[[], bool], timeout_s: float, what: str, root: Path) -> None:
    deadline = time.monotonic() + timeout_s
    while not ready():
        if time.monotonic() > deadline:
            logs = "".join((root / n).read_text()[-1500:] for n in ("slurmctld.log", "slurmd.log")
                           if (root / n).exists())
            raise RuntimeError(f"timed out waiting for {what}: {logs}")
        time.sleep(0.3)
