"""A whole run: journal the admitted plan, run it under trio with signal handling, and
produce its summary. Output goes through the ``emit`` callback only."""

from __future__ import annotations

import os
import signal
import sqlite3
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

import trio

from ..errors import RunError
from ..plan.admit import AdmittedPlan
from ..receipts import EXIT_CODES, Receipt, summary_record, summary_status
from ..store import JournalWriter, Store, lease_token
from .batch import BatchState, HaltPolicy, new_run_id, run_lanes
from .call import DEFAULT_OUTPUT_CAP, RunContext
from .spool import lane_rows

Emit = Callable[[dict], None]
_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@dataclass
class RunOptions:
    halt: HaltPolicy | None = None
    default_timeout_s: float | None = None
    no_cache: bool = False
    refresh_cache: bool = False
    output_cap_bytes: int = DEFAULT_OUTPUT_CAP
    audit: Callable[[dict], None] | None = None
    approve: str = "ask"  # answer to approval gates: ask | all | none
    ask: Any = None  # with approve=ask: a person at a terminal (cli/prompt.py); None pauses the run
    on_receipt: Callable[[Receipt], None] | None = None  # progress display, in the engine thread
    # called on the output thread after each batch of records handed to ``emit`` (flush a pipe
    # once per batch rather than once per record)
    flush_output: Callable[[], None] | None = None
    # findings of a lane refused by ``run --stream`` (its calls get invalid_input receipts)
    on_rejected: Callable[[list], None] | None = None
    # SIGINT/SIGTERM handling (main thread only): the first signal cancels the run, a second forces
    # an exit with code 130. ``on_signal`` gets a one-line notice for a person; it may be called
    # from a signal handler, so it must not take locks (write with os.write).
    handle_signals: bool = True
    on_signal: Callable[[str], None] | None = None

    def journal_form(self) -> dict:
        return {
            "halt": asdict(self.halt) if self.halt else None,
            "default_timeout_s": self.default_timeout_s,
            "no_cache": self.no_cache,
            "refresh_cache": self.refresh_cache,
            "output_cap_bytes": self.output_cap_bytes,
            "approve": self.approve,
        }


def journal_plan(store: Store, ctx: RunContext, plan: AdmittedPlan, options: RunOptions, owner: str) -> None:
    """Record the run (holding its lease) and every admitted lane and call."""
    plan_path = plan.path if plan.path.startswith("<") else os.path.abspath(plan.path)
    store.create_run({
        "run_id": ctx.run_id, "mode": plan.mode, "plan_path": plan_path,
        "plan_sha256": plan.plan_sha256, "registry_path": os.path.abspath(plan.registry_path),
        "contract_sha256": plan.contract.contract_sha256,
        "options": {"max_concurrency": plan.max_concurrency, "subagent": plan.subagent.id,
                    "app_root": plan.contract.app_root, **options.journal_form()},
        "parallel_batch_id": ctx.parallel_batch_id, "total_calls": plan.total_calls, "lease_owner": owner,
    })
    # lanes from a stream are in the journal already (spool.py); these are the plan file's
    store.journal_calls(ctx.run_id, *lane_rows(plan.lanes))


class _Signals:
    """SIGINT and SIGTERM for the length of a run.

    Outside the event loop (journaling the plan, flushing the journal) a plain handler only
    records the request: nothing is in flight then, and lanes check the flag before each call.
    Inside it, trio's signal receiver cancels the calls in flight from the loop's own thread.
    A second signal, wherever it lands, exits at once with 130: every receipt already written
    is committed, and calls without one are run again (or reported interrupted) by resume.
    """

    def __init__(self, state: BatchState, options: RunOptions):
        self.state = state
        self.notice = options.on_signal
        self.seen = 0
        self.enabled = options.handle_signals and threading.current_thread() is threading.main_thread()
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> "_Signals":
        if self.enabled:
            for sig in _SIGNALS:
                self._previous[sig] = signal.signal(sig, self._outside)
        return self

    def __exit__(self, *exc: Any) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def _tell(self, text: str) -> None:
        if self.notice is not None:
            try:
                self.notice(text)
            except Exception:  # noqa: BLE001 - a notice must never break signal handling
                pass

    def _first_or_force(self, sig: int) -> bool:
        name = signal.Signals(sig).name
        if self.seen:
            self._tell(f"{name} again: stopping now; every receipt written so far is in the journal")
            os._exit(130)
        self.seen += 1
        self._tell(f"{name}: cancelling the calls in flight (send it again to stop at once)")
        return True

    def _outside(self, sig: int, _frame: Any) -> None:
        self._first_or_force(sig)
        self.state.interrupted = True

    async def watch(self, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        with trio.open_signal_receiver(*_SIGNALS) as signals:
            task_status.started()
            async for sig in signals:
                self._first_or_force(sig)
                self.state.interrupt()


@dataclass
class _JournaledState(BatchState):
    """Batch state whose settled receipts go to the journal at once, in completion order, while
    they wait for their turn on the output (which follows input order)."""

    journal: Any = None
    settled: dict = field(default_factory=dict)  # seq -> record committed, not yet emitted

    def record(self, receipt: Receipt) -> None:
        super().record(receipt)
        if self.journal is not None:
            rec = self.settled[receipt.seq] = receipt.as_record()
            self.journal.commit(rec)


def _first(group: BaseExceptionGroup) -> BaseException:
    exc: BaseException = group
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    return exc


@dataclass
class RunResult:
    summary: dict
    state: BatchState = field(repr=False)

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.summary["status"]]


def execute_plan(
    plan: AdmittedPlan,
    store: Any,
    emit: Emit,
    options: RunOptions,
    *,
    run_id: str | None = None,
    resume: dict | None = None,
) -> RunResult:
    """Run an admitted plan to its end (or interruption). Every receipt is committed to the
    journal before ``emit`` sees it; the summary is emitted last.

    ``store`` is a ``Store`` or anything with the same methods. ``resume`` (from
    ``prepare_resume``) carries the receipts already settled, the lease owner, and where
    ``completion_seq`` goes on.
    """
    t0 = time.perf_counter()
    ctx = RunContext(
        run_id=run_id or new_run_id(),
        contract=plan.contract,
        parallel_batch_id=None,
        default_timeout_s=options.default_timeout_s,
        cache=store,
        no_cache=options.no_cache,
        refresh_cache=options.refresh_cache,
        output_cap_bytes=options.output_cap_bytes,
        audit=options.audit,
        approve=options.approve,
    )
    ctx.subagent = plan.subagent.id
    if options.approve == "ask":
        from .approvals import Approvals

        ctx.approvals = Approvals(store, ctx.run_id)
        ctx.ask = options.ask
    state = _JournaledState(total=plan.total_calls, halt=options.halt)
    with _Signals(state, options) as signals:
        skip: frozenset[int] = frozenset()
        prior: list[Receipt] = []
        journaled: frozenset[int] = frozenset()  # prior receipts the journal already holds as they are
        if resume is None:
            owner = lease_token()
            if plan.mode == "parallel":
                import uuid

                ctx.parallel_batch_id = uuid.uuid4().hex
            journal_plan(store, ctx, plan, options, owner)
            if plan.stream is not None:
                from .spool import LaneSpool

                plan.stream.journal = LaneSpool(store, ctx.run_id, page=1, grow_total=True)
        else:
            owner = resume["owner"]
            ctx.parallel_batch_id = resume["parallel_batch_id"]
            skip = frozenset(resume["skip"])
            prior = resume["prior"]
            journaled = frozenset(resume.get("journaled", ()))
            for parent_seq, child in resume.get("children", ()):
                ctx.add_child(parent_seq, child)  # printed again right after its kept parent
            ctx._completion = resume.get("completion_start", 0)
            store.reopen_run(ctx.run_id)

        def before_start(info: tuple) -> None:
            seq, tool, _sha = info
            if tool.effect in ("write", "destructive") and not tool.idempotent:
                store.mark_started(ctx.run_id, seq)

        ctx.before_start = before_start
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

        journal = state.journal = JournalWriter(store, emit, on_error=stop_on_writer_error,
                                                      after_batch=options.flush_output)
        settled = state.settled

        def sink(receipt: Receipt) -> None:
            # in input order; the receipt was committed when it settled (or is a prior one)
            if options.on_receipt is not None:
                options.on_receipt(receipt)
            rec = settled.pop(receipt.seq, None)
            if rec is not None:
                journal.emit(rec)
            elif receipt.seq in journaled:
                journal.emit(receipt.as_record())
            else:  # settled outside the batch state (resume's own receipts, dispatched calls)
                journal(receipt.as_record())

        async def main() -> None:
            loop_token.append(trio.lowlevel.current_trio_token())
            async with trio.open_nursery() as nursery:
                if signals.enabled:
                    await nursery.start(signals.watch)
                await run_lanes(ctx, plan.all_lanes() if plan.spool is not None and resume is None else plan.lanes,
                                plan.max_concurrency if plan.mode == "parallel" else 1, sink,
                                halt=options.halt, skip_seqs=skip, prior=prior, state=state,
                                stream=plan.stream if resume is None else None, on_rejected=options.on_rejected)
                nursery.cancel_scope.cancel()

        writer_error: BaseException | None = None
        store_error: sqlite3.Error | None = None
        try:
            try:
                trio.run(main)
            except* sqlite3.Error as group:  # a start marker or the cache could not be written
                store_error = _first(group)
        finally:
            interrupted = state.interrupted  # a signal after the last call does not change the outcome
            try:
                journal.close()
            except BaseException as exc:  # noqa: BLE001 - re-raised below once the run is recorded
                writer_error = exc
        if store_error is None and isinstance(writer_error, sqlite3.Error):
            store_error, writer_error = writer_error, None
        if writer_error is not None or store_error is not None:
            try:
                store.finish_run(ctx.run_id, "interrupted", state.counts, owner=owner)
            except Exception:  # noqa: BLE001 - the first failure is the one to report
                pass
            if store_error is not None:
                raise RunError(f"the state database could not be written ({store_error}); run {ctx.run_id} was"
                               " stopped, and every receipt printed is in the journal") from None
            raise writer_error  # type: ignore[misc]
        status = summary_status(state.counts, stopped=state.halted or bool(state.paused), interrupted=interrupted)
        summary = summary_record(ctx.run_id, plan.mode, status, state.counts,
                                 (time.perf_counter() - t0) * 1000, plan.contract.contract_sha256)
        if plan.stream is not None and resume is None:
            store.set_total_calls(ctx.run_id, state.total)  # rejected lanes' calls included
        store.finish_run(ctx.run_id, status, state.counts, summary, owner=owner)
        emit(summary)
    return RunResult(summary, state)
