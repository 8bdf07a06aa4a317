"""Where a slow request's time went: its phases, kept for the slowest few, and the garbage
collector's pauses. Off unless ``EVALSTOP_PHASES_OUT`` names a directory (the load benchmarks
set it); then each process writes ``phases-<pid>.json`` there when it shuts down.

A request is stamped (``time.monotonic_ns()``, the clock the benchmark's client schedules by)
when it enters the app, and at each named point after it (:func:`mark`); when it ends it is
kept only if it is among the slowest ``fraction`` of the requests seen (at most ``cap``), in a
heap. A client may send the time it meant to send the request (``x-evalstop-due-ns``) and
the time it did (``x-evalstop-sent-ns``): the first phases are then its own lag (``client``)
and the wait before the app saw the request (``queue``: the kernel, the event loop's backlog,
uvicorn's accept and HTTP parsing). ``SIGUSR1`` empties the log and the pause counts (the
benchmark sends it after its warm-up). Every stamp is a clock read and a list append; with
the log off, each stamping point is one read of a global.
"""

from __future__ import annotations

import contextvars
import gc
import heapq
import json
import os
import signal
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

ENV = "EVALSTOP_PHASES_OUT"
DUE_HEADER, SENT_HEADER = b"x-evalstop-due-ns", b"x-evalstop-sent-ns"
#: a pause this long (ns) is kept for the overlap check even when it is not a full collection
LONG_PAUSE_NS = 1_000_000


class Trace:
    """One request's stamps, in order: ``(name, ns)``; the first is ``"entry"``."""

    __slots__ = ("due", "notes", "sent", "stamps")

    def __init__(self, due: int | None = None, sent: int | None = None) -> None:
        self.due, self.sent = due, sent
        self.stamps: list[tuple[str, int]] = [("entry", time.monotonic_ns())]
        self.notes: dict[str, Any] = {}

    def mark(self, name: str) -> None:
        self.stamps.append((name, time.monotonic_ns()))

    def start(self) -> int:
        return self.due if self.due is not None and self.due <= self.stamps[0][1] else self.stamps[0][1]

    def phases_ms(self) -> dict[str, float]:
        """Each phase's length, named by the stamp that ends it (``client``: due to sent,
        ``queue``: sent, or due, to entry)."""
        out: dict[str, float] = {}
        entry, due = self.stamps[0][1], self.start()
        sent = self.sent if self.sent is not None and due <= self.sent <= entry else due
        if sent > due:
            out["client"] = (sent - due) / 1e6
        if entry > sent:
            out["queue"] = (entry - sent) / 1e6
        for (_, before), (name, at) in zip(self.stamps, self.stamps[1:], strict=False):
            out[name] = out.get(name, 0.0) + (at - before) / 1e6
        return out


class SlowestLog:
    """The slowest ``fraction`` of the traces added (at least ``least``), by their total time.
    It holds the slowest ``cap`` (memory stays bounded however many are added), so the answer
    is exact while ``fraction`` of the count is within ``cap``."""

    def __init__(self, fraction: float = 0.01, cap: int = 2000, least: int = 20) -> None:
        self.fraction, self.cap, self.least = fraction, cap, least
        self.count = 0
        self._heap: list[tuple[int, int, Trace]] = []
        self._reset = False

    def add(self, trace: Trace, end_ns: int) -> None:
        if self._reset:  # asked for by a signal handler: applied here, never mid-push
            self._reset, self.count, self._heap = False, 0, []
        self.count += 1
        item = (end_ns - trace.start(), self.count, trace)
        if len(self._heap) < self.cap:
            heapq.heappush(self._heap, item)
        elif item[0] > self._heap[0][0]:
            heapq.heapreplace(self._heap, item)

    def reset(self) -> None:
        self._reset = True

    def __len__(self) -> int:
        """How many traces it holds (at most ``cap``)."""
        return len(self._heap)

    def slowest(self) -> list[tuple[float, Trace]]:
        """(total ms, trace), slowest first."""
        keep = max(self.least, int(self.count * self.fraction))
        return [(total / 1e6, trace) for total, _, trace in heapq.nlargest(keep, self._heap)]


class GcPauses:
    """A ``gc.callbacks`` hook: per generation, passes, total and longest pause; and the
    windows of the full (generation 2) passes and of any pause over 1 ms, the last ``keep``."""

    def __init__(self, keep: int = 10_000) -> None:
        self.by_gen = {g: [0, 0, 0] for g in range(3)}  # passes, total ns, max ns
        self.windows: deque[tuple[int, int, int]] = deque(maxlen=keep)  # (generation, start, end)
        self._began = 0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        now = time.monotonic_ns()
        if phase == "start":
            self._began = now
            return
        gen, pause = int(info.get("generation", 0)), now - self._began
        counts = self.by_gen[gen]
        counts[0] += 1
        counts[1] += pause
        counts[2] = max(counts[2], pause)
        if gen == 2 or pause >= LONG_PAUSE_NS:
            self.windows.append((gen, self._began, now))

    def reset(self) -> None:
        self.by_gen = {g: [0, 0, 0] for g in range(3)}
        self.windows.clear()

    def overlap(self, start: int, end: int) -> tuple[float, int]:
        """ms of pauses inside [start, end], and how many of them were full collections."""
        ms, full = 0.0, 0
        for gen, began, ended in list(self.windows):
            if began < end and ended > start:
                ms += (min(end, ended) - max(start, began)) / 1e6
                full += gen == 2
        return ms, full

    def summary(self) -> dict[str, Any]:
        return {str(g): {"passes": n, "total_ms": round(t / 1e6, 3), "max_ms": round(m / 1e6, 3)}
                for g, (n, t, m) in self.by_gen.items()}


class Recorder:
    """The slowest requests' traces, every request's phase totals (for the means), GC pauses."""

    def __init__(self, out: Path, fraction: float = 0.01, cap: int = 2000) -> None:
        self.out = out
        self.log = SlowestLog(fraction, cap)
        self.gc = GcPauses()
        self.sums: dict[str, float] = {}
        self._reset = False

    def add(self, trace: Trace) -> None:
        if self._reset:
            self._reset, self.sums = False, {}
        self.log.add(trace, trace.stamps[-1][1])
        for name, ms in trace.phases_ms().items():
            self.sums[name] = self.sums.get(name, 0.0) + ms

    def reset(self) -> None:
        self._reset = True
        self.log.reset()
        self.gc.reset()

    def report(self) -> dict[str, Any]:
        rows = []
        for total, trace in self.log.slowest():
            # pauses while the server held the request (its time in the client or the kernel
            # queue is not the server's: a request seconds behind would overlap every pause)
            gc_ms, full = self.gc.overlap(trace.stamps[0][1], trace.stamps[-1][1])
            rows.append({"total_ms": round(total, 3),
                         "phases": {k: round(v, 3) for k, v in trace.phases_ms().items()},
                         "gc_ms": round(gc_ms, 3), "gc_full": full, **trace.notes})
        return {"pid": os.getpid(), "requests": self.log.count, "gc": self.gc.summary(),
                "phase_ms_sum": {k: round(v, 3) for k, v in self.sums.items()}, "slowest": rows}

    def dump(self) -> Path:
        path = self.out / f"phases-{os.getpid()}.json"
        path.write_text(json.dumps(self.report()))
        return path


RECORDER: Recorder | None = None
_current: contextvars.ContextVar[Trace | None] = contextvars.ContextVar("evalstop_trace", default=None)


def install(out: str | None = None) -> Recorder | None:
    """Turn the log on when ``out`` (default: ``$EVALSTOP_PHASES_OUT``) names a directory."""
    global RECORDER
    out = out if out is not None else os.environ.get(ENV)
    if not out or RECORDER is not None:
        return RECORDER
    RECORDER = Recorder(Path(out))
    RECORDER.out.mkdir(parents=True, exist_ok=True)
    gc.callbacks.append(RECORDER.gc)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGUSR1, lambda *_: RECORDER.reset() if RECORDER is not None else None)
    return RECORDER


def uninstall() -> None:
    """Write the report (if on) and turn the log off."""
    global RECORDER
    if RECORDER is None:
        return
    RECORDER.dump()
    if RECORDER.gc in gc.callbacks:
        gc.callbacks.remove(RECORDER.gc)
    RECORDER = None


def begin(headers: dict[bytes, bytes]) -> Trace | None:
    """A new trace for this request (the current one of its task), or None with the log off."""
    if RECORDER is None:
        return None
    due, sent = headers.get(DUE_HEADER, b""), headers.get(SENT_HEADER, b"")
    trace = Trace(int(due) if due.isdigit() else None, int(sent) if sent.isdigit() else None)
    _current.set(trace)
    return trace


def end(trace: Trace | None) -> None:
    if trace is not None and RECORDER is not None:
        trace.mark("reply")
        RECORDER.add(trace)


def current() -> Trace | None:
    """The running request's trace (this task's, or the task that handed this thread its work)."""
    return None if RECORDER is None else _current.get()


def mark(name: str) -> None:
    trace = current()
    if trace is not None:
        trace.mark(name)


def note(name: str, value: Any) -> None:
    trace = current()
    if trace is not None:
        trace.notes[name] = value


def since(name: str, began_ns: int) -> None:
    """Note the milliseconds since ``began_ns`` (``time.monotonic_ns()``) as ``<name>_ms``: a
    part of a phase (a lookup inside ``admit``)."""
    trace = current()
    if trace is not None:
        trace.notes[f"{name}_ms"] = round((time.monotonic_ns() - began_ns) / 1e6, 3)
