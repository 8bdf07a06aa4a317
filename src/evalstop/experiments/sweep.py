"""The sweep runner: ``run_point(point, seed) -> rows`` over many tasks, cached, local or on Ray.

- :func:`run_point` is pure: one workload for ``seed`` (synthetic or trace-driven), every policy
  of the point on that same workload (common random numbers), one metrics row per policy.
- Results are cached per ``(point content hash, seed, code version)`` as one small JSON file
  each, written atomically as tasks finish, so an interrupted sweep resumes where it stopped and
  a repeated one costs nothing. Identical points of different studies share cache entries.
- Backends: ``workers=1`` runs in this process; otherwise a process pool over the machine's
  cores (no server). With a Ray address, every missing task is a Ray task on that cluster; Ray is
  imported only then (``pip install -e '.[ray]'``).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .. import __version__
from .runner import run_pool
from .task import Row, Task, run_point

__all__ = ["Cache", "Progress", "Row", "Task", "code_version", "execute", "run_point"]

#: Source files whose change can change a simulation result; they define the code version.
_SIM_SOURCES = ("sim", "workloads", "detectors", "schedulers", "_validation.py", "_gc.py", "replay.py",
                "experiments/policies.py", "experiments/runner.py", "experiments/sweep.py",
                "experiments/task.py")


_CODE_VERSION: str | None = None


def code_version() -> str:
    """``VERSION+hash`` of every source file that can change a simulation result."""
    global _CODE_VERSION
    if _CODE_VERSION is None:
        root = Path(__file__).resolve().parent.parent
        digest = hashlib.sha256()
        for name in _SIM_SOURCES:
            path = root / name
            files = sorted(path.rglob("*.py")) if path.is_dir() else [path]
            for f in files:
                digest.update(str(f.relative_to(root)).encode())
                digest.update(f.read_bytes())
        _CODE_VERSION = f"{__version__}+{digest.hexdigest()[:12]}"
    return _CODE_VERSION


class Cache:
    """One JSON file per ``(key, seed, code version)`` under ``root``; None disables caching."""

    def __init__(self, root: Path | None, version: str | None = None) -> None:
        self.root = root
        self.version = version or code_version()

    def _path(self, key: str, seed: int) -> Path:
        assert self.root is not None
        return self.root / key[:2] / f"{key}-s{seed}-{self.version}.json"

    def get(self, key: str, seed: int) -> list[Row] | None:
        if self.root is None:
            return None
        path = self._path(key, seed)
        try:
            rows: list[Row] = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        return rows

    def put(self, key: str, seed: int, rows: list[Row]) -> None:
        if self.root is None:
            return
        path = self._path(key, seed)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(rows))
        os.replace(tmp, path)


class Progress:
    """A progress line with ETA on stderr: redrawn in place on a terminal, a line every
    ``every_s`` seconds otherwise (CI logs). Tasks read from the cache count toward the total
    but not toward the rate: the ETA comes from the tasks run now."""

    def __init__(self, total: int, label: str = "tasks", stream: Any = None, every_s: float = 10.0) -> None:
        self.total, self.label, self.done, self.cached = total, label, 0, 0
        self.stream = stream if stream is not None else sys.stderr
        self.every_s = every_s
        self.started = time.perf_counter()
        self._last = -1e9
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())

    def advance(self, n: int = 1, cached: bool = False) -> None:
        self.done += n
        self.cached += n if cached else 0
        now = time.perf_counter()
        final = self.done >= self.total
        if not (self.tty or final or now - self._last >= self.every_s):
            return
        self._last = now
        self.stream.write(("\r" if self.tty else "") + self.line() + ("\n" if final or not self.tty else ""))
        self.stream.flush()

    def line(self) -> str:
        elapsed = time.perf_counter() - self.started
        pct = 100.0 * self.done / self.total if self.total else 100.0
        ran = self.done - self.cached
        eta = elapsed / ran * (self.total - self.done) if ran else float("nan")
        width = 24
        filled = int(width * self.done / self.total) if self.total else width
        bar = "#" * filled + "." * (width - filled)
        eta_text = "0 s" if self.done >= self.total else "?" if eta != eta else _duration(eta)
        cached = f", {self.cached} from the cache" if self.cached else ""
        return (f"{self.label} [{bar}] {self.done}/{self.total} ({pct:.0f} %{cached}) "
                f"elapsed {_duration(elapsed)} ETA {eta_text}")


def _duration(seconds: float) -> str:
    seconds = max(0.0, seconds)
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def execute(
    tasks: Iterable[Task],
    cache: Cache,
    workers: int | None = None,
    ray_address: str | None = None,
    progress: Progress | None = None,
) -> tuple[dict[tuple[str, int], list[Row]], dict[str, int]]:
    """Rows of every task, from the cache or by running it. Returns ``(rows by (key, seed),
    counts)``, where counts has ``cached`` and ``ran``."""
    unique: dict[tuple[str, int], Task] = {}
    for task in tasks:
        unique.setdefault((task.key, task.seed), task)
    results: dict[tuple[str, int], list[Row]] = {}
    missing: list[Task] = []
    for (key, seed), task in unique.items():
        rows = cache.get(key, seed)
        if rows is None:
            missing.append(task)
        else:
            results[(key, seed)] = rows
    if progress is not None:
        progress.total = len(unique)
        progress.advance(len(results), cached=True) if results else None
    missing.sort(key=lambda t: -t.cost)

    def done(task: Task, rows: list[Row]) -> None:
        cache.put(task.key, task.seed, rows)
        results[(task.key, task.seed)] = rows
        if progress is not None:
            progress.advance()

    if missing:
        if ray_address:
            from ._ray import run_on_ray

            run_on_ray(missing, ray_address, done)
        elif (workers or os.cpu_count() or 1) <= 1 or len(missing) == 1:
            for task in missing:
                done(task, run_point(task.point, task.seed))
        else:
            # finished tasks are cached as they come, so a Ctrl-C loses only the running ones
            run_pool({i: (run_point, (t.point, t.seed)) for i, t in enumerate(missing)},
                     workers or os.cpu_count() or 1, lambda i, rows: done(missing[i], rows))
    return results, {"cached": len(unique) - len(missing), "ran": len(missing)}


