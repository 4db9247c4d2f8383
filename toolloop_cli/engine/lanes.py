"""The sequential and parallel runner: lanes under a trio nursery, calls serial inside a lane,
lanes concurrent up to ``max_concurrency``, receipts emitted in input order (``settle.py``)."""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any, Callable, Iterable, Iterator

import trio

from ..plan.admit import AdmittedCall, AdmittedLane, project_payload
from ..plan.lanes import RejectedLane
from ..receipts import Receipt
from .call import GovernedCall, execute_call, lane_call, not_run_receipt
from .child_runs import ChildPaused, cut_short_child
from .context import RunContext
from .gates import Refuse, Wait, check_call, check_lane_call
from .limits import LentDeadline, Watchdog
from .runstate import HaltPolicy, RunState
from .settle import Settlement

Sink = Callable[[Receipt], None]
#: the runner's state; the name batches have always used
BatchState = RunState

#: How far (in calls) workers may run ahead of the first receipt not yet emitted.
LOOKAHEAD_CALLS = 4096


class _LaneRun:
    """One lane's calls, run in order; remembers where it is so a cancelled worker can settle
    the call in flight and go on with the rest of the lane."""

    __slots__ = ("ctx", "lane", "calls", "settlement", "state", "pos", "payload", "stop_reason", "current_args",
                 "lent", "in_call", "cut_short")

    def __init__(self, ctx: RunContext, lane: AdmittedLane, calls: list[AdmittedCall],
                 settlement: Settlement, state: RunState):
        self.ctx, self.lane, self.calls, self.settlement, self.state = ctx, lane, calls, settlement, state
        self.pos = 0
        self.payload = dict(lane.payload) if lane.payload is not None else None
        self.stop_reason: str | None = None
        self.current_args: Any = None
        self.lent: LentDeadline | None = None  # the worker's scope as the deadline of its attempts
        self.in_call: GovernedCall | None = None  # the call running on the lent deadline
        self.cut_short = False  # its attempt in flight ran out of time: go on with it

    def _not_run(self, call: AdmittedCall, args: Any, status: str, message: str, approval: dict | None = None,
                 child: dict | None = None) -> None:
        receipt = not_run_receipt(
            self.ctx, call.tool, args, seq=call.seq, item_key=call.item_key, call_key=call.call_key,
            status=status, message=message, args_sha256=call.args_sha256 if args is call.args else None,
            approval=approval)
        if child is not None:  # a cancelled ``plan:`` call names the child run it had started
            receipt = dataclasses.replace(receipt, child_run_id=child["run_id"])
        self.settlement.settle(receipt)

    async def run(self) -> None:
        state = self.state
        if self.cut_short:
            await self._resume_call()
        while self.pos < len(self.calls):
            if state.interrupted:
                return  # not started: no receipt, so resume runs it
            call = self.calls[self.pos]
            if self.stop_reason is not None or state.halted:
                self.pos += 1
                self._not_run(call, call.args, "skipped",
                              self.stop_reason or state.stopped_by or f"the batch was halted ({halt_text(state.halt)})")
                continue
            # the gates (no coroutine unless a person may have to answer), then the call itself:
            # awaited right here, so a call is as few coroutines deep as its governance needs
            args, source = call.args, "admitted"
            if args is None:  # fed from the lane payload, which earlier calls may have extended
                args, source = project_payload(call.tool, self.payload or {}), "payload"
            verdict = check_lane_call(call.tool, args, source=source)
            if verdict is None:
                verdict = await check_call(self.ctx, call.tool, args, source=source, item_key=call.item_key,
                                           call_key=call.call_key, args_sha256=call.args_sha256)
            if isinstance(verdict, Wait):  # the lane pauses here: no receipts, so resume runs it
                self._pause(call)
                return
            if isinstance(verdict, Refuse):
                self._refuse(call, verdict.args, verdict.status, verdict.message, verdict.approval)
                continue
            args = self.current_args = verdict.args
            sha = call.args_sha256 if args is call.args else None
            scrubbed_with = None  # the run's scrubber the call path scrubbed the receipt with
            try:
                if self.lent is None:
                    receipt, _value, envelope = await execute_call(
                        self.ctx, call.tool, args, seq=call.seq, item_key=call.item_key, call_key=call.call_key,
                        args_sha256=sha, approval=verdict.approval)
                else:
                    self.in_call = governed = lane_call(
                        self.ctx, call.tool, args, self.lent, seq=call.seq, item_key=call.item_key,
                        call_key=call.call_key, args_sha256=sha, approval=verdict.approval)
                    receipt, _value, envelope = await governed.run()
                    self.in_call, scrubbed_with = None, governed.scrubbed_with
            except ChildPaused as paused:  # a child run waits for a person: the lane pauses with it
                self.in_call = None
                self._pause(call, paused.child_run_id)
                return
            self._ended(call, receipt, envelope, scrubbed_with)

    def _pause(self, call: AdmittedCall, child_run_id: str | None = None) -> None:
        for c in self.calls[self.pos:]:
            self.settlement.skip(c.seq)
        self.pos = len(self.calls)
        self.state.paused.append((call.item_key, call.call_key, child_run_id))

    def timed_out(self) -> None:
        """The worker's lent deadline fired: the call in flight goes on (its retries, its receipt)
        when the lane runs again, in the worker's fresh scope."""
        if self.in_call is None:  # no attempt was running: nothing to time out
            self.cancel_current()
        else:
            self.cut_short = True

    async def _resume_call(self) -> None:
        self.cut_short = False
        governed = self.in_call
        assert governed is not None
        try:
            receipt, _value, envelope = await governed.resume_timed_out()
        except ChildPaused as paused:
            self.in_call = None
            self._pause(self.calls[self.pos], paused.child_run_id)
            return
        self.in_call = None
        self._ended(self.calls[self.pos], receipt, envelope, governed.scrubbed_with)

    def _ended(self, call: AdmittedCall, receipt: Receipt, envelope: dict | None, scrubbed_with: Any = None) -> None:
        self.pos += 1
        self.settlement.settle(receipt, scrubbed_with)
        if receipt.status != "ok":
            self.stop_reason = f"call '{call.call_key}' in this lane ended {receipt.status}"
        elif envelope is not None:
            if envelope["decision"] == "stop":
                self.stop_reason = (f"call '{call.call_key}' reported status '{envelope['status']}'"
                                    " (control envelope: stop)")
            if self.payload is not None and envelope["handoff"]:
                self.payload.update(envelope["handoff"])

    def _refuse(self, call: AdmittedCall, args: Any, status: str, message: str, approval: dict | None = None) -> None:
        """The call does not run: its receipt says why, and the rest of its lane is skipped."""
        self.pos += 1
        self._not_run(call, args, status, message, approval)
        self.stop_reason = f"call '{call.call_key}' in this lane ended {status}"

    def cancel_current(self) -> None:
        """The call in flight was cancelled (halt now, or a signal): give it its receipt."""
        self.in_call, self.cut_short = None, False
        if self.pos >= len(self.calls):
            return
        call = self.calls[self.pos]
        self.pos += 1
        why = ("interrupted by a signal" if self.state.interrupted
               else self.state.stopped_by or f"the batch was halted ({halt_text(self.state.halt)})")
        child = cut_short_child(self.ctx, call.tool, call.seq)
        if child is not None:
            why += f"; its child run {child['run_id']} was cancelled with it and ended {child['status']}"
        self._not_run(call, self.current_args if self.current_args is not None else call.args, "cancelled", why,
                      child=child)
        self.stop_reason = f"call '{call.call_key}' in this lane was cancelled"


def halt_text(h: HaltPolicy | None) -> str:
    if h is None:
        return "halt"
    return f"--halt {h.when},fail={h.fail_count if h.fail_count is not None else f'{h.fail_percent:g}%'}"


class _Lanes:
    """Where the lanes come from and in what order their receipts are emitted."""

    def __init__(self, lanes: list[AdmittedLane] | Iterable[AdmittedLane], state: RunState | None,
                 skip_seqs: frozenset[int], streaming: bool):
        self.lanes = lanes
        self.skip_seqs = skip_seqs
        self.order: list[int] | None = None
        self.plan_calls: int | None = None
        if streaming:
            self.lanes = list(lanes)
            self.total = sum(len(lane.calls) for lane in self.lanes)  # open-ended: dispatched seqs go far above
        elif isinstance(lanes, list):
            expected = [c.seq for lane in lanes for c in lane.calls]
            self.total = len(expected)
            self.plan_calls = max(expected, default=-1) + 1
            self.order = expected if skip_seqs or _gappy(expected) else None
        else:
            # a stream of lanes (read back from the journal): seqs are 0..total-1 in order
            if state is None or skip_seqs:
                raise ValueError("lanes given as a stream need the batch state's total and no skipped seqs")
            self.total = self.plan_calls = state.total

    def positions(self) -> Iterator[tuple[int, AdmittedLane, list[AdmittedCall]]]:
        """(position of the lane's first call in emission order, lane, calls still to run)"""
        pos = 0
        skip = self.skip_seqs
        for lane in self.lanes:
            calls = [c for c in lane.calls if c.seq not in skip] if skip else lane.calls
            if calls:
                yield pos, lane, calls
            pos += len(lane.calls)


async def run_lanes(
    ctx: RunContext,
    lanes: list[AdmittedLane] | Iterable[AdmittedLane],
    max_concurrency: int,
    sink: Sink | Settlement,
    *,
    halt: HaltPolicy | None = None,
    skip_seqs: frozenset[int] = frozenset(),
    prior: Iterable[Receipt] = (),
    state: RunState | None = None,
    stream: Any = None,
    on_rejected: Callable[[list], None] | None = None,
) -> RunState:
    """Run lanes: calls serial inside a lane, lanes concurrent up to ``max_concurrency``.

    ``sink`` gets the receipts in output order, or is the run's ``Settlement`` (which journals
    them). ``stream`` (a ``plan.admit.LaneStream``) adds lanes read and admitted one at a time
    after ``lanes`` (``run --stream``); a rejected one gets ``invalid_input`` receipts and its
    findings go to ``on_rejected``. ``skip_seqs`` are calls already settled (resume); their
    receipts come in ``prior`` and are emitted in order with the new ones.
    """
    source = _Lanes(lanes, state, skip_seqs, stream is not None)
    state = state or RunState(total=source.total, halt=halt)
    state.total, state.halt = source.total, halt
    settlement = sink if isinstance(sink, Settlement) else Settlement(sink, counts=state.counts,
                                                                       children=ctx.children)
    settlement.listeners.append(state.note)
    settlement.expect(source.order)
    # dispatched calls are numbered after the plan's and emitted right after their parent
    ctx.sequence.plan_calls(source.plan_calls)
    for r in sorted(prior, key=lambda r: r.seq):
        settlement.keep(r)
    feeder = _Feeder(ctx, source, settlement, state, stream, on_rejected, max_concurrency)
    workers = (max(1, min(max_concurrency, len(source.lanes))) if isinstance(source.lanes, list) and stream is None
               else max(1, max_concurrency))
    # one watchdog for the deadlines of every lane worker's attempts (limits.LentDeadline); a run
    # whose tools dispatch gives each call a scope of its own, as its frame needs
    feeder.watchdog = None if ctx.dispatching else Watchdog()
    async with ctx.services.executors.opened():  # type: ignore[union-attr]
        async with trio.open_nursery() as outer:
            if feeder.watchdog is not None:
                outer.start_soon(feeder.watchdog.run)
            async with trio.open_nursery() as nursery:
                if stream is not None:
                    nursery.start_soon(feeder.feed)
                for _ in range(workers):
                    nursery.start_soon(feeder.worker)
            outer.cancel_scope.cancel()
    settlement.flush()
    return state


class _Feeder:
    """Hands lanes to the workers (the plan's first, then each streamed lane as it is read), and
    the workers that run them."""

    def __init__(self, ctx: RunContext, source: _Lanes, settlement: Settlement, state: RunState, stream: Any,
                 on_rejected: Callable[[list], None] | None, max_concurrency: int):
        self.ctx, self.source, self.settlement, self.state = ctx, source, settlement, state
        self.stream, self.on_rejected = stream, on_rejected
        self.window = max(LOOKAHEAD_CALLS, 64 * max_concurrency)
        self.watchdog: Watchdog | None = None
        #: the plan's lanes when nothing is streamed: taken by the workers without a coroutine;
        #: streamed lanes come from ``feed`` through a channel (``_fed``)
        self.pending: Iterator[tuple] | None = source.positions() if stream is None else None
        if stream is not None:
            self.send, self._receive = trio.open_memory_channel(max_concurrency)

    async def _fed(self) -> tuple | None:
        """The next streamed lane ``feed`` admitted, or None when it has fed them all."""
        try:
            return await self._receive.receive()
        except trio.EndOfChannel:
            return None

    async def worker(self) -> None:
        # One cancel scope per worker, not per call: halt-now and signals cancel these, and the
        # lane run settles whatever call was in flight. Its attempts borrow it as their deadline:
        # one that fires ends the scope too, and the call goes on (its retries, its receipt) in
        # the next one.
        state = self.state
        lent = LentDeadline(self.watchdog) if self.watchdog is not None else None
        current: _LaneRun | None = None
        taken = None  # a lane taken from the queue, not started yet
        while True:
            with trio.CancelScope() as scope:
                state.in_flight.add(scope)
                if lent is not None:
                    lent.lend(scope)
                    if current is not None and current.cut_short and state.cancelling():
                        scope.cancel()  # a halt came as the deadline fired: the call's retries are cancelled
                try:
                    while True:
                        if current is None:
                            if taken is None:
                                taken = next(self.pending, None) if self.pending is not None else await self._fed()
                                if taken is None:
                                    return
                            if taken[0] - self.window > self.settlement.emitted:
                                await self._within_window(taken[0])
                            current = _LaneRun(self.ctx, taken[1], taken[2], self.settlement, state)
                            current.lent = lent
                            taken = None
                        await current.run()
                        current = None
                finally:
                    state.in_flight.discard(scope)
            if current is not None:
                if lent is not None and lent.fired:
                    current.timed_out()
                else:
                    current.cancel_current()

    async def _within_window(self, pos: int) -> None:
        if pos - self.window > self.settlement.emitted and not (self.state.halted or self.state.interrupted):
            await self.settlement.wait_for(pos - self.window)

    async def feed(self) -> None:
        state = self.state
        async with self.send:
            for item in self.source.positions():
                await self.send.send(item)
            pos = self.source.total
            while not (state.halted or state.interrupted):
                lanes = await self._next_streamed()
                if not lanes:
                    return
                # every lane read is journaled: each is handed on (a halted run skips it)
                for lane in lanes:
                    if isinstance(lane, RejectedLane):
                        self._reject(lane)
                    else:
                        state.total += len(lane.calls)
                        if lane.calls:
                            await self.send.send((pos, lane, lane.calls))
                    pos += len(lane.calls)

    async def _next_streamed(self) -> list:
        """The lanes of the lines available now (read, admitted and journaled in a worker thread)."""
        with trio.CancelScope() as scope:
            self.state.in_flight.add(scope)
            try:
                lanes = await trio.to_thread.run_sync(self.stream.next_lanes, abandon_on_cancel=True)
            finally:
                self.state.in_flight.discard(scope)
        return [] if scope.cancelled_caught else lanes

    def _reject(self, lane: RejectedLane) -> None:
        if self.on_rejected is not None:
            self.on_rejected(lane.problems)
        self.state.rejected_lanes += 1
        for receipt in rejected_receipts(self.ctx, lane):
            self.state.total += 1
            self.settlement.settle(receipt)


def rejected_receipts(ctx: RunContext, lane: RejectedLane) -> list[Receipt]:
    """``invalid_input`` receipts for the calls of a lane refused by ``run --stream``."""
    message = "; ".join(f"{p.file}:{p.line}: {p.code} {p.message}" for p in lane.problems) or "lane rejected"
    return [not_run_receipt(ctx, tool, None, seq=seq, item_key=lane.item_key, call_key=call_key,
                            status="invalid_input", message=message, kind="rejected_lane")
            for seq, call_key, tool in lane.calls]


def _gappy(seqs: list[int]) -> bool:
    return any(s != i for i, s in enumerate(seqs))


async def run_batch(ctx: RunContext, calls: list[AdmittedCall], sink: Sink | Settlement, **kw: Any) -> RunState:
    """A sequential list: one lane, run in order."""
    lane = AdmittedLane(0, None, None, calls)
    return await run_lanes(ctx, [lane], 1, sink, **kw)


async def run_parallel_batch(ctx: RunContext, lanes: list[AdmittedLane], max_concurrency: int,
                             sink: Sink | Settlement, **kw: Any) -> RunState:
    """Governed parallel lanes; the run's ``parallel_batch_id`` is set if the caller left it empty."""
    if ctx.config.parallel_batch_id is None:
        ctx.config.parallel_batch_id = uuid.uuid4().hex
    return await run_lanes(ctx, lanes, max_concurrency, sink, **kw)
