"""Sync callables in worker threads. A thread cannot be killed: at the timeout the call is
abandoned (left running, its receipt says ``abandoned: true``) and keeps its source slot until it
really ends. Whatever the callable raises leaves its thread as ``ToolRaised``."""

from __future__ import annotations

import functools
from typing import Any

import trio

from ...contract.compiled import ToolSpec
from . import Executor
from .failure import ToolRaised, engine_signal

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


def _guarded(fn: Any, args: dict[str, Any]) -> Any:
    """``fn(**args)``, in the worker thread: its value, or ``ToolRaised`` for anything it raised
    (trio would raise a ``KeyboardInterrupt`` or ``SystemExit`` from a thread again in the task)."""
    failure: ToolRaised | None = None
    try:
        return fn(**args)
    except trio.Cancelled:
        raise
    except BaseException as exc:  # noqa: BLE001 - App code may raise anything
        if engine_signal(exc):
            raise
        failure = ToolRaised.of(exc)
    raise failure  # outside the handler: the App's exception and its frames are not kept


async def run_in_thread(fn: Any, args: dict[str, Any], slot: HeldSlot | None = None) -> Any:
    """``fn(**args)`` in a worker thread, abandoned (left running) if cancelled. The thread sees
    the caller's context variables (the running call, for dispatch)."""
    limiter: Any = thread_limiter() if slot is None else slot
    return await trio.to_thread.run_sync(functools.partial(_guarded, fn, args), abandon_on_cancel=True,
                                         limiter=limiter)


class ThreadExecutor(Executor):
    """``fn(**args)`` in a worker thread of the engine."""

    name = "thread"
    abandons = True  # a timed-out thread is left running
    holds_slot = True  # ... and keeps the tool's slot until it really ends

    async def run(self, tool: ToolSpec, args: dict[str, Any], prepared: Any, slot: HeldSlot | None) -> Any:
        return await run_in_thread(tool.fn, args, slot)


def make(run: object) -> ThreadExecutor:
    return ThreadExecutor()
