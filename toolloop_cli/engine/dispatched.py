"""Running a dispatched call on the engine's trio loop: from the calling task, a
worker thread or the asyncio loop thread, through the same gates as every call, with its own
receipt recorded after its parent's (``settle.Children``)."""

from __future__ import annotations

import concurrent.futures
from typing import Any

from .. import _json

from .._canonical import sha256_of
from ..contract.compiled import ToolSpec
from ..errors import DispatchError
from .call import execute_in_frame, give_evidence, not_run_receipt
from .frames import CallFrame
from .gates import Refuse, check_call


async def run_child(frame: CallFrame, name: str, args: Any) -> Any:
    """Run the child call on the trio loop and return its result (or raise DispatchError)."""
    return await execute_child(frame, frame.target(name), args)


def spawn(frame: CallFrame, name: str, args: Any, fut: concurrent.futures.Future) -> None:
    """On the trio thread: start a child in the parent attempt's nursery; ``fut`` gets the
    result or the DispatchError."""
    if frame.nursery is not None:
        frame.nursery.start_soon(_child_task, frame, name, args, fut)
    elif frame.ended or not (frame.tool.is_async and frame.tool.runtime == "trio"):
        # a thread left behind by a try that timed out
        _settle(fut, error=DispatchError(f"dispatch to '{name}' refused: the calling try has already ended"))
    else:
        # a trio callable dispatching from a thread it started: the callable awaits that
        # thread, so the child still ends before the callable does
        import trio

        trio.lowlevel.spawn_system_task(_child_task, frame, name, args, fut)


async def _child_task(frame: CallFrame, name: str, args: Any, fut: concurrent.futures.Future) -> None:
    try:
        value = await run_child(frame, name, args)
    except DispatchError as exc:
        _settle(fut, error=exc)
    else:
        _settle(fut, value=value)
    finally:
        # cancelled with the parent's attempt: whoever waits is released (and abandoned)
        _settle(fut, error=DispatchError(f"dispatch to '{name}' cancelled: the calling call ended"))


def _settle(fut: concurrent.futures.Future, *, value: Any = None, error: BaseException | None = None) -> None:
    if fut.done():
        return
    try:
        if error is not None:
            fut.set_exception(error)
        else:
            fut.set_result(value)
    except concurrent.futures.InvalidStateError:  # cancelled by its waiter meanwhile
        pass


async def execute_child(frame: CallFrame, tool: ToolSpec, args: Any) -> Any:
    """A dispatched call: its own receipt (with ``parent_receipt_id``) through every gate of an
    ordinary call. Returns the result; raises DispatchError unless it is ``ok``."""
    ctx = frame.ctx
    if not isinstance(args, dict):
        raise DispatchError(f"dispatch to '{tool.id}' refused: arguments must be an object, not {type(args).__name__}")
    try:
        args = _json.loads(_json.dumps(args))  # JSON only, and a copy the caller cannot change
    except (TypeError, ValueError) as exc:
        raise DispatchError(f"dispatch to '{tool.id}' refused: arguments are not JSON ({exc})") from None
    seq = ctx.sequence.new_child_seq()
    where = {"seq": seq, "item_key": frame.item_key, "call_key": None,
             "parent_receipt_id": frame.receipt_id, "iteration": frame.iteration}
    verdict = await check_call(ctx, tool, args, source="dispatch", item_key=frame.item_key, call_key=None)
    if isinstance(verdict, Refuse):
        receipt = not_run_receipt(ctx, tool, args, status=verdict.status, message=verdict.message,
                                  approval=verdict.approval, **where)
        ctx.children.add(frame.seq, receipt)
        if ctx.contract.evidence is not None:
            await give_evidence(ctx, receipt)
        raise DispatchError(f"dispatch to '{tool.id}' ended {verdict.status}: {verdict.message}", receipt.as_record())
    settled = False
    try:
        receipt, value, _envelope = await execute_in_frame(
            ctx, tool, args, seq=seq, item_key=frame.item_key, call_key=None, args_sha256=sha256_of(args),
            parent_receipt_id=frame.receipt_id, iteration=frame.iteration, parent=frame)
        settled = True
    finally:
        if not settled:  # cancelled with its parent: it still gets a receipt
            ctx.children.add(frame.seq, not_run_receipt(
                ctx, tool, args, status="cancelled", message="the dispatching call ended before this call finished",
                **where))
    ctx.children.add(frame.seq, receipt)
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
