"""Operators' steer and abort for a run (``toolloop steer`` / ``abort``, the web page): added by
whoever controls the run, read by the run before its next turn, and marked with the turn that
read them so a resume applies each again in the same place. Each change is a link of the run's
hash chain."""

from __future__ import annotations

import time

from .db import Database, naming_the_run
from .records import link, linked_text


@naming_the_run
class Controls(Database):
    """The ``controls`` table."""

    def add_control(self, run_id: str, kind: str, message: str | None) -> int:
        """Record an operator's steer or abort for a run; returns its number."""
        def work() -> int:
            n = self.db.execute("SELECT COALESCE(MAX(n), -1) + 1 FROM controls WHERE run_id=?", (run_id,)).fetchone()[0]
            self.db.execute("INSERT INTO controls (run_id, n, kind, message, at, linked) VALUES (?,?,?,?,?,1)",
                            (run_id, n, kind, message, time.time()))
            link(self.db, [(run_id, "control", n, linked_text(self.db, "control", run_id, n))])
            return n

        return self._transaction(work)

    def controls_after(self, run_id: str, n: int) -> list[tuple[int, str, str | None, int | None]]:
        """Controls numbered ``n`` or more: ``(n, kind, message, consumed_at_iteration)``. Read on the
        store's read-only connection: a running loop reads them before each turn and must not wait
        for the journal thread's commit (``Database._read``)."""
        return self._read("SELECT n, kind, message, consumed_at FROM controls WHERE run_id=? AND n>=? ORDER BY n",
                          (run_id, n))

    def consume_control(self, run_id: str, n: int, iteration: int) -> None:
        """The run read control ``n`` before turn ``iteration`` (a resume applies it there again)."""
        with self._writing():
            cur = self.db.execute("UPDATE controls SET consumed_at=? WHERE run_id=? AND n=? AND consumed_at IS NULL",
                                  (iteration, run_id, n))
            text = linked_text(self.db, "control", run_id, n) if cur.rowcount == 1 else None
            if text is not None:
                link(self.db, [(run_id, "control", n, text)])
