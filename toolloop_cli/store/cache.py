"""The result cache: a tool's result by a key that hashes its contract with the arguments, kept
in the state database next to the journal (``prune`` removes the entries only pruned runs wrote)."""

from __future__ import annotations

import time
from typing import Any

from .. import _json
from .db import Database, dumps, naming_the_run


@naming_the_run
class Cache:
    """The ``cache`` table, on the database's connection and lock."""

    def __init__(self, database: Database):
        self._database = database

    @property
    def path(self) -> Any:  # named in a StateError (``naming_the_run``)
        return self._database.path

    def get(self, key: str) -> tuple[Any] | None:
        """``(result,)`` for a stored key, else None (a stored ``null`` result is a hit too)."""
        database = self._database
        with database._lock:
            row = database.db.execute("SELECT result FROM cache WHERE key=?", (key,)).fetchone()
        if row is None:
            return None
        # a damaged entry is not damage to the journal: the cache's reader takes it as a miss with a warning
        if not isinstance(row[0], (str, bytes)):
            raise ValueError("the stored value is not JSON text")
        return (_json.loads(row[0]),)

    def put(self, key: str, tool: str, result: Any) -> None:
        database = self._database
        with database._lock:
            database.db.execute("INSERT OR REPLACE INTO cache (key, tool, result, created_at) VALUES (?,?,?,?)",
                                (key, tool, dumps(result), time.time()))
