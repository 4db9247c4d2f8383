"""How a callable is run: on the trio loop, in a worker thread, in a worker process, or on
an asyncio loop thread. Each worker returns the callable's value or raises its exception;
cancellation (the timeout) is the caller's cancel scope."""

from __future__ import annotations

import functools
import threading
from typing import Any, Callable, TypeVar

import trio

from ..contract.compiled import ToolSpec

F = TypeVar("F", bound=Callable[..., Any])

_thread_limiter: trio.CapacityLimiter | None = None


def thread_limiter() -> trio.CapacityLimiter:
    # Sized generously: the run's own --max-concurrency and source limits are the real caps;
    # trio's default of 40 would add a hidden one.
    global _thread_limiter
    if _thread_limiter is None:
        _thread_limiter = trio.CapacityLimiter(256)
    return _thread_limiter


class HeldSlot:
    """A tool's ``max_in_flight`` slot, already taken by the caller, handed to a worker thread:
    trio gives it back when the thread really ends, so an abandoned thread keeps its slot and a
    source limit stays hard even after a timeout. ``handed_over`` says whether trio took charge
    of giving it back (else the caller still must)."""

    __slots__ = ("tool", "borrower", "handed_over")

    def __init__(self, tool: trio.CapacityLimiter, borrower: object):
        self.tool = tool
        self.borrower = borrower
        self.handed_over = False

    async def acquire_on_behalf_of(self, borrower: object) -> None:
        await thread_limiter().acquire_on_behalf_of(borrower)
        self.handed_over = True

    def release_on_behalf_of(self, borrower: object) -> None:
        thread_limiter().release_on_behalf_of(borrower)
        self.tool.release_on_behalf_of(self.borrower)


async def run_in_thread(fn: Any, args: dict, slot: HeldSlot | None = None) -> Any:
    """``fn(**args)`` in a worker thread, abandoned (left running) if cancelled. The thread sees
    the caller's context variables (the running call, for dispatch)."""
    limiter: Any = thread_limiter() if slot is None else slot
    return await trio.to_thread.run_sync(functools.partial(fn, **args), abandon_on_cancel=True, limiter=limiter)


async def run_in_process(tool: ToolSpec, app_root: str, args: dict, cap: int | None = None) -> Any:
    """``fn(**args)`` in a warm worker process, which is stopped (TERM, grace, KILL) if the call
    is cancelled. Raises ``procpool.WorkerFailure`` when the callable raised."""
    from .procpool import current_pool

    pool = current_pool()
    worker = await pool.acquire(app_root)
    return await pool.call(worker, tool.ref, args, cap)


def asyncio_tool(fn: F) -> F:
    """Mark an async callable as written for asyncio: it runs on the shared asyncio loop thread
    instead of the engine's trio loop (see docs/calls.md for the automatic detection)."""
    fn.__toolloop_runtime__ = "asyncio"  # type: ignore[attr-defined]
    return fn


class _AsyncioLoop:
    """One asyncio event loop on a daemon thread, shared by every asyncio callable."""

    def __init__(self) -> None:
        import asyncio

        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="toolloop-asyncio", daemon=True)
        self.thread.start()


_asyncio: _AsyncioLoop | None = None
_asyncio_lock = threading.Lock()


def asyncio_loop() -> Any:
    global _asyncio
    with _asyncio_lock:
        if _asyncio is None:
            _asyncio = _AsyncioLoop()
    return _asyncio.loop


async def _captured(fn: Any, args: dict) -> tuple[bool, Any]:
    # the task itself never fails, so asyncio never logs an unretrieved exception (which would
    # print a traceback that may quote an argument)
    try:
        return True, await fn(**args)
    except Exception as exc:  # noqa: BLE001 - handed back to the engine as the call's failure
        return False, exc


async def run_on_asyncio(fn: Any, args: dict) -> Any:
    """Await ``fn(**args)`` on the asyncio loop thread; cancellation cancels the asyncio task.
    The task runs in a copy of the caller's context (call_soon_threadsafe copies it)."""
    import asyncio

    loop = asyncio_loop()
    fut = asyncio.run_coroutine_threadsafe(_captured(fn, args), loop)
    token = trio.lowlevel.current_trio_token()
    done = trio.Event()

    def wake(_f: Any) -> None:
        try:
            token.run_sync_soon(done.set)
        except trio.RunFinishedError:
            pass

    fut.add_done_callback(wake)
    try:
        await done.wait()
    finally:
        if not fut.done():
            fut.cancel()  # cancels the asyncio task: a real stop, unlike a thread
    ok, value = fut.result()
    if not ok:
        raise value
    return value
