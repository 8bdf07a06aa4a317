"""The floor under the service's single-score figures: the least a Python HTTP server on the same
stack can spend per score, measured exactly as ``service_load.py`` measures the service.

Each replica is a bare ASGI app on uvicorn (httptools, uvloop when installed) that, for every
``POST /v1/jobs/{job}/scores``, runs one durable PostgreSQL transaction in a worker thread: lock
the job row, insert the score, write a small JSON state on the job row, commit (two round trips,
``BEGIN`` and ``COMMIT`` sent with the statements) and answers ``{"decision": "continue"}``. No
auth, no rate limit, no rule, no validation: what is left is HTTP, the thread hop, the driver and
the database. The client, the replicas and a throwaway PostgreSQL share the machine, and the
paced phase is ``service_load.py``'s own (same schedule, same latency, same CPU accounting)::

    .venv/bin/python bench/service_floor.py                  # 2 replicas, 1,000 scores/s, 10 s
    .venv/bin/python bench/service_floor.py --replicas 1 --rate 600 --json
    .venv/bin/python bench/service_floor.py --pairs 5        # floor, then the service, 5 times

``--pairs N`` puts each service run beside a floor run from the same minute (this machine's
speed drifts by half over minutes): the pairs, how many runs of each met the target, and the
median ratio of CPU per score, service over floor. ``--on-loop`` makes the floor's database call
on psycopg's asyncio connection on the event loop instead of a worker thread.

The gap between these figures and ``service_load.py --db postgresql --phases paced`` at the same
rate is what evalstop's own request work costs (docs/service.md, "Performance"; the runs:
bench/results/2026-12-02-service-performance.md).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import queue
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import phase_split
from service_load import paced_raw, start_postgres

from evalstop.service import phases

JOBS = 24
#: The floor's transaction: lock the job row and read its state, then insert and write the state
LOCK = "BEGIN; SELECT state FROM jobs WHERE id = %s FOR UPDATE"
WRITE = ("WITH new AS (INSERT INTO scores VALUES (%s, %s, %s)) UPDATE jobs SET state = %s::json "
         "WHERE id = %s; COMMIT")


def make_app(dsn: str, threads: int, on_loop: bool = False) -> Any:
    """The bare app: a pool of ``threads`` autocommit connections, one transaction per POST (with
    ``on_loop``, asyncio connections used on the event loop: no thread hop)."""
    import psycopg

    pool: queue.SimpleQueue[Any] = queue.SimpleQueue()
    apool: asyncio.Queue[Any] = asyncio.Queue()  # with on_loop: up to ``threads``, opened on demand
    opened = 0
    if not on_loop:
        for _ in range(threads):
            pool.put(psycopg.connect(dsn, autocommit=True))

    async def store_on_loop(job: str, step: int, value: float) -> None:
        nonlocal opened
        if apool.empty() and opened < threads:
            opened += 1
            await apool.put(await psycopg.AsyncConnection.connect(dsn, autocommit=True))
        conn = await apool.get()
        try:
            async with psycopg.AsyncClientCursor(conn) as cur:
                await cur.execute(cur.mogrify(LOCK, [job]))
                cur.nextset()
                await cur.fetchone()
                state = json.dumps({"last_step": step, "last_value": value})
                await cur.execute(cur.mogrify(WRITE, [job, step, value, state, job]))
        finally:
            apool.put_nowait(conn)

    def store(job: str, step: int, value: float, trace: phases.Trace | None = None) -> None:
        if trace is not None:
            trace.mark("hand_off")
        conn = pool.get()
        try:
            with psycopg.ClientCursor(conn) as cur:
                cur.execute(cur.mogrify(LOCK, [job]))
                cur.nextset()
                cur.fetchone()
                state = json.dumps({"last_step": step, "last_value": value})
                cur.execute(cur.mogrify(WRITE, [job, step, value, state, job]))
        finally:
            pool.put(conn)
            if trace is not None:
                trace.mark("database")

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        trace = phases.begin(dict(scope["headers"])) if scope["method"] == "POST" else None
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        if scope["method"] == "GET":  # the health check while starting
            out = b"{}"
        else:
            job, score = scope["path"].split("/")[3], json.loads(body)
            phases.mark("loop")
            if on_loop:
                await store_on_loop(job, int(score["step"]), float(score["value"]))
            else:
                await asyncio.to_thread(store, job, int(score["step"]), float(score["value"]), trace)
            phases.mark("hand_back")
            out = json.dumps({"decision": "continue", "accepted": 1}).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(out)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": out})
        phases.end(trace)

    return app


def serve(dsn: str, port: int, threads: int, on_loop: bool) -> None:
    import uvicorn

    phases.install()  # with EVALSTOP_PHASES_OUT set (--phase-log): the same log as the service's
    # uvicorn raises SIGTERM again once drained, with the handler it found: a no-op, so the log is written
    signal.signal(signal.SIGTERM, lambda *_: None)
    uvicorn.run(make_app(dsn, threads, on_loop), host="127.0.0.1", port=port, log_level="warning",
                access_log=False)
    phases.uninstall()


def start_replica(
    dsn: str, threads: int, on_loop: bool, phase_out: Path | None = None
) -> tuple[subprocess.Popen[bytes], str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, **({phases.ENV: str(phase_out)} if phase_out is not None else {})}
    proc = subprocess.Popen([sys.executable, __file__, "--serve", dsn, "--port", str(port),
                             "--threads", str(threads), *(["--on-loop"] if on_loop else [])], env=env)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return proc, f"http://127.0.0.1:{port}"
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("a floor replica did not start within 30 s")


def floor_run(args: argparse.Namespace) -> dict[str, Any]:
    """One run of the floor: a throwaway PostgreSQL, ``args.replicas`` bare replicas, the
    warm-up and the paced phase (``service_load.py``'s own); its figures."""
    url, stop_pg, db_pid = start_postgres()
    dsn = url.replace("postgresql+psycopg", "postgresql")
    procs: list[subprocess.Popen[bytes]] = []
    logs = tempfile.TemporaryDirectory(prefix="evalstop-floor-phases-") if args.phase_log else None
    phase_out = Path(logs.name) if logs is not None else None
    result: dict[str, Any] = {"replicas": args.replicas, "threads": args.threads, "on_loop": args.on_loop,
                              "cpus": os.cpu_count()}
    try:
        import psycopg

        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE jobs (id text PRIMARY KEY, state json)")
            conn.execute("CREATE TABLE scores (job_id text, step bigint, value float8, "
                         "PRIMARY KEY (job_id, step))")
            for j in range(2 * JOBS):
                conn.execute("INSERT INTO jobs VALUES (%s, '{}')", (f"job{j}",))
        bases = []
        for _ in range(args.replicas):
            proc, base = start_replica(dsn, args.threads, args.on_loop, phase_out)
            procs.append(proc)
            bases.append(base)
        jobs = [f"job{j}" for j in range(2 * JOBS)]
        result["load_avg_before"] = os.getloadavg()
        if args.warm_up > 0:  # other jobs, so the measured phase's steps are new
            result["paced_warm_up"] = paced_raw(bases, "-", jobs[JOBS:], args.rate, args.warm_up,
                                                args.paced_threads)
        if phase_out is not None:
            phase_split.reset([proc.pid for proc in procs])
        result["paced"] = paced_raw(bases, "-", jobs[:JOBS], args.rate, args.seconds, args.paced_threads,
                                    [proc.pid for proc in procs], db_pid, due_header=phase_out is not None)
        result["load_avg_after"] = os.getloadavg()
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(10)
        stop_pg()
        if logs is not None and phase_out is not None:  # each replica wrote its log as it stopped
            split = phase_split.split(phase_out, [proc.pid for proc in procs])
            result.setdefault("paced", {})["phase_split"] = split
            logs.cleanup()
    return result


def service_run(args: argparse.Namespace) -> dict[str, Any]:
    """The same paced phase on the service (``service_load.py``, same replicas, rate, seconds,
    warm-up and senders); its figures."""
    cmd = [sys.executable, str(Path(__file__).resolve().parent / "service_load.py"), "--db", "postgresql",
           "--replicas", str(args.replicas), "--phases", "paced", "--rate", str(args.rate),
           "--seconds", str(args.seconds), "--warm-up", str(args.warm_up),
           "--paced-threads", str(args.paced_threads), "--json", *(["--phase-log"] if args.phase_log else []),
           *(["--db-threads", str(args.db_threads)] if args.db_threads else [])]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise SystemExit(f"the service's run failed (exit {done.returncode}): {done.stderr.strip()[-2000:]}")
    return dict(json.loads(done.stdout))


def pairs(args: argparse.Namespace) -> dict[str, Any]:
    """``args.pairs`` runs of the floor, each followed at once by the same run of the service:
    the machine's speed drifts over minutes, so each service figure is read beside a floor
    figure from the same minute. Met: the whole rate achieved (99 %) with p99 <= the target."""
    rows = []
    for _ in range(args.pairs):
        floor, service = floor_run(args)["paced"], service_run(args)["paced"]
        rows.append({"floor": floor, "service": service,
                     "when": time.strftime("%H:%M:%S", time.gmtime()), "load_avg": os.getloadavg()[0]})
    keys = ("achieved_rate", "p50_ms", "p99_ms", "server_cpu_ms_per_request", "database_cpu_ms_per_request",
            "phase_split")

    ratios = [row["service"]["p99_ms"] / row["floor"]["p99_ms"] for row in rows]

    def met(q: dict[str, Any]) -> bool:
        return bool(q["achieved_rate"] >= 0.99 * args.rate and q["p99_ms"] <= args.target_ms)

    return {
        "rate": args.rate, "target_p99_ms": args.target_ms, "replicas": args.replicas,
        "pairs": [{"ended": row["when"], "load_avg": row["load_avg"],
                   **{side: {k: row[side][k] for k in keys if k in row[side]}
                      for side in ("floor", "service")}}
                  for row in rows],
        # the service's p99 over the floor's in the same pair: the median and the worst
        "p99_ratio": {"median": round(statistics.median(ratios), 2), "max": round(max(ratios), 2)},
        "met": {side: sum(met(row[side]) for row in rows) for side in ("floor", "service")},
        # CPU per score of the service over the floor's, server and database (median of the pairs)
        "cpu_ratio": {part: statistics.median(row["service"][f"{part}_cpu_ms_per_request"]
                                              / row["floor"][f"{part}_cpu_ms_per_request"] for row in rows)
                      for part in ("server", "database")},
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--replicas", type=int, default=2)
    p.add_argument("--rate", type=float, default=1000.0)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--warm-up", type=float, default=2.0, help="seconds of the same load first, not counted")
    p.add_argument("--paced-threads", type=int, default=8, help="the client's senders (as service_load.py)")
    p.add_argument("--threads", type=int, default=4, help="each replica's database threads and connections")
    p.add_argument("--on-loop", action="store_true",
                   help="the driver's asyncio connections on the event loop instead of worker threads")
    p.add_argument("--pairs", type=int, default=0,
                   help="N runs of the floor, each followed by the same run of the service, side by side")
    p.add_argument("--target-ms", type=float, default=20.0, help="with --pairs: the p99 target")
    p.add_argument("--db-threads", type=int, help="with --pairs: the service's db_threads (default: its own)")
    p.add_argument("--phase-log", action="store_true",
                   help="each server logs the phases of its slowest 1 %% of requests and its GC pauses; "
                   "the split of the tail is added to the figures")
    p.add_argument("--json", action="store_true")
    p.add_argument("--serve", metavar="DSN", help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.serve:
        serve(args.serve, args.port, args.threads, args.on_loop)
        return 0
    if args.pairs:
        compared = pairs(args)
        if args.json:
            print(json.dumps(compared, indent=2))
            return 0
        print(f"paced {args.rate:.0f}/s single scores, {args.replicas} replica(s): floor, then service, "
              f"{args.pairs} times (achieved/s, p50 ms, p99 ms, server and database CPU ms per score)")
        for i, row in enumerate(compared["pairs"], 1):
            sides = [(side, row[side]) for side in ("floor", "service")]
            print(f"  {i} (ended {row['ended']} UTC, load {row['load_avg']:.1f}): " + "   ".join(
                f"{side} {q['achieved_rate']}/s p50 {q['p50_ms']} p99 {q['p99_ms']} "
                f"cpu {q['server_cpu_ms_per_request']}+{q['database_cpu_ms_per_request']}"
                for side, q in sides))
            for side, q in sides:
                if "phase_split" in q:
                    print(f"     {side} tail: {phase_split.line(q['phase_split'])}")
        print(f"within p99 <= {args.target_ms:g} ms at the whole rate: floor {compared['met']['floor']} of "
              f"{args.pairs}, service {compared['met']['service']} of {args.pairs}")
        ratio = compared["p99_ratio"]
        print(f"p99 service / floor: median {ratio['median']}, max {ratio['max']}")
        print(f"CPU per score, service / floor (median): server {compared['cpu_ratio']['server']:.2f}, "
              f"database {compared['cpu_ratio']['database']:.2f}")
        return 0
    result = floor_run(args)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        q = result["paced"]
        print(f"floor, paced {q['target_rate']:.0f}/s single scores ({args.replicas} replica(s), "
              f"{args.threads} database threads each): achieved {q['achieved_rate']}/s, "
              f"p50 {q['p50_ms']} ms, p99 {q['p99_ms']} ms, max {q['max_ms']} ms")
        print(f"  CPU per request: server {q['server_cpu_ms_per_request']} ms (in the kernel "
              f"{q['server_kernel_ms_per_request']} ms), client {q['client_cpu_ms_per_request']} ms, "
              f"database {q['database_cpu_ms_per_request']} ms")
        print(f"load average before/after: {result['load_avg_before']} / {result['load_avg_after']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
