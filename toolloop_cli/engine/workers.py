"""How a callable is run: on the trio loop, in a worker thread, in a worker process, or on
an asyncio loop thread. Each worker returns the callable's value or raises its exception;
cancellation (the timeout) is the caller's cancel scope."""

from __future__ import annotations

import functools
import threading
from typing import Any

import trio

from ..contract.compiled import ToolSpec

_thread_limiter: trio.CapacityLimiter | None = None


def thread_limiter() -> trio.CapacityLimiter:
    # Sized generously: the run's own --max-concurrency and source limits are the real caps;
    # trio's default of 40 would add a hidden one.
    global _thread_limiter
    if _thread_limiter is None:
        _thread_limiter = trio.CapacityLimiter(256)
    return _thread_limiter


class Abandoned(Exception):
    """Internal marker: the deadline passed while a thread kept running."""


async def run_in_thread(fn: Any, args: dict) -> Any:
    return await trio.to_thread.run_sync(
        functools.partial(fn, **args), abandon_on_cancel=True, limiter=thread_limiter()
    )


def _call_ref(ref: str, app_root: str, args: dict) -> Any:
    # runs in the worker process: resolve there, so nothing unpicklable crosses over
    from ..contract.callables import resolve

    r = resolve(ref, app_root)
    if r.fn is None:
        raise RuntimeError(r.message)
    return r.fn(**args)


async def run_in_process(tool: ToolSpec, app_root: str, args: dict) -> Any:
    try:
        import trio_parallel
    except ImportError as exc:  # the extra is not installed
        raise RuntimeError("isolation: process needs the extra: pip install 'toolloop[process]'") from exc
    return await trio_parallel.run_sync(_call_ref, tool.ref, app_root, args, kill_on_cancel=True)


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


async def run_on_asyncio(fn: Any, args: dict) -> Any:
    import asyncio

    loop = asyncio_loop()
    fut = asyncio.run_coroutine_threadsafe(fn(**args), loop)
    token = trio.lowlevel.current_trio_token()
    done = trio.Event()
    fut.add_done_callback(lambda _f: token.run_sync_soon(done.set))
    try:
        await done.wait()
    finally:
        if not fut.done():
            fut.cancel()  # cancels the asyncio task: a real stop, unlike a thread
    return fut.result()
