"""A whole run: journal the admitted plan, run it under trio with signal handling, and
produce its summary. Output goes through the ``emit`` callback only."""

from __future__ import annotations

import os
import signal
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

import trio

from ..plan.admit import AdmittedCall, AdmittedLane, AdmittedPlan
from ..receipts import Receipt, summary_record, summary_status
from ..store import JournalWriter, Store, lease_token
from .batch import BatchState, HaltPolicy, new_run_id, run_lanes
from .call import DEFAULT_OUTPUT_CAP, RunContext

Emit = Callable[[dict], None]


@dataclass
class RunOptions:
    halt: HaltPolicy | None = None
    default_timeout_s: float | None = None
    no_cache: bool = False
    refresh_cache: bool = False
    output_cap_bytes: int = DEFAULT_OUTPUT_CAP
    audit: Callable[[dict], None] | None = None
    on_receipt: Callable[[Receipt], None] | None = None  # progress display, in the engine thread

    def journal_form(self) -> dict:
        return {
            "halt": asdict(self.halt) if self.halt else None,
            "default_timeout_s": self.default_timeout_s,
            "no_cache": self.no_cache,
            "refresh_cache": self.refresh_cache,
        }


def _stored_args(call: AdmittedCall, ctx: RunContext) -> str | None:
    if call.args is None:
        return None
    red = ctx.redactor(call.tool)
    if red.active and red.secrets(call.args):
        return None  # never journal a redacted value; resume rebuilds it from the plan
    import orjson

    return orjson.dumps(call.args).decode()


def journal_plan(store: Store, ctx: RunContext, plan: AdmittedPlan) -> None:
    store.create_run({
        "run_id": ctx.run_id, "mode": plan.mode, "plan_path": os.path.abspath(plan.path),
        "plan_sha256": plan.plan_sha256, "registry_path": os.path.abspath(plan.registry_path),
        "contract_sha256": plan.contract.contract_sha256, "options": {"max_concurrency": plan.max_concurrency},
        "parallel_batch_id": ctx.parallel_batch_id, "total_calls": plan.total_calls,
    })
    store.journal_calls(
        ctx.run_id,
        ((lane.index, lane.item_key, lane.payload) for lane in plan.lanes),
        ((c.seq, c.lane, c.item_key, c.call_key, c.tool.id, _stored_args(c, ctx), c.args_sha256)
         for lane in plan.lanes for c in lane.calls),
    )


async def _watch_signals(state: BatchState, done: trio.Event) -> None:
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for _sig in signals:
            if state.interrupted:
                os._exit(130)  # a second Ctrl-C forces; the journal is already consistent
            state.interrupt()


@dataclass
class RunResult:
    summary: dict
    state: BatchState = field(repr=False)

    @property
    def exit_code(self) -> int:
        from ..receipts import EXIT_CODES

        return EXIT_CODES[self.summary["status"]]


def execute_plan(
    plan: AdmittedPlan,
    store: Store,
    emit: Emit,
    options: RunOptions,
    *,
    run_id: str | None = None,
    resume: dict | None = None,
) -> RunResult:
    """Run an admitted plan to its end (or interruption). Every receipt is committed to the
    journal before ``emit`` sees it; the summary is emitted last."""
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
    )
    skip: frozenset[int] = frozenset()
    prior: list[Receipt] = []
    if resume is None:
        if plan.mode == "parallel":
            import uuid

            ctx.parallel_batch_id = uuid.uuid4().hex
        journal_plan(store, ctx, plan)
        store.acquire_lease(ctx.run_id, lease_token())
    else:
        ctx.parallel_batch_id = resume["parallel_batch_id"]
        skip = frozenset(resume["skip"])
        prior = resume["prior"]
        ctx._completion = resume.get("completion_start", 0)

    def before_start(info: tuple) -> None:
        seq, tool, _sha = info
        if tool.effect in ("write", "destructive") and not tool.idempotent:
            store.mark_started(ctx.run_id, seq)

    ctx.before_start = before_start
    state = BatchState(total=plan.total_calls, halt=options.halt)
    loop_token: list = []

    def stop_on_writer_error(_exc: BaseException) -> None:
        # called on the journal thread (e.g. the reader of stdout went away): stop the run from
        # the event loop's own thread
        if loop_token:
            try:
                loop_token[0].run_sync_soon(state.interrupt)
            except trio.RunFinishedError:
                pass

    journal = JournalWriter(store, emit, on_error=stop_on_writer_error)

    def sink(receipt: Receipt) -> None:
        if options.on_receipt is not None:
            options.on_receipt(receipt)
        journal(receipt.as_record())

    async def main() -> None:
        loop_token.append(trio.lowlevel.current_trio_token())
        done = trio.Event()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_watch_signals, state, done)
            await run_lanes(ctx, plan.lanes, plan.max_concurrency if plan.mode == "parallel" else 1, sink,
                            halt=options.halt, skip_seqs=skip, prior=prior, state=state)
            nursery.cancel_scope.cancel()

    writer_error: BaseException | None = None
    try:
        trio.run(main, restrict_keyboard_interrupt_to_checkpoints=True)
    finally:
        try:
            journal.close()
        except BaseException as exc:  # noqa: BLE001 - re-raised below once the run is recorded
            writer_error = exc
    status = summary_status(state.counts, stopped=state.halted, interrupted=state.interrupted)
    if writer_error is not None:
        store.finish_run(ctx.run_id, "interrupted", state.counts)
        raise writer_error
    summary = summary_record(ctx.run_id, plan.mode, status, state.counts,
                             (time.perf_counter() - t0) * 1000, plan.contract.contract_sha256)
    store.finish_run(ctx.run_id, status, state.counts, summary)
    emit(summary)
    return RunResult(summary, state)
