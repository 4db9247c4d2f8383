"""The production router: ``dispatch(tool, args)`` from inside a running callable.

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
from typing import Any

from ..errors import DispatchError
from .frames import CURRENT, CallFrame

# Light on purpose: an App module imports this at its top, also in worker processes. What runs a
# dispatched call lives in ``dispatched.py``, imported when a call is dispatched.


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
        from .dispatched import run_child

        return run_child(frame, tool, args)
    if where == "asyncio":
        return _from_asyncio(frame, tool, args)
    return _from_thread(frame, tool, args)


def _from_thread(frame: CallFrame, tool: str, args: Any) -> Any:
    import trio

    from .dispatched import spawn

    fut: concurrent.futures.Future = concurrent.futures.Future()
    try:
        trio.from_thread.run_sync(spawn, frame, tool, args, fut, trio_token=frame.token)
    except trio.RunFinishedError:
        raise DispatchError(f"dispatch to '{tool}' refused: the run has ended") from None
    return fut.result()


async def _from_asyncio(frame: CallFrame, tool: str, args: Any) -> Any:
    import asyncio

    import trio

    from .dispatched import spawn

    fut: concurrent.futures.Future = concurrent.futures.Future()
    try:
        frame.token.run_sync_soon(spawn, frame, tool, args, fut)
    except trio.RunFinishedError:
        raise DispatchError(f"dispatch to '{tool}' refused: the run has ended") from None
    return await asyncio.wrap_future(fut)

