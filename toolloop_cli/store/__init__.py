"""SQLite state: runs, admitted calls, receipts, start markers, cache, approvals, controls.

One database file (WAL mode) per state folder, ``state.db``, opened as one ``Store``. The store
is a facade over its parts, one module per concern:

- ``db``: the connection (WAL, migrations, one transaction at a time) and the read layer that
  checks every value read; ``schema``: the migrations;
- ``runs``: runs, their lanes and admitted calls; ``records``: receipts, other output records,
  model answers, those a resumed routed run went past (``went_past``, kept apart from the run's)
  and the hash chain over them; ``approvals``; ``controls``; ``notifications``
  (attempts to tell someone about a run, kept outside the chain);
- ``cache``: the result cache, a class of its own (``Store.cache``);
- ``liveness``: leases and start markers; ``pruning``: deleting runs and compacting;
- ``journal``: the journal writer, the thread that does every write of a running run.

Receipts are committed by the journal thread in batched transactions; a receipt is handed on for
output only after its transaction has committed.
"""

from __future__ import annotations

import os
from typing import Any

from .approvals import Approvals
from .cache import Cache
from .controls import Controls
from .db import dumps as _dumps, loads as _loads, naming_the_run, state_dir
from .journal import JournalWriter
from .liveness import LEASE_SECONDS, Liveness, holder_alive, holder_pid, lease_token
from .notifications import Notifications
from .pruning import Pruning
from .records import Records
from .schema import MIGRATIONS, SCHEMA_VERSION

__all__ = ["LEASE_SECONDS", "MIGRATIONS", "SCHEMA_VERSION", "Cache", "JournalWriter", "Store", "holder_alive",
           "holder_pid", "lease_token", "state_dir", "_dumps", "_loads"]


@naming_the_run
class Store(Pruning, Records, Approvals, Controls, Liveness, Notifications):
    """The journal and cache of one state folder. Methods are synchronous and thread-safe (one
    connection behind a lock); while a run's event loop runs, its writes go through
    ``JournalWriter``, on the journal thread. Every read goes through the read layer
    (``db.py``): a damaged database is a ``StateError`` naming the file (and the run and record
    where known), never a crash further in."""

    def __init__(self, folder: str | os.PathLike, *, create: bool = True,
                 migrations: list[tuple[str, ...]] | None = None):
        super().__init__(folder, create=create, migrations=migrations)
        self.cache = Cache(self)

    # the engine reaches the cache through the store (``RunServices.cache``)
    def get(self, key: str) -> tuple[Any] | None:
        """``(result,)`` for a stored key, else None (a stored ``null`` result is a hit too)."""
        return self.cache.get(key)

    def put(self, key: str, tool: str, result: Any) -> None:
        self.cache.put(key, tool, result)
