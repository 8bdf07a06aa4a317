"""Pause Python's cyclic garbage collector around bulk work on acyclic records."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def cyclic_gc_paused() -> Iterator[None]:
    """Building or simulating millions of small acyclic records makes the cyclic collector
    rescan them again and again and free nothing (a quarter of a large run; see
    bench/README.md). Reference counting still frees them; any cycles are collected after."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def freeze_long_lived() -> int:
    """Collect once, then put every object alive now out of the cyclic collector's reach
    (``gc.freeze``): a server's start-up objects (the app, its routes and models, pools,
    threads) live until it stops, and every full collection would scan them again, a pause
    of every thread. Objects made later are collected as usual. The number frozen."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


def thaw() -> None:
    """Undo :func:`freeze_long_lived` (a server that stops; tests that start many apps)."""
    gc.unfreeze()
