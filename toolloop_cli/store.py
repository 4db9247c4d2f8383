"""SQLite state: runs, admitted calls, receipts, start markers, cache, decisions, approvals.

One database file (WAL mode) per state folder, ``state.db``. Receipts are committed by a
journal thread in batched transactions; a receipt is handed on for output only after its
transaction has committed. The schema carries its version in ``PRAGMA user_version`` and is
brought up to date by ordered migrations when the database is opened; a database written by a
newer toolloop is refused rather than guessed at.

Durability: WAL with ``synchronous=NORMAL``. A committed transaction survives the death of the
process at any instant (SIGKILL included); a power loss may drop the last few commits but never
leaves a half-written one (SQLite checks every WAL frame and ignores an incomplete tail).
"""

from __future__ import annotations

import contextlib
import os
import queue
import socket
import sqlite3
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from . import _json
from ._statedb import MODEL_ANSWER, RECEIPT, SUMMARY, Connection, naming_the_run, parse_json, parse_object, schema_problem
from .chain import EMPTY_SHA256, RESET, Link, link_sha256, record_sha256
from .errors import RunError, StateError, UsageError

# Each entry brings the schema from version i to i + 1; append, never edit a shipped entry.
MIGRATIONS: list[tuple[str, ...]] = [
    (  # 1: the first journal layout
        """CREATE TABLE IF NOT EXISTS runs (
            run_id TEXT PRIMARY KEY,
            mode TEXT NOT NULL,
            status TEXT NOT NULL,
            plan_path TEXT NOT NULL,
            plan_sha256 TEXT NOT NULL,
            registry_path TEXT NOT NULL,
            contract_sha256 TEXT NOT NULL,
            options TEXT NOT NULL,
            parallel_batch_id TEXT,
            total_calls INTEGER NOT NULL DEFAULT 0,
            counts TEXT,
            summary TEXT,
            started_at REAL NOT NULL,
            finished_at REAL,
            lease_owner TEXT,
            lease_until REAL
        )""",
        """CREATE TABLE IF NOT EXISTS lanes (
            run_id TEXT NOT NULL,
            lane INTEGER NOT NULL,
            item_key TEXT,
            payload TEXT,
            PRIMARY KEY (run_id, lane)
        )""",
        # args is NULL when the arguments held a redacted value, or come from the lane payload
        """CREATE TABLE IF NOT EXISTS calls (
            run_id TEXT NOT NULL,
            seq INTEGER NOT NULL,
            lane INTEGER NOT NULL,
            item_key TEXT,
            call_key TEXT NOT NULL,
            tool TEXT NOT NULL,
            args TEXT,
            args_sha256 TEXT,
            PRIMARY KEY (run_id, seq)
        )""",
        """CREATE TABLE IF NOT EXISTS starts (
            run_id TEXT NOT NULL,
            seq INTEGER NOT NULL,
            started_at REAL NOT NULL,
            PRIMARY KEY (run_id, seq)
        )""",
        """CREATE TABLE IF NOT EXISTS receipts (
            run_id TEXT NOT NULL,
            seq INTEGER NOT NULL,
            status TEXT NOT NULL,
            record TEXT NOT NULL,
            PRIMARY KEY (run_id, seq)
        )""",
        """CREATE TABLE IF NOT EXISTS cache (
            key TEXT PRIMARY KEY,
            tool TEXT NOT NULL,
            result TEXT NOT NULL,
            created_at REAL NOT NULL
        )""",
        """CREATE TABLE IF NOT EXISTS decisions (
            run_id TEXT NOT NULL,
            iteration INTEGER NOT NULL,
            record TEXT NOT NULL,
            PRIMARY KEY (run_id, iteration)
        )""",
        """CREATE TABLE IF NOT EXISTS model_answers (
            run_id TEXT NOT NULL,
            n INTEGER NOT NULL,
            role TEXT NOT NULL,
            request_sha256 TEXT NOT NULL,
            answer TEXT NOT NULL,
            PRIMARY KEY (run_id, n)
        )""",
        # state: pending | approved | rejected | used
        """CREATE TABLE IF NOT EXISTS approvals (
            run_id TEXT NOT NULL,
            item_key TEXT NOT NULL DEFAULT '',
            call_key TEXT NOT NULL,
            args_sha256 TEXT NOT NULL,
            state TEXT NOT NULL,
            args TEXT,
            message TEXT,
            PRIMARY KEY (run_id, item_key, call_key)
        )""",
    ),
    (  # 2: a lane payload holding a redacted value is withheld; its hash lets resume check the rebuilt one
        "ALTER TABLE lanes ADD COLUMN payload_sha256 TEXT",
    ),
    (  # 3: lanes spooled from a stream are read back a page of lanes at a time
        "CREATE INDEX IF NOT EXISTS calls_by_lane ON calls (run_id, lane, seq)",
    ),
    (  # 4: output records other than receipts (a routed loop's decisions, supervisor and guardrail
       # records), in commit order, each with the number of receipts printed before it
        """CREATE TABLE IF NOT EXISTS records (
            run_id TEXT NOT NULL,
            n INTEGER NOT NULL,
            type TEXT NOT NULL,
            receipts_before INTEGER NOT NULL,
            record TEXT NOT NULL,
            PRIMARY KEY (run_id, n)
        )""",
        "ALTER TABLE model_answers ADD COLUMN record TEXT",
    ),
    (  # 5: operators' steer and abort for a run, read by the run before its next turn
        """CREATE TABLE IF NOT EXISTS controls (
            run_id TEXT NOT NULL,
            n INTEGER NOT NULL,
            kind TEXT NOT NULL,
            message TEXT,
            at REAL NOT NULL,
            consumed_at INTEGER,
            PRIMARY KEY (run_id, n)
        )""",
    ),
    (  # 6: who answered an approval request, and when it was asked and answered
        "ALTER TABLE approvals ADD COLUMN approver TEXT",
        "ALTER TABLE approvals ADD COLUMN requested_at REAL",
        "ALTER TABLE approvals ADD COLUMN answered_at REAL",
    ),
    (  # 7: a run's labels and the contract it used (the registry declaration as data), and the
       # hash chain over each run's records in commit order (see chain.py)
        "ALTER TABLE runs ADD COLUMN labels TEXT",
        "ALTER TABLE runs ADD COLUMN contract TEXT",
        """CREATE TABLE IF NOT EXISTS chain (
            run_id TEXT NOT NULL,
            n INTEGER NOT NULL,
            kind TEXT NOT NULL,
            ref INTEGER NOT NULL,
            record_sha256 TEXT NOT NULL,
            link_sha256 TEXT NOT NULL,
            PRIMARY KEY (run_id, n)
        )""",
    ),
    (  # 8: a streamed lane's item key is looked up in the journal, not kept in memory
        "CREATE INDEX IF NOT EXISTS lanes_by_item_key ON lanes (run_id, item_key)",
    ),
    (  # 9: approval requests and answers and operator controls are links of the run's hash chain:
       # a request's number in its run is its ref; NULL (and a control's NULL ``linked``) marks a
       # row journaled before they were, which is never acted on without a link of its own
        "ALTER TABLE approvals ADD COLUMN n INTEGER",
        "ALTER TABLE controls ADD COLUMN linked INTEGER",
        # a request's or a control's last link is found without reading the run's receipts' links
        "CREATE INDEX IF NOT EXISTS chain_approvals ON chain (run_id, ref, n) WHERE kind='approval'",
        "CREATE INDEX IF NOT EXISTS chain_controls ON chain (run_id, ref, n) WHERE kind='control'",
    ),
]

SCHEMA_VERSION = len(MIGRATIONS)


def state_dir(flag: str | os.PathLike | None) -> Path:
    """``--state-dir`` wins, then ``TOOLLOOP_STATE_DIR``, then ``./.toolloop``."""
    if flag:
        return Path(flag)
    env = os.environ.get("TOOLLOOP_STATE_DIR")
    return Path(env) if env else Path(".toolloop")


def _dumps(value: Any) -> str:
    return _json.dumps(value).decode()


def _loads(text: str | bytes, what: str = "a stored value", run_id: str | None = None) -> Any:
    """A JSON column's value; damage (a ``StateError`` naming ``what``) when it does not parse."""
    return parse_json(text, what, run_id)


def _keep_out_of_git(folder: Path, ours: bool) -> None:
    """A state folder toolloop created (or the default ``.toolloop``) holds a ``.gitignore`` of
    ``*``, so the journal never lands in a repository by accident. A folder the user named that
    already existed is left as it is."""
    marker = folder / ".gitignore"
    if ours and not marker.exists():
        marker.write_text("# toolloop's state (journal and cache): never committed\n*\n", encoding="utf-8")


@naming_the_run
class Store:
    """The journal and cache. Methods are synchronous and thread-safe (one connection behind a
    lock); the engine reaches them through ``JournalWriter`` (receipts) or short calls (cache,
    start markers). Every read goes through ``_statedb``: a damaged database is a ``StateError``
    naming the file (and the run and record where known), never a crash further in."""

    def __init__(self, folder: str | os.PathLike, *, create: bool = True,
                 migrations: list[tuple[str, ...]] | None = None):
        folder = Path(folder)
        self.path = folder / "state.db"
        from ._paths import look_at

        if (looked := look_at(self.path)).kind == "bad":  # a --state-dir no file system takes
            from ._text import excerpt

            raise UsageError(f"cannot open the state database in {excerpt(str(folder))}: {looked.why}")
        if not create and not self.path.exists():
            raise UsageError(f"no state database at {self.path} (run a plan first, or pass --state-dir)")
        try:
            new_folder = not folder.exists()
            folder.mkdir(parents=True, exist_ok=True)
            _keep_out_of_git(folder, new_folder or folder.name == ".toolloop")
            self.db = Connection(sqlite3.connect(self.path, timeout=30, check_same_thread=False,
                                                 isolation_level=None), self.path)
        except (OSError, sqlite3.Error) as exc:
            raise UsageError(f"cannot open the state database {self.path}: {exc}") from None
        self._lock = threading.RLock()
        try:
            self.db.execute("PRAGMA busy_timeout=30000")
            mode = self._to_wal()
            if str(mode).lower() != "wal":
                raise UsageError(f"the state database {self.path} cannot use WAL journaling (got '{mode}');"
                                 " put --state-dir on a local file system")
            self.db.execute("PRAGMA synchronous=NORMAL")
            self._migrate(MIGRATIONS if migrations is None else migrations)
            # a table dropped or renamed, or a column gone, is named now, before anything is run
            problem = schema_problem(self.db, MIGRATIONS if migrations is None else migrations)
            if problem is not None:
                raise StateError(problem, path=self.path)
        except sqlite3.DatabaseError as exc:
            self.db.close()
            raise StateError(f"it is not a usable toolloop state database ({exc})", path=self.path) from None
        except BaseException:
            self.db.close()
            raise

    def _to_wal(self) -> str:
        # Switching a new file to WAL takes an exclusive lock and, when another process does the
        # same at that moment, fails with "locked" without waiting: retry for a bounded time.
        deadline = time.monotonic() + 30
        while True:
            try:
                return self.db.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.005)

    @property
    def schema_version(self) -> int:
        with self._lock:
            return int(self.db.execute("PRAGMA user_version").fetchone()[0])

    def _migrate(self, migrations: list[tuple[str, ...]]) -> None:
        target = len(migrations)
        with self._lock:
            if self.schema_version == target:
                return
            # IMMEDIATE: two processes opening a fresh folder at once migrate it once.
            self.db.execute("BEGIN IMMEDIATE")
            try:
                version = self.schema_version
                if version < 0:
                    raise StateError(f"its schema version is {version}, which no toolloop writes", path=self.path)
                if version > target:
                    raise RunError(
                        f"the state database {self.path} has schema version {version}, newer than this toolloop"
                        f" understands ({target}); upgrade toolloop, or use another --state-dir"
                    )
                for v in range(version, target):
                    for stmt in migrations[v]:
                        self.db.execute(stmt)
                self.db.execute(f"PRAGMA user_version={target}")
                self.db.execute("COMMIT")
            except BaseException:
                self.db.execute("ROLLBACK")
                raise

    def close(self) -> None:
        with self._lock:
            self.db.close()

    def _transaction(self, work: Callable[[], Any]) -> Any:
        with self._writing():
            return work()

    @contextlib.contextmanager
    def _writing(self) -> Iterator[None]:
        """One transaction (a change and its link in the run's hash chain commit together)."""
        with self._lock:
            self.db.execute("BEGIN IMMEDIATE")
            try:
                yield
            except BaseException:
                self.db.execute("ROLLBACK")
                raise
            self.db.execute("COMMIT")

    # --- runs -------------------------------------------------------------------------
    def create_run(self, run: dict) -> None:
        with self._lock:
            self.db.execute(
                "INSERT INTO runs (run_id, mode, status, plan_path, plan_sha256, registry_path, contract_sha256,"
                " options, parallel_batch_id, total_calls, started_at, lease_owner, lease_until, labels, contract)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (run["run_id"], run["mode"], "running", run["plan_path"], run["plan_sha256"], run["registry_path"],
                 run["contract_sha256"], _dumps(run["options"]), run.get("parallel_batch_id"),
                 run["total_calls"], time.time(), run.get("lease_owner"),
                 None if run.get("lease_owner") is None else time.time() + LEASE_SECONDS,
                 _dumps(run.get("labels") or {}), None if run.get("contract") is None else _dumps(run["contract"])),
            )

    def describe_run(self, run_id: str, labels: dict[str, str], contract: dict | None) -> None:
        """The run's labels and the snapshot of the contract it runs under (a resume that accepted a
        changed contract records the new one)."""
        with self._lock:
            self.db.execute("UPDATE runs SET labels=?, contract=COALESCE(?, contract) WHERE run_id=?",
                            (_dumps(labels), None if contract is None else _dumps(contract), run_id))

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
                ((run_id, i, k, None if p is None or sha is not None else _dumps(p), sha) for i, k, p, sha in lanes),
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
            self.db.execute("UPDATE runs SET options=? WHERE run_id=?", (_dumps(options), run_id))

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
                (status, _dumps(counts), None if summary is None else _dumps(summary), time.time(), run_id,
                 owner, owner),
            )

    def get_run(self, run_id: str) -> dict | None:
        with self._lock:
            cur = self.db.execute("SELECT * FROM runs WHERE run_id=?", (run_id,))
            row = cur.fetchone()
            if row is None:
                return None
            return _row(cur, row)

    def child_run(self, parent_run_id: str, parent_seq: int) -> dict | None:
        """The child run a call of ``parent_run_id`` started (a ``plan:`` tool), newest first."""
        with self._lock:
            cur = self.db.execute(
                "SELECT * FROM runs WHERE json_extract(options, '$.parent_run_id')=?"
                " AND json_extract(options, '$.parent_seq')=? ORDER BY started_at DESC LIMIT 1",
                (parent_run_id, parent_seq))
            row = cur.fetchone()
            return None if row is None else _row(cur, row)

    def list_runs(self, labels: dict[str, str] | None = None) -> list[dict]:
        """Every run, newest first; with ``labels``, only the runs carrying every one of them."""
        with self._lock:
            cur = self.db.execute("SELECT * FROM runs ORDER BY started_at DESC, run_id DESC")
            runs = [_row(cur, r) for r in cur.fetchall()]
        if labels:
            runs = [r for r in runs if all(r["labels"].get(k) == v for k, v in labels.items())]
        return runs

    def find_runs(self, prefix: str) -> list[str]:
        with self._lock:
            return [r[0] for r in self.db.execute(
                "SELECT run_id FROM runs WHERE run_id LIKE ? ESCAPE '\\' ORDER BY run_id",
                (prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%",))]

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
            yield seq, lane, item, ck, tool, (None if args is None else _loads(args, f"the arguments of call seq {seq}")), sha

    # --- leases (one runner or resumer at a time) -------------------------------------
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

    # --- receipts and start markers ---------------------------------------------------
    def mark_started(self, run_id: str, seq: int) -> None:
        """Committed (autocommit) before an at-most-once call runs."""
        with self._lock:
            self.db.execute("INSERT OR REPLACE INTO starts (run_id, seq, started_at) VALUES (?,?,?)",
                            (run_id, seq, time.time()))

    # --- approvals (SPEC 6.4) -------------------------------------------------------------
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
            out = _row(cur, row)
        if out.get("args") is not None:
            out["args"] = _loads(out["args"], f"the approved arguments of call '{call_key}'")
        return out

    def answer_approval(self, run_id: str, item_key: str | None, call_key: str, state: str,
                        args_sha256: str | None = None, args: Any = None, message: str | None = None,
                        approver: str | None = None) -> bool:
        """Answer a pending request once (compare-and-set); False when none is pending."""
        with self._writing():
            cur = self.db.execute(
                "UPDATE approvals SET state=?, args_sha256=COALESCE(?, args_sha256), args=?, message=?, approver=?,"
                " answered_at=? WHERE run_id=? AND item_key=? AND call_key=? AND state='pending'",
                (state, args_sha256, None if args is None else _dumps(args), message, approver, time.time(), run_id,
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
            return [_row(cur, r) for r in cur.fetchall()]

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
            rows = [_row(cur, r) for r in cur.fetchall()]
        for row in rows:
            row["args"] = None if row["args"] is None else _loads(row["args"], f"the arguments of call seq {row['seq']}",
                                                                  row["run_id"])
        return rows

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

    def started_seqs(self, run_id: str) -> set[int]:
        with self._lock:
            return {r[0] for r in self.db.execute("SELECT seq FROM starts WHERE run_id=?", (run_id,))}

    def put_receipts(self, records: list[dict]) -> None:
        """Commit receipt records (one transaction); a later record for the same call replaces
        the earlier one (resume settles a cancelled write as interrupted, or re-runs a call)."""
        self.put_records(records)

    def put_records(self, receipts: list[dict], others: list[tuple[dict, int]] = ()) -> None:  # type: ignore[assignment]
        """Commit receipts and other output records in one transaction, each with its link in
        its run's hash chain (receipts first, then the others, in the order given). ``others``
        are ``(record, receipts_before)``: the record and how many receipts were printed before it."""
        rows = [(r["run_id"], r["seq"], r["status"], _dumps(r)) for r in receipts]

        def work() -> None:
            links: list[tuple[str, str, int, str]] = []
            if rows:
                self.db.executemany(
                    "INSERT OR REPLACE INTO receipts (run_id, seq, status, record) VALUES (?,?,?,?)", rows)
                links += [(run_id, "receipt", seq, text) for run_id, seq, _status, text in rows]
            next_n: dict[str, int] = {}
            for rec, before in others:
                run_id, text = rec["run_id"], _dumps(rec)
                n = next_n.get(run_id)
                if n is None:
                    n = self.db.execute("SELECT COALESCE(MAX(n), -1) + 1 FROM records WHERE run_id=?",
                                        (run_id,)).fetchone()[0]
                next_n[run_id] = n + 1
                self.db.execute("INSERT INTO records (run_id, n, type, receipts_before, record) VALUES (?,?,?,?,?)",
                                (run_id, n, rec["type"], before, text))
                links.append((run_id, "record", n, text))
            self._link(links)

        self._transaction(work)

    def _link(self, entries: list[tuple[str, str, int, str]]) -> None:
        """Append ``(run_id, kind, ref, stored text)`` to their runs' hash chains, in order
        (inside the transaction that stores the records)."""
        heads: dict[str, tuple[int, str]] = {}
        rows = []
        for run_id, kind, ref, text in entries:
            head = heads.get(run_id)
            if head is None:
                row = self.db.execute("SELECT n, link_sha256 FROM chain WHERE run_id=? ORDER BY n DESC LIMIT 1",
                                      (run_id,)).fetchone()
                head = (row[0], row[1]) if row is not None else (-1, "")
            digest = EMPTY_SHA256 if text is None else record_sha256(text)
            link = link_sha256(head[1], kind, ref, digest)
            head = heads[run_id] = (head[0] + 1, link)
            rows.append((run_id, head[0], kind, ref, digest, link))
        if rows:
            self.db.executemany("INSERT INTO chain (run_id, n, kind, ref, record_sha256, link_sha256)"
                                " VALUES (?,?,?,?,?,?)", rows)

    def chain_head(self, run_id: str) -> str | None:
        """The last link of the run's hash chain (None before its first record)."""
        with self._lock:
            row = self.db.execute("SELECT link_sha256 FROM chain WHERE run_id=? ORDER BY n DESC LIMIT 1",
                                  (run_id,)).fetchone()
        return None if row is None else row[0]

    def chain_of(self, run_id: str) -> tuple[list[Link], dict[tuple[str, int], str]]:
        """The run's links in order, and the records the journal holds now: (kind, ref) -> text."""
        with self._lock:
            links = [Link(*r) for r in self.db.execute(
                "SELECT n, kind, ref, record_sha256, link_sha256 FROM chain WHERE run_id=? ORDER BY n", (run_id,))]
            current: dict[tuple[str, int], str] = {}
            for kind, sql in (("receipt", "SELECT seq, record FROM receipts WHERE run_id=?"),
                              ("record", "SELECT n, record FROM records WHERE run_id=?"),
                              ("model_answer", "SELECT n, record FROM model_answers WHERE run_id=? AND record IS NOT NULL")):
                for ref, text in self.db.execute(sql, (run_id,)):
                    _record(kind, ref, text)  # one that does not parse is damage, not a mismatch
                    current[(kind, ref)] = text
            for kind, sql in (("approval", "SELECT * FROM approvals WHERE run_id=? AND n IS NOT NULL"),
                              ("control", "SELECT * FROM controls WHERE run_id=? AND linked IS NOT NULL")):
                cur = self.db.execute(sql, (run_id,))
                for row in cur.fetchall():
                    text = _linked_row(cur, row)
                    current[(kind, row[[d[0] for d in cur.description].index("n")])] = text
        return links, current

    # --- approval requests and answers, operator controls: links of the run's chain ------------
    def link_holds(self, run_id: str, kind: str, ref: int | None) -> bool:
        """Whether approval request or control ``ref`` (``kind`` ``approval`` or ``control``) is,
        as it stands now, what its last link says, and that link follows from the one before it.
        False for a row journaled before such rows were links (it has no link of its own)."""
        if kind not in ("approval", "control"):
            raise ValueError(kind)
        if ref is None:
            return False
        with self._lock:
            text = self._linked_text(kind, run_id, ref)
            last = self.db.execute(  # kind is one of two literals: the partial index answers it
                f"SELECT n, record_sha256, link_sha256 FROM chain WHERE run_id=? AND kind='{kind}' AND ref=?"
                " ORDER BY n DESC LIMIT 1", (run_id, ref)).fetchone()
            if text is None or last is None or record_sha256(text) != last[1]:
                return False
            before = self.db.execute("SELECT link_sha256 FROM chain WHERE run_id=? AND n=?",
                                     (run_id, last[0] - 1)).fetchone()
        return link_sha256(before[0] if before else "", kind, ref, last[1]) == last[2]

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
        self._link([(run_id, "approval", n, self._linked_text("approval", run_id, n))])

    def _linked_text(self, kind: str, run_id: str, ref: int) -> str | None:
        """The text an approval request or a control is linked as, or None when there is no such
        row (or, for a control, it was journaled before controls were links)."""
        sql = ("SELECT * FROM approvals WHERE run_id=? AND n=?" if kind == "approval"
               else "SELECT * FROM controls WHERE run_id=? AND n=? AND linked IS NOT NULL")
        cur = self.db.execute(sql, (run_id, ref))
        row = cur.fetchone()
        return None if row is None else _linked_row(cur, row)

    def clear_records(self, run_id: str) -> None:
        """Forget a run's other output records (a resumed routed run records them again as it
        replays); the hash chain says so with a reset link."""
        def work() -> None:
            self.db.execute("DELETE FROM records WHERE run_id=?", (run_id,))
            self._link([(run_id, RESET, -1, None)])  # type: ignore[list-item]

        self._transaction(work)

    def records_of(self, run_id: str) -> list[tuple[int, dict]]:
        """The run's other output records in commit order: ``(receipts_before, record)``."""
        with self._lock:
            rows = self.db.execute("SELECT n, receipts_before, record FROM records WHERE run_id=? ORDER BY n",
                                   (run_id,)).fetchall()
        return [(before, _record("record", n, rec)) for n, before, rec in rows]

    # --- operators (steer, abort) -------------------------------------------------------
    def add_control(self, run_id: str, kind: str, message: str | None) -> int:
        """Record an operator's steer or abort for a run; returns its number."""
        def work() -> int:
            n = self.db.execute("SELECT COALESCE(MAX(n), -1) + 1 FROM controls WHERE run_id=?", (run_id,)).fetchone()[0]
            self.db.execute("INSERT INTO controls (run_id, n, kind, message, at, linked) VALUES (?,?,?,?,?,1)",
                            (run_id, n, kind, message, time.time()))
            self._link([(run_id, "control", n, self._linked_text("control", run_id, n))])
            return n

        return self._transaction(work)

    def controls_after(self, run_id: str, n: int) -> list[tuple[int, str, str | None, int | None]]:
        """Controls numbered ``n`` or more: ``(n, kind, message, consumed_at_iteration)``."""
        with self._lock:
            return [tuple(r) for r in self.db.execute(  # type: ignore[misc]
                "SELECT n, kind, message, consumed_at FROM controls WHERE run_id=? AND n>=? ORDER BY n", (run_id, n))]

    def consume_control(self, run_id: str, n: int, iteration: int) -> None:
        """The run read control ``n`` before turn ``iteration`` (a resume applies it there again)."""
        with self._writing():
            cur = self.db.execute("UPDATE controls SET consumed_at=? WHERE run_id=? AND n=? AND consumed_at IS NULL",
                                  (iteration, run_id, n))
            text = self._linked_text("control", run_id, n) if cur.rowcount == 1 else None
            if text is not None:
                self._link([(run_id, "control", n, text)])

    # --- model answers (routed runs: replay and resume reuse them) ---------------------
    def put_model_answer(self, answer: dict) -> None:
        """Commit one model answer (a ``model_answer`` record: run_id, n, role, request_sha256, ...)
        with its link in the run's hash chain."""
        text = _dumps(answer)

        def work() -> None:
            self.db.execute(
                "INSERT OR REPLACE INTO model_answers (run_id, n, role, request_sha256, answer, record)"
                " VALUES (?,?,?,?,?,?)",
                (answer["run_id"], answer["n"], answer["role"], answer["request_sha256"], answer.get("text") or "",
                 text))
            self._link([(answer["run_id"], "model_answer", answer["n"], text)])

        self._transaction(work)

    def model_answers_of(self, run_id: str) -> list[dict]:
        with self._lock:
            rows = self.db.execute("SELECT n, record FROM model_answers WHERE run_id=? AND record IS NOT NULL ORDER BY n",
                                   (run_id,)).fetchall()
        return [_record("model_answer", n, text) for n, text in rows]

    def receipts_of(self, run_id: str) -> list[dict]:
        with self._lock:
            rows = self.db.execute("SELECT seq, record FROM receipts WHERE run_id=? ORDER BY seq", (run_id,)).fetchall()
        return [_record("receipt", seq, text) for seq, text in rows]

    def counts_of(self, run_id: str) -> dict[str, int]:
        """Receipts per status so far (for a run that has no summary yet)."""
        with self._lock:
            return dict(self.db.execute(
                "SELECT status, COUNT(*) FROM receipts WHERE run_id=? GROUP BY status ORDER BY status", (run_id,)))

    # --- pruning ----------------------------------------------------------------------
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
                          "approvals", "chain", "runs"):
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

    # --- cache ------------------------------------------------------------------------
    def get(self, key: str) -> tuple[Any] | None:
        """``(result,)`` for a stored key, else None (a stored ``null`` result is a hit too)."""
        with self._lock:
            row = self.db.execute("SELECT result FROM cache WHERE key=?", (key,)).fetchone()
        if row is None:
            return None
        # a damaged entry is not damage to the journal: the cache's reader takes it as a miss with a warning
        if not isinstance(row[0], (str, bytes)):
            raise ValueError("the stored value is not JSON text")
        return (_json.loads(row[0]),)

    def put(self, key: str, tool: str, result: Any) -> None:
        with self._lock:
            self.db.execute("INSERT OR REPLACE INTO cache (key, tool, result, created_at) VALUES (?,?,?,?)",
                            (key, tool, _dumps(result), time.time()))

    # --- watching -----------------------------------------------------------------------
    def data_version(self) -> int:
        """A number that changes whenever another connection (another process, another Store)
        commits to the database: a cheap way to tell that there is something new to read."""
        with self._lock:
            return int(self.db.execute("PRAGMA data_version").fetchone()[0])


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


def _row(cur: Any, row: tuple) -> dict:
    out = {d[0]: v for d, v in zip(cur.description, row)}
    try:
        for key in ("options", "counts", "summary"):
            if out.get(key):
                out[key] = parse_object(out[key], f"the run's {key}", SUMMARY if key == "summary" else None)
        if "labels" in out:
            out["labels"] = parse_object(out["labels"], "the run's labels") if out["labels"] else {}
            if not all(isinstance(v, str) for v in out["labels"].values()):
                raise StateError("the run's labels are not all text")
        if isinstance(out.get("counts"), dict) and not all(type(v) is int for v in out["counts"].values()):
            raise StateError("the run's counts are not all integers")
    except StateError as exc:
        exc.run_id = exc.run_id or out.get("run_id")
        raise
    return out


def _linked_row(cur: Any, row: tuple) -> str:
    """An approval request or control as its link hashes it: the row's columns but its keys'
    numbers, NULL ones left out (so a column added later does not change older rows' text), as
    canonical JSON."""
    return _json.dumps({d[0]: v for d, v in zip(cur.description, row)
                        if d[0] not in ("run_id", "n", "linked") and v is not None}, canonical=True).decode()


#: The keys every reader of a journaled record relies on, by the kind of record
_RECORD_KEYS: dict[str, dict[str, Any]] = {
    "receipt": RECEIPT,
    "record": {"type": str},
    "model_answer": MODEL_ANSWER,
}


def _record(kind: str, ref: int, text: str) -> dict:
    """A journaled record read back: a JSON object with the keys its readers rely on, of the type
    its table holds (a decision in the receipts' table would be shown as what it is not)."""
    from .chain import describe

    what = describe(kind, ref)
    rec = parse_object(text, what, _RECORD_KEYS[kind])
    shown = rec["type"]
    wrong = shown in ("receipt", "model_answer", "summary") if kind == "record" else shown != kind
    if wrong:
        raise StateError(f"{what} is a '{shown[:40]}' record")
    return rec


class JournalWriter:
    """Commits receipts on its own thread in batched transactions, and hands committed records
    on, in the order they were handed in for output, to ``after_commit`` on a second thread —
    so nothing reaches standard output before it is durable, the event loop never waits on the
    disk, and a slow reader of the output never holds back the journal.

    Two ways in: ``commit(record)`` as soon as a call is settled (completion order: the journal
    holds it even while it waits for earlier calls before it may be printed), then
    ``emit(record)`` when its turn to be printed comes; or ``writer(record)`` for both at once.
    Both go through one FIFO queue, so a record's commit always precedes its emission.

    If ``after_commit`` fails (the reader went away), ``on_error`` is called once and nothing
    more is handed on; receipts are still committed. If a commit fails, ``on_error`` is called
    and nothing more is committed or handed on. ``close()`` re-raises the first failure.
    """

    _STOP = object()
    _COMMIT, _EMIT, _BOTH, _OTHER, _SYNC, _OTHER_QUIET = 1, 2, 3, 4, 8, 16

    def __init__(self, store: Store, after_commit: Callable[[dict], None], max_batch: int = 512,
                 on_error: Callable[[BaseException], None] | None = None,
                 after_batch: Callable[[], None] | None = None):
        self.store = store
        self.after_commit = after_commit
        self.after_batch = after_batch
        self.on_error = on_error
        self.max_batch = max_batch
        self._q: queue.SimpleQueue = queue.SimpleQueue()
        self._out: queue.SimpleQueue = queue.SimpleQueue()
        self.error: BaseException | None = None
        self.commit_error: BaseException | None = None
        self.committed = 0
        self._commit_thread = threading.Thread(target=self._commit_loop, name="toolloop-journal", daemon=True)
        self._emit_thread = threading.Thread(target=self._emit_loop, name="toolloop-output", daemon=True)
        self._commit_thread.start()
        self._emit_thread.start()

    def __call__(self, record: dict) -> None:
        """Commit a receipt, then hand it on."""
        self._q.put((self._BOTH, record))

    def record(self, record: dict, receipts_before: int, emit: bool = True) -> None:
        """Commit any other output record (a decision, a supervisor record...), then hand it on
        (unless ``emit`` is false: a child run's records are journaled, not printed)."""
        self._q.put((self._OTHER if emit else self._OTHER_QUIET, (record, receipts_before)))

    def commit(self, record: dict) -> None:
        self._q.put((self._COMMIT, record))

    def emit(self, record: dict) -> None:
        """Hand on a record whose commit was requested earlier (or that the journal holds)."""
        self._q.put((self._EMIT, record))

    def sync(self) -> None:
        """Block until everything queued before this call is committed (or the journal failed)."""
        done = threading.Event()
        self._q.put((self._SYNC, done))
        done.wait()

    def _fail(self, exc: BaseException) -> None:
        if self.error is None:
            self.error = exc
            if self.on_error is not None:
                self.on_error(exc)

    def _next_batch(self) -> list:
        batch = [self._q.get()]
        while len(batch) < self.max_batch:
            try:
                batch.append(self._q.get_nowait())
            except queue.Empty:
                break
        return batch

    def _commit_loop(self) -> None:
        while True:
            batch = self._next_batch()
            stop = any(b is self._STOP for b in batch)
            syncs = [b[1] for b in batch if b is not self._STOP and b[0] == self._SYNC]
            items = [b for b in batch if b is not self._STOP and b[0] != self._SYNC]
            if items and self.commit_error is None:
                self._commit(items)
            for done in syncs:
                done.set()
            if stop:
                self._out.put(self._STOP)
                return

    def _commit(self, items: list) -> None:
        """Commit one batch in one transaction; then hand on, in order, what is to be printed."""
        records = [r for kind, r in items if kind & self._COMMIT]
        others = [r for kind, r in items if kind in (self._OTHER, self._OTHER_QUIET)]
        try:
            if others:
                self.store.put_records(records, others)
            elif records:
                self.store.put_receipts(records)
        except BaseException as exc:  # noqa: BLE001 - reported by close() on the caller's thread
            self.commit_error = exc
            self._fail(exc)
            return
        self.committed += len(records)
        out = [r if kind != self._OTHER else r[0] for kind, r in items if kind & self._EMIT or kind == self._OTHER]
        if out:
            self._out.put(out)

    def _emit_loop(self) -> None:
        while True:
            records = self._out.get()
            if records is self._STOP:
                return
            if self.error is not None:
                continue
            try:
                for r in records:
                    self.after_commit(r)
                if self.after_batch is not None:
                    self.after_batch()
            except BaseException as exc:  # noqa: BLE001 - reported by close() on the caller's thread
                self._fail(exc)

    def close(self) -> None:
        """Wait until everything queued is committed and handed on; re-raise a failure."""
        self._q.put(self._STOP)
        self._commit_thread.join()
        self._emit_thread.join()
        if self.error is not None:
            raise self.error
