"""Approval requests and their answers: asked by a gated call, answered once by a
person (compare-and-set), used once. Every change is linked in the run's hash chain in the
transaction that makes it, so an answer edited in the database is never acted on."""

from __future__ import annotations

import time
from typing import Any

from .db import Database, checked_row, dumps, loads, naming_the_run
from .records import link, linked_text


@naming_the_run
class Approvals(Database):
    """The ``approvals`` table."""

    def request_approval(self, run_id: str, item_key: str | None, call_key: str, args_sha256: str) -> None:
        """A gated call waits for a person: a pending request (an existing answer is kept)."""
        with self._writing():
            cur = self.db.execute(
                "INSERT OR IGNORE INTO approvals (run_id, item_key, call_key, args_sha256, state, requested_at)"
                " VALUES (?,?,?,?,?,?)", (run_id, item_key or "", call_key, args_sha256, "pending", time.time()))
            if cur.rowcount == 1:
                self._link_approval(run_id, item_key, call_key)

    def approval(self, run_id: str, item_key: str | None, call_key: str) -> dict | None:
        with self._lock:
            cur = self.db.execute("SELECT * FROM approvals WHERE run_id=? AND item_key=? AND call_key=?",
                                  (run_id, item_key or "", call_key))
            row = cur.fetchone()
            if row is None:
                return None
            out = checked_row(cur, row)
        if out.get("args") is not None:
            out["args"] = loads(out["args"], f"the approved arguments of call '{call_key}'")
        return out

    def answer_approval(self, run_id: str, item_key: str | None, call_key: str, state: str,
                        args_sha256: str | None = None, args: Any = None, message: str | None = None,
                        approver: str | None = None) -> bool:
        """Answer a pending request once (compare-and-set); False when none is pending."""
        with self._writing():
            cur = self.db.execute(
                "UPDATE approvals SET state=?, args_sha256=COALESCE(?, args_sha256), args=?, message=?, approver=?,"
                " answered_at=? WHERE run_id=? AND item_key=? AND call_key=? AND state='pending'",
                (state, args_sha256, None if args is None else dumps(args), message, approver, time.time(), run_id,
                 item_key or "", call_key))
            if cur.rowcount == 1:
                self._link_approval(run_id, item_key, call_key)
            return cur.rowcount == 1

    def answer_all_pending(self, run_id: str, state: str, message: str | None = None,
                           approver: str | None = None) -> list[tuple[str | None, str]]:
        """Answer every request of a run that is pending now, in one transaction; the
        ``(item_key, call_key)`` of each one answered (those answered meanwhile are left alone)."""

        def work() -> list[tuple[str | None, str]]:
            keys = self.db.execute(
                "SELECT item_key, call_key FROM approvals WHERE run_id=? AND state='pending' ORDER BY item_key, call_key",
                (run_id,)).fetchall()
            self.db.execute(
                "UPDATE approvals SET state=?, message=?, approver=?, answered_at=? WHERE run_id=? AND state='pending'",
                (state, message, approver, time.time(), run_id))
            for item, ck in keys:
                self._link_approval(run_id, item, ck)
            return [(item or None, ck) for item, ck in keys]

        return self._transaction(work)

    def use_approval(self, run_id: str, item_key: str | None, call_key: str) -> bool:
        """An approval is used once: approved -> used (compare-and-set)."""
        with self._writing():
            cur = self.db.execute(
                "UPDATE approvals SET state='used' WHERE run_id=? AND item_key=? AND call_key=? AND state='approved'",
                (run_id, item_key or "", call_key))
            if cur.rowcount == 1:
                self._link_approval(run_id, item_key, call_key)
            return cur.rowcount == 1

    def reopen_approval(self, run_id: str, item_key: str | None, call_key: str, args_sha256: str) -> None:
        """A used or stale answer no longer holds: the call waits for a person again."""
        with self._writing():
            self.db.execute(
                "UPDATE approvals SET state='pending', args_sha256=?, args=NULL, message=NULL, approver=NULL,"
                " answered_at=NULL, requested_at=? WHERE run_id=? AND item_key=? AND call_key=?",
                (args_sha256, time.time(), run_id, item_key or "", call_key))
            self._link_approval(run_id, item_key, call_key)

    def pending_approvals(self, run_id: str) -> list[dict]:
        with self._lock:
            cur = self.db.execute("SELECT * FROM approvals WHERE run_id=? AND state='pending' ORDER BY item_key, call_key",
                                  (run_id,))
            return [checked_row(cur, r) for r in cur.fetchall()]

    def pending_requests(self, run_id: str | None = None) -> list[dict]:
        """Pending approval requests (of one run, or of all), each with its admitted call (seq,
        lane, tool, journaled arguments, ``None`` when withheld) and its run's files; in run then
        input order."""
        sql = (
            "SELECT a.run_id, NULLIF(a.item_key, '') AS item_key, a.call_key, a.args_sha256, a.requested_at,"
            " c.seq, c.lane, c.tool, c.args, r.plan_path, r.registry_path, r.options"
            " FROM approvals a JOIN runs r ON r.run_id = a.run_id"
            " LEFT JOIN calls c ON c.run_id = a.run_id AND COALESCE(c.item_key, '') = a.item_key"
            " AND c.call_key = a.call_key"
            " WHERE a.state = 'pending'" + (" AND a.run_id = ?" if run_id is not None else "") +
            " ORDER BY r.started_at, a.run_id, c.seq, a.item_key, a.call_key")
        with self._lock:
            cur = self.db.execute(sql, (run_id,) if run_id is not None else ())
            rows = [checked_row(cur, r) for r in cur.fetchall()]
        for row in rows:
            row["args"] = None if row["args"] is None else loads(row["args"], f"the arguments of call seq {row['seq']}",
                                                                 row["run_id"])
        return rows

    def _link_approval(self, run_id: str, item_key: str | None, call_key: str) -> None:
        """Link a request as it stands now (inside the transaction that changed it); a request
        journaled before requests were links gets its number in the run first."""
        keys = (run_id, item_key or "", call_key)
        row = self.db.execute("SELECT n FROM approvals WHERE run_id=? AND item_key=? AND call_key=?", keys).fetchone()
        if row is None:
            return
        n = row[0]
        if n is None:
            n = self.db.execute("SELECT COALESCE(MAX(n), -1) + 1 FROM approvals WHERE run_id=?", (run_id,)).fetchone()[0]
            self.db.execute("UPDATE approvals SET n=? WHERE run_id=? AND item_key=? AND call_key=?", (n, *keys))
        link(self.db, [(run_id, "approval", n, linked_text(self.db, "approval", run_id, n))])
