"""The journal writer: the one thread that writes a run's journal while its event loop runs, and
the output thread that hands committed records on.

Receipts and other records are committed in batched transactions; a record is handed on for
output only after its transaction has committed. Every other write a run makes while its event
loop runs (a model's answer, an operator's control read) goes through the same queue (``write``),
in order with the records, so the event loop never waits on SQLite.
"""

from __future__ import annotations

import queue
import threading
from typing import Any, Callable

class JournalWriter:
    """Commits receipts on its own thread in batched transactions, and hands committed records
    on, in the order they were handed in for output, to ``after_commit`` on a second thread —
    so nothing reaches standard output before it is durable, the event loop never waits on the
    disk, and a slow reader of the output never holds back the journal.

    Two ways in: ``commit(record)`` as soon as a call is settled (completion order: the journal
    holds it even while it waits for earlier calls before it may be printed), then
    ``emit(record)`` when its turn to be printed comes; or ``writer(record)`` for both at once.
    Both go through one FIFO queue, so a record's commit always precedes its emission. Any other
    write of the run (``write(store.put_model_answer, answer)``) takes its place in the same queue:
    it is done after everything queued before it is committed, and before anything queued after.
    ``then(done)`` calls ``done`` once everything queued before it is committed, so an event loop
    can wait for a commit without blocking on it.

    ``after_commit(record, line)`` gets with each receipt committed in the step that hands it on the
    bytes the journal stored it as (``line``: its compact JSON, ``_json.dumps(record)``), so a
    JSON Lines writer prints them instead of encoding the record again; ``line`` is None for any
    other record (one committed earlier, a decision...), which a writer encodes itself.

    If ``after_commit`` fails (the reader went away), ``on_error`` is called once and nothing
    more is handed on; receipts are still committed. If a commit fails, ``on_error`` is called
    and nothing more is committed or handed on. ``close()`` re-raises the first failure.
    """

    _STOP = object()
    _COMMIT, _EMIT, _BOTH, _OTHER, _SYNC, _OTHER_QUIET, _WRITE, _ANSWER = 1, 2, 3, 4, 8, 16, 32, 64

    def __init__(self, store: Any, after_commit: Callable[[dict, bytes | None], None], max_batch: int = 512,
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

    def answer(self, record: dict) -> None:
        """Commit a model's answer (a ``model_answer`` record, never handed on for output) in
        the transaction of the records queued around it, in its place in the queue."""
        self._q.put((self._ANSWER, record))

    def write(self, change: Callable[..., Any], *args: Any) -> None:
        """Make a change to the store (``change(*args)``, one of its methods) on the journal thread,
        in its place in the queue. A failure is the journal's: nothing more is committed."""
        self._q.put((self._WRITE, (change, args)))

    def then(self, done: Callable[[], None]) -> None:
        """Call ``done`` on the journal thread once everything queued before this call is
        committed (or the journal failed: see ``commit_error``)."""
        self._q.put((self._SYNC, done))

    def sync(self) -> None:
        """Block until everything queued before this call is committed (or the journal failed)."""
        done = threading.Event()
        self.then(done.set)
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
                done()
            if stop:
                self._out.put(self._STOP)
                return

    def _commit(self, items: list) -> None:
        """Commit one batch in queue order: the records between two other writes in one
        transaction, each other write in its own."""
        start = 0
        for i, (kind, change) in enumerate(items):
            if kind == self._WRITE:
                if not self._commit_records(items[start:i]) or not self._write(*change):
                    return
                start = i + 1
        self._commit_records(items[start:])

    def _write(self, change: Callable[..., Any], args: tuple) -> bool:
        try:
            change(*args)
        except BaseException as exc:  # noqa: BLE001 - reported by close() on the caller's thread
            self.commit_error = exc
            self._fail(exc)
            return False
        return True

    def _commit_records(self, items: list) -> bool:
        """Commit records in one transaction; then hand on, in order, what is to be printed."""
        if not items:
            return True
        records = [r for kind, r in items if kind & self._COMMIT]
        others = [r for kind, r in items if kind in (self._OTHER, self._OTHER_QUIET)]
        answers = [r for kind, r in items if kind == self._ANSWER]
        try:
            if answers:
                lines = self.store.put_records(records, others, answers)
            elif others:
                lines = self.store.put_records(records, others)
            elif records:
                lines = self.store.put_receipts(records)
            else:
                lines = None
        except BaseException as exc:  # noqa: BLE001 - reported by close() on the caller's thread
            self.commit_error = exc
            self._fail(exc)
            return False
        self.committed += len(records)
        if lines is None or len(lines) != len(records):  # a store that does not say what it stored
            lines = [None] * len(records)
        if len(records) == len(items):  # receipts only (the common batch)
            out = [(r, line) for (kind, r), line in zip(items, lines) if kind & self._EMIT]
        else:
            out = self._handed_on(items, lines)
        if out:
            self._out.put(out)
        return True

    def _handed_on(self, items: list, lines: list) -> list[tuple[dict, bytes | None]]:
        """What a step hands on, in queue order, each record with the bytes it was stored as in
        this step (``lines``, one for each record committed), None for one committed earlier and
        for other records."""
        stored = iter(lines)
        out: list[tuple[dict, bytes | None]] = []
        for kind, r in items:
            if kind & self._COMMIT:
                line = next(stored)
                if kind & self._EMIT:
                    out.append((r, line))
            elif kind & self._EMIT:
                out.append((r, None))
            elif kind == self._OTHER:
                out.append((r[0], None))
        return out

    def _emit_loop(self) -> None:
        while True:
            records = self._out.get()
            if records is self._STOP:
                return
            if self.error is not None:
                continue
            try:
                after_commit = self.after_commit
                for r, line in records:
                    after_commit(r, line)
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
