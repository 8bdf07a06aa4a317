"""One named daemon thread that loops until told to stop (the outbox worker, the pull loop)."""

from __future__ import annotations

import threading


class DaemonLoop:
    """``start``/``stop``/``alive`` for a subclass whose ``_run(stop)`` loops until ``stop`` is set."""

    thread_name = "evalstop-loop"
    _thread: threading.Thread | None = None
    _stop_event: threading.Event | None = None

    def _run(self, stop: threading.Event) -> None:
        raise NotImplementedError

    def start(self) -> None:
        self._stop_event = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(self._stop_event,),
                                        name=self.thread_name, daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        if self._stop_event is not None:
            self._stop_event.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()
