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
