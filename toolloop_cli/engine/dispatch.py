"""The production router (SPEC 5.6): ``dispatch(tool, args)`` from inside a running callable.

The engine marks the running call in a context variable (``CURRENT``) for tools that declare
``dispatch``; every worker a callable can run in sees it (the trio task, a worker thread, the
asyncio loop thread). ``dispatch`` reads it, checks the target against the caller's ``dispatch``
list, and runs the target as a child call on the engine's trio loop, through every gate of an
ordinary call. How the caller waits depends on where it runs:

- a sync callable (worker thread): ``dispatch(...)`` blocks and returns the result;
- an async callable (trio or asyncio): ``dispatch(...)`` returns an awaitable;
  write ``await dispatch(...)``.

Child calls started from a thread or from asyncio run in a nursery owned by the parent's attempt,
so they end with it: when the parent times out, its children are cancelled (each gets a
``cancelled`` receipt) and nothing it dispatched outlives it.
"""

from __future__ import annotations

import concurrent.futures
import contextvars
from typing import TYPE_CHECKING, Any

from ..errors import DispatchError

if TYPE_CHECKING:
    from ..contract.compiled import ToolSpec
    from .call import RunContext


class CallFrame:
    """The running call that may dispatch: what a child call needs to know about its parent."""

    __slots__ = ("ctx", "tool", "seq", "receipt_id", "item_key", "iteration", "token", "nursery", "secrets", "ended")

    def __init__(self, ctx: RunContext, tool: ToolSpec, seq: int, receipt_id: str, item_key: str | None,
                 iteration: int | None, token: Any):
        self.ctx = ctx
        self.tool = tool
        self.seq = seq
        self.receipt_id = receipt_id
        self.item_key = item_key
        self.iteration = iteration
        self.token = token  # the engine's trio loop
        self.nursery: Any = None  # open while an attempt of a thread or asyncio callable runs
        # values its children redact: hidden in this call's receipt too (a result may quote them)
        self.secrets: list[str] = []
        self.ended = False  # the call has its receipt: it can dispatch no more

    def target(self, name: str) -> ToolSpec:
        """The tool ``name`` if this call may dispatch to it; else DispatchError (nothing runs)."""
        if not isinstance(name, str) or name not in self.tool.dispatch:
            allowed = ", ".join(self.tool.dispatch)
            raise DispatchError(
                f"dispatch to '{name}' refused: tool '{self.tool.id}' may dispatch only to [{allowed}]"
            )
        sub = self.ctx.contract.subagents[self.tool.subagent]
        return sub.tools[name]

    async def run_child(self, name: str, args: Any) -> Any:
        """Run the child call on the trio loop and return its result (or raise DispatchError)."""
        from .call import execute_child

        return await execute_child(self, self.target(name), args)

    def spawn(self, name: str, args: Any, fut: concurrent.futures.Future) -> None:
        """On the trio thread: start a child in the parent attempt's nursery; ``fut`` gets the
        result or the DispatchError."""
        if self.nursery is not None:
            self.nursery.start_soon(self._child_task, name, args, fut)
        elif self.ended or not (self.tool.is_async and self.tool.runtime == "trio"):
            # a thread left behind by a try that timed out
            _settle(fut, error=DispatchError(f"dispatch to '{name}' refused: the calling try has already ended"))
        else:
            # a trio callable dispatching from a thread it started: the callable awaits that
            # thread, so the child still ends before the callable does
            import trio

            trio.lowlevel.spawn_system_task(self._child_task, name, args, fut)

    async def _child_task(self, name: str, args: Any, fut: concurrent.futures.Future) -> None:
        try:
            value = await self.run_child(name, args)
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


CURRENT: contextvars.ContextVar[CallFrame | None] = contextvars.ContextVar("toolloop_call", default=None)


def _where() -> str:
    """'trio', 'asyncio' or 'thread': what is running this code."""
    try:
        import trio

        trio.lowlevel.current_task()
        return "trio"
    except (RuntimeError, ImportError):
        pass
    import asyncio

    try:
        asyncio.get_running_loop()
        return "asyncio"
    except RuntimeError:
        return "thread"


def dispatch(tool: str, args: dict) -> Any:
    """Dispatch ``args`` to ``tool`` through the engine and return its result.

    Call it from inside a running callable whose tool lists ``tool`` under ``dispatch``. From a
    sync callable it returns the result; from an async callable (trio or asyncio) it returns an
    awaitable of the result. Raises ``toolloop_cli.DispatchError`` when the dispatch is refused
    (nothing runs) or the dispatched call's receipt is not ``ok`` (``exc.receipt`` holds that
    receipt, redacted).
    """
    frame = CURRENT.get()
    if frame is None:
        raise DispatchError(
            f"dispatch to '{tool}' refused: no running call declares it (dispatch works inside a "
            "callable whose tool lists it under 'dispatch', in the callable's own thread or task; "
            "not from isolation: process)"
        )
    frame.target(tool)  # refuse early, before anything is awaited
    where = _where()
    if where == "trio":
        return frame.run_child(tool, args)
    if where == "asyncio":
        return _from_asyncio(frame, tool, args)
    return _from_thread(frame, tool, args)


def _from_thread(frame: CallFrame, tool: str, args: Any) -> Any:
    import trio

    fut: concurrent.futures.Future = concurrent.futures.Future()
    try:
        trio.from_thread.run_sync(frame.spawn, tool, args, fut, trio_token=frame.token)
    except trio.RunFinishedError:
        raise DispatchError(f"dispatch to '{tool}' refused: the run has ended") from None
    return fut.result()


async def _from_asyncio(frame: CallFrame, tool: str, args: Any) -> Any:
    import asyncio

    import trio

    fut: concurrent.futures.Future = concurrent.futures.Future()
    try:
        frame.token.run_sync_soon(frame.spawn, tool, args, fut)
    except trio.RunFinishedError:
        raise DispatchError(f"dispatch to '{tool}' refused: the run has ended") from None
    return await asyncio.wrap_future(fut)
