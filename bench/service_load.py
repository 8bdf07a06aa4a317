"""Load benchmark of the EvalStop service over loopback, with durable SQLite commits.

Starts ``evalstop serve`` as its own process (SQLite file in a temp dir, WAL, synchronous=FULL:
every acknowledged request is on disk), then drives it from this process with persistent HTTP/1.1
connections (stdlib ``http.client`` in threads; the paced and fair phases use, by default, a
leaner client: raw HTTP/1.1 over asyncio streams, one task per sender, ``--client raw``, which
takes about half the CPU per request of ``--client http.client`` on the same cores):

1. **batched throughput**: ``--clients`` threads each post batches of ``--batch`` scores to
   their own jobs for ``--seconds``; reports acknowledged scores/s.
2. **decision latency at a fixed rate**: single-score requests on an open-loop schedule of
   ``--rate`` per second for ``--seconds``; latency is measured from the *scheduled* send time
   to the reply (so a stalled server cannot hide queueing), p50/p99/max, plus the achieved rate.
   It follows ``--warm-up`` seconds (default 2) of the same load on other jobs of the same
   tenant, reported apart and not counted: the steady state, not the servers' (and a new
   tenant's) first second (``--warm-up 0`` for that). ``--json`` adds each second's p99.

3. **history**: single-score requests, one at a time, alternating between jobs (default rule)
   that already hold ``--short-history`` evals and jobs that hold ``--long-history`` evals;
   p50/p90 latency of each and the ratio long/short (each job's rule state is persisted, so a
   request never reads the history: the target is a ratio within 2).
4. **contention**: one tenant posts ``--contention-batches`` batches of 1,000 scores to a
   ``mann-kendall`` job while another tenant sends single scores at ``--contention-rate`` per
   second (open loop, as in phase 2); p50/p99/max of those single scores while the batches run
   (target: p99 <= 50 ms), and the time per 1,000-score batch. The default 20 batches give about
   50 single scores to rank (5 gave 7, so "p99" was the maximum of a handful).

Every reply carries the detector's decision, so the latency is "score in -> decision out".
The paced phase also reports the CPU time per request of the server (from /proc, when this
script started it or got ``--server-pid``) and of this client, which share the machine.

    .venv/bin/python bench/service_load.py                     # both phases, 10 s each
    .venv/bin/python bench/service_load.py --seconds 5 --json
    .venv/bin/python bench/service_load.py --phases paced       # one phase only
    .venv/bin/python bench/service_load.py --phases history,contention
    .venv/bin/python bench/service_load.py --url http://127.0.0.1:8000 --admin-token ...
    .venv/bin/python bench/service_load.py --replicas 2 --db postgresql   # + the fairness phase

``--db postgresql`` starts a throwaway PostgreSQL (``initdb`` under ``/usr/lib/postgresql``, as
in tests/service/conftest.py; or pass ``--database-url``); ``--replicas N`` starts N servers on
the same database and spreads the clients over them. The **fair** phase (on by default with
``--replicas``) has a heavy tenant, limited to ``--heavy-quota`` scores/s, post batches as fast as
it can (its 429s are counted) while a light tenant sends ``--light-rate`` single scores/s; it
prints the light tenant's p99.

The **idle** phase (``--phases idle``) measures, for ``--seconds`` with no request, each server's
CPU per second and the database's: the fixed cost of a replica.

The **slow-neighbour** phase (``--phases slow-neighbour``; issue 22) starts a webhook receiver in
this process and points the server's webhook adapter at it (``timeout_s`` 5). A tenant stops
``--neighbour-stops`` webhook jobs one at a time (0.3 s apart) and the phase measures, for each,
the time from the ``stop_now`` request to the signal reaching that tenant's receiver: first with
the worker otherwise idle, then while another tenant's receiver answers only after 6 s and that
tenant has ``--slow-jobs`` stops in delivery. It prints p50/max of both cases (target: <= 1 s).

The **first-burst** phase (``--phases first-burst``) measures a new tenant's first concurrent
requests: ``--burst-rounds`` times, a new tenant and ``--burst-size`` jobs are made through the
first server, then one single score to each job, all sent at once on connections opened
before, to the other servers (with one server, to it: there the token is already known). The
same senders then send ``--burst-steady`` more such rounds: the steady state at the same
concurrency. It prints p50/p99/max of the first requests, the steady p50, and the ratio of
the first requests' p99 to it (target: <= 3).
"""


from __future__ import annotations

import argparse
import asyncio
import gc
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import urlparse

sys.path.insert(0, str(Path(__file__).resolve().parent))
import phase_split

from evalstop.service.phases import ENV as phases_env

try:  # uvicorn[standard] installs uvloop; the lean client's loop is lighter with it
    import uvloop
except ImportError:  # pragma: no cover
    uvloop = None  # type: ignore[assignment]

ADMIN = "bench-admin-token"


class Conn:
    """One keep-alive HTTP connection posting JSON."""

    def __init__(self, base: str, token: str) -> None:
        url = urlparse(base)
        self.conn = http.client.HTTPConnection(url.hostname or "127.0.0.1", url.port or 80, timeout=30)
        self.headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}

    def send(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        self.conn.request(method, path, body=data, headers=self.headers)
        response = self.conn.getresponse()
        payload = response.read()
        return response.status, json.loads(payload) if payload else None


def start_server(
    tmp: Path, synchronous: str, database_url: str | None = None, extra_env: dict[str, str] | None = None,
) -> tuple[subprocess.Popen[bytes], str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "EVALSTOP_ADMIN_TOKEN": ADMIN, "EVALSTOP_SQLITE_SYNCHRONOUS": synchronous,
           **(extra_env or {})}
    cmd = [sys.executable, "-m", "evalstop.cli", "serve", "--database-url",
           database_url or f"sqlite:///{tmp / 'bench.db'}", "--port", str(port), "--log-level", "warning"]
    proc = subprocess.Popen(cmd, env=env)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            Conn(base, "").send("GET", "/healthz")
            return proc, base
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("the server did not start within 60 s")


def start_postgres() -> tuple[str, Any, int]:
    """A throwaway PostgreSQL on a free loopback port (fsync on: replies mean committed): its
    URL, a function that stops it, and the pid of its postmaster."""
    import glob
    import pwd
    import shutil

    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if not found:
        raise SystemExit("--db postgresql: no PostgreSQL server binaries under /usr/lib/postgresql (or pass "
                         "--database-url)")
    bindir, root = Path(found[-1]).parent, Path(tempfile.mkdtemp(prefix="evalstop-bench-pg-"))
    user = next((u for u in ("postgres", "evalstop-pg") if _user_exists(pwd, u)), None)
    prefix = ["runuser", "-u", user, "--"] if os.geteuid() == 0 and user else []
    if prefix and user:
        shutil.chown(root, user)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]

    def run(*cmd: str) -> None:
        subprocess.run([*prefix, *cmd], check=True, capture_output=True, timeout=120)

    run(str(bindir / "initdb"), "-D", str(root / "data"), "-U", "postgres", "--auth=trust", "-E", "UTF8")
    opts = f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c max_connections=200"
    run(str(bindir / "pg_ctl"), "-D", str(root / "data"), "-o", opts, "-l", str(root / "log"), "-w", "start")

    def stop() -> None:
        run(str(bindir / "pg_ctl"), "-D", str(root / "data"), "-m", "fast", "stop")
        shutil.rmtree(root, ignore_errors=True)

    postmaster = int((root / "data" / "postmaster.pid").read_text().split()[0])
    return f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres", stop, postmaster


def _user_exists(pwd: Any, name: str) -> bool:
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


def make_jobs(
    base: str, admin: str, n: int, detector: str | None = "evalstop:k=3", quota: dict[str, Any] | None = None,
    token: str | None = None,
) -> tuple[str, list[str]]:
    """A new tenant (with ``quota``, if given) and ``n`` jobs of it running ``detector`` (None:
    the service's default); with ``token``, ``n`` new jobs of that tenant instead."""
    name = f"bench-{os.getpid()}-{time.time_ns()}"
    if token is None:
        status, tenant = Conn(base, admin).send("POST", "/v1/tenants", {"name": name, "quota": quota})
        assert status == 201, tenant
        token = tenant["token"]
    c = Conn(base, token)
    ids = []
    spec = {} if detector is None else {"detector": detector}
    for i in range(n):
        status, job = c.send("POST", "/v1/jobs", {"external_ref": f"{name}-{i}", "target": "dry-run", **spec})
        assert status == 201, job
        ids.append(job["id"])
    return token, ids


def rising(step: int) -> float:
    """A healthy curve (never three declines in a row), so the job keeps running all along."""
    return 0.5 + 0.4 * step / (step + 1000) + (0.001 if step % 2 else 0.0)


def batched(
    bases: list[str], token: str, jobs: list[str], clients: int, batch: int, seconds: float
) -> dict[str, Any]:
    counts = [0] * clients
    stop_at = time.monotonic() + seconds

    def run(k: int) -> None:
        c, mine, step = Conn(bases[k % len(bases)], token), jobs[k::clients], 0
        while time.monotonic() < stop_at:
            for job in mine:
                body = {"scores": [{"step": s, "value": rising(s)} for s in range(step, step + batch)]}
                status, reply = c.send("POST", f"/v1/jobs/{job}/scores", body)
                assert status == 200 and reply["accepted"] == batch, reply
                counts[k] += batch
            step += batch

    started = time.monotonic()
    _run_threads(run, clients)
    elapsed = time.monotonic() - started
    return {"scores": sum(counts), "seconds": round(elapsed, 2), "scores_per_s": round(sum(counts) / elapsed)}


def paced(
    bases: list[str], token: str, jobs: list[str], rate: float, seconds: float, threads: int,
    server_pids: Sequence[int] = (), db_pid: int | None = None,
) -> dict[str, Any]:
    """Request ``i`` is due at ``t0 + i / rate``; thread ``i % threads`` sends it, to one of that
    thread's own jobs (so each job's steps arrive in order)."""
    n = int(rate * seconds)
    latencies: list[float] = [0.0] * n
    t0 = time.monotonic() + 0.2
    cpu0 = time.process_time(), _cpu_s(server_pids), _tree_cpu_s(db_pid)

    def run(k: int) -> None:
        c, mine = Conn(bases[k % len(bases)], token), jobs[k::threads]
        for i in range(k, n, threads):
            due = t0 + i / rate
            time.sleep(max(0.0, due - time.monotonic()))
            job, step = mine[(i // threads) % len(mine)], 10**7 + i
            status, reply = c.send("POST", f"/v1/jobs/{job}/scores", {"step": step, "value": rising(step)})
            assert status == 200 and reply["decision"] == "continue", reply
            latencies[i] = time.monotonic() - due

    _run_threads(run, threads)
    wall = time.monotonic() - t0
    return _paced_result(n, rate, wall, latencies, time.process_time() - cpu0[0], cpu0[1:],
                         (_cpu_s(server_pids), _tree_cpu_s(db_pid)))


#: A lean client connection idle this long is opened anew before its next request.
IDLE_S = 4.0


class RawConn:
    """One keep-alive HTTP/1.1 connection over asyncio streams, for the paced phase's lean client
    (``--client raw``): the request is written as bytes prepared once but for the path and body,
    and the reply is read by its status line, its headers (``Content-Length`` required) and
    exactly that many body bytes. Every reply's status and body are returned for checking."""

    def __init__(self, base: str, token: str) -> None:
        url = urlparse(base)
        self.host, self.port = url.hostname or "127.0.0.1", url.port or 80
        self.head = (f"Host: {self.host}:{self.port}\r\nAuthorization: Bearer {token}\r\n"
                     "Content-Type: application/json\r\nContent-Length: ").encode()
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.used = 0.0

    async def post(self, path: str, body: bytes, extra: bytes = b"") -> tuple[int, bytes]:
        if self.writer is not None and time.monotonic() - self.used > IDLE_S:
            self.close()  # the server closes a connection idle for 5 s (uvicorn's keep-alive)
            self.writer = None
        if self.writer is None or self.reader is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        self.used = time.monotonic()
        self.writer.write(b"POST " + path.encode() + b" HTTP/1.1\r\n" + extra + self.head
                          + str(len(body)).encode() + b"\r\n\r\n" + body)
        head = (await self.reader.readuntil(b"\r\n\r\n")).split(b"\r\n")
        status, length = int(head[0].split(b" ", 2)[1]), None
        for line in head[1:]:
            name, _, value = line.partition(b":")
            if name.lower() == b"content-length":
                length = int(value)
        if length is None:
            raise RuntimeError(f"a reply without Content-Length ({head[0]!r})")
        payload = await self.reader.readexactly(length)
        self.used = time.monotonic()
        return status, payload

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def paced_raw(
    bases: list[str], token: str, jobs: list[str], rate: float, seconds: float, threads: int,
    server_pids: Sequence[int] = (), db_pid: int | None = None, due_header: bool = False,
) -> dict[str, Any]:
    """:func:`paced` with the lean client: the same schedule (request ``i`` due at ``t0 + i /
    rate``, sent by sender ``i % threads`` on its own connection, to one of its own jobs), the
    same latency (scheduled send to the whole reply) and the same check of every reply, from
    ``threads`` tasks on one event loop (uvloop if installed) instead of threads. With
    ``due_header`` each request names its scheduled time (for the servers' phase logs)."""
    n = int(rate * seconds)
    latencies: list[float] = [0.0] * n

    async def run(k: int, t0: float) -> None:
        c, mine = RawConn(bases[k % len(bases)], token), jobs[k::threads]
        try:
            for i in range(k, n, threads):
                due = t0 + i / rate
                wait = due - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                job, step = mine[(i // threads) % len(mine)], 10**7 + i
                body = json.dumps({"step": step, "value": rising(step)}).encode()
                extra = (b"X-Evalstop-Due-Ns: %d\r\nX-Evalstop-Sent-Ns: %d\r\n"
                         % (int(due * 1e9), time.monotonic_ns()) if due_header else b"")
                status, payload = await c.post(f"/v1/jobs/{job}/scores", body, extra)
                reply = json.loads(payload)
                assert status == 200 and reply["decision"] == "continue", reply
                latencies[i] = time.monotonic() - due
        finally:
            c.close()

    async def main() -> tuple[float, float]:
        t0 = time.monotonic() + 0.2
        await asyncio.gather(*(run(k, t0) for k in range(threads)))
        return t0, time.monotonic()

    cpu0 = time.process_time(), _cpu_s(server_pids), _tree_cpu_s(db_pid)
    t0, t1 = asyncio.run(main()) if uvloop is None else uvloop.run(main())
    return _paced_result(n, rate, t1 - t0, latencies, time.process_time() - cpu0[0], cpu0[1:],
                         (_cpu_s(server_pids), _tree_cpu_s(db_pid)))


#: The servers' CPU seconds (total, kernel) and the database's, each None where unknown.
CpuReading = tuple[tuple[float, float] | None, float | None]


def _paced_result(
    n: int, rate: float, wall: float, latencies: list[float], client_cpu: float,
    before: CpuReading, after: CpuReading,
) -> dict[str, Any]:
    """The phase's figures; ``before``/``after``: the servers' CPU (total, kernel) and the
    database's, as :func:`_cpu_s` and :func:`_tree_cpu_s` read them (None: unknown)."""
    ms = sorted(x * 1000 for x in latencies)
    server = kernel = database = None
    if before[0] is not None and after[0] is not None:
        server = round(1000 * (after[0][0] - before[0][0]) / n, 3)
        kernel = round(1000 * (after[0][1] - before[0][1]) / n, 3)
    if before[1] is not None and after[1] is not None:
        database = round(1000 * (after[1] - before[1]) / n, 3)
    return {"requests": n, "target_rate": rate, "achieved_rate": round(n / wall),
            "p50_ms": round(statistics.median(ms), 2), "p99_ms": round(ms[int(0.99 * (n - 1))], 2),
            "max_ms": round(ms[-1], 2), "client_cpu_ms_per_request": round(1000 * client_cpu / n, 3),
            # every server (replica) together; of which in the kernel (sockets, wake-ups, fsync)
            "server_cpu_ms_per_request": server, "server_kernel_ms_per_request": kernel,
            # the PostgreSQL this script started: the postmaster and its processes at each reading
            "database_cpu_ms_per_request": database,
            # p99 of the requests due in each second of the schedule: a run that fell behind and
            # stayed behind rises and stays up; one slow moment is one high second
            "p99_ms_by_second": _by_second(latencies, rate)}


def _by_second(latencies: list[float], rate: float) -> list[float]:
    """p99 (ms) of each second's requests, by when they were due (request ``i`` at ``i / rate``)."""
    step, out = max(1, int(rate)), []
    for k in range(0, len(latencies), step):
        ms = sorted(x * 1000 for x in latencies[k:k + step])
        out.append(round(ms[int(0.99 * (len(ms) - 1))], 2))
    return out


def first_burst(bases: list[str], admin: str, rounds: int, size: int, steady: int) -> dict[str, Any]:
    """See the module docstring: each round a new tenant's first ``size`` requests, at once,
    then ``steady`` rounds of the same on the now known tenant; latency per request."""
    targets = bases[1:] or bases  # servers that have not seen the tenant (its jobs are made on bases[0])
    firsts: list[float] = []
    warm: list[float] = []
    for _ in range(rounds):
        token, jobs = make_jobs(bases[0], admin, size)
        first, *rest = _bursts(targets, token, jobs, 1 + steady)
        firsts += first
        warm += [x for burst in rest for x in burst]

    def ms(xs: list[float], q: float) -> float:
        xs = sorted(xs)
        return round(1000 * xs[int(q * (len(xs) - 1))], 2)

    steady_p50 = ms(warm, 0.5) if warm else float("nan")
    return {"rounds": rounds, "size": size, "servers": len(targets), "first_p50_ms": ms(firsts, 0.5),
            "first_p99_ms": ms(firsts, 0.99), "first_max_ms": ms(firsts, 1.0), "steady_p50_ms": steady_p50,
            "steady_p99_ms": ms(warm, 0.99) if warm else float("nan"),
            "ratio_first_p99_to_steady_p50": round(ms(firsts, 0.99) / steady_p50, 2) if warm else None}


def _bursts(targets: list[str], token: str, jobs: list[str], times: int) -> list[list[float]]:
    """``times`` rounds of one score to each of ``jobs`` at once (steps 1, 2, ...), each job on
    its own connection (opened first) to one of ``targets``; each round's latencies (s)."""

    async def main() -> list[list[float]]:
        conns = [RawConn(targets[k % len(targets)], token) for k in range(len(jobs))]
        for c in conns:
            c.reader, c.writer = await asyncio.open_connection(c.host, c.port)
            c.used = time.monotonic()

        async def one(k: int, step: int) -> float:
            body = json.dumps({"step": step, "value": rising(step)}).encode()
            t0 = time.monotonic()
            status, payload = await conns[k].post(f"/v1/jobs/{jobs[k]}/scores", body)
            assert status == 200, payload
            return time.monotonic() - t0

        try:
            return [list(await asyncio.gather(*(one(k, step) for k in range(len(jobs)))))
                    for step in range(1, times + 1)]
        finally:
            for c in conns:
                c.close()

    return asyncio.run(main()) if uvloop is None else uvloop.run(main())


#: The paced phase's clients (``--client``): the lean asyncio one, and the threads of ``http.client``.
PACED = {"raw": paced_raw, "http.client": paced}


def fair(
    bases: list[str], admin: str, args: argparse.Namespace
) -> dict[str, Any]:
    """The heavy tenant saturates its quota from ``--clients`` threads (batches, no pause; a 429
    is counted and retried after a short sleep) while the light tenant is paced."""
    quota = {"scores_per_s": args.heavy_quota, "burst": max(args.batch, int(args.heavy_quota))}
    heavy, heavy_jobs = make_jobs(bases[0], admin, args.clients, quota=quota)
    light, light_jobs = make_jobs(bases[0], admin, args.paced_threads)
    stop = threading.Event()
    accepted, refused = [0] * args.clients, [0] * args.clients

    def hammer(k: int) -> None:
        c, job, step = Conn(bases[k % len(bases)], heavy), heavy_jobs[k], 0
        while not stop.is_set():
            body = {"scores": [{"step": s, "value": rising(s)} for s in range(step, step + args.batch)]}
            status, _ = c.send("POST", f"/v1/jobs/{job}/scores", body)
            if status == 200:
                accepted[k] += args.batch
                step += args.batch
            else:
                assert status == 429, status
                refused[k] += 1
                time.sleep(0.01)

    threads = [threading.Thread(target=hammer, args=(k,)) for k in range(args.clients)]
    for t in threads:
        t.start()
    time.sleep(1.0)  # the heavy tenant has used up its burst
    started = time.monotonic()
    try:
        light_result = PACED[args.client](bases, light, light_jobs, args.light_rate, args.seconds,
                                          args.paced_threads)
    finally:
        stop.set()
        for t in threads:
            t.join()
    elapsed = time.monotonic() - started + 1.0
    return {"heavy_quota_scores_per_s": args.heavy_quota, "heavy_accepted_scores_per_s":
            round(sum(accepted) / elapsed), "heavy_429s": sum(refused), "light": light_result}


def fill(c: Conn, job: str, n: int, chunk: int = 1000) -> None:
    """Post steps 0..n-1 of the healthy curve to ``job`` in batches."""
    for first in range(0, n, chunk):
        body = {"scores": [{"step": s, "value": rising(s)} for s in range(first, min(n, first + chunk))]}
        status, reply = c.send("POST", f"/v1/jobs/{job}/scores", body)
        assert status == 200 and reply["decision"] == "continue", reply


def history_cost(
    base: str, admin: str, short: int, long: int, requests: int, n_jobs: int = 4
) -> dict[str, Any]:
    """Single-score latency on jobs holding ``short`` vs ``long`` evals (default rule)."""
    token, jobs = make_jobs(base, admin, 2 * n_jobs, detector=None)
    c = Conn(base, token)
    groups = {"short": jobs[:n_jobs], "long": jobs[n_jobs:]}
    for name, n in (("short", short), ("long", long)):
        for job in groups[name]:
            fill(c, job, n)
    latencies: dict[str, list[float]] = {"short": [], "long": []}
    for i in range(requests):
        for name in ("short", "long"):  # alternate, so both see the same machine
            job = groups[name][i % n_jobs]
            step = 10**7 + i
            t = time.perf_counter()
            status, reply = c.send("POST", f"/v1/jobs/{job}/scores", {"step": step, "value": rising(step)})
            latencies[name].append(1000 * (time.perf_counter() - t))
            assert status == 200 and reply["decision"] == "continue", reply
    out: dict[str, Any] = {"short_history": short, "long_history": long, "requests_each": requests}
    for name, ms in latencies.items():
        ms.sort()
        out[f"{name}_p50_ms"] = round(statistics.median(ms), 3)
        out[f"{name}_p90_ms"] = round(ms[int(0.9 * (len(ms) - 1))], 3)
    out["ratio_p50"] = round(out["long_p50_ms"] / out["short_p50_ms"], 2)
    return out


def contention(base: str, admin: str, batches: int, rate: float) -> dict[str, Any]:
    """One tenant's 1,000-score batches to a mann-kendall job vs another tenant's single scores."""
    big_token, (big_job,) = make_jobs(base, admin, 1, detector="mann-kendall")
    small_token, small_jobs = make_jobs(base, admin, 4, detector=None)
    done = threading.Event()
    batch_s: list[float] = []

    def post_batches() -> None:
        c = Conn(base, big_token)
        try:
            for b in range(batches):
                # a slow decline: Mann-Kendall's window after the best grows to its bound
                body = {"scores": [{"step": b * 1000 + s, "value": 0.9 - 1e-5 * (b * 1000 + s)
                                    + (0.002 if s % 3 else 0.0)} for s in range(1000)]}
                t = time.perf_counter()
                status, reply = c.send("POST", f"/v1/jobs/{big_job}/scores", body)
                batch_s.append(time.perf_counter() - t)
                assert status == 200 and reply["accepted"] == 1000, reply
        finally:
            done.set()

    latencies: list[float] = []
    c = Conn(base, small_token)
    worker = threading.Thread(target=post_batches)
    t0 = time.monotonic() + 0.05
    worker.start()
    i = 0
    while not done.is_set():
        due = t0 + i / rate
        time.sleep(max(0.0, due - time.monotonic()))
        step = 10**7 + i
        body = {"step": step, "value": rising(step)}
        status, reply = c.send("POST", f"/v1/jobs/{small_jobs[i % 4]}/scores", body)
        assert status == 200, reply
        latencies.append(1000 * (time.monotonic() - due))
        i += 1
    worker.join()
    ms = sorted(latencies)
    return {"batches": batches, "batch_ms_mean": round(1000 * statistics.mean(batch_s), 1),
            "single_requests": len(ms), "rate": rate, "p50_ms": round(statistics.median(ms), 2),
            "p99_ms": round(ms[int(0.99 * (len(ms) - 1))], 2), "max_ms": round(ms[-1], 2)}


class Receiver(BaseHTTPRequestHandler):
    """The slow-neighbour phase's webhook receiver: notes when each signal arrives; under
    ``/slow`` it answers after ``SLOW_S`` (or when the phase ends)."""

    protocol_version = "HTTP/1.1"
    signalled: ClassVar[dict[str, float]] = {}
    done = threading.Event()

    def log_message(self, *_: Any) -> None:
        pass

    def do_POST(self) -> None:
        msg = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        if msg["action"] == "signal":
            self.signalled.setdefault(msg["external_ref"], time.monotonic())
        if self.path.startswith("/slow"):
            self.done.wait(SLOW_S)
        data = json.dumps({"stopped": msg["action"] != "pin"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


SLOW_S = 6.0
WEBHOOK_SECRET = "bench-webhook-secret"


def start_receiver() -> tuple[ThreadingHTTPServer, str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def webhook_tenant(base: str, admin: str, url: str, name: str, refs: list[str]) -> tuple[str, list[str]]:
    """A tenant whose webhook scope is ``url`` and one webhook job per ref posting under it."""
    c = Conn(base, admin)  # a fresh connection: the server closes one idle for 5 s
    scope = {"webhook": {"url_prefixes": [url]}}
    status, tenant = c.send("POST", "/v1/tenants", {"name": name, "scope": scope})
    assert status == 201, tenant
    own = Conn(base, tenant["token"])
    ids = []
    for ref in refs:
        body = {"external_ref": ref, "target": "webhook", "grace_period_s": 0,
                "target_options": {"url": f"{url}/{ref}"}}
        status, job = own.send("POST", "/v1/jobs", body)
        assert status == 201, job
        ids.append(job["id"])
    return str(tenant["token"]), ids


def stop_latencies(base: str, token: str, ids: list[str], refs: list[str]) -> list[float]:
    """Stop each job in turn; ms from the ``stop_now`` request to its signal at the receiver."""
    out = []
    for job, ref in zip(ids, refs, strict=True):
        c = Conn(base, token)  # fresh: a slow delivery may outlast the server's keep-alive
        asked = time.monotonic()
        status, reply = c.send("PUT", f"/v1/jobs/{job}/override", {"override": "stop_now"})
        assert status == 200, reply
        while ref not in Receiver.signalled and time.monotonic() < asked + 30:
            time.sleep(0.005)
        out.append(1000 * (Receiver.signalled.get(ref, float("inf")) - asked))
        time.sleep(0.3)
    return out


def slow_neighbour(base: str, admin: str, recv: str, stops: int, slow_jobs: int) -> dict[str, Any]:
    """Another tenant's stop latency with the worker idle, then beside a tenant whose receiver hangs."""
    tag = f"{os.getpid()}-{time.time_ns()}"
    result: dict[str, Any] = {"stops": stops, "slow_jobs": slow_jobs, "slow_receiver_s": SLOW_S}
    for case in ("idle", "slow_neighbour"):
        if case == "slow_neighbour":
            slow, slow_ids = webhook_tenant(base, admin, f"{recv}/slow", f"slow-{tag}",
                                            [f"s{i}-{tag}" for i in range(slow_jobs)])
            for job in slow_ids:
                body = {"override": "stop_now"}
                status, reply = Conn(base, slow).send("PUT", f"/v1/jobs/{job}/override", body)
                assert status == 200, reply
            time.sleep(0.5)  # its stops are in delivery now, hanging on its receiver
        refs = [f"{case}{i}-{tag}" for i in range(stops)]
        own, ids = webhook_tenant(base, admin, f"{recv}/fast-{case}", f"{case}-{tag}"[:64], refs)
        ms = sorted(stop_latencies(base, own, ids, refs))
        result[case] = {"p50_ms": round(statistics.median(ms), 1), "max_ms": round(ms[-1], 1)}
    Receiver.done.set()
    return result


def _cpu_s(pids: Sequence[int]) -> tuple[float, float] | None:
    """CPU seconds used so far by the processes ``pids`` together: (user + system, system); None
    without pids or where /proc is missing."""
    if not pids:
        return None
    total = kernel = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        except OSError:
            return None
        total += int(fields[11]) + int(fields[12])
        kernel += int(fields[12])
    tick = os.sysconf("SC_CLK_TCK")
    return total / tick, kernel / tick


def _tree_cpu_s(pid: int | None) -> float | None:
    """CPU seconds used so far by process ``pid`` and its children alive now (a PostgreSQL
    postmaster and its backends: the pooled connections live through a phase)."""
    if pid is None:
        return None
    pids = [pid]
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rpartition(")")[2].split()[1]) == pid:
                pids.append(int(stat.parent.name))
        except (OSError, ValueError, IndexError):
            continue
    found = _cpu_s(pids)
    return None if found is None else found[0]


def idle_cost(pids: Sequence[int], db_pid: int | None, seconds: float) -> dict[str, Any]:
    """CPU per second of each server and of the database while no request comes: the fixed
    cost of a replica (the outbox worker's polls, the event loop's timers)."""
    time.sleep(1.0)  # let start-up and the previous phase settle
    servers = [_cpu_s([pid]) for pid in pids]
    database = _tree_cpu_s(db_pid)
    start = time.monotonic()
    time.sleep(seconds)
    wall = time.monotonic() - start
    after = [_cpu_s([pid]) for pid in pids]
    database_after = _tree_cpu_s(db_pid)
    per_server = [None if a is None or b is None else round(1000 * (b[0] - a[0]) / wall, 1)
                  for a, b in zip(servers, after, strict=True)]
    db = (None if database is None or database_after is None
          else round(1000 * (database_after - database) / wall, 1))
    return {"seconds": round(wall, 1), "server_cpu_ms_per_s": per_server, "database_cpu_ms_per_s": db}


def _run_threads(target: Any, n: int) -> None:
    threads = [threading.Thread(target=target, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--url", help="benchmark a running server instead of starting one")
    p.add_argument("--admin-token", default=ADMIN)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--jobs", type=int, default=24)
    p.add_argument("--clients", type=int, default=4)
    p.add_argument("--batch", type=int, default=200)
    p.add_argument("--rate", type=float, default=1000.0)
    p.add_argument("--paced-threads", type=int, default=8)
    p.add_argument("--warm-up", type=float, default=2.0,
                   help="paced phase: seconds of the same load on other jobs before it, not counted "
                        "(the servers' connections and prepared statements warm; 0: measure from cold)")
    p.add_argument("--synchronous", choices=["FULL", "NORMAL"], default="FULL")
    p.add_argument("--server-pid", type=int, help="with --url: the server's pid, to report its CPU time")
    p.add_argument("--phases", help="comma-separated: batched, paced, history, contention, fair, "
                   "idle (each server's and the database's CPU per second with no requests), "
                   "slow-neighbour, first-burst (default: "
                   "batched,paced,history,contention; with --replicas > 1: batched,paced,fair)")
    p.add_argument("--short-history", type=int, default=10)
    p.add_argument("--long-history", type=int, default=5000)
    p.add_argument("--history-requests", type=int, default=200)
    p.add_argument("--contention-batches", type=int, default=20)
    p.add_argument("--contention-rate", type=float, default=50.0)
    p.add_argument("--replicas", type=int, default=1, help="servers on the same database")
    p.add_argument("--db", choices=["sqlite", "postgresql"], default="sqlite")
    p.add_argument("--database-url", help="with --db postgresql: this server instead of a throwaway one")
    p.add_argument("--heavy-quota", type=float, default=500.0, help="fair phase: heavy tenant's scores/s")
    p.add_argument("--light-rate", type=float, default=100.0, help="fair phase: light tenant's requests/s")
    p.add_argument("--neighbour-stops", type=int, default=10, help="slow-neighbour phase: stops measured")
    p.add_argument("--slow-jobs", type=int, default=4, help="slow-neighbour phase: the slow tenant's stops")
    p.add_argument("--burst-rounds", type=int, default=10, help="first-burst phase: new tenants")
    p.add_argument("--burst-size", type=int, default=8, help="first-burst phase: concurrent first requests")
    p.add_argument("--burst-steady", type=int, default=10,
                   help="first-burst phase: rounds of the same on the known tenant (the steady state)")
    p.add_argument("--db-threads", type=int, help="the servers' db_threads (PostgreSQL writer threads per "
                   "replica; default: the service's own default)")
    p.add_argument("--no-fast-path", action="store_true",
                   help="start the servers with EVALSTOP_FAST_PATH=false (every score through the route)")
    p.add_argument("--client", choices=list(PACED), default="raw",
                   help="the paced and fair phases' client: raw HTTP/1.1 over asyncio streams, one task per "
                   "sender (default), or a thread per sender with http.client (the client before issue 21's "
                   "third pass)")
    p.add_argument("--phase-log", action="store_true",
                   help="paced phase: the servers log the phases of their slowest 1 %% of requests and "
                   "their GC pauses (EVALSTOP_PHASES_OUT); the split is added to the figures (--client raw)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    default = "batched,paced,fair" if args.replicas > 1 else "batched,paced,history,contention"
    phases = set((args.phases or default).split(","))
    if args.phase_log and (args.client != "raw" or args.url or not {"paced", "first-burst"} & phases):
        p.error("--phase-log needs the paced or first-burst phase, --client raw and servers this script "
                "starts (no --url)")
    with tempfile.TemporaryDirectory(prefix="evalstop-bench-") as tmp:
        procs: list[subprocess.Popen[bytes]] = []
        stop_pg, db_pid = None, None
        receiver, recv = start_receiver() if "slow-neighbour" in phases else (None, "")
        extra_env = {"EVALSTOP_ADAPTER_SETTINGS": json.dumps({"webhook": {
            "url": f"{recv}/default", "secret": WEBHOOK_SECRET, "timeout_s": 5.0}})} if recv else {}
        if args.no_fast_path:
            extra_env["EVALSTOP_FAST_PATH"] = "false"
        if args.db_threads is not None:
            extra_env["EVALSTOP_DB_THREADS"] = str(args.db_threads)
        phase_out = Path(tmp) / "phases"
        if args.phase_log:
            extra_env[phases_env] = str(phase_out)
        split = None
        try:
            if args.url:
                bases = [args.url]
            else:
                url = args.database_url
                if args.db == "postgresql" and url is None:
                    url, stop_pg, db_pid = start_postgres()
                bases = []
                for _ in range(args.replicas):
                    proc, base = start_server(Path(tmp), args.synchronous, url, extra_env)
                    procs.append(proc)
                    bases.append(base)
            gc.collect()
            gc.freeze()  # no full-collection pauses in the client's own timing (the server does the same)
            result: dict[str, Any] = {"db": args.db, "replicas": len(bases), "synchronous": args.synchronous,
                                      "fast_path": not args.no_fast_path, "client": args.client,
                                      "cpus": os.cpu_count(), "load_avg_before": os.getloadavg()}
            if "batched" in phases:
                token, jobs = make_jobs(bases[0], args.admin_token, args.jobs)
                result["batched"] = batched(bases, token, jobs, args.clients, args.batch, args.seconds)
            if "idle" in phases:
                pids = [args.server_pid] if args.server_pid else [proc.pid for proc in procs]
                result["idle"] = idle_cost(pids, db_pid, args.seconds)
            if "paced" in phases:
                pids = [args.server_pid] if args.server_pid else [proc.pid for proc in procs]
                warmed: str | None = None  # the warm-up's tenant
                if args.warm_up > 0:  # the same load on other jobs of the same tenant, not counted
                    warmed, fresh = make_jobs(bases[0], args.admin_token, args.jobs)
                    result["paced_warm_up"] = PACED[args.client](
                        bases, warmed, fresh, args.rate, args.warm_up, args.paced_threads, pids, db_pid)
                # new jobs, so their histories start empty; of the same tenant, so the steady
                # state is measured (a new tenant's first requests, which take the slow path at
                # once, are in the warm-up's own figures)
                token, fresh = make_jobs(bases[0], args.admin_token, args.jobs, token=warmed)
                logged: dict[str, Any] = {}
                if args.phase_log:
                    phase_split.reset(pids)  # the warm-up is not counted
                    logged["due_header"] = True
                result["paced"] = PACED[args.client](bases, token, fresh, args.rate, args.seconds,
                                                     args.paced_threads, pids, db_pid, **logged)
            if "first-burst" in phases:
                result["first_burst"] = first_burst(bases, args.admin_token, args.burst_rounds,
                                                    args.burst_size, args.burst_steady)
            if "fair" in phases:
                result["fair"] = fair(bases, args.admin_token, args)
            if "history" in phases:
                result["history"] = history_cost(bases[0], args.admin_token, args.short_history,
                                                 args.long_history, args.history_requests)
            if "contention" in phases:
                result["contention"] = contention(bases[0], args.admin_token, args.contention_batches,
                                                  args.contention_rate)
            if "slow-neighbour" in phases:
                result["slow_neighbour"] = slow_neighbour(bases[0], args.admin_token, recv,
                                                          args.neighbour_stops, args.slow_jobs)
            result["load_avg_after"] = os.getloadavg()
        finally:
            if receiver is not None:
                Receiver.done.set()
                receiver.shutdown()
            for proc in procs:
                proc.terminate()
                proc.wait(10)
            if stop_pg is not None:
                stop_pg()
            if args.phase_log:  # each server wrote its log as it shut down
                split = phase_split.split(phase_out, [proc.pid for proc in procs])
    result["db_threads"] = args.db_threads
    if split is not None:  # the paced phase's, after its warm-up; else the whole run's
        result["paced" if "paced" in result else "first_burst"]["phase_split"] = split
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        if "batched" in result:
            b = result["batched"]
            print(f"batched: {b['scores_per_s']} scores/s ({b['scores']} scores in {b['seconds']} s, "
                  f"{args.clients} clients x batches of {args.batch}, {args.db}, {result['replicas']} "
                  f"replica(s))")
        if "paced_warm_up" in result:
            w = result["paced_warm_up"]
            print(f"warm-up, not counted: {args.warm_up:g} s at {w['target_rate']:.0f}/s on other jobs: "
                  f"achieved {w['achieved_rate']}/s, p50 {w['p50_ms']} ms, p99 {w['p99_ms']} ms")
        if "paced" in result:
            q = result["paced"]
            print(f"paced {q['target_rate']:.0f}/s single scores ({args.db}, {result['replicas']} "
                  f"replica(s), db_threads {args.db_threads or 'default'}): achieved {q['achieved_rate']}/s, "
                  f"decision latency p50 {q['p50_ms']} ms, p99 {q['p99_ms']} ms, max {q['max_ms']} ms")
            print(f"  CPU per request: server {q['server_cpu_ms_per_request']} ms (in the kernel "
                  f"{q['server_kernel_ms_per_request']} ms), client {q['client_cpu_ms_per_request']} ms "
                  f"({args.client} client), database {q['database_cpu_ms_per_request']} ms")
            if "phase_split" in q:
                print(f"  tail: {phase_split.line(q['phase_split'])}")
        if "first_burst" in result:
            b = result["first_burst"]
            print(f"a new tenant's first {b['size']} requests at once ({b['rounds']} tenants, to "
                  f"{b['servers']} server(s) that had not seen it): p50 {b['first_p50_ms']} ms, "
                  f"p99 {b['first_p99_ms']} ms, max {b['first_max_ms']} ms; steady state at the same "
                  f"concurrency p50 {b['steady_p50_ms']} ms: "
                  f"ratio p99 / steady p50 {b['ratio_first_p99_to_steady_p50']}")
        if "idle" in result:
            i = result["idle"]
            print(f"idle for {i['seconds']} s: CPU ms/s of each server {i['server_cpu_ms_per_s']}, of the "
                  f"database {i['database_cpu_ms_per_s']}")
        if "fair" in result:
            f = result["fair"]
            q = f["light"]
            print(f"fair: heavy tenant at its quota of {f['heavy_quota_scores_per_s']:.0f} scores/s "
                  f"(accepted {f['heavy_accepted_scores_per_s']}/s, {f['heavy_429s']} x 429); "
                  f"light tenant {q['target_rate']:.0f}/s: p50 {q['p50_ms']} ms, p99 {q['p99_ms']} ms, "
                  f"max {q['max_ms']} ms")
        if "history" in result:
            h = result["history"]
            print(f"single score at {h['long_history']} evals vs at {h['short_history']}: p50 "
                  f"{h['long_p50_ms']} vs {h['short_p50_ms']} ms (ratio {h['ratio_p50']}), p90 "
                  f"{h['long_p90_ms']} vs {h['short_p90_ms']} ms")
        if "contention" in result:
            k = result["contention"]
            print(f"while another tenant posts {k['batches']} x 1,000 scores to a mann-kendall job "
                  f"({k['batch_ms_mean']} ms per batch): {k['single_requests']} single scores at "
                  f"{k['rate']:.0f}/s p50 {k['p50_ms']} ms, p99 {k['p99_ms']} ms, max {k['max_ms']} ms")
        if "slow_neighbour" in result:
            n = result["slow_neighbour"]
            print(f"stop delivery to a tenant's receiver ({n['stops']} stops): idle worker p50 "
                  f"{n['idle']['p50_ms']} ms, max {n['idle']['max_ms']} ms; while another tenant's receiver "
                  f"hangs {n['slow_receiver_s']:.0f} s on its {n['slow_jobs']} stops: p50 "
                  f"{n['slow_neighbour']['p50_ms']} ms, max {n['slow_neighbour']['max_ms']} ms")
        print(f"load average before/after: {result['load_avg_before']} / {result['load_avg_after']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
