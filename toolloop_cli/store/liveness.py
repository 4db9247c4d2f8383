"""Who is running a run, and which calls began: leases (one runner or resumer at a time, taken
over only from a holder that is provably gone) and the start markers of at-most-once calls."""

from __future__ import annotations

import os
import socket
import time
import uuid

from .db import Database, naming_the_run

# A held lease outlives any run; it is taken over early only when its holder is provably gone.
LEASE_SECONDS = 7 * 24 * 3600
_HOST = socket.gethostname()


def _proc_stat(pid: int | str) -> tuple[bytes, bytes] | None:
    """(state, start time) of a process from /proc, or None where /proc is not available."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        return fields[0], fields[19]
    except (OSError, IndexError):
        return None


_stat = _proc_stat("self")
_START = _stat[1].decode() if _stat else "0"


def lease_token() -> str:
    """An owner token for leases: pid, host, process start time (so a reused pid is not taken
    for the holder), and a random part."""
    return f"{os.getpid()}:{_HOST}:{_START}:{uuid.uuid4().hex[:12]}"


def holder_alive(owner: str) -> bool | None:
    """Whether the process holding a lease still runs: True, False, or None when it cannot be
    known (another host, or a token of an unknown shape)."""
    parts = owner.split(":")
    if len(parts) != 4 or not parts[0].isdigit() or parts[1] != _HOST:
        return None
    pid, start = int(parts[0]), parts[2]
    if pid == os.getpid():
        return start == _START
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    stat = _proc_stat(pid)
    if stat is None:
        return True
    state, started = stat
    # a killed child its parent has not reaped yet still answers kill(pid, 0)
    return state not in (b"Z", b"X") and (start == "0" or started.decode() == start)


def holder_pid(owner: str | None) -> str:
    return owner.split(":")[0] if owner else "?"


@naming_the_run
class Liveness(Database):
    """A run's lease (in ``runs``) and its calls' start markers (``starts``)."""

    def acquire_lease(self, run_id: str, owner: str, seconds: float | None = None) -> bool:
        """Compare-and-set: take the run if nobody holds it, if we already do, or if the holder
        is provably gone (its process on this host has exited) or its lease has expired."""
        now = time.time()

        def work() -> bool:
            row = self.db.execute("SELECT lease_owner, lease_until FROM runs WHERE run_id=?", (run_id,)).fetchone()
            if row is None:
                return False
            holder, until = row
            if holder is not None and holder != owner:
                alive = holder_alive(holder)
                if alive or (alive is None and until is not None and until >= now):
                    return False
            self.db.execute("UPDATE runs SET lease_owner=?, lease_until=? WHERE run_id=?",
                            (owner, now + (LEASE_SECONDS if seconds is None else seconds), run_id))
            return True

        return self._transaction(work)

    def lease_owner(self, run_id: str) -> str | None:
        with self._lock:
            row = self.db.execute("SELECT lease_owner FROM runs WHERE run_id=?", (run_id,)).fetchone()
        return None if row is None else row[0]

    def release_lease(self, run_id: str, owner: str) -> None:
        with self._lock:
            self.db.execute("UPDATE runs SET lease_owner=NULL, lease_until=NULL WHERE run_id=? AND lease_owner=?",
                            (run_id, owner))

    def mark_started(self, run_id: str, seq: int) -> None:
        """Committed (autocommit) before an at-most-once call runs."""
        with self._lock:
            self.db.execute("INSERT OR REPLACE INTO starts (run_id, seq, started_at) VALUES (?,?,?)",
                            (run_id, seq, time.time()))

    def started_seqs(self, run_id: str) -> set[int]:
        with self._lock:
            return {r[0] for r in self.db.execute("SELECT seq FROM starts WHERE run_id=?", (run_id,))}
