"""One call, fully governed: source limits, timeout, retries, cache, output gate, envelope,
redaction, and its receipt."""

from __future__ import annotations

import os
import random
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

import orjson
import trio

from .._canonical import canonical_bytes, sha256_of
from ..contract.compiled import Contract, ToolSpec
from ..contract.schemas import schema_errors
from ..errors import DispatchError
from ..receipts import Receipt, rfc3339
from .dispatch import CURRENT, CallFrame
from .limits import ToolLimits
from .redact import Redactor, Scrubber, scrub
from .singleflight import cached_or_lead
from .workers import HeldSlot, run_in_thread, run_on_asyncio

DEFAULT_OUTPUT_CAP = 16 * 1024 * 1024
MAX_MESSAGE_CHARS = 8192  # an error message longer than this is cut (after redaction)
#: first seq of dispatched calls when the runner did not say how many calls its plan has
CHILD_SEQ_FALLBACK = 1_000_000_000


class Cache(Protocol):
    def get(self, key: str) -> Any | None: ...
    def put(self, key: str, tool: str, result: Any) -> None: ...


@dataclass
class RunContext:
    """What every call of one run shares. Plain state; no printing."""

    run_id: str
    contract: Contract
    parallel_batch_id: str | None = None
    subagent: str | None = None  # the plan's subagent, for receipts of calls that never resolved a tool
    mcp: Any = None  # the run's MCP sessions (engine/mcp.py), opened by run_lanes
    default_timeout_s: float | None = None
    cache: Cache | None = None
    no_cache: bool = False
    refresh_cache: bool = False
    output_cap_bytes: int = DEFAULT_OUTPUT_CAP
    audit: Callable[[dict], None] | None = None
    approve: str = "ask"  # approval gates: ask (a person) | all | none  (run --approve)
    approvals: Any = None  # engine.approvals.Approvals: answers from the journal (approve=ask)
    # a person at a terminal: async (tool, item_key, call_key, args) -> ("run", args) | ("reject", message)
    ask: Any = None
    before_start: Callable[[Any], None] | None = None  # journal hook for at-most-once writes
    rng: random.Random = field(default_factory=random.Random)
    limits: ToolLimits = field(default_factory=ToolLimits)
    #: seq of the first dispatched call: the number of calls in the plan (set by the batch runner)
    child_seq_base: int | None = None
    _completion: int = 0
    _redactors: dict = field(default_factory=dict)
    # dispatched receipts waiting to be emitted right after their parent's, by the parent's seq
    _children: dict = field(default_factory=dict)
    _child_next: int | None = None
    _counts: dict = field(default_factory=dict)  # calls made per tool with a max_calls
    # receipt ids: a random prefix per run context (one system call) and a counter
    _id_prefix: str = field(default_factory=lambda: os.urandom(8).hex())
    _ids: int = 0

    def new_receipt_id(self) -> str:
        """A unique receipt id: 16 random hex digits for this context, then a counter."""
        self._ids += 1
        return f"{self._id_prefix}{self._ids:016x}"
    _dispatching: bool = False  # some tool of the contract may dispatch

    def __post_init__(self) -> None:
        self._dispatching = any(t.dispatch for s in self.contract.subagents.values() for t in s.tools.values())

    def redactor(self, tool: ToolSpec) -> Redactor:
        key = (tool.subagent, tool.id)
        r = self._redactors.get(key)
        if r is None:
            r = self._redactors[key] = Redactor(tool.redact)
        return r

    def next_completion(self) -> int:
        n = self._completion
        self._completion += 1
        return n

    def emit_audit(self, event: str, **data: Any) -> None:
        if self.audit is not None:
            self.audit({"event": event, "run_id": self.run_id, "at": rfc3339(time.time()), **data})

    # -- dispatched (child) calls ------------------------------------------------------------

    def new_child_seq(self) -> int:
        """A seq for a dispatched call: after every plan seq, never reused in the run. The count
        starts at the run's completion counter, which a resume continues, so a resumed run
        cannot hand out a seq an earlier child already had."""
        if self._child_next is None:
            self._child_next = self._completion
        n = self._child_next
        self._child_next += 1
        base = self.child_seq_base if self.child_seq_base is not None else CHILD_SEQ_FALLBACK
        return base + n

    def add_child(self, parent_seq: int, receipt: Receipt) -> None:
        self._children.setdefault(parent_seq, []).append(receipt)

    def take_children(self, parent_seq: int) -> list[Receipt]:
        """The receipts dispatched by the call ``parent_seq`` (and by those, depth first), in the
        order they finished; each is handed out once."""
        if not self._children:
            return []
        out: list[Receipt] = []
        for r in self._children.pop(parent_seq, ()):
            out.append(r)
            out.extend(self.take_children(r.seq))
        return out

    def with_children(self, sink: Callable[[Receipt], None], counts: dict[str, int] | None = None,
                      *, plan_calls: int | None = None) -> Callable[[Receipt], None]:
        """``sink`` extended to emit each call's dispatched receipts right after its own (counted in
        ``counts``). ``plan_calls`` sets where dispatched seqs start."""
        if plan_calls is not None and self.child_seq_base is None:
            self.child_seq_base = plan_calls
        if not self._dispatching:
            return sink

        def emit(receipt: Receipt) -> None:
            sink(receipt)
            for child in self.take_children(receipt.seq):
                if counts is not None:
                    counts[child.status] = counts.get(child.status, 0) + 1
                sink(child)

        return emit


@dataclass(slots=True)
class Outcome:
    status: str
    value: Any = None
    error: dict | None = None
    abandoned: bool = False


def _failure(exc: Exception) -> Outcome:
    from .procpool import WorkerFailure, WorkerOutputRejected

    if isinstance(exc, WorkerOutputRejected):
        return Outcome("invalid_output", error={"kind": exc.kind, "message": str(exc)})
    kind = exc.kind if isinstance(exc, WorkerFailure) else type(exc).__name__
    return Outcome("error", error={"kind": kind, "message": str(exc) or kind})


async def _attempt(ctx: RunContext, tool: ToolSpec, args: dict, timeout: float | None,
                   slot: HeldSlot | None = None) -> Outcome:
    thread = False
    value: Any = None
    failed: Outcome | None = None
    if tool.kind != "mcp" and not tool.is_async and tool.isolation == "process":
        # the worker is taken (or started) before the deadline runs: the timeout is the call's
        from .procpool import current_pool

        pool = current_pool()
        try:
            worker = await pool.acquire(ctx.contract.app_root)
        except OSError as exc:
            return Outcome("error", error={"kind": "worker_start", "message": f"cannot start a worker process: {exc}"})
    deadline = trio.current_time() + timeout if timeout is not None else float("inf")
    with trio.CancelScope(deadline=deadline) as scope:
        try:
            if tool.kind == "mcp":
                if ctx.mcp is None:
                    raise RuntimeError("MCP tools run inside a batch (run_lanes opens their sessions)")
                value = await ctx.mcp.call(tool, args)
            elif tool.is_async:
                if tool.runtime == "asyncio":
                    value = await run_on_asyncio(tool.fn, args)
                else:
                    value = await tool.fn(**args)  # type: ignore[misc]
            elif tool.isolation == "process":
                value = await pool.call(worker, tool.ref, args, ctx.output_cap_bytes)
            else:
                thread = True
                value = await run_in_thread(tool.fn, args, slot)
        except Exception as exc:  # noqa: BLE001 - any failure of App code is a receipt, not a crash
            failed = _failure(exc)
    if scope.cancelled_caught or trio.current_time() > deadline:
        # a result (or a failure) that arrives after the deadline is never accepted
        return Outcome(
            "timeout",
            error={"kind": "timeout", "message": f"no result within {timeout:g}s"},
            abandoned=thread,
        )
    return failed if failed is not None else Outcome("ok", value)


async def _attempt_with_children(ctx: RunContext, tool: ToolSpec, args: dict, timeout: float | None,
                                 slot: HeldSlot | None, frame: CallFrame) -> Outcome:
    """An attempt of a thread or asyncio callable that may dispatch: its child calls run in a
    nursery that ends with the attempt."""
    async with trio.open_nursery() as nursery:
        frame.nursery = nursery
        try:
            outcome = await _attempt(ctx, tool, args, timeout, slot)
        finally:
            frame.nursery = None
            nursery.cancel_scope.cancel()
    return outcome


async def _run_attempts(ctx: RunContext, tool: ToolSpec, args: dict, meta: dict,
                        frame: CallFrame | None = None, start_info: tuple | None = None) -> tuple[Outcome, int]:
    policy = tool.retry
    timeout = tool.timeout_s if tool.timeout_s is not None else ctx.default_timeout_s
    key = (tool.subagent, tool.id)
    threaded = tool.kind != "mcp" and not tool.is_async and tool.isolation != "process"
    nested = frame is not None and not (tool.is_async and tool.runtime == "trio")
    attempts = 0
    async def one_attempt(slot: HeldSlot | None) -> Outcome:
        # after the source limits: the rate, the at-most-once start marker, then the attempt
        if tool.per_second is not None:
            await ctx.limits.rate(key, tool.per_second).acquire()
        if start_info is not None and attempts == 1:
            ctx.before_start(start_info)  # type: ignore[misc]  # committed before the callable runs
        if ctx.audit is not None:
            ctx.emit_audit("started", **meta, attempt=attempts)
        if nested:
            return await _attempt_with_children(ctx, tool, args, timeout, slot, frame)  # type: ignore[arg-type]
        return await _attempt(ctx, tool, args, timeout, slot)

    while True:
        attempts += 1
        if tool.max_in_flight is not None:
            # the slot is taken before the deadline runs (waiting for a source is not the call's
            # time) and held for the whole attempt; a thread keeps it until it really ends
            limiter = ctx.limits.in_flight(key, tool.max_in_flight)
            borrower = object()
            await limiter.acquire_on_behalf_of(borrower)
            slot = HeldSlot(limiter, borrower) if threaded else None
            try:
                outcome = await one_attempt(slot)
            finally:
                if slot is None or not slot.handed_over:
                    limiter.release_on_behalf_of(borrower)
        else:
            outcome = await one_attempt(None)
        if outcome.status in policy.on and attempts < policy.max_attempts:
            delay = policy.delay(attempts, ctx.rng.random())
            if ctx.audit is not None:
                ctx.emit_audit("retried", **meta, attempt=attempts, status=outcome.status,
                               retry_in_s=round(delay, 6), error=_scrubbed(ctx, tool, outcome.error, args))
            await trio.sleep(delay)
            continue
        return outcome, attempts


def _too_large(value: Any, cap: int) -> int | None:
    """A lower bound of the JSON size of ``value`` when it already passes ``cap``, found without
    serialising: strings at the top level or one level down. Else None."""
    if isinstance(value, str):
        return len(value) + 2 if len(value) > cap else None
    if isinstance(value, (dict, list)):
        items = value.values() if isinstance(value, dict) else value
        n = 0
        for v in items:
            if isinstance(v, str):
                n += len(v)
                if n > cap:
                    return n
    return None


def _check_output(ctx: RunContext, tool: ToolSpec, outcome: Outcome) -> tuple[Outcome, dict | None]:
    value = outcome.value
    cap = ctx.output_cap_bytes
    size = _too_large(value, cap)
    if size is None:
        try:
            raw = orjson.dumps(value)
        except TypeError as exc:
            return Outcome("invalid_output", error={"kind": "not_json", "message": f"result is not JSON: {exc}"}), None
        if len(raw) > cap:
            size = len(raw)
        del raw
    if size is not None:
        return Outcome("invalid_output", error={
            "kind": "output_too_large",
            "message": f"result dropped: {size} bytes or more exceed the output cap of {cap} bytes (--max-output-bytes)",
        }), None
    if tool.output_validator is not None and not tool.output_validator.is_valid(value):
        msgs = schema_errors(tool.output_validator, value, limit=3)
        return Outcome("invalid_output", error={"kind": "schema", "message": "result fails output_schema: " + "; ".join(msgs)}), None
    envelope = None
    if tool.envelope is not None:
        envelope, problem = tool.envelope.read(value)
        if problem is not None:
            return Outcome("invalid_output", error={"kind": "envelope", "message": problem}), None
    return outcome, envelope


def _scrubbed(ctx: RunContext, tool: ToolSpec, error: dict | None, args: Any, value: Any = None) -> dict | None:
    """``error`` with the call's redacted values scrubbed from its message, and cut to size."""
    if error is None:
        return None
    message = error["message"]
    red = ctx.redactor(tool)
    if red.active:
        message = scrub(message, red.secrets(args) + red.secrets(value))
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
) -> tuple[Receipt, Any, dict | None]:
    """Run one admitted call. Returns its receipt, the real (unredacted) result and envelope
    reading, for the engine's own use (lane handoff, dispatch). Never raises for App failures."""
    if ctx._dispatching:
        return await _execute_in_frame(ctx, tool, args, seq, item_key, call_key, args_sha256,
                                       parent_receipt_id, iteration)
    return await _execute(ctx, tool, args, seq, item_key, call_key, args_sha256, parent_receipt_id,
                          iteration, ctx.new_receipt_id(), None)


async def _execute_in_frame(ctx: RunContext, tool: ToolSpec, args: dict, seq: int, item_key: str | None,
                            call_key: str | None, args_sha256: str | None, parent_receipt_id: str | None,
                            iteration: int | None, parent: CallFrame | None = None) -> tuple[Receipt, Any, dict | None]:
    # the call is visible to dispatch() in its task, threads and asyncio task; a call whose
    # tool declares no dispatch hides its parent's frame
    receipt_id = ctx.new_receipt_id()
    frame = (CallFrame(ctx, tool, seq, receipt_id, item_key, iteration, trio.lowlevel.current_trio_token())
             if tool.dispatch else None)
    token = CURRENT.set(frame)
    try:
        return await _execute(ctx, tool, args, seq, item_key, call_key, args_sha256, parent_receipt_id,
                              iteration, receipt_id, frame)
    finally:
        CURRENT.reset(token)
        if frame is not None:
            frame.ended = True
            if parent is not None and frame.secrets:
                parent.secrets.extend(frame.secrets)


async def _execute(
    ctx: RunContext, tool: ToolSpec, args: dict, seq: int, item_key: str | None, call_key: str | None,
    args_sha256: str | None, parent_receipt_id: str | None, iteration: int | None, receipt_id: str,
    frame: CallFrame | None,
) -> tuple[Receipt, Any, dict | None]:
    red = ctx.redactor(tool)
    args_sha = args_sha256 or sha256_of(args)
    meta: dict = {}
    if ctx.audit is not None:
        meta = {"seq": seq, "tool": tool.id, "item_key": item_key, "call_key": call_key, "receipt_id": receipt_id}
        if parent_receipt_id is not None:
            meta["parent_receipt_id"] = parent_receipt_id
    started = time.time()
    t0 = time.perf_counter()
    if ctx.audit is not None:
        ctx.emit_audit("admitted", **meta, subagent=tool.subagent, args_sha256=args_sha)
    if tool.max_calls is not None:
        ctx._counts[tool.id] = ctx._counts.get(tool.id, 0) + 1
    cache_state = "off"
    key = None
    outcome: Outcome | None = None
    envelope = None
    attempts = 0
    flight = None
    stored = False
    if tool.cacheable and ctx.cache is not None and not ctx.no_cache:
        key = cache_key(tool, args)
        cache_state = "miss"
        # an identical call already in flight is waited for, not run twice (singleflight.py)
        hit, flight = await cached_or_lead(ctx.cache, key, refresh=ctx.refresh_cache)
        if hit is not None:
            cache_state = "hit"
            outcome = Outcome("ok", hit[0])
            envelope = tool.envelope.read(hit[0])[0] if tool.envelope is not None else None
    ran = outcome is None
    if outcome is None:
        start_info = (seq, tool, args_sha) if ctx.before_start is not None else None
        outcome, attempts = await _run_attempts(ctx, tool, args, meta, frame, start_info)
        if outcome.status == "ok":
            outcome, envelope = _check_output(ctx, tool, outcome)
    value = outcome.value if outcome.status == "ok" else None
    # The values this call redacts, and those its dispatched calls redacted, are hidden wherever
    # they appear in what is written, not only at their pointers (a result may quote an argument).
    scrubber = None
    if red.active or (frame is not None and frame.secrets):
        secrets = red.secrets(args) + red.secrets(value) if red.active else []
        if frame is not None:
            secrets += frame.secrets
        scrubber = Scrubber(secrets) if secrets else None
    if ran and key is not None and outcome.status == "ok":
        # a result holding a redacted value is never stored: the cache is in the state file
        if not (red.active and red.secrets(value)) and (scrubber is None or scrubber.deep(value) == value):
            ctx.cache.put(key, tool.id, value)  # type: ignore[union-attr]
            stored = True
    if flight is not None:
        flight.release(stored=stored)
    error = outcome.error
    if error is not None:
        message = scrubber.text(error["message"]) if scrubber is not None else error["message"]
        if len(message) > MAX_MESSAGE_CHARS:
            message = message[:MAX_MESSAGE_CHARS] + f"… ({len(message)} characters)"
        if message is not error["message"]:
            error = {"kind": error["kind"], "message": message}
    shown_args = red.apply(args)
    shown_result = red.apply(value) if outcome.status == "ok" else None
    shown_envelope = red.apply_envelope(envelope) if envelope is not None and red.active else envelope
    if scrubber is not None:
        shown_args, shown_result = scrubber.deep(shown_args), scrubber.deep(shown_result)
        shown_envelope = scrubber.deep(shown_envelope)
    finished = time.time()
    receipt = Receipt(
        run_id=ctx.run_id,
        seq=seq,
        completion_seq=ctx.next_completion(),
        subagent=tool.subagent,
        tool=tool.id,
        parallel_batch_id=ctx.parallel_batch_id,
        item_key=item_key,
        call_key=call_key,
        parent_receipt_id=parent_receipt_id,
        iteration=iteration,
        receipt_id=receipt_id,
        status=outcome.status,
        abandoned=outcome.abandoned,
        attempts=attempts,
        cache=cache_state,
        args_sha256=args_sha,
        args=shown_args,
        result=shown_result,
        error=error,
        envelope=shown_envelope,
        started_at=rfc3339(started),
        finished_at=rfc3339(finished),
        duration_ms=round((time.perf_counter() - t0) * 1000, 3),
    )
    if ctx.audit is not None:
        ctx.emit_audit("finished", **meta, status=receipt.status, attempts=attempts, cache=cache_state,
                       error=error, duration_ms=receipt.duration_ms)
    if ctx.contract.evidence is not None:
        await give_evidence(ctx, receipt)
    return receipt, value, envelope


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
) -> Receipt:
    """A receipt for a call that never started (skipped, cancelled before start, denied...).
    ``tool`` is a tool id as written when the call never resolved to a registered tool."""
    if isinstance(tool, str):
        subagent, tool_id, shown = ctx.subagent or "", tool, args
    else:
        subagent, tool_id, shown = tool.subagent, tool.id, ctx.redactor(tool).apply(args)
    return Receipt(
        run_id=ctx.run_id, seq=seq, completion_seq=ctx.next_completion(), subagent=subagent,
        tool=tool_id, parallel_batch_id=ctx.parallel_batch_id, item_key=item_key, call_key=call_key,
        parent_receipt_id=parent_receipt_id, iteration=iteration, receipt_id=ctx.new_receipt_id(), status=status,
        abandoned=False, attempts=0, cache="off",
        args_sha256=args_sha256 if args_sha256 is not None else (sha256_of(args) if args is not None else None),
        args=shown, result=None,
        error={"kind": kind or status, "message": message} if message else None, envelope=None,
        started_at=None, finished_at=None, duration_ms=0.0,
    )


async def execute_child(frame: CallFrame, tool: ToolSpec, args: Any) -> Any:
    """A dispatched call (SPEC 5.6): its own receipt (with ``parent_receipt_id``) through every
    gate of an ordinary call. Returns the result; raises DispatchError unless it is ``ok``."""
    ctx = frame.ctx
    if not isinstance(args, dict):
        raise DispatchError(f"dispatch to '{tool.id}' refused: arguments must be an object, not {type(args).__name__}")
    try:
        args = orjson.loads(orjson.dumps(args))  # JSON only, and a copy the caller cannot change
    except (TypeError, orjson.JSONDecodeError) as exc:
        raise DispatchError(f"dispatch to '{tool.id}' refused: arguments are not JSON ({exc})") from None
    seq = ctx.new_child_seq()
    where = {"seq": seq, "item_key": frame.item_key, "call_key": None,
             "parent_receipt_id": frame.receipt_id, "iteration": frame.iteration}
    refusal: tuple[str, str] | None = None
    if tool.input_validator is not None and not tool.input_validator.is_valid(args):
        msgs = schema_errors(tool.input_validator, args, limit=3)
        refusal = ("invalid_input", "dispatched arguments fail input_schema: " + "; ".join(msgs))
    elif tool.max_calls is not None and ctx._counts.get(tool.id, 0) >= tool.max_calls:
        refusal = ("budget_exceeded", f"tool '{tool.id}' has made its max_calls ({tool.max_calls}) in this run")
    elif tool.approval is not None and tool.approval.matches(args, tool.effect):
        refusal = ("denied", f"tool '{tool.id}' needs approval here ({tool.approval_text}); "
                             "a dispatched call cannot wait for it")
    if refusal is not None:
        receipt = not_run_receipt(ctx, tool, args, status=refusal[0], message=refusal[1], **where)
        ctx.add_child(frame.seq, receipt)
        if ctx.contract.evidence is not None:
            await give_evidence(ctx, receipt)
        raise DispatchError(f"dispatch to '{tool.id}' ended {refusal[0]}: {refusal[1]}", receipt.as_record())
    settled = False
    try:
        receipt, value, _envelope = await _execute_in_frame(
            ctx, tool, args, seq, frame.item_key, None, sha256_of(args), frame.receipt_id, frame.iteration, frame)
        settled = True
    finally:
        if not settled:  # cancelled with its parent: it still gets a receipt
            ctx.add_child(frame.seq, not_run_receipt(
                ctx, tool, args, status="cancelled", message="the dispatching call ended before this call finished",
                **where))
    ctx.add_child(frame.seq, receipt)
    red = ctx.redactor(tool)
    if red.active:
        frame.secrets.extend(red.secrets(args) + red.secrets(value))
    if receipt.status != "ok":
        err = receipt.error or {}
        raise DispatchError(
            f"dispatch to '{tool.id}' ended {receipt.status}: {err.get('message', receipt.status)}",
            receipt.as_record(),
        )
    return value
