"""Coroutines written for asyncio: one asyncio event loop on a daemon thread, shared by every
asyncio callable of the process; cancelling the call cancels its asyncio task. Nothing App code
raises stops that loop: a coroutine's failure is handed back as ``ToolRaised``, and a callback
that raises ``SystemExit`` or ``KeyboardInterrupt`` only makes the loop start again."""

from __future__ import annotations

import threading
from typing import Any, Callable, TypeVar

import trio

from ...contract.compiled import ToolSpec
from . import Executor
from .failure import ToolRaised, engine_signal

F = TypeVar("F", bound=Callable[..., Any])


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
        self.thread = threading.Thread(target=self._serve, name="toolloop-asyncio", daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        # asyncio lets SystemExit and KeyboardInterrupt from a callback out of run_forever (App
        # code may schedule one: ``loop.call_soon(sys.exit)``); the loop just runs on
        while True:
            try:
                self.loop.run_forever()
                return
            except BaseException:  # noqa: BLE001 - App code's, never this thread's end
                continue


_asyncio: _AsyncioLoop | None = None
_asyncio_lock = threading.Lock()


def asyncio_loop() -> Any:
    global _asyncio
    with _asyncio_lock:
        if _asyncio is None or not _asyncio.thread.is_alive():
            _asyncio = _AsyncioLoop()
    return _asyncio.loop


async def _captured(fn: Any, args: dict[str, Any]) -> tuple[bool, Any]:
    # the task itself never fails, so asyncio never logs an unretrieved exception (which would
    # print a traceback that may quote an argument), and a SystemExit or KeyboardInterrupt never
    # reaches the loop (asyncio would stop it); only the task's cancellation goes through
    import asyncio

    failure: BaseException | None = None
    try:
        return True, await fn(**args)
    except asyncio.CancelledError:
        raise
    except BaseException as exc:  # noqa: BLE001 - handed back to the engine as the call's failure
        failure = exc if engine_signal(exc) else ToolRaised.of(exc)
    return False, failure


async def run_on_asyncio(fn: Any, args: dict[str, Any]) -> Any:
    """Await ``fn(**args)`` on the asyncio loop thread; cancellation cancels the asyncio task.
    The task runs in a copy of the caller's context (call_soon_threadsafe copies it)."""
    import asyncio
    import concurrent.futures

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
    try:
        ok, value = fut.result()
    except concurrent.futures.CancelledError:
        # the coroutine raised CancelledError itself (the call was not cancelled: that returned above)
        raise ToolRaised("CancelledError", "the asyncio task was cancelled") from None
    if not ok:
        raise value
    return value


class AsyncioExecutor(Executor):
    """An asyncio coroutine on the shared asyncio loop thread."""

    name = "asyncio"

    async def run(self, tool: ToolSpec, args: dict[str, Any], prepared: Any, slot: Any) -> Any:
        return await run_on_asyncio(tool.fn, args)


def make(run: object) -> AsyncioExecutor:
    return AsyncioExecutor()
