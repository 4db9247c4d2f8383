"""One call, fully governed: source limits, timeout, retries, cache, output gate, envelope,
redaction, and its receipt."""

from __future__ import annotations

import random
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

import orjson
import trio

from .._canonical import canonical_bytes, sha256_of
from ..contract.compiled import Contract, ToolSpec
from ..contract.schemas import schema_errors
from ..receipts import Receipt, rfc3339
from .limits import ToolLimits
from .redact import Redactor, scrub
from .workers import run_in_process, run_in_thread, run_on_asyncio

DEFAULT_OUTPUT_CAP = 16 * 1024 * 1024


class Cache(Protocol):
    def get(self, key: str) -> Any | None: ...
    def put(self, key: str, tool: str, result: Any) -> None: ...


@dataclass
class RunContext:
    """What every call of one run shares. Plain state; no printing."""

    run_id: str
    contract: Contract
    parallel_batch_id: str | None = None
    default_timeout_s: float | None = None
    cache: Cache | None = None
    no_cache: bool = False
    refresh_cache: bool = False
    output_cap_bytes: int = DEFAULT_OUTPUT_CAP
    audit: Callable[[dict], None] | None = None
    before_start: Callable[[Any], None] | None = None  # journal hook for at-most-once writes
    rng: random.Random = field(default_factory=random.Random)
    limits: ToolLimits = field(default_factory=ToolLimits)
    _completion: int = 0
    _redactors: dict = field(default_factory=dict)

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


@dataclass(slots=True)
class Outcome:
    status: str
    value: Any = None
    error: dict | None = None
    abandoned: bool = False


async def _attempt(ctx: RunContext, tool: ToolSpec, args: dict, timeout: float | None) -> Outcome:
    thread = False
    with trio.move_on_after(timeout if timeout is not None else float("inf")) as scope:
        try:
            if tool.kind == "mcp":
                from .mcp import call_mcp_tool

                value = await call_mcp_tool(tool, args)
            elif tool.is_async:
                if getattr(tool, "runtime", "trio") == "asyncio":
                    value = await run_on_asyncio(tool.fn, args)
                else:
                    value = await tool.fn(**args)
            elif tool.isolation == "process":
                value = await run_in_process(tool, ctx.contract.app_root, args)
            else:
                thread = True
                value = await run_in_thread(tool.fn, args)
        except Exception as exc:  # noqa: BLE001 - any failure of App code is a receipt, not a crash
            return Outcome("error", error={"kind": type(exc).__name__, "message": str(exc) or type(exc).__name__})
    if scope.cancelled_caught:
        return Outcome(
            "timeout",
            error={"kind": "timeout", "message": f"no result within {timeout:g}s"},
            abandoned=thread,
        )
    return Outcome("ok", value)


async def _run_attempts(ctx: RunContext, tool: ToolSpec, args: dict, meta: dict) -> tuple[Outcome, int]:
    policy = tool.retry
    timeout = tool.timeout_s if tool.timeout_s is not None else ctx.default_timeout_s
    attempts = 0
    while True:
        attempts += 1
        if tool.max_in_flight is not None:
            limiter = ctx.limits.in_flight((tool.subagent, tool.id), tool.max_in_flight)
            async with limiter:
                if tool.per_second is not None:
                    await ctx.limits.rate((tool.subagent, tool.id), tool.per_second).acquire()
                outcome = await _attempt(ctx, tool, args, timeout)
        else:
            if tool.per_second is not None:
                await ctx.limits.rate((tool.subagent, tool.id), tool.per_second).acquire()
            outcome = await _attempt(ctx, tool, args, timeout)
        if outcome.status in policy.on and attempts < policy.max_attempts:
            delay = policy.delay(attempts, ctx.rng.random())
            if ctx.audit is not None:
                ctx.emit_audit("attempt_failed", **meta, attempt=attempts, status=outcome.status,
                               retry_in_s=round(delay, 6), error=outcome.error)
            await trio.sleep(delay)
            continue
        return outcome, attempts


def _check_output(ctx: RunContext, tool: ToolSpec, outcome: Outcome) -> tuple[Outcome, dict | None]:
    value = outcome.value
    try:
        raw = orjson.dumps(value)
    except TypeError as exc:
        return Outcome("invalid_output", error={"kind": "not_json", "message": f"result is not JSON: {exc}"}), None
    if len(raw) > ctx.output_cap_bytes:
        return Outcome("invalid_output", error={
            "kind": "output_too_large",
            "message": f"result truncated: {len(raw)} bytes exceed the output cap of {ctx.output_cap_bytes} bytes",
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
    receipt_id = uuid.uuid4().hex
    red = ctx.redactor(tool)
    args_sha = args_sha256 or sha256_of(args)
    meta = {"seq": seq, "tool": tool.id, "item_key": item_key, "call_key": call_key, "receipt_id": receipt_id}
    started = time.time()
    t0 = time.perf_counter()
    if ctx.audit is not None:
        ctx.emit_audit("started", **meta)
    cache_state = "off"
    key = None
    outcome: Outcome | None = None
    envelope = None
    attempts = 0
    if tool.cacheable and ctx.cache is not None and not ctx.no_cache:
        key = cache_key(tool, args)
        cache_state = "miss"
        if not ctx.refresh_cache:
            hit = ctx.cache.get(key)
            if hit is not None:
                cache_state = "hit"
                outcome = Outcome("ok", hit[0])
                envelope = tool.envelope.read(hit[0])[0] if tool.envelope is not None else None
    if outcome is None:
        if ctx.before_start is not None:
            ctx.before_start((seq, tool, args_sha))
        outcome, attempts = await _run_attempts(ctx, tool, args, meta)
        if outcome.status == "ok":
            outcome, envelope = _check_output(ctx, tool, outcome)
            if outcome.status == "ok" and key is not None:
                ctx.cache.put(key, tool.id, outcome.value)  # type: ignore[union-attr]
    error = outcome.error
    if error is not None and red.active:
        secrets = red.secrets(args) + red.secrets(outcome.value)
        error = {"kind": error["kind"], "message": scrub(error["message"], secrets)}
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
        args=red.apply(args),
        result=red.apply(outcome.value) if outcome.status == "ok" else None,
        error=error,
        envelope=red.apply_envelope(envelope) if envelope is not None and red.active else envelope,
        started_at=rfc3339(started),
        finished_at=rfc3339(finished),
        duration_ms=round((time.perf_counter() - t0) * 1000, 3),
    )
    if ctx.audit is not None:
        ctx.emit_audit("finished", **meta, status=receipt.status, attempts=attempts, error=error)
    return receipt, (outcome.value if outcome.status == "ok" else None), envelope


def not_run_receipt(
    ctx: RunContext, tool: ToolSpec, args: Any, *, seq: int, item_key: str | None, call_key: str | None,
    status: str, message: str | None, args_sha256: str | None = None,
) -> Receipt:
    """A receipt for a call that never started (skipped, cancelled before start, denied...)."""
    red = ctx.redactor(tool)
    return Receipt(
        run_id=ctx.run_id, seq=seq, completion_seq=ctx.next_completion(), subagent=tool.subagent,
        tool=tool.id, parallel_batch_id=ctx.parallel_batch_id, item_key=item_key, call_key=call_key,
        parent_receipt_id=None, iteration=None, receipt_id=uuid.uuid4().hex, status=status,
        abandoned=False, attempts=0, cache="off",
        args_sha256=args_sha256 if args_sha256 is not None else (sha256_of(args) if args is not None else None),
        args=red.apply(args), result=None,
        error={"kind": status, "message": message} if message else None, envelope=None,
        started_at=None, finished_at=None, duration_ms=0.0,
    )
