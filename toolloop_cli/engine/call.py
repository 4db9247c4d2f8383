"""One call, fully governed: source limits, timeout, retries, cache, output gate, envelope,
redaction, and its receipt."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import trio

from .._canonical import canonical_bytes, sha256_of
from ..contract.compiled import ToolSpec, timeout_of
from ..contract.isolation import isolation_of
from .taint import taint_of
from ..receipts import Receipt, millis3, rfc3339
from .child_runs import ChildFailed, ChildResult, cut_short_child
from .context import RunContext
from .executors import Executor, WorkerLost
from .executors.thread import HeldSlot
from .frames import CURRENT, CallFrame
from .identity import reset_current, set_pending
from .limits import LentDeadline
from .output_gate import check_output
from .redact import Redactor, Scrubber, scrub
from .singleflight import cached_or_lead

MAX_MESSAGE_CHARS = 8192  # an error message longer than this is cut (after redaction)

@dataclass(slots=True)
class Outcome:
    status: str
    value: Any = None
    error: dict | None = None
    abandoned: bool = False
    child_run_id: str | None = None


def _failure(exc: Exception, tool: ToolSpec) -> Outcome:
    from .procpool import WorkerFailure, WorkerOutputRejected

    if isinstance(exc, WorkerOutputRejected):
        return Outcome("invalid_output", error={"kind": exc.kind, "message": str(exc)})
    if isinstance(exc, ChildFailed):
        return Outcome("error", error={"kind": exc.kind, "message": str(exc) or exc.kind}, child_run_id=exc.child_run_id)
    if isinstance(exc, WorkerLost) and tool.effect in ("write", "destructive") and not tool.idempotent:
        # an at-most-once write whose worker went away may or may not have happened: never an
        # error that a retry policy or --retry-failed would run again
        return Outcome("interrupted", error={"kind": exc.kind, "message": f"{exc}; this write may or may not have"
                                             " happened: run it again on purpose with --retry-interrupted"})
    kind = exc.kind if isinstance(exc, (WorkerFailure, WorkerLost)) else type(exc).__name__
    return Outcome("error", error={"kind": kind, "message": str(exc) or kind})


async def _attempt(ctx: RunContext, tool: ToolSpec, executor: Executor, args: dict, timeout: float | None,
                   slot: HeldSlot | None = None, lent: LentDeadline | None = None) -> Outcome:
    failed: Outcome | None = None
    value: Any = None
    prepared = None
    if executor.prepares:  # the base executor's prepare does nothing: no coroutine to await
        try:
            prepared = await executor.prepare(tool, args)  # before the deadline runs: the timeout is the call's
        except OSError as exc:
            return Outcome("error", error={"kind": "worker_start", "message": f"cannot start a worker process: {exc}"})
    if not executor.copies_arguments:
        args = private_copy(args)
    now = lent.now if lent is not None else trio.current_time  # the run's clock, read directly
    deadline = now() + timeout if timeout is not None else float("inf")
    if lent is not None:
        # the lane worker's scope is the deadline (limits.LentDeadline): when it fires, the
        # Cancelled goes up to the worker, which settles this attempt as timed out
        lent.start(deadline)
        try:
            value = await executor.run(tool, args, prepared, slot)
        except Exception as exc:  # noqa: BLE001 - any failure of App code is a receipt, not a crash
            failed = _failure(exc, tool)
        finally:
            lent.at = float("inf")
        if lent.fired:  # fired while the result was on its way: the worker's scope is cancelled
            await trio.lowlevel.checkpoint()
        cancelled = False
    else:
        with trio.CancelScope(deadline=deadline) as scope:
            try:
                value = await executor.run(tool, args, prepared, slot)
            except Exception as exc:  # noqa: BLE001 - any failure of App code is a receipt, not a crash
                failed = _failure(exc, tool)
        cancelled = scope.cancelled_caught
    if cancelled or (timeout is not None and now() > deadline):
        # a result (or a failure) that arrives after the deadline is never accepted
        return timed_out(timeout, executor)
    if failed is not None:
        return failed
    if isinstance(value, ChildResult):
        return Outcome("ok", value.value, child_run_id=value.child_run_id)
    return Outcome("ok", value)


def _cut_short_child_id(ctx: RunContext, tool: ToolSpec, ran: Any, seq: int) -> str | None:
    """A ``plan:`` call cut short by its timeout names the child run it had started."""
    if tool.kind != "plan" or ran.outcome.status != "timeout":
        return None
    child = cut_short_child(ctx, tool, seq)
    return child["run_id"] if child is not None else None


def timed_out(timeout: float | None, executor: Executor) -> Outcome:
    return Outcome("timeout", error={"kind": "timeout", "message": f"no result within {timeout:g}s"},
                   abandoned=executor.abandons)


def private_copy(args: dict) -> dict:
    """The arguments as the callable gets them: nested objects and lists copied, so a tool that
    changes its arguments in place cannot change what the receipt, the journal or a retry sees.
    (``fn(**args)`` already gives the callable a dict of its own; only nested values are shared.)"""
    for v in args.values():
        if isinstance(v, (dict, list)):
            import copy

            return copy.deepcopy(args)
    return args


async def _attempt_with_children(ctx: RunContext, tool: ToolSpec, executor: Executor, args: dict,
                                 timeout: float | None, slot: HeldSlot | None, frame: CallFrame) -> Outcome:
    """An attempt of a thread or asyncio callable that may dispatch: its child calls run in a
    nursery that ends with the attempt."""
    async with trio.open_nursery() as nursery:
        frame.nursery = nursery
        try:
            outcome = await _attempt(ctx, tool, executor, args, timeout, slot)
        finally:
            frame.nursery = None
            nursery.cancel_scope.cancel()
    return outcome


class _Attempts:
    """The tries of one call: source limits, the at-most-once start marker, retries."""

    __slots__ = ("ctx", "tool", "args", "meta", "frame", "start_info", "executor", "timeout", "count", "where",
                 "lent")

    def __init__(self, ctx: RunContext, tool: ToolSpec, args: dict, meta: dict, frame: CallFrame | None,
                 start_info: tuple | None, where: _Where, lent: LentDeadline | None = None):
        self.ctx, self.tool, self.args, self.meta, self.where = ctx, tool, args, meta, where
        self.lent = lent
        self.executor = ctx.services.executors.for_tool(tool)  # type: ignore[union-attr]
        # children of a trio callable run in its own task; others get a nursery per attempt
        self.frame = frame if frame is not None and not self.executor.in_calling_task else None
        self.start_info = start_info
        self.timeout = timeout_of(tool.timeout_s, ctx.config.default_timeout_s)
        self.count = 0

    async def run(self, outcome: Outcome | None = None) -> tuple[Outcome, int]:
        """Try until done; ``outcome`` is that of the attempt in flight when it was cut short (a
        lent deadline that fired), and the tries go on from there."""
        tool = self.tool
        policy = tool.retry
        # a write that timed out may still be running, or may have applied: never tried again
        at_most_once = tool.at_most_once
        while True:
            if outcome is None:
                self.count += 1
                outcome = await (self._one(None) if tool.max_in_flight is None else self._limited())
            if outcome.status == "timeout" and at_most_once:
                return outcome, self.count
            if outcome.status in policy.on and self.count < policy.max_attempts:
                delay = policy.delay(self.count, self.ctx.services.rng.random())
                if self.ctx.services.audit is not None:
                    self.ctx.emit_audit("retried", **self.meta, attempt=self.count, status=outcome.status,
                                        retry_in_s=round(delay, 6),
                                        error=_scrubbed(self.ctx, self.tool, outcome.error, self.args))
                await trio.sleep(delay)
                outcome = None
                continue
            return outcome, self.count

    async def _limited(self) -> Outcome:
        tool = self.tool
        assert tool.max_in_flight is not None
        # the slot is taken before the deadline runs (waiting for a source is not the call's
        # time) and held for the whole attempt; a thread keeps it until it really ends
        limiter = self.ctx.services.limits.in_flight((tool.subagent, tool.id), tool.max_in_flight)
        borrower = object()
        await limiter.acquire_on_behalf_of(borrower)
        slot = HeldSlot(limiter, borrower) if self.executor.holds_slot else None
        try:
            return await self._one(slot)
        finally:
            if slot is None or not slot.handed_over:
                limiter.release_on_behalf_of(borrower)

    async def _one(self, slot: HeldSlot | None) -> Outcome:
        # after the source limits: the rate, the at-most-once start marker, then the attempt
        ctx, tool = self.ctx, self.tool
        if tool.per_second is not None:
            await ctx.services.limits.rate((tool.subagent, tool.id), tool.per_second).acquire()
        token = _try_starts(ctx, self.where, self.start_info, self.meta, self.count)
        try:
            if self.frame is not None:
                return await _attempt_with_children(ctx, tool, self.executor, self.args, self.timeout, slot, self.frame)
            return await _attempt(ctx, tool, self.executor, self.args, self.timeout, slot, self.lent)
        finally:
            reset_current(token)


def _try_starts(ctx: RunContext, w: _Where, start_info: tuple | None, meta: dict, count: int) -> Any:
    """What comes right before try ``count`` of a call: its at-most-once start marker committed
    (the first try's), the audit's ``started``, and the call's identity set (``current_call()``
    in the callable); the identity's token, for ``reset_current`` when the try ends."""
    if start_info is not None and count == 1:
        ctx.services.before_start(start_info)  # type: ignore[misc]  # committed before the callable runs
    if ctx.services.audit is not None:
        ctx.emit_audit("started", **meta, attempt=count)
    return set_pending(ctx.config.run_id, w.seq, w.item_key, w.call_key, count, ctx.config.labels,
                       meta.get("receipt_id") or w.receipt_id)


def _check_output(ctx: RunContext, tool: ToolSpec, outcome: Outcome) -> tuple[Outcome, dict | None]:
    error, envelope = check_output(tool, outcome.value, ctx.config.output_cap_bytes)
    return (outcome, envelope) if error is None else (Outcome("invalid_output", error=error), None)


def _scrubbed(ctx: RunContext, tool: ToolSpec, error: dict | None, args: Any, value: Any = None) -> dict | None:
    """``error`` with the call's redacted values scrubbed from its message, and cut to size."""
    if error is None:
        return None
    message = error["message"]
    red = ctx.redactor(tool)
    if red.active:
        message = scrub(message, red.secrets(args) + red.secrets(value))
    message = ctx.services.secrets.text(message)
    if len(message) > MAX_MESSAGE_CHARS:
        message = message[:MAX_MESSAGE_CHARS] + f"… ({len(message)} characters)"
    elif message is error["message"]:
        return error
    return {"kind": error["kind"], "message": message}


def cache_key(tool: ToolSpec, args: dict) -> str:
    return sha256_of([tool.contract_sha256, canonical_bytes(args).decode()])


async def execute_call(
    ctx: RunContext,
    tool: ToolSpec,
    args: dict,
    *,
    seq: int,
    item_key: str | None,
    call_key: str | None,
    args_sha256: str | None = None,
    parent_receipt_id: str | None = None,
    iteration: int | None = None,
    approval: dict | None = None,
) -> tuple[Receipt, Any, dict | None]:
    """Run one call that passed its gates (``gates.check_call``). Returns its receipt, the real
    (unredacted) result and envelope reading, for the engine's own use (lane handoff, dispatch).
    Never raises for App failures."""
    where = _Where(seq, item_key, call_key, parent_receipt_id, iteration, approval)
    if ctx.dispatching:
        return await execute_in_frame(ctx, tool, args, seq=seq, item_key=item_key, call_key=call_key,
                                      args_sha256=args_sha256, parent_receipt_id=parent_receipt_id,
                                      iteration=iteration, approval=approval)
    return await GovernedCall(ctx, tool, args, where, args_sha256, ctx.sequence.new_receipt_id(), None).run()


async def execute_in_frame(ctx: RunContext, tool: ToolSpec, args: dict, *, seq: int, item_key: str | None,
                           call_key: str | None, args_sha256: str | None, parent_receipt_id: str | None,
                           iteration: int | None, parent: CallFrame | None = None,
                           approval: dict | None = None) -> tuple[Receipt, Any, dict | None]:
    """``execute_call`` for runs where a tool may dispatch: the call is visible to ``dispatch()``
    in its task, threads and asyncio task; a call whose tool declares no dispatch hides its
    parent's frame."""
    receipt_id = ctx.sequence.new_receipt_id()
    frame = (CallFrame(ctx, tool, seq, receipt_id, item_key, iteration, trio.lowlevel.current_trio_token())
             if tool.dispatch else None)
    token = CURRENT.set(frame)
    try:
        return await GovernedCall(ctx, tool, args, _Where(seq, item_key, call_key, parent_receipt_id, iteration,
                                                          approval), args_sha256, receipt_id, frame).run()
    finally:
        CURRENT.reset(token)
        if frame is not None:
            frame.ended = True
            if parent is not None and frame.secrets:
                parent.secrets.extend(frame.secrets)


@dataclass(slots=True)
class _Where:
    seq: int
    item_key: str | None
    call_key: str | None
    parent_receipt_id: str | None
    iteration: int | None
    approval: dict | None = None
    receipt_id: str | None = None


#: the outcome a call's ``_Ran`` holds until its try replaces it (never changed in place: one for all)
_NOT_TRIED = Outcome("ok")


@dataclass(slots=True)
class _Ran:
    """What running (or looking up) a call gave: its outcome and how it was reached."""

    outcome: Outcome
    envelope: dict | None = None
    attempts: int = 0
    cache: str = "off"
    key: str | None = None  # the cache key, when the tool is cached and the cache is read
    flight: Any = None  # single-flight slot to release once the result is stored (or not)


class GovernedCall:
    """One call from its admission to its receipt. A lane worker keeps it while it runs: when the
    worker's lent deadline fires, the attempt in flight is cut short, and ``resume_timed_out``
    (in the worker's fresh scope) goes on with its retries and its receipt."""

    __slots__ = ("ctx", "tool", "args", "where", "args_sha", "receipt_id", "frame", "meta", "started", "t0",
                 "ran", "attempts", "lent", "scrubbed_with")

    def __init__(self, ctx: RunContext, tool: ToolSpec, args: dict, where: _Where, args_sha256: str | None,
                 receipt_id: str, frame: CallFrame | None, lent: LentDeadline | None = None):
        self.ctx, self.tool, self.args, self.where, self.frame = ctx, tool, args, where, frame
        self.args_sha = args_sha = args_sha256 or sha256_of(args)
        self.receipt_id = where.receipt_id = receipt_id  # each call has its own _Where
        meta: dict = {}
        if ctx.services.audit is not None:
            meta = {"seq": where.seq, "tool": tool.id, "item_key": where.item_key, "call_key": where.call_key,
                    "receipt_id": receipt_id}
            if where.parent_receipt_id is not None:
                meta["parent_receipt_id"] = where.parent_receipt_id
            ctx.emit_audit("admitted", **meta, subagent=tool.subagent, args_sha256=args_sha)
        self.meta = meta
        self.started = time.time()
        self.t0 = time.perf_counter()
        ctx.ledger.count(tool)
        self.ran: _Ran | None = None
        self.attempts: _Attempts | None = None
        self.lent = lent
        #: the run's scrubber (``RunSecrets.scrubber``) as it stood when the receipt's shown values
        #: were scrubbed with it (or with more), None before that or when the run has no secrets:
        #: settling scrubs the receipt's record again only where it changed since
        self.scrubbed_with: Scrubber | None = None

    async def run(self) -> tuple[Receipt, Any, dict | None]:
        ctx, tool, where = self.ctx, self.tool, self.where
        # a call whose result is not cached needs nothing looked up (no coroutine to await)
        self.ran = ran = (await _cached(ctx, tool, self.args) if _reads_cache(ctx, tool) else _Ran(_NOT_TRIED))
        if ran.cache != "hit":
            lent = self.lent
            if (lent is not None and self.frame is None and not self.meta and tool.max_in_flight is None
                    and tool.per_second is None):
                # nothing to wait for around the first try (no source limits, no audit) and its
                # deadline the worker's lent scope: made here as ``_Attempts._one`` would make it,
                # two coroutines less a call; the retry loop only goes on with a try that failed
                # (or, from ``resume_timed_out``, one cut short)
                token = _try_starts(ctx, where, self._start_info(), self.meta, 1)
                executor = ctx.services.executors.for_tool(tool)  # type: ignore[union-attr]
                try:
                    outcome = await _attempt(ctx, tool, executor, self.args,
                                             timeout_of(tool.timeout_s, ctx.config.default_timeout_s), None, lent)
                finally:
                    reset_current(token)
                if outcome.status == "ok":
                    ran.outcome, ran.attempts = outcome, 1
                else:
                    ran.outcome, ran.attempts = await self._tries(1).run(outcome)
            else:
                ran.outcome, ran.attempts = await self._tries(0).run()
            if ran.outcome.status == "ok":
                ran.outcome, ran.envelope = _check_output(ctx, tool, ran.outcome)
        receipt, value = self._receipt()
        if ctx.contract.evidence is not None:
            await give_evidence(ctx, receipt)
        return receipt, value, ran.envelope

    async def resume_timed_out(self) -> tuple[Receipt, Any, dict | None]:
        """The attempt in flight ran out of time (its lent deadline fired): its retries, then the
        receipt."""
        ran, attempts = self.ran, self.attempts or self._tries(1)  # a first try made by ``run`` itself
        assert ran is not None, "a call is cut short only while it is tried"
        ran.outcome, ran.attempts = await attempts.run(timed_out(attempts.timeout, attempts.executor))
        if ran.outcome.status == "ok":
            ran.outcome, ran.envelope = _check_output(self.ctx, self.tool, ran.outcome)
        return await self._finished()

    def _start_info(self) -> tuple | None:
        """What the at-most-once start marker is committed from, when the run commits them."""
        return (self.where.seq, self.tool, self.args_sha) if self.ctx.services.before_start is not None else None

    def _tries(self, made: int) -> _Attempts:
        """The retry loop of the call, after the first ``made`` tries ``run`` made itself."""
        self.attempts = attempts = _Attempts(self.ctx, self.tool, self.args, self.meta, self.frame,
                                             self._start_info(), self.where, self.lent)
        attempts.count = made
        return attempts

    async def _finished(self) -> tuple[Receipt, Any, dict | None]:
        receipt, value = self._receipt()
        if self.ctx.contract.evidence is not None:
            await give_evidence(self.ctx, receipt)
        return receipt, value, self.ran.envelope  # type: ignore[union-attr]

    def _receipt(self) -> tuple[Receipt, Any]:
        ctx, tool, args, where, ran = self.ctx, self.tool, self.args, self.where, self.ran
        assert ran is not None
        value = ran.outcome.value if ran.outcome.status == "ok" else None
        red = ctx.redactor(tool)
        run_secrets = ctx.services.secrets
        # taken before the call's scrubber: a secret the run learns meanwhile makes it stale
        self.scrubbed_with = run_scrubber = run_secrets.scrubber if run_secrets else None
        scrubber = _scrubber(red, args, value, self.frame, run_secrets, run_scrubber)
        _store(ctx, tool, ran, value, scrubber)
        shown_args, result, error, envelope = _shown(red, args, value, ran, scrubber)
        receipt = Receipt(
            run_id=ctx.config.run_id, seq=where.seq, completion_seq=ctx.sequence.next_completion(),
            subagent=tool.subagent, tool=tool.id, parallel_batch_id=ctx.config.parallel_batch_id,
            item_key=where.item_key, call_key=where.call_key, parent_receipt_id=where.parent_receipt_id,
            iteration=where.iteration, receipt_id=self.receipt_id, status=ran.outcome.status,
            abandoned=ran.outcome.abandoned, attempts=ran.attempts, cache=ran.cache, args_sha256=self.args_sha,
            args=shown_args, result=result, error=error, envelope=envelope, started_at=rfc3339(self.started),
            finished_at=rfc3339(time.time()), duration_ms=millis3((time.perf_counter() - self.t0) * 1000),
            approval=where.approval, isolation=isolation_of(tool),
            child_run_id=ran.outcome.child_run_id or (_cut_short_child_id(ctx, tool, ran, where.seq)
                                                      if tool.kind == "plan" else None),
            taint=taint_of(ctx, tool),
        )
        if ctx.services.audit is not None:
            ctx.emit_audit("finished", **self.meta, status=receipt.status, attempts=ran.attempts, cache=ran.cache,
                           error=receipt.error, duration_ms=receipt.duration_ms)
        return receipt, value


def lane_call(ctx: RunContext, tool: ToolSpec, args: dict, lent: LentDeadline, *, seq: int, item_key: str | None,
              call_key: str | None, args_sha256: str | None, approval: dict | None) -> GovernedCall:
    """A call of a lane worker whose attempts borrow the worker's scope as their deadline (runs
    where no tool dispatches: a dispatching call runs in a frame of its own, ``execute_call``)."""
    where = _Where(seq, item_key, call_key, None, None, approval)
    return GovernedCall(ctx, tool, args, where, args_sha256, ctx.sequence.new_receipt_id(), None, lent)


def _reads_cache(ctx: RunContext, tool: ToolSpec) -> bool:
    return tool.cacheable and ctx.services.cache is not None and not ctx.config.no_cache


async def _cached(ctx: RunContext, tool: ToolSpec, args: dict) -> _Ran:
    """A cache hit, or what is needed to run the call and store its result."""
    ran = _Ran(Outcome("ok"))
    cache = ctx.services.cache
    if not _reads_cache(ctx, tool):
        return ran
    ran.key = cache_key(tool, args)
    ran.cache = "miss"
    # an identical call already in flight is waited for, not run twice (singleflight.py)
    hit, ran.flight = await cached_or_lead(_Checked(cache, ctx, tool), ran.key, refresh=ctx.config.refresh_cache)
    if hit is not None:
        ran.cache = "hit"
        ran.outcome = Outcome("ok", hit[0])
        ran.envelope = tool.envelope.read(hit[0])[0] if tool.envelope is not None else None
    return ran


class _Checked:
    """The cache as one tool reads it: a damaged entry (not JSON, or failing the tool's output
    schema or envelope) is a miss with a warning, never a crash and never an ok the tool did not
    return; the call then runs and its result replaces the entry."""

    __slots__ = ("cache", "ctx", "tool")

    def __init__(self, cache: Any, ctx: RunContext, tool: ToolSpec):
        self.cache, self.ctx, self.tool = cache, ctx, tool

    def get(self, key: str) -> tuple[Any] | None:
        try:
            hit = self.cache.get(key)
        except ValueError as exc:  # the stored text is not JSON
            return self._damaged(f"it is not JSON ({exc})")
        if hit is None:
            return None
        tool = self.tool
        if tool.output_validator is not None and not tool.output_validator.is_valid(hit[0]):
            return self._damaged("it fails the tool's output_schema")
        if tool.envelope is not None and tool.envelope.read(hit[0])[1] is not None:
            return self._damaged("its control envelope cannot be read")
        return hit

    def _damaged(self, why: str) -> None:
        warn = self.ctx.services.warn
        if warn is not None:
            warn(f"cache entry of '{self.tool.id}' ignored: {why}; the call runs and replaces it")
        return None

    def put(self, key: str, tool: str, result: Any) -> None:
        self.cache.put(key, tool, result)


def _scrubber(red: Redactor, args: dict, value: Any, frame: CallFrame | None, run_secrets: Any,
              run_scrubber: Scrubber | None) -> Scrubber | None:
    """The values this call redacts (``red``: its tool's redactor), and those its dispatched calls
    redacted, are hidden wherever they appear in what is written, not only at their pointers (a
    result may quote an argument); with them the run's secrets (``run_secrets``: credentials the
    run read, values a model proposed; ``run_scrubber`` their scrubber, None when there are none)."""
    if not (red.active or (frame is not None and frame.secrets)):
        return run_scrubber
    secrets = red.secrets(args) + red.secrets(value) if red.active else []
    if frame is not None:
        secrets += frame.secrets
    if not secrets:
        return run_scrubber
    return Scrubber(secrets + run_secrets.values()) if run_scrubber is not None else Scrubber(secrets)


def _store(ctx: RunContext, tool: ToolSpec, ran: _Ran, value: Any, scrubber: Scrubber | None) -> None:
    """Store a fresh ok result in the cache, unless it holds a redacted value (the cache is in the
    state file), and let identical calls waiting on it go."""
    stored = False
    if ran.key is not None and ran.cache == "miss" and ran.outcome.status == "ok":
        red = ctx.redactor(tool)
        if not (red.active and red.secrets(value)) and (scrubber is None or scrubber.deep(value) == value):
            ctx.services.cache.put(ran.key, tool.id, value)  # type: ignore[union-attr]
            stored = True
    if ran.flight is not None:
        ran.flight.release(stored=stored)


def _shown(red: Redactor, args: dict, value: Any, ran: _Ran,
           scrubber: Scrubber | None) -> tuple[Any, Any, dict | None, dict | None]:
    """The receipt's ``args``, ``result``, ``error`` and ``envelope``, redacted by ``red`` (the
    tool's redactor)."""
    error = ran.outcome.error
    if error is not None:
        message = scrubber.text(error["message"]) if scrubber is not None else error["message"]
        if len(message) > MAX_MESSAGE_CHARS:
            message = message[:MAX_MESSAGE_CHARS] + f"… ({len(message)} characters)"
        if message is not error["message"]:
            error = {"kind": error["kind"], "message": message}
    envelope = ran.envelope
    shown_args = red.apply(args)
    shown_result = red.apply(value) if ran.outcome.status == "ok" else None
    shown_envelope = red.apply_envelope(envelope) if envelope is not None and red.active else envelope
    if scrubber is not None:
        shown_args, shown_result = scrubber.deep(shown_args), scrubber.deep(shown_result)
        shown_envelope = scrubber.deep(shown_envelope)
    return shown_args, shown_result, error, shown_envelope


async def give_evidence(ctx: RunContext, receipt: Receipt) -> None:
    """Hand a finished receipt's record (redacted) to the registry's evidence hook. The hook's
    own failure is reported on the audit stream and never breaks the run."""
    hook = ctx.contract.evidence
    if hook is None:
        return
    try:
        result = hook(receipt.as_record())
        if hasattr(result, "__await__"):
            await result
    except Exception as exc:  # noqa: BLE001 - App code; its failure is not the run's
        tool = ctx.contract.subagents[receipt.subagent].tools.get(receipt.tool)
        err = {"kind": type(exc).__name__, "message": str(exc) or type(exc).__name__}
        if tool is not None:
            err = _scrubbed(ctx, tool, err, None) or err
        ctx.emit_audit("evidence_failed", seq=receipt.seq, tool=receipt.tool, receipt_id=receipt.receipt_id,
                       error=err)


def not_run_receipt(
    ctx: RunContext, tool: ToolSpec | str, args: Any, *, seq: int, item_key: str | None, call_key: str | None,
    status: str, message: str | None, args_sha256: str | None = None,
    parent_receipt_id: str | None = None, iteration: int | None = None, kind: str | None = None,
    approval: dict | None = None,
) -> Receipt:
    """A receipt for a call that never started (skipped, cancelled before start, denied...).
    ``tool`` is a tool id as written when the call never resolved to a registered tool."""
    if isinstance(tool, str):
        subagent, tool_id, shown = ctx.config.subagent or "", tool, args
    else:
        subagent, tool_id, shown = tool.subagent, tool.id, ctx.redactor(tool).apply(args)
    secrets = ctx.services.secrets
    if secrets:  # arguments a model wrote (or an approver typed) may quote a credential
        shown, message = secrets.deep(shown), secrets.text(message) if message else message
    return Receipt(
        run_id=ctx.config.run_id, seq=seq, completion_seq=ctx.sequence.next_completion(), subagent=subagent,
        tool=tool_id, parallel_batch_id=ctx.config.parallel_batch_id, item_key=item_key, call_key=call_key,
        parent_receipt_id=parent_receipt_id, iteration=iteration, receipt_id=ctx.sequence.new_receipt_id(),
        status=status,
        abandoned=False, attempts=0, cache="off",
        args_sha256=args_sha256 if args_sha256 is not None else (sha256_of(args) if args is not None else None),
        args=shown, result=None,
        error={"kind": kind or status, "message": message} if message else None, envelope=None,
        started_at=None, finished_at=None, duration_ms=0.0, approval=approval,
        isolation=None if isinstance(tool, str) else isolation_of(tool),
        taint=None if isinstance(tool, str) else taint_of(ctx, tool),
    )
