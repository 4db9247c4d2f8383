"""The state database: its connection (WAL, migrations, transactions) and its read layer.

One database file (WAL mode) per state folder, ``state.db``. Durability: WAL with
``synchronous=NORMAL``. A committed transaction survives the death of the process at any instant
(SIGKILL included); a power loss may drop the last few commits but never leaves a half-written one
(SQLite checks every WAL frame and ignores an incomplete tail).

The read layer checks every value read from the journal before anything else sees it, so a
damaged file (a missing table, a malformed page, a value of the wrong type, JSON that does not
parse) is one ``StateError`` naming the file, and the run and the record where they are known,
from whichever command reads it, never a crash further in.

- ``Connection`` wraps the SQLite connection. An SQLite error that means damage becomes a
  ``StateError``; every row fetched is checked against the kind of each column it holds
  (``COLUMNS``, by name: the journal gives each column name one meaning in every table).
- ``parse_json`` and ``parse_object`` read a JSON column, naming the record that does not parse.
- ``naming_the_run`` gives a ``StateError`` raised inside a store method the run it was
  reading (its ``run_id`` argument), so each message says where to look.
- ``Database`` opens the file, brings its schema up to date (``schema.py``) and gives the store's
  parts one connection behind one lock, and ``_writing``, one transaction.

Errors that are not damage (a busy or full disk, a read-only file, a bug in a statement) are left as
they are: the run's own handling reports them.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

from .. import _json
from ..errors import RunError, StateError, UsageError
from .schema import MIGRATIONS, schema_problem

INT, TIME, TEXT, JSON = "an integer", "a time", "text", "JSON text"

#: What each column of the journal holds, by name. NULL is let through here: the columns that may
#: not be NULL are NOT NULL in the schema, and the JSON readers refuse a missing record.
COLUMNS: dict[str, str] = {
    "run_id": TEXT, "mode": TEXT, "status": TEXT, "plan_path": TEXT, "plan_sha256": TEXT, "registry_path": TEXT,
    "contract_sha256": TEXT, "options": JSON, "parallel_batch_id": TEXT, "total_calls": INT, "counts": JSON,
    "summary": JSON, "started_at": TIME, "finished_at": TIME, "lease_owner": TEXT, "lease_until": TIME,
    "labels": JSON, "contract": JSON,
    "lane": INT, "item_key": TEXT, "payload": JSON, "payload_sha256": TEXT,
    "seq": INT, "call_key": TEXT, "tool": TEXT, "args": JSON, "args_sha256": TEXT,
    "record": JSON, "key": TEXT, "result": JSON, "created_at": TIME,
    "iteration": INT, "n": INT, "role": TEXT, "request_sha256": TEXT, "answer": TEXT,
    "state": TEXT, "message": TEXT, "approver": TEXT, "requested_at": TIME, "answered_at": TIME,
    "type": TEXT, "receipts_before": INT, "kind": TEXT, "at": TIME, "consumed_at": INT, "linked": INT,
    "ref": INT, "record_sha256": TEXT, "link_sha256": TEXT,
}

# datetime's range: a time outside it cannot be shown (RFC 3339) or compared with a clock
_EARLIEST, _LATEST = -62135596800.0, 253402300799.0

# SQLite's primary result codes that say the file is not a journal any more (an ERROR only when it
# names a missing table, column or index: any other ERROR is a statement's own fault)
_CORRUPT, _NOTADB, _MISMATCH, _FORMAT, _RANGE, _ERROR = 11, 26, 20, 24, 25, 1
_DAMAGE_CODES = frozenset({_CORRUPT, _NOTADB, _MISMATCH, _FORMAT, _RANGE})


def damage_of(exc: sqlite3.Error) -> str | None:
    """What is damaged, for an SQLite error that means damage; None for any other error."""
    message = str(exc)
    code = getattr(exc, "sqlite_errorcode", None)
    if message.startswith("Could not decode to UTF-8 column"):
        # Python's own reading error quotes the bytes: name the column only
        column = message.split("'")[1] if message.count("'") >= 2 else "?"
        return f"column '{column}' holds bytes that are not UTF-8 text"
    if code is None:
        return None
    code &= 0xFF
    if code in _DAMAGE_CODES:
        return message
    if code == _ERROR and (message.startswith(("no such table", "no such column", "no such index"))
                           or "malformed" in message):
        return message
    return None


def _kind_problem(value: Any, kind: str) -> str | None:
    if value is None:
        return None
    if kind == INT:
        return None if type(value) is int else _found(value, kind)
    if kind == TIME:
        if type(value) not in (int, float):
            return _found(value, kind)
        return None if _EARLIEST <= value <= _LATEST else f"holds {value!r}, which is not a time"
    return None if type(value) is str else _found(value, kind)


def _found(value: Any, kind: str) -> str:
    what = {int: "an integer", float: "a number", str: "text", bytes: "bytes"}.get(type(value), type(value).__name__)
    return f"holds {what} where {kind} belongs"


def _row_place(names: list[str], row: tuple) -> tuple[str | None, str | None]:
    """The run and the record a row belongs to, from the key columns it holds."""
    by_name = dict(zip(names, row))
    run_id = by_name.get("run_id")
    keys = [f"{k} {by_name[k]!r}" for k in ("seq", "n", "lane", "iteration", "call_key", "key")
            if by_name.get(k) is not None and type(by_name[k]) in (int, str)]
    return (run_id if type(run_id) is str else None), (", ".join(keys[:2]) or None)


class Cursor:
    """A cursor whose rows are checked against ``COLUMNS`` as they are fetched."""

    __slots__ = ("_cur", "_path", "_checks", "_names")

    def __init__(self, cur: sqlite3.Cursor, path: Any):
        self._cur, self._path = cur, path
        desc = cur.description
        self._names = [d[0] for d in desc] if desc else []
        self._checks = [(i, COLUMNS[name]) for i, name in enumerate(self._names) if name in COLUMNS]

    @property
    def rowcount(self) -> int:
        return self._cur.rowcount

    @property
    def description(self) -> Any:
        return self._cur.description

    def _checked(self, row: tuple) -> tuple:
        for i, kind in self._checks:
            problem = _kind_problem(row[i], kind)
            if problem is not None:
                run_id, record = _row_place(self._names, row)
                raise StateError(f"column '{self._names[i]}' {problem}", path=self._path, run_id=run_id,
                                 record=record)
        return row

    def fetchone(self) -> tuple | None:
        with reading(self._path):
            row = self._cur.fetchone()
        return None if row is None else self._checked(row)

    def fetchall(self) -> list[tuple]:
        with reading(self._path):
            rows = self._cur.fetchall()
        if self._checks:
            for row in rows:
                self._checked(row)
        return rows

    def __iter__(self) -> Iterator[tuple]:
        return iter(self.fetchall())


class Connection:
    """The journal's SQLite connection, with every statement and fetch read through this layer."""

    __slots__ = ("_con", "path")

    def __init__(self, con: sqlite3.Connection, path: Any):
        self._con, self.path = con, path

    def execute(self, sql: str, params: Any = ()) -> Cursor:
        with reading(self.path):
            return Cursor(self._con.execute(sql, params), self.path)

    def executemany(self, sql: str, rows: Any) -> Cursor:
        with reading(self.path):
            return Cursor(self._con.executemany(sql, rows), self.path)

    def close(self) -> None:
        self._con.close()


class reading:
    """Turns an SQLite error that means damage into a ``StateError`` naming ``path``."""

    __slots__ = ("path",)

    def __init__(self, path: Any):
        self.path = path

    def __enter__(self) -> None:
        return None

    def __exit__(self, _type: Any, exc: BaseException | None, _tb: Any) -> bool:
        if isinstance(exc, UnicodeDecodeError):  # SQLite read damaged bytes where it keeps text of its own
            raise StateError("SQLite read bytes that are not UTF-8 text where it keeps its own", path=self.path) from None
        if isinstance(exc, sqlite3.Error):
            problem = damage_of(exc)
            if problem is not None:
                raise StateError(problem, path=self.path) from None
        return False


def parse_json(text: Any, what: str, run_id: str | None = None) -> Any:
    """The value of a JSON column; a ``StateError`` saying that ``what`` (of run ``run_id``, when
    the reader knows it better than its own arguments say) does not parse."""
    if type(text) is not str and not isinstance(text, (bytes, bytearray)):
        raise StateError(f"{what} is missing" if text is None else f"{what} is not JSON text", run_id=run_id)
    try:
        return _json.loads(text)
    except _json.JSONDecodeError as exc:
        raise StateError(f"{what} does not parse as JSON ({exc})", run_id=run_id) from None


_NONE = type(None)
_NUMBER = (int, float)

#: The keys a journaled receipt always has, with what each holds: every reader (a table,
#: resume, replay) relies on them. A key added to receipts later is optional here.
RECEIPT: dict[str, Any] = {
    "type": str, "run_id": str, "seq": int, "completion_seq": int, "subagent": str, "tool": str,
    "parallel_batch_id": (str, _NONE), "item_key": (str, _NONE), "call_key": (str, _NONE),
    "parent_receipt_id": (str, _NONE), "iteration": (int, _NONE), "receipt_id": str, "status": str,
    "abandoned": bool, "attempts": int, "cache": str, "args_sha256": (str, _NONE), "args": object,
    "result": object, "error": (dict, _NONE), "envelope": (dict, _NONE), "started_at": (str, _NONE),
    "finished_at": (str, _NONE), "duration_ms": _NUMBER,
}
#: A model answer as replay and resume read it back.
MODEL_ANSWER: dict[str, Any] = {"type": str, "n": int, "role": str, "model": str, "request_sha256": str, "text": str,
                                "input_tokens": int, "output_tokens": int}
#: A run's summary as it is shown again (``runs show``, the web page).
SUMMARY: dict[str, Any] = {"type": str, "run_id": str, "mode": str, "status": str, "counts": dict,
                           "duration_ms": _NUMBER}


def parse_object(text: Any, what: str, required: dict[str, Any] | None = None, run_id: str | None = None) -> dict:
    """A JSON column that holds an object, with ``required`` keys holding what they must."""
    value = parse_json(text, what, run_id)
    if not isinstance(value, dict):
        raise StateError(f"{what} is not a JSON object", run_id=run_id)
    for key, kind in (required or {}).items():
        got = value.get(key)
        if key not in value or not isinstance(got, kind) or (isinstance(got, bool) and kind in (int, _NUMBER)):
            raise StateError(f"{what} has no valid '{key}'", run_id=run_id)
    return value


def naming_the_run(cls: type) -> type:
    """Every public method of ``cls`` (a store) names, in a ``StateError`` it raises, the file and
    the run it was reading when it has a ``run_id`` argument. One place, so each read path reports
    damage the same way."""
    for name, fn in list(vars(cls).items()):
        if name.startswith("_") or not inspect.isfunction(fn):
            continue
        setattr(cls, name, _named(fn))
    return cls


def _named(fn: Callable) -> Callable:
    params = list(inspect.signature(fn).parameters)
    at = params.index("run_id") if "run_id" in params else None

    def place(self: Any, args: tuple, kwargs: dict, exc: StateError) -> None:
        if exc.path is None:
            exc.path = getattr(self, "path", None)
        if exc.run_id is None and at is not None:
            run_id = kwargs.get("run_id", args[at - 1] if len(args) >= at else None)
            exc.run_id = run_id if isinstance(run_id, str) else None

    if inspect.isgeneratorfunction(fn):
        @functools.wraps(fn)
        def generate(self: Any, *args: Any, **kwargs: Any) -> Iterator[Any]:
            try:
                yield from fn(self, *args, **kwargs)
            except StateError as exc:
                place(self, args, kwargs, exc)
                raise
        return generate

    @functools.wraps(fn)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(self, *args, **kwargs)
        except StateError as exc:
            place(self, args, kwargs, exc)
            raise
    return call


def state_dir(flag: str | os.PathLike | None) -> Path:
    """``--state-dir`` wins, then ``TOOLLOOP_STATE_DIR``, then ``./.toolloop``."""
    if flag:
        return Path(flag)
    env = os.environ.get("TOOLLOOP_STATE_DIR")
    return Path(env) if env else Path(".toolloop")


def dumps(value: Any) -> str:
    return _json.dumps(value).decode()


def loads(text: str | bytes, what: str = "a stored value", run_id: str | None = None) -> Any:
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
class Database:
    """One open ``state.db``: a connection behind a lock (methods of the store's parts are
    synchronous and thread-safe), its schema brought up to date when it is opened."""

    def __init__(self, folder: str | os.PathLike, *, create: bool = True,
                 migrations: list[tuple[str, ...]] | None = None):
        folder = Path(folder)
        self.path = folder / "state.db"
        self.db = self._connect(folder, create)
        self._lock = threading.RLock()
        # reads that must not wait for the journal thread's commit (operators' controls) go through a
        # read-only connection of their own, opened at the first such read (``_read``)
        self._read_lock = threading.Lock()
        self._reader: Connection | None = None
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

    def _connect(self, folder: Path, create: bool) -> Connection:
        from .._paths import look_at

        if (looked := look_at(self.path)).kind == "bad":  # a --state-dir no file system takes
            from .._text import excerpt

            raise UsageError(f"cannot open the state database in {excerpt(str(folder))}: {looked.why}")
        if not create and not self.path.exists():
            raise UsageError(f"no state database at {self.path} (run a plan first, or pass --state-dir)")
        try:
            new_folder = not folder.exists()
            folder.mkdir(parents=True, exist_ok=True)
            _keep_out_of_git(folder, new_folder or folder.name == ".toolloop")
            return self._open(self.path)
        except (OSError, sqlite3.Error) as exc:
            raise UsageError(f"cannot open the state database {self.path}: {exc}") from None

    def _open(self, target: Any, *, uri: bool = False) -> Connection:
        """A connection to the store's file (``target``: its path, or a URI of it with ``uri``)."""
        return Connection(sqlite3.connect(target, uri=uri, timeout=30, check_same_thread=False,
                                          isolation_level=None), self.path)

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
        with self._read_lock:
            if self._reader is not None:
                self._reader.close()
                self._reader = None
        with self._lock:
            self.db.close()

    def _read(self, sql: str, params: Any = ()) -> list[tuple]:
        """The rows of one read on the store's read-only connection, not behind the lock the journal
        thread holds through each of its transactions: in WAL mode a reader never waits for the
        writer, and sees every transaction committed before the read began (another process's
        too). Only the reader's own lock is taken, which nothing holds across a commit."""
        with self._read_lock:
            if self._reader is None:
                try:
                    self._reader = self._open(f"{self.path.resolve().as_uri()}?mode=ro", uri=True)
                except sqlite3.Error as exc:
                    raise UsageError(f"cannot open the state database {self.path}: {exc}") from None
            return self._reader.execute(sql, params).fetchall()

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

    def data_version(self) -> int:
        """A number that changes whenever another connection (another process, another Store)
        commits to the database: a cheap way to tell that there is something new to read."""
        with self._lock:
            return int(self.db.execute("PRAGMA data_version").fetchone()[0])


def checked_row(cur: Any, row: tuple) -> dict:
    """A row as a dict by column name, the JSON columns of a run (options, counts, summary, labels) parsed
    and checked."""
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
