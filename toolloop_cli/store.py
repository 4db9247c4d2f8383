"""SQLite state: runs, admitted calls, receipts, start markers, cache, decisions, approvals.

One database file (WAL mode) per state folder. Receipts are written by a journal thread in
batched transactions; a receipt is handed on for output only after its transaction commits.
"""

from __future__ import annotations

import os
import queue
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import orjson

from .errors import RunError, UsageError

SCHEMA_VERSION = 1

_MIGRATIONS: list[str] = [
    # version 1
    """
    CREATE TABLE IF NOT EXISTS runs (
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
    );
    CREATE TABLE IF NOT EXISTS lanes (
        run_id TEXT NOT NULL,
        lane INTEGER NOT NULL,
        item_key TEXT,
        payload TEXT,
        PRIMARY KEY (run_id, lane)
    );
    CREATE TABLE IF NOT EXISTS calls (
        run_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        lane INTEGER NOT NULL,
        item_key TEXT,
        call_key TEXT NOT NULL,
        tool TEXT NOT NULL,
        args TEXT,             -- NULL when the arguments held a redacted value, or came from a payload
        args_sha256 TEXT,
        PRIMARY KEY (run_id, seq)
    );
    CREATE TABLE IF NOT EXISTS starts (
        run_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        started_at REAL NOT NULL,
        PRIMARY KEY (run_id, seq)
    );
    CREATE TABLE IF NOT EXISTS receipts (
        run_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        status TEXT NOT NULL,
        record TEXT NOT NULL,
        PRIMARY KEY (run_id, seq)
    );
    CREATE TABLE IF NOT EXISTS cache (
        key TEXT PRIMARY KEY,
        tool TEXT NOT NULL,
        result TEXT NOT NULL,
        created_at REAL NOT NULL
    );
    CREATE TABLE IF NOT EXISTS decisions (
        run_id TEXT NOT NULL,
        iteration INTEGER NOT NULL,
        record TEXT NOT NULL,
        PRIMARY KEY (run_id, iteration)
    );
    CREATE TABLE IF NOT EXISTS model_answers (
        run_id TEXT NOT NULL,
        n INTEGER NOT NULL,
        role TEXT NOT NULL,
        request_sha256 TEXT NOT NULL,
        answer TEXT NOT NULL,
        PRIMARY KEY (run_id, n)
    );
    CREATE TABLE IF NOT EXISTS approvals (
        run_id TEXT NOT NULL,
        item_key TEXT NOT NULL DEFAULT '',
        call_key TEXT NOT NULL,
        args_sha256 TEXT NOT NULL,
        state TEXT NOT NULL,      -- pending | approved | rejected | used
        args TEXT,
        message TEXT,
        PRIMARY KEY (run_id, item_key, call_key)
    );
    """,
]


def state_dir(flag: str | None) -> Path:
    """``--state-dir`` wins, then ``TOOLLOOP_STATE_DIR``, then ``./.toolloop``."""
    if flag:
        return Path(flag)
    env = os.environ.get("TOOLLOOP_STATE_DIR")
    return Path(env) if env else Path(".toolloop")


def _dumps(value: Any) -> str:
    return orjson.dumps(value).decode()


class Store:
    """The journal and cache. Methods are synchronous; the engine reaches them through
    ``JournalWriter`` (receipts) or short calls (cache, start markers)."""

    def __init__(self, folder: str | os.PathLike, *, create: bool = True):
        folder = Path(folder)
        self.path = folder / "state.db"
        if not create and not self.path.exists():
            raise UsageError(f"no state database at {self.path} (run a plan first, or pass --state-dir)")
        try:
            folder.mkdir(parents=True, exist_ok=True)
            self.db = sqlite3.connect(self.path, timeout=30, check_same_thread=False, isolation_level=None)
        except (OSError, sqlite3.Error) as exc:
            raise UsageError(f"cannot open the state database {self.path}: {exc}") from None
        self._lock = threading.RLock()
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.execute("PRAGMA busy_timeout=30000")
        self._migrate()

    def _migrate(self) -> None:
        with self._lock:
            version = self.db.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise RunError(
                    f"{self.path} was written by a newer toolloop (schema {version} > {SCHEMA_VERSION}); upgrade toolloop"
                )
            for v in range(version, SCHEMA_VERSION):
                self.db.execute("BEGIN IMMEDIATE")
                try:
                    for stmt in _MIGRATIONS[v].split(";"):
                        if stmt.strip():
                            self.db.execute(stmt)
                    self.db.execute(f"PRAGMA user_version={v + 1}")
                    self.db.execute("COMMIT")
                except BaseException:
                    self.db.execute("ROLLBACK")
                    raise

    def close(self) -> None:
        with self._lock:
            self.db.close()

    # --- runs -------------------------------------------------------------------------
    def create_run(self, run: dict) -> None:
        with self._lock:
            self.db.execute(
                "INSERT INTO runs (run_id, mode, status, plan_path, plan_sha256, registry_path, contract_sha256,"
                " options, parallel_batch_id, total_calls, started_at) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                (run["run_id"], run["mode"], "running", run["plan_path"], run["plan_sha256"], run["registry_path"],
                 run["contract_sha256"], _dumps(run["options"]), run.get("parallel_batch_id"),
                 run["total_calls"], time.time()),
            )

    def journal_calls(self, run_id: str, lanes: Iterable[tuple[int, str | None, Any]],
                      calls: Iterable[tuple]) -> None:
        """Record the admitted lanes and calls (one transaction)."""
        with self._lock:
            self.db.execute("BEGIN")
            self.db.executemany(
                "INSERT INTO lanes (run_id, lane, item_key, payload) VALUES (?,?,?,?)",
                ((run_id, i, k, None if p is None else _dumps(p)) for i, k, p in lanes),
            )
            self.db.executemany(
                "INSERT INTO calls (run_id, seq, lane, item_key, call_key, tool, args, args_sha256)"
                " VALUES (?,?,?,?,?,?,?,?)",
                ((run_id, *c) for c in calls),
            )
            self.db.execute("COMMIT")

    def finish_run(self, run_id: str, status: str, counts: dict, summary: dict | None = None) -> None:
        with self._lock:
            self.db.execute(
                "UPDATE runs SET status=?, counts=?, summary=?, finished_at=?, lease_owner=NULL, lease_until=NULL"
                " WHERE run_id=?",
                (status, _dumps(counts), None if summary is None else _dumps(summary), time.time(), run_id),
            )

    def get_run(self, run_id: str) -> dict | None:
        with self._lock:
            cur = self.db.execute("SELECT * FROM runs WHERE run_id=?", (run_id,))
            row = cur.fetchone()
            if row is None:
                return None
            return _row(cur, row)

    def list_runs(self) -> list[dict]:
        with self._lock:
            cur = self.db.execute("SELECT * FROM runs ORDER BY started_at DESC, run_id DESC")
            return [_row(cur, r) for r in cur.fetchall()]

    def find_runs(self, prefix: str) -> list[str]:
        with self._lock:
            return [r[0] for r in self.db.execute(
                "SELECT run_id FROM runs WHERE run_id LIKE ? ESCAPE '\\' ORDER BY run_id",
                (prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%",))]

    def lanes_of(self, run_id: str) -> list[tuple[int, str | None, Any]]:
        with self._lock:
            return [(i, k, None if p is None else orjson.loads(p)) for i, k, p in self.db.execute(
                "SELECT lane, item_key, payload FROM lanes WHERE run_id=? ORDER BY lane", (run_id,))]

    def calls_of(self, run_id: str) -> Iterator[tuple]:
        with self._lock:
            rows = self.db.execute(
                "SELECT seq, lane, item_key, call_key, tool, args, args_sha256 FROM calls WHERE run_id=? ORDER BY seq",
                (run_id,)).fetchall()
        for seq, lane, item, ck, tool, args, sha in rows:
            yield seq, lane, item, ck, tool, (None if args is None else orjson.loads(args)), sha

    # --- leases (one resumer at a time) ---------------------------------------------------
    def acquire_lease(self, run_id: str, owner: str, seconds: float = 3600 * 24) -> bool:
        """Compare-and-set: take the run if nobody holds a lease on it, or if the holder's
        process is gone (a crashed run or resumer)."""
        now = time.time()
        with self._lock:
            cur = self.db.execute(
                "UPDATE runs SET lease_owner=?, lease_until=? WHERE run_id=? AND"
                " (lease_owner IS NULL OR lease_until < ? OR lease_owner=?)",
                (owner, now + seconds, run_id, now, owner),
            )
            if cur.rowcount == 1:
                return True
            row = self.db.execute("SELECT lease_owner FROM runs WHERE run_id=?", (run_id,)).fetchone()
            if row is None or row[0] is None or _pid_alive(row[0]):
                return False
            cur = self.db.execute(
                "UPDATE runs SET lease_owner=?, lease_until=? WHERE run_id=? AND lease_owner=?",
                (owner, now + seconds, run_id, row[0]),
            )
            return cur.rowcount == 1

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
        """Committed before an at-most-once call runs."""
        with self._lock:
            self.db.execute("INSERT OR REPLACE INTO starts (run_id, seq, started_at) VALUES (?,?,?)",
                            (run_id, seq, time.time()))

    def started_seqs(self, run_id: str) -> set[int]:
        with self._lock:
            return {r[0] for r in self.db.execute("SELECT seq FROM starts WHERE run_id=?", (run_id,))}

    def put_receipts(self, records: list[dict]) -> None:
        with self._lock:
            self.db.execute("BEGIN")
            self.db.executemany(
                "INSERT OR REPLACE INTO receipts (run_id, seq, status, record) VALUES (?,?,?,?)",
                ((r["run_id"], r["seq"], r["status"], _dumps(r)) for r in records),
            )
            self.db.execute("COMMIT")

    def receipts_of(self, run_id: str) -> list[dict]:
        with self._lock:
            return [orjson.loads(r[0]) for r in self.db.execute(
                "SELECT record FROM receipts WHERE run_id=? ORDER BY seq", (run_id,))]

    # --- cache ------------------------------------------------------------------------
    def get(self, key: str) -> tuple[Any] | None:
        with self._lock:
            row = self.db.execute("SELECT result FROM cache WHERE key=?", (key,)).fetchone()
        return None if row is None else (orjson.loads(row[0]),)

    def put(self, key: str, tool: str, result: Any) -> None:
        with self._lock:
            self.db.execute("INSERT OR REPLACE INTO cache (key, tool, result, created_at) VALUES (?,?,?,?)",
                            (key, tool, _dumps(result), time.time()))


def _pid_alive(owner: str) -> bool:
    head = owner.split(":")[0]
    if not head.isdigit():
        return False
    try:
        os.kill(int(head), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def lease_token() -> str:
    """An owner token for leases: this process's pid and a random part."""
    import uuid

    return f"{os.getpid()}:{uuid.uuid4().hex[:12]}"


def _row(cur: sqlite3.Cursor, row: tuple) -> dict:
    out = {d[0]: v for d, v in zip(cur.description, row)}
    for key in ("options", "counts", "summary"):
        if out.get(key):
            out[key] = orjson.loads(out[key])
    return out


class JournalWriter:
    """Commits receipts on its own thread in batches, then passes each on (in order) to
    ``after_commit`` — so nothing reaches standard output before it is durable, and the event
    loop never waits on the disk."""

    _STOP = object()

    def __init__(self, store: Store, after_commit: Callable[[dict], None], max_batch: int = 512,
                 on_error: Callable[[BaseException], None] | None = None):
        self.store = store
        self.after_commit = after_commit
        self.on_error = on_error
        self.max_batch = max_batch
        self._q: queue.SimpleQueue = queue.SimpleQueue()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._loop, name="toolloop-journal", daemon=True)
        self._thread.start()

    def __call__(self, record: dict) -> None:
        self._q.put(record)

    def _loop(self) -> None:
        q = self._q
        while True:
            item = q.get()
            batch = [item]
            while len(batch) < self.max_batch:
                try:
                    batch.append(q.get_nowait())
                except queue.Empty:
                    break
            stop = any(b is self._STOP for b in batch)
            records = [b for b in batch if b is not self._STOP]
            if records and self.error is None:
                try:
                    self.store.put_receipts(records)
                    for r in records:
                        self.after_commit(r)
                except BaseException as exc:  # noqa: BLE001 - reported by close() on the main thread
                    self.error = exc
                    if self.on_error is not None:
                        self.on_error(exc)
            if stop:
                return

    def close(self) -> None:
        """Wait until everything queued is committed and passed on; re-raise a writer failure."""
        self._q.put(self._STOP)
        self._thread.join()
        if self.error is not None:
            raise self.error
