"""Operators' controls are read without waiting for the journal thread: the event loop reads them
before each routed turn (and a batch's abort watch every poll) while the journal thread holds the
store's lock through each commit. The read goes through the store's read-only connection (WAL: a
reader never waits for the writer), so a control another process added is read while the journal
thread holds the lock and has its transaction open, and what that transaction has not committed
is not."""

from __future__ import annotations

import subprocess
import sys
import threading
from contextlib import contextmanager
from typing import Any, Iterator

from conftest import APP
from toolloop_cli.contract.registry import load_registry
from toolloop_cli.engine.handle import RunHandle
from toolloop_cli.engine.session import RunnerEnd, RunOptions, RunSession
from toolloop_cli.store import Store


class JournalsLock:
    """The store's lock, held by the journal thread at the test's word; any other thread that
    would wait for it while it is held fails at once instead (a read that waits for the
    journal's commit), so the test cannot hang."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self.holder: int | None = None

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if self.holder is not None and self.holder != threading.get_ident():
            raise AssertionError("waited for the lock the journal thread holds through its commit")
        return self._lock.acquire(blocking, timeout)

    def release(self) -> None:
        self._lock.release()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: Any) -> None:
        self.release()

    @contextmanager
    def held(self) -> Iterator[None]:
        with self._lock:
            self.holder = threading.get_ident()
            try:
                yield
            finally:
                self.holder = None


def add_control_from_another_process(state: Any, run_id: str, message: str) -> None:
    code = ("import sys; from toolloop_cli.store import Store; s = Store(sys.argv[1]);"
            " s.add_control(sys.argv[2], 'steer', sys.argv[3]); s.close()")
    subprocess.run([sys.executable, "-c", code, str(state), run_id, message], check=True, timeout=120)


def test_a_control_committed_elsewhere_is_read_while_the_journal_holds_its_lock_and_transaction(tmp_path):
    store = Store(tmp_path / "state")
    store._lock = JournalsLock()  # type: ignore[assignment]
    add_control_from_another_process(tmp_path / "state", "run1", "look again")
    holding, release = threading.Event(), threading.Event()

    def journal_thread() -> None:  # mid-commit: the lock held, a write transaction open, a control in it
        with store._lock.held(), store._writing():  # type: ignore[attr-defined]
            store.db.execute("INSERT INTO controls (run_id, n, kind, message, at, linked) VALUES"
                             " ('run1', 1, 'abort', 'not yet', 0, 1)")
            holding.set()
            release.wait()

    writer = threading.Thread(target=journal_thread)
    writer.start()
    try:
        holding.wait()
        read = store.controls_after("run1", 0)
    finally:
        release.set()
        writer.join()
    assert read == [(0, "steer", "look again", None)]  # the other process's, not the uncommitted one
    assert [c[:3] for c in store.controls_after("run1", 0)] == [(0, "steer", "look again"), (1, "abort", "not yet")]
    store.close()


class HeldCommits(Store):
    """A store whose journal thread, at its first commit of records, holds the store's lock until
    the test lets it go (as it holds it through every commit)."""

    holding: threading.Event
    release: threading.Event

    def put_records(self, *args: Any, **kwargs: Any) -> Any:
        if not self.holding.is_set():
            with self._lock.held():  # type: ignore[attr-defined]
                self.holding.set()
                self.release.wait()
                return super().put_records(*args, **kwargs)
        return super().put_records(*args, **kwargs)


class ReadsWhileHeld:
    """A runner that hands a record to the journal, and while the journal thread commits it (the
    lock held) has another process steer the run and reads the controls through its handle."""

    def __init__(self, store: HeldCommits, state: Any) -> None:
        self.store, self.state = store, state
        self.read: list = []

    def begin(self, session: RunSession) -> None:
        session.store.create_run({
            "run_id": session.run_id, "mode": "sequential", "plan_path": "<probe>", "plan_sha256": "0" * 64,
            "registry_path": str(APP / "registry.yml"), "contract_sha256": session.ctx.contract.contract_sha256,
            "options": {}, "parallel_batch_id": None, "total_calls": 0, "lease_owner": session.owner})

    async def __call__(self, run: RunHandle) -> RunnerEnd:
        run.record({"type": "decision", "run_id": run.run_id, "iteration": 1, "action": "call"})
        try:
            self.store.holding.wait()
            add_control_from_another_process(self.state, run.run_id, "steer me")
            self.read = run.controls_after(0)
        finally:
            self.store.release.set()
        await run.synced()
        return RunnerEnd(stopped=False)


def test_a_runner_reads_a_control_from_another_process_while_the_journal_thread_commits(tmp_path):
    contract, problems = load_registry(str(APP / "registry.yml"))
    assert contract is not None, problems
    store = HeldCommits(tmp_path / "state")
    store.holding, store.release = threading.Event(), threading.Event()
    store._lock = JournalsLock()  # type: ignore[assignment]
    printed: list[dict] = []
    session = RunSession(store, printed.append, RunOptions(handle_signals=False), run_id="run1", contract=contract,
                         mode="sequential", subagent="t", total_calls=0, owner="me")
    runner = ReadsWhileHeld(store, tmp_path / "state")
    result = session.run(runner)
    assert runner.read == [(0, "steer", "steer me", None)]
    assert result.summary["status"] == "ok", result.summary
    assert [r["type"] for r in printed] == ["decision", "summary"]
    store.close()
