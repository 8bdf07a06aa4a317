"""One leader among the replicas that share a database, for work that must run once (the pull
pollers): on PostgreSQL, the holder of a session advisory lock; on SQLite, the only process.

The lock lives on a connection of its own and is released when that connection closes, so a
replica that is SIGKILLed loses it as soon as the server notices the dead connection; another
replica takes it on its next try. A leader checks its connection each round and steps down
when it is gone.
"""

from __future__ import annotations

from typing import Any

from .store import Store
from .store.lock import SessionLock

#: The advisory lock key of the pull pollers ("evalpull" as an int64).
PULL_LOCK = int.from_bytes(b"evalpull", "big") & 0x7FFF_FFFF_FFFF_FFFF


class Leadership(SessionLock):
    def __init__(self, store: Store, key: int = PULL_LOCK) -> None:
        super().__init__(store, key)

    def __enter__(self) -> Leadership:
        return self

    def __exit__(self, *_: Any) -> None:
        self.release()
