"""Pruning the state folder: which runs may go, deleting them with everything journaled for
them (and the cache entries only they wrote), and giving the space back."""

from __future__ import annotations

import os
import sqlite3
import time

from .db import naming_the_run
from .liveness import holder_alive
from .runs import Runs


@naming_the_run
class Pruning(Runs):
    """``toolloop prune``'s side of the store."""

    def prunable_runs(self) -> list[dict]:
        """Runs that may be deleted, newest first: finished (ok, failed, rejected, interrupted,
        or marked running by a process that is gone); never one that is paused (stopped, it may
        be resumed) or leased by a live or unknown holder."""
        out = []
        for run in self.list_runs():
            holder = run["lease_owner"]
            if holder is not None and holder_alive(holder) is not False:
                continue
            if run["status"] == "stopped":
                continue
            out.append(run)
        return out

    def delete_runs(self, runs: list[dict]) -> dict[str, int]:
        """Delete runs with everything journaled for them, and the cache entries only they wrote
        and no remaining run read (one transaction). Counts of what went."""
        ids = [r["run_id"] for r in runs]
        if not ids:
            return {"runs": 0, "receipts": 0, "cache_entries": 0}

        def work() -> dict[str, int]:
            self.db.execute("CREATE TEMP TABLE IF NOT EXISTS pruned (run_id TEXT PRIMARY KEY)")
            self.db.execute("DELETE FROM pruned")
            self.db.executemany("INSERT INTO pruned VALUES (?)", ((i,) for i in ids))
            receipts = self.db.execute(
                "SELECT COUNT(*) FROM receipts WHERE run_id IN (SELECT run_id FROM pruned)").fetchone()[0]
            cache = self._unused_cache_keys(runs)
            for table in ("receipts", "records", "controls", "calls", "lanes", "starts", "decisions", "model_answers",
                          "approvals", "chain", "notifications", "went_past", "runs"):
                self.db.execute(f"DELETE FROM {table} WHERE run_id IN (SELECT run_id FROM pruned)")
            self.db.executemany("DELETE FROM cache WHERE key=?", ((k,) for k in cache))
            self.db.execute("DROP TABLE pruned")
            return {"runs": len(ids), "receipts": receipts, "cache_entries": len(cache)}

        return self._transaction(work)

    def _unused_cache_keys(self, runs: list[dict]) -> list[str]:
        # A cache key hashes a tool's contract with the arguments, so a run does not name the keys
        # it wrote. An entry counts as a pruned run's when it was written while that run went, by
        # a tool that missed the cache in it; it stays when a remaining run went at that time or
        # hit the cache of that tool (it may be the entry that run read).
        hits_kept = {r[0] for r in self.db.execute(
            "SELECT DISTINCT json_extract(record, '$.tool') FROM receipts"
            " WHERE run_id NOT IN (SELECT run_id FROM pruned) AND json_extract(record, '$.cache') = 'hit'")}
        kept_windows = [(s, f if f is not None else time.time()) for s, f in self.db.execute(
            "SELECT started_at, finished_at FROM runs WHERE run_id NOT IN (SELECT run_id FROM pruned)")]
        keys: set[str] = set()
        for run in runs:
            tools = [r[0] for r in self.db.execute(
                "SELECT DISTINCT json_extract(record, '$.tool') FROM receipts WHERE run_id=? AND status='ok'"
                " AND json_extract(record, '$.cache') = 'miss'", (run["run_id"],))]
            start, end = run["started_at"], run["finished_at"] if run["finished_at"] is not None else time.time()
            for tool in tools:
                if tool in hits_kept:
                    continue
                for key, created in self.db.execute(
                        "SELECT key, created_at FROM cache WHERE tool=? AND created_at BETWEEN ? AND ?",
                        (tool, start, end)):
                    if not any(s <= created <= f for s, f in kept_windows):
                        keys.add(key)
        return sorted(keys)

    def compact(self) -> bool:
        """Give the space of deleted rows back to the file system (False when another process
        holds the database, in which case later runs reuse the space instead)."""
        with self._lock:
            try:
                self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                self.db.execute("VACUUM")
                self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            except sqlite3.OperationalError:
                return False
        return True

    def size_bytes(self) -> int:
        """The database file with its write-ahead log."""
        total = 0
        for suffix in ("", "-wal"):
            try:
                total += os.path.getsize(str(self.path) + suffix)
            except OSError:
                pass
        return total
