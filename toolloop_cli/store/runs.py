"""Runs and what was admitted for them: a run's row (mode, files, options, labels, contract
snapshot, outcome), its lanes and its calls."""

from __future__ import annotations

import time
from typing import Any, Iterable, Iterator

from ..errors import StateError, UsageError
from .db import Database, checked_row, dumps, loads, naming_the_run, parse_object
from .liveness import LEASE_SECONDS


@naming_the_run
class Runs(Database):
    """The ``runs``, ``lanes`` and ``calls`` tables."""

    def create_run(self, run: dict) -> None:
        with self._lock:
            self.db.execute(
                "INSERT INTO runs (run_id, mode, status, plan_path, plan_sha256, registry_path, contract_sha256,"
                " options, parallel_batch_id, total_calls, started_at, lease_owner, lease_until, labels, contract)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (run["run_id"], run["mode"], "running", run["plan_path"], run["plan_sha256"], run["registry_path"],
                 run["contract_sha256"], dumps(run["options"]), run.get("parallel_batch_id"),
                 run["total_calls"], time.time(), run.get("lease_owner"),
                 None if run.get("lease_owner") is None else time.time() + LEASE_SECONDS,
                 dumps(run.get("labels") or {}), None if run.get("contract") is None else dumps(run["contract"])),
            )

    def describe_run(self, run_id: str, labels: dict[str, str], contract: dict | None) -> None:
        """The run's labels and the snapshot of the contract it runs under (a resume that accepted a
        changed contract records the new one)."""
        with self._lock:
            self.db.execute("UPDATE runs SET labels=?, contract=COALESCE(?, contract) WHERE run_id=?",
                            (dumps(labels), None if contract is None else dumps(contract), run_id))

    def contract_of(self, run_id: str) -> dict | None:
        """The contract snapshot stored with the run, or None (a run journaled before snapshots)."""
        with self._lock:
            row = self.db.execute("SELECT contract FROM runs WHERE run_id=?", (run_id,)).fetchone()
        return None if row is None or row[0] is None else parse_object(row[0], "the run's contract snapshot")

    def set_total_calls(self, run_id: str, total: int) -> None:
        with self._lock:
            self.db.execute("UPDATE runs SET total_calls=? WHERE run_id=?", (total, run_id))

    def journal_calls(self, run_id: str, lanes: Iterable[tuple[int, str | None, Any, str | None]],
                      calls: Iterable[tuple], grow_total: bool = False) -> None:
        """Record the admitted lanes ``(index, item_key, payload, withheld_sha256)`` and calls (one
        transaction). A lane whose payload is withheld (it holds a redacted value) is stored with
        the payload's hash only."""

        def work() -> None:
            self.db.executemany(
                "INSERT INTO lanes (run_id, lane, item_key, payload, payload_sha256) VALUES (?,?,?,?,?)",
                ((run_id, i, k, None if p is None or sha is not None else dumps(p), sha) for i, k, p, sha in lanes),
            )
            rows = [(run_id, *c) for c in calls]
            self.db.executemany(
                "INSERT INTO calls (run_id, seq, lane, item_key, call_key, tool, args, args_sha256)"
                " VALUES (?,?,?,?,?,?,?,?)",
                rows,
            )
            if grow_total:  # lanes streamed into a running run (run --stream)
                self.db.execute("UPDATE runs SET total_calls = total_calls + ? WHERE run_id=?", (len(rows), run_id))

        self._transaction(work)

    def discard_calls(self, run_id: str) -> None:
        """Forget lanes and calls journaled for a run that never started (its plan was rejected)."""
        self._transaction(lambda: (
            self.db.execute("DELETE FROM lanes WHERE run_id=?", (run_id,)),
            self.db.execute("DELETE FROM calls WHERE run_id=?", (run_id,)),
        ))

    def set_option(self, run_id: str, key: str, value: Any) -> None:
        """Change one of a run's recorded options (a resume's new --halt policy)."""
        def work() -> None:
            row = self.db.execute("SELECT options FROM runs WHERE run_id=?", (run_id,)).fetchone()
            options = parse_object(row[0], "the run's options") if row and row[0] else {}
            options[key] = value
            self.db.execute("UPDATE runs SET options=? WHERE run_id=?", (dumps(options), run_id))

        self._transaction(work)

    def set_contract(self, run_id: str, contract_sha256: str) -> None:
        """A resume went on under a changed contract (``--accept-contract-change``)."""
        with self._lock:
            self.db.execute("UPDATE runs SET contract_sha256=? WHERE run_id=?", (contract_sha256, run_id))

    def reopen_run(self, run_id: str) -> None:
        """A resumed run is running again: its old summary no longer describes it."""
        with self._lock:
            self.db.execute("UPDATE runs SET status='running', summary=NULL, finished_at=NULL WHERE run_id=?",
                            (run_id,))

    def finish_run(self, run_id: str, status: str, counts: dict, summary: dict | None = None,
                   owner: str | None = None) -> None:
        """Record the outcome and release the lease (only ``owner``'s, when given)."""
        with self._lock:
            self.db.execute(
                "UPDATE runs SET status=?, counts=?, summary=?, finished_at=?, lease_owner=NULL, lease_until=NULL"
                " WHERE run_id=? AND (? IS NULL OR lease_owner IS NULL OR lease_owner=?)",
                (status, dumps(counts), None if summary is None else dumps(summary), time.time(), run_id,
                 owner, owner),
            )

    def get_run(self, run_id: str) -> dict | None:
        with self._lock:
            cur = self.db.execute("SELECT * FROM runs WHERE run_id=?", (run_id,))
            row = cur.fetchone()
            if row is None:
                return None
            return checked_row(cur, row)

    def child_run(self, parent_run_id: str, parent_seq: int) -> dict | None:
        """The child run a call of ``parent_run_id`` started (a ``plan:`` tool), newest first."""
        with self._lock:
            cur = self.db.execute(
                "SELECT * FROM runs WHERE json_extract(options, '$.parent_run_id')=?"
                " AND json_extract(options, '$.parent_seq')=? ORDER BY started_at DESC LIMIT 1",
                (parent_run_id, parent_seq))
            row = cur.fetchone()
            return None if row is None else checked_row(cur, row)

    def list_runs(self, labels: dict[str, str] | None = None) -> list[dict]:
        """Every run, newest first; with ``labels``, only the runs carrying every one of them."""
        with self._lock:
            cur = self.db.execute("SELECT * FROM runs ORDER BY started_at DESC, run_id DESC")
            runs = [checked_row(cur, r) for r in cur.fetchall()]
        if labels:
            runs = [r for r in runs if all(r["labels"].get(k) == v for k, v in labels.items())]
        return runs

    def find_runs(self, prefix: str) -> list[str]:
        with self._lock:
            return [r[0] for r in self.db.execute(
                "SELECT run_id FROM runs WHERE run_id LIKE ? ESCAPE '\\' ORDER BY run_id",
                (prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%",))]

    def resolve_run_id(self, run_id: str) -> str:
        """The run with this id, or with this unique prefix; a usage error otherwise."""
        with self._lock:
            if self.db.execute("SELECT 1 FROM runs WHERE run_id=?", (run_id,)).fetchone() is not None:
                return run_id
        matches = self.find_runs(run_id)
        if len(matches) == 1:
            return matches[0]
        if len(matches) > 1:
            raise UsageError(f"run id '{run_id}' is ambiguous: {', '.join(matches[:5])}")
        raise UsageError(f"no run '{run_id}' in {self.path} (see 'toolloop runs list')")

    def lane_of_item_key(self, run_id: str, item_key: str) -> int | None:
        """The journaled lane of ``run_id`` with this item key (the first, should there be two)."""
        # the item-key index, never MIN(lane), which the planner answers by scanning the run's lanes
        with self._lock:
            rows = self.db.execute("SELECT lane FROM lanes INDEXED BY lanes_by_item_key WHERE run_id=? AND item_key=?",
                                   (run_id, item_key)).fetchall()
        return min(r[0] for r in rows) if rows else None

    def lanes_of(self, run_id: str) -> list[tuple[int, str | None, Any, str | None]]:
        """``(index, item_key, payload, withheld_sha256)``: payload None and a hash when withheld."""
        with self._lock:
            rows = self.db.execute(
                "SELECT lane, item_key, payload, payload_sha256 FROM lanes WHERE run_id=? ORDER BY lane",
                (run_id,)).fetchall()
        return [(i, k, None if p is None else parse_object(p, f"the payload of lane {i}"), sha) for i, k, p, sha in rows]

    def calls_of(self, run_id: str) -> Iterator[tuple]:
        with self._lock:
            rows = self.db.execute(
                "SELECT seq, lane, item_key, call_key, tool, args, args_sha256 FROM calls WHERE run_id=? ORDER BY seq",
                (run_id,)).fetchall()
            lanes = {r[0] for r in self.db.execute("SELECT lane FROM lanes WHERE run_id=?", (run_id,))}
        for seq, lane, item, ck, tool, args, sha in rows:
            if lane not in lanes and (lanes or lane != 0):  # a run journaled without lanes has one, lane 0
                raise StateError(f"call seq {seq} is in lane {lane}, which the journal does not hold")
            yield seq, lane, item, ck, tool, (None if args is None else loads(args, f"the arguments of call seq {seq}")), sha
