"""Notification attempts (``notify``): one ``notification`` record per attempt to tell someone
about a run. They say whether a person was told, not what the run did, so they are kept beside
the run's records and are not links of its hash chain."""

from __future__ import annotations

from .db import Database, dumps, naming_the_run, parse_object


@naming_the_run
class Notifications(Database):
    """The ``notifications`` table."""

    def put_notification(self, record: dict) -> None:
        """Keep one attempt's record, after the run's earlier ones."""
        def work() -> None:
            self.db.execute(
                "INSERT INTO notifications (run_id, n, record) VALUES"
                " (?, (SELECT COALESCE(MAX(n), -1) + 1 FROM notifications WHERE run_id=?), ?)",
                (record["run_id"], record["run_id"], dumps(record)))

        self._transaction(work)

    def notifications_of(self, run_id: str) -> list[dict]:
        """The run's notification records in the order they were made."""
        with self._lock:
            rows = self.db.execute("SELECT n, record FROM notifications WHERE run_id=? ORDER BY n",
                                   (run_id,)).fetchall()
        return [parse_object(text, f"notification record {n}", {"type": str}, run_id) for n, text in rows]
