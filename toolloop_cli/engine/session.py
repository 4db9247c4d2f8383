"""A run of the engine: its lease, signals, journal, executors, summary and exit status.

``RunSession.run(runner)`` opens what every run needs and runs ``runner``, an async callable that
gets a narrow handle on the run (``handle.RunHandle``, not the session) and returns a
``RunnerEnd``: the lanes runner (``run.LanesRunner``) for sequential and parallel plans, the routed
loop for routed plans. The runner settles its records through the handle; the session commits
them, writes the summary last and says how the run ended. Output goes through the ``emit``
callback only; nothing here prints.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import threading
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field, fields, replace
from typing import Any, Awaitable, Callable, Iterator, Protocol, TypeVar

import trio

from ..contract.compiled import Contract
from ..contract.problems import Problem
from ..errors import RunError, StateError
from ..receipts import EXIT_CODES, Receipt, summary_record, summary_status
from ..store import JournalWriter
from .context import DEFAULT_OUTPUT_CAP, RunContext, RunServices
from .executors import Executors
from .handle import RunHandle
from .redact import RunSecrets, run_credentials, scrub_record
from .runstate import HaltPolicy, RunState
from .settle import Settlement
from .telemetry import open_telemetry

Emit = Callable[[dict[str, Any]], None]
_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _journaled(default: Any) -> Any:
    """A field that is part of what the run was asked to do: journaled with the run, and read back
    by ``RunOptions.from_journal`` when it is resumed."""
    return field(default=default, metadata={"journaled": True})


@dataclass(frozen=True)
class RunOptions:
    """How a run goes: the options it was asked for (the journaled fields, stored with the run as
    they are and read back by ``from_journal``) and the hooks of whoever runs it (callbacks, the
    clock, signal handling: never journaled)."""

    halt: HaltPolicy | None = _journaled(None)
    default_timeout_s: float | None = _journaled(None)
    no_cache: bool = _journaled(False)
    refresh_cache: bool = _journaled(False)
    output_cap_bytes: int = _journaled(DEFAULT_OUTPUT_CAP)
    approve: str = _journaled("ask")  # answer to approval gates: ask | all | none
    order: str = _journaled("input")  # input | completion (run --order)
    # where calls of callables run: "local" (this process, its threads and worker processes) or
    # "ray" (tasks on the cluster at ``ray_address``, else RAY_ADDRESS, else a local Ray for the run)
    executor: str = _journaled("local")
    ray_address: str | None = _journaled(None)
    # out-of-band identity of the run (run --label KEY=VALUE), journaled as the run's labels rather
    # than with its options; None on resume keeps the run's own
    labels: dict[str, str] | None = None

    audit: Callable[[dict[str, Any]], None] | None = None
    ask: Any = None  # with approve=ask: a person at a terminal (cli/prompt.py); None pauses the run
    on_receipt: Callable[[Receipt], None] | None = None  # progress display, in the engine thread
    # called on the output thread after each batch of records handed to ``emit`` (flush a pipe
    # once per batch rather than once per record)
    flush_output: Callable[[], None] | None = None
    # a sink's writer that also takes the bytes a record is journaled as: when set, each record the
    # journal hands on goes to ``emit_line(record, line)`` instead of ``emit(record)``, ``line`` its
    # compact JSON as stored (``_json.dumps``) or None, so a JSON writer need not encode it again
    emit_line: Callable[[dict[str, Any], bytes | None], None] | None = None
    # findings of a lane refused by ``run --stream`` (its calls get invalid_input receipts)
    on_rejected: Callable[[list[Problem]], None] | None = None
    # SIGINT/SIGTERM handling (main thread only): the first signal cancels the run, a second forces
    # an exit with code 130. ``on_signal`` gets a one-line notice for a person; it may be called
    # from a signal handler, so it must not take locks (write with os.write).
    handle_signals: bool = True
    on_signal: Callable[[str], None] | None = None
    # one-line warnings for a person (a damaged cache entry): standard error in the CLI
    on_warning: Callable[[str], None] | None = None
    # the event loop's clock: None for the real one (trio.testing.MockClock makes timeout tests instant)
    clock: Any = None
    # provider instances by provider name: each answers every profile of a routed run (and of its
    # child runs) that names it, instead of one made from the profile; the caller closes them
    providers: dict[str, Any] | None = None
    # whether the plan's ``notify`` is told about the run (off for a replay and a test case)
    notifications: bool = True

    def journal_form(self) -> dict[str, Any]:
        """The journaled fields as the run's ``options`` hold them (the halt policy as a mapping)."""
        form = {f.name: getattr(self, f.name) for f in fields(self) if f.metadata.get("journaled")}
        form["halt"] = self.halt.journal_form() if self.halt else None
        return form

    @classmethod
    def from_journal(cls, journaled: dict[str, Any] | None, **hooks: Any) -> RunOptions:
        """The options a journaled run was started with (its ``options``; keys it does not know, and
        the plan's own, are left aside; one it lacks, journaled by an older toolloop, takes its
        default), with ``hooks`` set."""
        journaled = journaled or {}
        taken = {f.name: journaled[f.name] for f in fields(cls)
                 if f.metadata.get("journaled") and journaled.get(f.name) is not None}
        if taken.get("halt") is not None:
            taken["halt"] = HaltPolicy(**taken["halt"])
        return cls(**taken, **hooks)


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


class SignalCount:
    """The SIGINT and SIGTERM a command has had. The first stops what it can; the second, wherever
    it lands, exits at once with 130: every receipt already written is committed, and calls
    without one are run again (or reported interrupted) by resume."""

    def __init__(self, notice: Callable[[str], None] | None):
        self.notice = notice
        self.seen = 0
        self.run_ended = False  # said in the notice of a signal that lands after the run

    def tell(self, text: str) -> None:
        if self.notice is not None:
            try:
                self.notice(text)
            except Exception:  # noqa: BLE001 - a notice must never break signal handling
                pass

    def first_or_force(self, sig: int, doing: str) -> None:
        name = signal.Signals(sig).name
        if self.seen:
            self.tell(f"{name} again: stopping now; every receipt written so far is in the journal")
            os._exit(130)
        self.seen += 1
        self.tell(f"{name}: {doing} (send it again to stop at once)")

    def held(self, sig: int, _frame: Any) -> None:
        """The handler while no run's event loop takes the signals (``held_signals``)."""
        self.first_or_force(sig, "writing what the run has done, then stopping" if self.run_ended
                           else "the run stops before its first call")


_HELD: SignalCount | None = None


@contextmanager
def held_signals(notice: Callable[[str], None] | None = None) -> Iterator[SignalCount | None]:
    """SIGINT and SIGTERM for the whole of a command that runs a plan: from before its run starts
    (loading, admission, opening the journal) until its output is closed. A run's own handling
    takes them while it goes (``RunSession.run``); before and after, they are counted, never a
    ``KeyboardInterrupt`` or a silent end, so the run's start, its summary and its output are never
    cut off half-way. A signal before the run makes it start interrupted (its summary says so,
    exit 130); one after its summary is written changes nothing; a second exits at once with 130.
    Nested uses share the outer count; off the main thread this does nothing."""
    global _HELD
    if _HELD is not None or threading.current_thread() is not threading.main_thread():
        yield _HELD
        return
    count = SignalCount(notice)
    previous = {sig: signal.signal(sig, count.held) for sig in _SIGNALS}
    _HELD = count
    try:
        yield count
    finally:
        _HELD = None
        for sig, handler in previous.items():
            signal.signal(sig, handler)


class _Signals:
    """SIGINT and SIGTERM for the length of a run.

    Outside the event loop (journaling the plan, flushing the journal) a plain handler only
    records the request: nothing is in flight then, and lanes check the flag before each call.
    Inside it, trio's signal receiver cancels the calls in flight from the loop's own thread.
    Signals are counted with those the command had before the run (``held_signals``): one that
    came before makes the run start interrupted, and after the run the command's count goes on.
    """

    def __init__(self, state: RunState, options: RunOptions):
        self.state = state
        self.enabled = options.handle_signals and threading.current_thread() is threading.main_thread()
        self.count = _HELD if self.enabled and _HELD is not None else SignalCount(options.on_signal)
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> "_Signals":
        if self.enabled:
            for sig in _SIGNALS:
                self._previous[sig] = signal.signal(sig, self._outside)
            if self.count.seen:
                self.state.interrupted = True  # a signal while the command started: nothing runs
        return self

    def __exit__(self, *exc: Any) -> None:
        self.count.run_ended = True
        for sig, handler in self._previous.items():
            # the command's own handler when there is one (ray.init, run in between, sets its own)
            signal.signal(sig, self.count.held if self.count is _HELD else handler)

    def _first_or_force(self, sig: int) -> None:
        self.count.first_or_force(sig, "cancelling the calls in flight")

    def _outside(self, sig: int, frame: Any) -> None:
        if self.count.run_ended:  # the loop is over: the outcome is known
            self.count.held(sig, frame)
            return
        self._first_or_force(sig)
        self.state.interrupted = True

    async def watch(self, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        with trio.open_signal_receiver(*_SIGNALS) as signals:
            task_status.started()
            async for sig in signals:
                self._first_or_force(sig)
                self.state.interrupt()


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
        with self.ctx.services.executors.connected(), _Signals(state, self.options) as signals:  # type: ignore[union-attr]
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
        self.store.describe_run(self.run_id, self.ctx.config.labels, contract_snapshot(self.ctx.contract))

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
