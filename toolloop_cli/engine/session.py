"""A run of the engine: its lease, signals, journal, executors, summary and exit status.

``RunSession.run(runner)`` opens what every run needs and runs ``runner``, an async callable that
gets a narrow handle on the run (``handle.RunHandle``, not the session) and returns a
``RunnerEnd``: the lanes runner (``run.LanesRunner``) for sequential and parallel plans, the routed
loop for routed plans. The runner settles its records through the handle; the session commits
them, writes the summary last and says how the run ended. Output goes through the ``emit``
callback only; nothing here prints. How a run goes is its ``RunOptions`` (``options.py``); the
signals it takes while its loop runs, and those its command holds around it, are ``signals.py``'s.
"""

from __future__ import annotations

import os
import sqlite3
import time
import uuid
from dataclasses import dataclass, field, replace
from typing import Any, Awaitable, Callable, Protocol, TypeVar

import trio

from ..contract.compiled import Contract
from ..errors import RunError, StateError
from ..receipts import EXIT_CODES, summary_record, summary_status
from ..store import JournalWriter
from .context import RunContext, RunServices
from .executors import Executors
from .handle import RunHandle
from .options import RunOptions as RunOptions  # where the runners and the command line import it from
from .redact import RunSecrets, run_credentials, scrub_record
from .runstate import RunState
from .settle import Settlement
from .signals import RunSignals, held_signals as held_signals  # the command line holds signals from here
from .telemetry import open_telemetry

Emit = Callable[[dict[str, Any]], None]


@dataclass
class RunnerEnd:
    """How a runner ended: ``stopped`` early on purpose (resumable, exit 4), a ``status`` that
    overrides the one the receipts give, and keys added to the summary."""

    stopped: bool = False
    status: str | None = None
    summary: dict[str, Any] = field(default_factory=dict)


class Runner(Protocol):
    def begin(self, session: RunSession) -> None:
        """Journal what the run is (or reopen it), before the event loop starts."""

    def __call__(self, run: RunHandle) -> Awaitable[RunnerEnd]:
        """Run, through the narrow handle the session gives (``handle.py``), not the session."""


_E = TypeVar("_E", bound=BaseException)


def _first(group: BaseExceptionGroup[_E]) -> _E:
    """The first exception the group holds, however deeply nested."""
    first = group.exceptions[0]
    while isinstance(first, BaseExceptionGroup):
        first = first.exceptions[0]
    return first


@dataclass
class RunResult:
    summary: dict[str, Any]
    state: RunState = field(repr=False)

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.summary["status"]]


class RunSession:
    """One run: the context its calls share, the journal its records go to, and how it ends."""

    def __init__(self, store: Any, emit: Emit, options: RunOptions, *, run_id: str, contract: Contract,
                 mode: str, subagent: str | None, total_calls: int, owner: str,
                 parent: tuple[str, str] | None = None, depth: int = 0, notify: Any = None, plan: str = ""):
        self.store = store
        self.parent = parent  # (parent run id, parent receipt id) of a child run
        #: what a child run's journal entry holds of its parent and context (``child_plans.py``),
        #: so that its parent's resume, and a resume of its own, find and rebuild it
        self.child_options: dict[str, Any] | None = None
        #: the contracts of the child plans its ``plan:`` tools may run (``child_plans.install``), by
        #: plan path: their MCP tools' offers go into the run's contract snapshot
        self.child_contracts: dict[str, Contract] = {}
        self.depth = depth  # 0 for a top plan, 1 for its children, ...
        self.emit = emit
        self.options = options
        self.mode = mode
        self.owner = owner
        self.audit_error: OSError | None = None
        services = RunServices(cache=store, audit=self._audit if options.audit is not None else None,
                               warn=options.on_warning, secrets=RunSecrets(run_credentials(contract, os.environ)),
                               executors=Executors(contract, options.output_cap_bytes, placement=options.executor,
                                                   ray_address=options.ray_address))
        self.ctx = RunContext(
            run_id, contract, services=services, subagent=subagent, default_timeout_s=options.default_timeout_s,
            no_cache=options.no_cache, refresh_cache=options.refresh_cache,
            output_cap_bytes=options.output_cap_bytes, approve=options.approve,
        )
        if options.approve == "ask":
            from .approvals import Approvals

            services.approvals = Approvals(store, run_id, warn=options.on_warning)
            services.ask = options.ask
        services.before_start = self._before_start
        if notify is not None:
            # the hook's header values are the run's secrets, also in a run that tells nobody (a replay)
            services.secrets.add(notify.secrets(os.environ))
        if notify is not None and options.notifications:
            from .notify import Notifier

            services.notify = Notifier(notify, store=store, run_id=run_id, plan=plan, secrets=services.secrets,
                                       warn=options.on_warning, state_dir=_state_dir_shown(store))
        self.state = RunState(total=total_calls, halt=options.halt)
        self.settlement: Settlement | None = None
        self.journal: JournalWriter | None = None
        #: the run's traces (``telemetry.RunTelemetry``) when the environment asks for them
        self.telemetry: Any = None

    @property
    def run_id(self) -> str:
        return self.ctx.config.run_id

    def _audit(self, event: dict[str, Any]) -> None:
        # an audit file that cannot be written stops the run (resumable), like standard output
        if self.audit_error is not None:
            return
        try:
            self.options.audit(event)  # type: ignore[misc]
        except OSError as exc:
            self.audit_error = exc
            self.state.interrupt()

    # -- writes while the event loop runs: on the journal thread, in order with the run's records --

    async def committed(self) -> None:
        """Wait until everything handed to the journal so far is committed, without blocking the
        event loop; a failed commit is raised here (nothing is acted on that is not journaled)."""
        journal = self.journal
        assert journal is not None
        if self.options.clock is not None:
            # a run on its own clock (trio's MockClock) moves that clock whenever the loop waits on
            # a thread, as far as the next deadline: the run's own budget. Waiting on the journal
            # takes no run time there, so the loop waits for the commit itself (deterministic).
            journal.sync()
            await trio.lowlevel.checkpoint()
            if journal.commit_error is not None:
                raise journal.commit_error
            return
        token, done = trio.lowlevel.current_trio_token(), trio.Event()

        def wake() -> None:  # on the journal thread
            try:
                token.run_sync_soon(done.set)
            except trio.RunFinishedError:
                pass

        journal.then(wake)
        await done.wait()
        if journal.commit_error is not None:
            raise journal.commit_error

    def _before_start(self, info: tuple[Any, ...]) -> None:
        # the start of an at-most-once write is committed before its callable runs
        seq, tool, _sha = info
        if tool.at_most_once:
            self.store.mark_started(self.run_id, seq)

    def _after_commit(self) -> Callable[[dict[str, Any], bytes | None], None]:
        """What the journal hands each committed record to: the sink's writer that takes the bytes
        it was stored as, or ``emit``, which takes the record alone."""
        if self.options.emit_line is not None:
            return self.options.emit_line
        emit = self.emit
        return lambda record, _line: emit(record)

    def run(self, runner: Runner) -> RunResult:
        """Run ``runner`` to its end (or interruption). Every record is committed to the journal
        before ``emit`` sees it; the summary is emitted last."""
        t0 = time.perf_counter()
        state = self.state
        # connected before the run is journaled (a cluster that cannot be reached leaves no run),
        # and before the signal handlers (ray.init sets its own)
        with self.ctx.services.executors.connected(), RunSignals(state, self.options) as signals:  # type: ignore[union-attr]
            runner.begin(self)
            self._describe()
            notifier = self.ctx.services.notify
            if notifier is not None:
                notifier.labels = dict(self.ctx.config.labels)
            telemetry = self.telemetry = open_telemetry(
                run_id=self.run_id, mode=self.mode, subagent=self.ctx.config.subagent, labels=self.ctx.config.labels,
                warn=self.options.on_warning, batch_id=self.ctx.config.parallel_batch_id)
            loop_token: list[trio.lowlevel.TrioToken] = []

            def stop_on_writer_error(_exc: BaseException) -> None:
                # On a journal thread (the reader of stdout went away, or the disk failed): stop the
                # run from the event loop's own thread.
                state.interrupted = True
                if loop_token:
                    try:
                        loop_token[0].run_sync_soon(state.interrupt)
                    except trio.RunFinishedError:
                        pass

            journal = self.journal = JournalWriter(self.store, self._after_commit(), on_error=stop_on_writer_error,
                                                   after_batch=self.options.flush_output)
            self.settlement = Settlement(journal=journal, children=self.ctx.children, counts=state.counts,
                                         on_emit=self.options.on_receipt,
                                         completion_order=self.options.order == "completion",
                                         secrets=self.ctx.services.secrets)
            if telemetry is not None:
                self.settlement.observers.append(telemetry.receipt)
                self.settlement.record_observers.append(telemetry.record)
            ending: list[RunnerEnd] = []

            async def main() -> None:
                loop_token.append(trio.lowlevel.current_trio_token())
                async with trio.open_nursery() as nursery:
                    if signals.enabled:
                        await nursery.start(signals.watch)
                    async with self.ctx.services.executors.opened():  # type: ignore[union-attr]
                        ending.append(await runner(self.handle()))
                    nursery.cancel_scope.cancel()

            try:
                interrupted = self._loop(main, journal)
                signals.count.run_ended = True
            except BaseException:
                self._end_telemetry({"status": "interrupted" if state.interrupted else "failed",
                                     "counts": state.counts})
                if notifier is not None:  # what was queued while the run went is still sent
                    notifier.finish()
                raise
            # still under the run's signal handling: a signal now changes nothing (the outcome is
            # known), and never cuts the summary off half-written
            try:
                result = self._finish(ending[0] if ending else RunnerEnd(), interrupted, t0)
                self.emit(result.summary)
            finally:  # exported after the summary is out: a slow collector delays only the exit
                self._end_telemetry(result.summary if "result" in locals() else {"status": "failed"})
                if notifier is not None and "result" not in locals():
                    notifier.finish()  # what was queued while the run went is still sent
            if notifier is not None:  # told last, after the summary: a slow receiver delays only the exit
                self._tell_ending(notifier, result.summary)
        return result

    def _tell_ending(self, notifier: Any, summary: dict[str, Any]) -> None:
        """The run's ending to the notifier, once its summary is out where a reader sees it (flushed:
        the process may wait for its notifications before it closes its output)."""
        unwritable: BaseException | None = None
        if self.options.flush_output is not None:
            try:
                self.options.flush_output()
            except OSError as exc:  # the reader went away: said once the notifications are sent
                unwritable = exc
        notifier.ended(summary, self.state.paused)
        notifier.finish()
        if unwritable is not None:
            raise unwritable

    def handle(self) -> RunHandle:
        """What the runner may do to this run (``handle.py``); the settlement and the journal are open."""
        assert self.settlement is not None and self.journal is not None
        return RunHandle(ctx=self.ctx, settlement=self.settlement, state=self.state, store=self.store,
                         journal=self.journal, halt=self.options.halt, warn=self.options.on_warning,
                         on_rejected=self.options.on_rejected,
                         on_model_answer=self.telemetry.chat if self.telemetry is not None else None,
                         providers=self.options.providers, committed=self.committed)

    def _describe(self) -> None:
        """The run's labels (a resume keeps those it was started with; child runs take their
        parent's) and the snapshot of the contract it runs under."""
        from ..contract.snapshot import contract_snapshot

        labels = self.options.labels
        if labels is None:
            run = self.store.get_run(self.run_id)
            labels = dict((run or {}).get("labels") or {})
            self.options = replace(self.options, labels=labels)
        self.ctx.config.labels = dict(labels)
        self.store.describe_run(self.run_id, self.ctx.config.labels,
                                contract_snapshot(self.ctx.contract, self.child_contracts))

    def _end_telemetry(self, summary: dict[str, Any]) -> None:
        telemetry, self.telemetry = self.telemetry, None
        if telemetry is not None:
            telemetry.close(summary)

    async def run_child(self, runner: Runner, parent_journal: JournalWriter) -> RunResult:
        """Run ``runner`` as a child run inside its parent's event loop (a ``plan:`` tool): its
        records and summary go to the parent's journal under its own run id, and are not printed
        (``toolloop runs show CHILD_RUN_ID`` prints them)."""
        t0 = time.perf_counter()
        runner.begin(self)
        self._describe()
        self.journal = _ChildJournal(parent_journal)  # type: ignore[assignment]
        self.settlement = Settlement(journal=self.journal, children=self.ctx.children, counts=self.state.counts,
                                     secrets=self.ctx.services.secrets)
        async with self.ctx.services.executors.opened():  # type: ignore[union-attr]
            end = await runner(self.handle())
        await trio.to_thread.run_sync(parent_journal.sync)
        return self._finish(end, self.state.interrupted, t0)

    def _finish(self, end: RunnerEnd, interrupted: bool, t0: float) -> RunResult:
        state = self.state
        status = end.status or summary_status(state.counts, stopped=end.stopped, interrupted=interrupted)
        summary = summary_record(self.run_id, self.mode, status, state.counts, (time.perf_counter() - t0) * 1000,
                                 self.ctx.contract.contract_sha256, executor=self.options.executor,
                                 labels=self.ctx.config.labels, chain_sha256=self.store.chain_head(self.run_id))
        summary.update(end.summary)
        if self.parent is not None:
            summary["parent_run_id"], summary["parent_receipt_id"] = self.parent
        if self.ctx.services.secrets:  # a final answer or an error may quote a credential
            summary = scrub_record(summary, self.ctx.services.secrets)
        self.store.finish_run(self.run_id, status, state.counts, summary, owner=self.owner)
        return RunResult(summary, state)

    def _loop(self, main: Callable[[], Awaitable[None]], journal: JournalWriter) -> bool:
        """Run the event loop, then close the journal; returns whether the run was interrupted.
        A journal or output failure is recorded with the run and raised."""
        writer_error: BaseException | None = None
        store_error: sqlite3.Error | StateError | None = None
        try:
            try:
                trio.run(main, clock=self.options.clock)
            except* (sqlite3.Error, StateError) as group:  # the journal could not be written, or is damaged
                store_error = _first(group)
        finally:
            interrupted = self.state.interrupted  # a signal after the last call does not change the outcome
            try:
                journal.close()
            except BaseException as exc:  # noqa: BLE001 - re-raised below once the run is recorded
                writer_error = exc
        if store_error is None and isinstance(writer_error, (sqlite3.Error, StateError)):
            store_error, writer_error = writer_error, None
        unwritable = None
        if isinstance(writer_error, OSError) and not isinstance(writer_error, BrokenPipeError):
            unwritable, writer_error = f"standard output cannot be written ({writer_error.strerror or writer_error})", None
        elif self.audit_error is not None:
            unwritable = f"the audit file cannot be written ({self.audit_error.strerror or self.audit_error})"
        if writer_error is not None or store_error is not None or unwritable is not None:
            try:
                self.store.finish_run(self.run_id, "interrupted", self.state.counts, owner=self.owner)
            except Exception:  # noqa: BLE001 - the first failure is the one to report
                pass
            if isinstance(store_error, StateError):
                raise store_error
            if store_error is not None:
                raise RunError(f"the state database could not be written ({store_error}); run {self.run_id} was"
                               " stopped, and every receipt printed is in the journal") from None
            if unwritable is not None:
                raise RunError(f"{unwritable}; run {self.run_id} was stopped with its journal intact:"
                               f" toolloop resume {self.run_id}") from None
            raise writer_error  # type: ignore[misc]
        return interrupted


class _ChildJournal:
    """A child run's journal: its records are committed by the top run's journal writer, in the
    same commit order, and never handed on for output. A grandchild's journal is its child's,
    so every level of nesting commits through the one writer."""

    def __init__(self, parent: "JournalWriter | _ChildJournal"):
        self.parent: JournalWriter = parent.parent if isinstance(parent, _ChildJournal) else parent

    def commit(self, record: dict[str, Any]) -> None:
        self.parent.commit(record)

    def emit(self, record: dict[str, Any]) -> None:
        return None

    def __call__(self, record: dict[str, Any]) -> None:
        self.parent.commit(record)

    def record(self, record: dict[str, Any], receipts_before: int) -> None:
        self.parent.record(record, receipts_before, emit=False)

    def sync(self) -> None:
        self.parent.sync()

    def answer(self, record: dict[str, Any]) -> None:
        self.parent.answer(record)

    def write(self, change: Callable[..., Any], *args: Any) -> None:
        self.parent.write(change, *args)

    def then(self, done: Callable[[], None]) -> None:
        self.parent.then(done)

    @property
    def commit_error(self) -> BaseException | None:
        return self.parent.commit_error


def _state_dir_shown(store: Any) -> str | None:
    """The state folder a ``toolloop approve`` line must name: None for the default one of the
    folder the run started in."""
    path = getattr(store, "path", None)
    if path is None:
        return None
    folder = os.path.abspath(os.path.dirname(path))
    return None if folder == os.path.abspath(".toolloop") else folder


def new_run_id() -> str:
    """Sortable run ids: UTC time to the second, then randomness."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + uuid.uuid4().hex[:8]
