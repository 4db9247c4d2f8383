"""Sequential and parallel batches under trio nurseries, with receipts emitted in input order."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator

import trio

from .._canonical import sha256_of
from ..contract.schemas import schema_errors
from ..plan.admit import AdmittedCall, AdmittedLane, project_payload
from ..plan.lanes import RejectedLane
from ..receipts import STATUSES, Receipt
from .call import RunContext, execute_call, not_run_receipt

Sink = Callable[[Receipt], None]

#: How far (in calls) workers may run ahead of the first receipt not yet emitted.
LOOKAHEAD_CALLS = 4096


@dataclass(frozen=True)
class HaltPolicy:
    """``--halt now,fail=N`` or ``--halt soon,fail=P%``: stop the batch after failures."""

    when: str  # now | soon
    fail_count: int | None = None
    fail_percent: float | None = None

    def tripped(self, failed: int, total: int) -> bool:
        if failed == 0:
            return False
        if self.fail_count is not None:
            return failed >= self.fail_count
        return total > 0 and failed * 100.0 >= (self.fail_percent or 0) * total

    @classmethod
    def parse(cls, text: str) -> "HaltPolicy":
        """Parse ``now,fail=3`` / ``soon,fail=10%``; raises ValueError with a usable message."""
        try:
            when, rest = text.split(",", 1)
            key, value = rest.split("=", 1)
        except ValueError:
            raise ValueError(f"--halt '{text}': expected now,fail=N or soon,fail=P%") from None
        when, key, value = when.strip(), key.strip(), value.strip()
        if when not in ("now", "soon") or key != "fail":
            raise ValueError(f"--halt '{text}': expected now,fail=N or soon,fail=P%")
        try:
            if value.endswith("%"):
                pct = float(value[:-1])
                if not 0 < pct <= 100:
                    raise ValueError
                return cls(when, fail_percent=pct)
            n = int(value)
            if n < 1:
                raise ValueError
            return cls(when, fail_count=n)
        except ValueError:
            raise ValueError(f"--halt '{text}': fail= takes a count of 1 or more, or a percentage like 10%") from None


class OrderedEmitter:
    """Hands receipts to the sink in input order, each as soon as everything before it is done.

    ``expected`` lists the seqs to emit when they are not simply 0, 1, 2, … (a resume).
    ``wait_for(n)`` lets workers stay at most a window ahead of the emission point, so the
    receipts held back for order stay bounded however long one lane takes.
    """

    def __init__(self, sink: Sink, expected: Iterable[int] | None = None):
        self._sink = sink
        self._pending: dict[int, Receipt] = {}
        self._order = sorted(expected) if expected is not None else None
        self.emitted = 0
        self._waiters: list[tuple[int, trio.Event]] = []

    def _next_seq(self) -> int | None:
        if self._order is None:
            return self.emitted
        return self._order[self.emitted] if self.emitted < len(self._order) else None

    def skip(self, seq: int) -> None:
        """``seq`` will have no receipt in this run (its lane paused): emission moves past it."""
        self._settle(seq, None)

    def done(self, receipt: Receipt) -> None:
        self._settle(receipt.seq, receipt)

    def _settle(self, seq: int, receipt: Receipt | None) -> None:
        self._pending[seq] = receipt
        nxt = self._next_seq()
        if nxt not in self._pending:
            return
        while nxt is not None and nxt in self._pending:
            ready = self._pending.pop(nxt)
            if ready is not None:
                self._sink(ready)
            self.emitted += 1
            nxt = self._next_seq()
        if self._waiters:
            ready = [w for w in self._waiters if w[0] <= self.emitted]
            if ready:
                self._waiters = [w for w in self._waiters if w[0] > self.emitted]
                for _, event in ready:
                    event.set()

    async def wait_for(self, count: int) -> None:
        """Return once at least ``count`` receipts have been emitted."""
        if self.emitted >= count:
            return
        event = trio.Event()
        self._waiters.append((count, event))
        await event.wait()

    def flush(self) -> None:
        """Emit whatever is left (after an interruption), still in seq order."""
        for seq in sorted(self._pending):
            ready = self._pending.pop(seq)
            if ready is not None:
                self._sink(ready)


@dataclass
class BatchState:
    total: int
    halt: HaltPolicy | None = None
    counts: dict[str, int] = field(default_factory=lambda: {s: 0 for s in STATUSES})
    failed: int = 0
    halted: bool = False
    interrupted: bool = False
    in_flight: set = field(default_factory=set)
    paused: list = field(default_factory=list)  # (item_key, call_key) of calls waiting for approval

    def record(self, receipt: Receipt) -> None:
        self.counts[receipt.status] += 1
        if receipt.status not in ("ok", "skipped"):
            self.failed += 1
            if self.halt is not None and not self.halted and self.halt.tripped(self.failed, self.total):
                self.halted = True
                if self.halt.when == "now":
                    for scope in list(self.in_flight):
                        scope.cancel()

    def interrupt(self) -> None:
        self.interrupted = True
        for scope in list(self.in_flight):
            scope.cancel()


class _LaneRun:
    """One lane's calls, run in order; remembers where it is so a cancelled worker can settle
    the call in flight and go on with the rest of the lane."""

    __slots__ = ("ctx", "lane", "calls", "emitter", "state", "pos", "payload", "stop_reason", "current_args")

    def __init__(self, ctx: RunContext, lane: AdmittedLane, calls: list[AdmittedCall],
                 emitter: OrderedEmitter, state: BatchState):
        self.ctx, self.lane, self.calls, self.emitter, self.state = ctx, lane, calls, emitter, state
        self.pos = 0
        self.payload = dict(lane.payload) if lane.payload is not None else None
        self.stop_reason: str | None = None
        self.current_args: Any = None

    def _settle(self, receipt: Receipt) -> None:
        self.state.record(receipt)
        self.emitter.done(receipt)

    def _not_run(self, call: AdmittedCall, args: Any, status: str, message: str) -> None:
        self._settle(not_run_receipt(self.ctx, call.tool, args, seq=call.seq, item_key=call.item_key,
                                     call_key=call.call_key, status=status, message=message,
                                     args_sha256=call.args_sha256 if args is call.args else None))

    async def run(self) -> None:
        ctx, state = self.ctx, self.state
        while self.pos < len(self.calls):
            if state.interrupted:
                return  # not started: no receipt, so resume runs it
            call = self.calls[self.pos]
            tool = call.tool
            if self.stop_reason is not None or state.halted:
                self.pos += 1
                self._not_run(call, call.args, "skipped",
                              self.stop_reason or f"the batch was halted ({_halt_text(state.halt)})")
                continue
            args = call.args
            if args is None:  # fed from the lane payload, which earlier calls may have extended
                args = project_payload(tool, self.payload or {})
                problem = _input_problem(tool, args)
                if problem is not None:
                    self._refuse(call, args, "invalid_input", f"arguments from the lane payload fail input_schema: {problem}")
                    continue
            if tool.approval is not None and ctx.approve != "all" and tool.approval.matches(args, tool.effect):
                verdict, value = await self._ask_approval(call, args)
                if verdict == "wait":  # the lane pauses here: no receipts, so resume runs it
                    for c in self.calls[self.pos:]:
                        self.emitter.skip(c.seq)
                    self.pos = len(self.calls)
                    state.paused.append((call.item_key, call.call_key))
                    return
                if verdict == "reject":
                    self._refuse(call, args, "denied", f"tool '{tool.id}' needs approval ({tool.approval_text}): {value}")
                    continue
                if value is not args:  # arguments edited by the approver: checked again
                    args = value
                    problem = _input_problem(tool, args)
                    if problem is not None:
                        self._refuse(call, args, "invalid_input", f"approved arguments fail input_schema: {problem}")
                        continue
            self.current_args = args
            receipt, _value, envelope = await execute_call(
                ctx, tool, args, seq=call.seq, item_key=call.item_key, call_key=call.call_key,
                args_sha256=call.args_sha256 if args is call.args else None,
            )
            self.pos += 1
            self._settle(receipt)
            if receipt.status != "ok":
                self.stop_reason = f"call '{call.call_key}' in this lane ended {receipt.status}"
            elif envelope is not None:
                if envelope["decision"] == "stop":
                    self.stop_reason = (f"call '{call.call_key}' reported status '{envelope['status']}'"
                                        " (control envelope: stop)")
                if self.payload is not None and envelope["handoff"]:
                    self.payload.update(envelope["handoff"])

    def _refuse(self, call: AdmittedCall, args: Any, status: str, message: str) -> None:
        """The call does not run: its receipt says why, and the rest of its lane is skipped."""
        self.pos += 1
        self._not_run(call, args, status, message)
        self.stop_reason = f"call '{call.call_key}' in this lane ended {status}"

    async def _ask_approval(self, call: AdmittedCall, args: Any) -> tuple[str, Any]:
        """A gated call (SPEC 6.4), failing closed: ("run", args), ("reject", why) or ("wait", None)."""
        ctx = self.ctx
        if ctx.approve == "none":
            return "reject", "rejected by --approve none"
        if ctx.approvals is None:
            return "reject", "no person can answer here (run with --approve all or --approve none)"
        sha = call.args_sha256 or sha256_of(args)
        verdict, value = ctx.approvals.decide(call.item_key, call.call_key, args, sha)
        if verdict == "wait" and ctx.ask is not None:  # a person at a terminal answers now
            verdict, value = await ctx.ask(call.tool, call.item_key, call.call_key, args)
            ctx.approvals.record(call.item_key, call.call_key, sha, verdict, value)
        return verdict, value

    def cancel_current(self) -> None:
        """The call in flight was cancelled (halt now, or a signal): give it its receipt."""
        if self.pos >= len(self.calls):
            return
        call = self.calls[self.pos]
        self.pos += 1
        why = "interrupted by a signal" if self.state.interrupted else f"the batch was halted ({_halt_text(self.state.halt)})"
        self._not_run(call, self.current_args if self.current_args is not None else call.args, "cancelled", why)
        self.stop_reason = f"call '{call.call_key}' in this lane was cancelled"


def _input_problem(tool: Any, args: Any) -> str | None:
    """Why ``args`` fail the tool's input schema, or None when they pass (or there is none)."""
    if tool.input_validator is None or tool.input_validator.is_valid(args):
        return None
    return "; ".join(schema_errors(tool.input_validator, args, limit=3))


def _halt_text(h: HaltPolicy | None) -> str:
    if h is None:
        return "halt"
    return f"--halt {h.when},fail={h.fail_count if h.fail_count is not None else f'{h.fail_percent:g}%'}"


async def run_lanes(
    ctx: RunContext,
    lanes: list[AdmittedLane] | Iterable[AdmittedLane],
    max_concurrency: int,
    sink: Sink,
    *,
    halt: HaltPolicy | None = None,
    skip_seqs: frozenset[int] = frozenset(),
    prior: Iterable[Receipt] = (),
    state: BatchState | None = None,
    stream: Any = None,
    on_rejected: Callable[[list], None] | None = None,
) -> BatchState:
    """Run lanes: calls serial inside a lane, lanes concurrent up to ``max_concurrency``.

    ``stream`` (a ``plan.admit.LaneStream``) adds lanes read and admitted one at a time after
    ``lanes`` (``run --stream``); a rejected one gets ``invalid_input`` receipts and its
    findings go to ``on_rejected``.

    ``skip_seqs`` are calls already settled (resume); their receipts come in ``prior`` and are
    emitted in order with the new ones.
    """
    if stream is not None:
        lanes = list(lanes)
        total = sum(len(lane.calls) for lane in lanes)
        plan_calls = None  # open-ended: dispatched calls take seqs far above any plan call
        order = None
    elif isinstance(lanes, list):
        expected = [c.seq for lane in lanes for c in lane.calls]
        total = len(expected)
        plan_calls = max(expected, default=-1) + 1
        order = expected if skip_seqs or _gappy(expected) else None
    else:
        # a stream of lanes (read back from the journal): seqs are 0..total-1 in order
        if state is None or skip_seqs:
            raise ValueError("lanes given as a stream need the batch state's total and no skipped seqs")
        total = plan_calls = state.total
        order = None
    state = state or BatchState(total=total, halt=halt)
    state.total, state.halt = total, halt
    # dispatched calls (SPEC 5.6) are numbered after the plan's and emitted right after their parent
    sink = ctx.with_children(sink, state.counts, plan_calls=plan_calls)
    emitter = OrderedEmitter(sink, order)
    for r in sorted(prior, key=lambda r: r.seq):
        state.counts[r.status] += 1
        emitter.done(r)

    def positions() -> Iterator[tuple[int, AdmittedLane, list[AdmittedCall]]]:
        """(position of the lane's first call in emission order, lane, calls still to run)"""
        pos = 0
        for lane in lanes:
            calls = [c for c in lane.calls if c.seq not in skip_seqs] if skip_seqs else lane.calls
            if calls:
                yield pos, lane, calls
            pos += len(lane.calls)

    window = max(LOOKAHEAD_CALLS, 64 * max_concurrency)
    if stream is None:
        pending = positions()

        async def take() -> tuple | None:
            return next(pending, None)
    else:
        send, receive = trio.open_memory_channel(max_concurrency)

        async def take() -> tuple | None:
            try:
                return await receive.receive()
            except trio.EndOfChannel:
                return None

    async def worker() -> None:
        # One cancel scope per worker, not per call: halt-now and signals cancel these, and the
        # lane run settles whatever call was in flight.
        current: _LaneRun | None = None
        taken = None  # a lane taken from the queue, not started yet
        while True:
            with trio.CancelScope() as scope:
                state.in_flight.add(scope)
                try:
                    while True:
                        if current is None:
                            if taken is None:
                                taken = await take()
                                if taken is None:
                                    return
                            if taken[0] - window > emitter.emitted and not (state.halted or state.interrupted):
                                await emitter.wait_for(taken[0] - window)
                            current = _LaneRun(ctx, taken[1], taken[2], emitter, state)
                            taken = None
                        await current.run()
                        current = None
                finally:
                    state.in_flight.discard(scope)
            if current is not None:
                current.cancel_current()

    workers = (max(1, min(max_concurrency, len(lanes))) if isinstance(lanes, list) and stream is None
               else max(1, max_concurrency))
    async def feed() -> None:
        """Hand lanes to the workers: the plan's first, then each streamed lane as it is read."""
        pos = 0
        async with send:
            for item in positions():
                await send.send(item)
            pos = total
            while not (state.halted or state.interrupted):
                with trio.CancelScope() as scope:
                    state.in_flight.add(scope)
                    try:
                        lane = await trio.to_thread.run_sync(stream.next_lane, abandon_on_cancel=True)
                    finally:
                        state.in_flight.discard(scope)
                if scope.cancelled_caught or lane is None:
                    return
                if isinstance(lane, RejectedLane):
                    if on_rejected is not None:
                        on_rejected(lane.problems)
                    for receipt in rejected_receipts(ctx, lane):
                        state.total += 1
                        state.record(receipt)
                        emitter.done(receipt)
                    pos += len(lane.calls)
                    continue
                state.total += len(lane.calls)
                if lane.calls:
                    await send.send((pos, lane, lane.calls))
                pos += len(lane.calls)

    uses_mcp = any(t.kind == "mcp" for sub in ctx.contract.subagents.values() for t in sub.tools.values())
    if ctx.mcp is None and uses_mcp:
        from .mcp import open_mcp_sessions

        async with open_mcp_sessions() as ctx.mcp:
            await _run_workers(workers, worker, feed if stream is not None else None)
        ctx.mcp = None
    else:
        await _run_workers(workers, worker, feed if stream is not None else None)
    emitter.flush()
    return state


async def _run_workers(workers: int, worker: Any, feed: Any) -> None:
    async with trio.open_nursery() as nursery:
        if feed is not None:
            nursery.start_soon(feed)
        for _ in range(workers):
            nursery.start_soon(worker)


def rejected_receipts(ctx: RunContext, lane: RejectedLane) -> list[Receipt]:
    """``invalid_input`` receipts for the calls of a lane refused by ``run --stream``."""
    message = "; ".join(f"{p.file}:{p.line}: {p.code} {p.message}" for p in lane.problems) or "lane rejected"
    return [not_run_receipt(ctx, tool, None, seq=seq, item_key=lane.item_key, call_key=call_key,
                            status="invalid_input", message=message, kind="rejected_lane")
            for seq, call_key, tool in lane.calls]


def _gappy(seqs: list[int]) -> bool:
    return any(s != i for i, s in enumerate(seqs))


async def run_batch(ctx: RunContext, calls: list[AdmittedCall], sink: Sink, **kw: Any) -> BatchState:
    """A sequential list: one lane, run in order."""
    lane = AdmittedLane(0, None, None, calls)
    return await run_lanes(ctx, [lane], 1, sink, **kw)


async def run_parallel_batch(ctx: RunContext, lanes: list[AdmittedLane], max_concurrency: int,
                             sink: Sink, **kw: Any) -> BatchState:
    """Governed parallel lanes; ``ctx.parallel_batch_id`` is set if the caller left it empty."""
    if ctx.parallel_batch_id is None:
        ctx.parallel_batch_id = uuid.uuid4().hex
    return await run_lanes(ctx, lanes, max_concurrency, sink, **kw)


def new_run_id() -> str:
    """Sortable run ids: UTC time to the second, then randomness."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + uuid.uuid4().hex[:8]
