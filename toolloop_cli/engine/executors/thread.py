"""Sync callables in worker threads. A thread cannot be killed: at the timeout the call is
abandoned (left running, its receipt says ``abandoned: true``) and keeps its source slot until it
really ends. Whatever the callable raises leaves its thread as ``ToolRaised``.

The threads are the engine's own pool rather than ``trio.to_thread``'s: calls wait in one queue
that every idle thread reads, so a thread that ends a call takes the next one waiting without
going to sleep, and results go back to the event loop in batches (one wake-up of the loop for
all the results that arrived since it last looked), not one wake-up each. On a busy run that is
a fraction of the context switches, and of the CPU, of a thread hand-off per call each way. A
call never waits for a thread busy with another: when no thread is idle a new one starts (up to
``thread_limiter()``'s size, held by every call until its thread really ends); a thread idle for
``IDLE_S`` seconds ends."""

from __future__ import annotations

import collections
import contextvars
import inspect
import queue
import threading
from typing import Any

import outcome
import trio
from sniffio import current_async_library_cvar

from ...contract.compiled import ToolSpec
from . import Executor
from .failure import ToolRaised, engine_signal

# What trio.from_thread reads in a thread trio started: App code may call it from a sync tool.
# trio (checked up to 0.35) has no public way to give a thread of our own that standing:
# from_thread without trio_token= reads only this thread-local, which only trio.to_thread sets
# (trio.lowlevel.start_thread_soon does not). tests/test_thread_pool.py fails if it moves.
PARENT_TASK_DATA: Any
try:
    from trio._threads import PARENT_TASK_DATA
except ImportError:  # pragma: no cover - another trio: from_thread then needs trio_token=
    PARENT_TASK_DATA = None

#: how long a pool thread waits for a call before it ends
IDLE_S = 10.0

_THREAD_LIMITER: trio.lowlevel.RunVar[trio.CapacityLimiter] = trio.lowlevel.RunVar("toolloop_thread_limiter")


def thread_limiter() -> trio.CapacityLimiter:
    """The run's limiter of threads: one per event loop (a process serving several runs, each on a
    loop of its own, must not share one: a trio limiter belongs to one loop, and a token an
    abandoned thread holds is given back through the loop that lent it, which may have ended)."""
    # Sized generously: the run's own --max-concurrency and source limits are the real caps;
    # trio's default of 40 would add a hidden one.
    try:
        return _THREAD_LIMITER.get()
    except LookupError:
        limiter = trio.CapacityLimiter(256)
        _THREAD_LIMITER.set(limiter)
        return limiter


class HeldSlot:
    """A tool's ``max_in_flight`` slot, already taken by the caller, handed to a worker thread:
    it is given back when the thread really ends, so an abandoned thread keeps its slot and a
    source limit stays hard even after a timeout. ``handed_over`` says whether the thread took
    charge of giving it back (else the caller still must)."""

    __slots__ = ("tool", "borrower", "handed_over")

    def __init__(self, tool: trio.CapacityLimiter, borrower: object):
        self.tool = tool
        self.borrower = borrower
        self.handed_over = False

    def release(self) -> None:
        self.tool.release_on_behalf_of(self.borrower)


def _guarded(fn: Any, args: dict[str, Any]) -> Any:
    """``fn(**args)``, in the worker thread: its value, or ``ToolRaised`` for anything it raised
    (a ``KeyboardInterrupt`` or ``SystemExit`` raised again in the task would stop the run)."""
    failure: ToolRaised | None = None
    try:
        value = fn(**args)
    except trio.Cancelled:
        raise
    except BaseException as exc:  # noqa: BLE001 - App code may raise anything
        if engine_signal(exc):
            raise
        failure = ToolRaised.of(exc)
    else:
        if inspect.iscoroutine(value):  # a sync callable that returned a coroutine: never awaited
            value.close()
            raise TypeError(f"Trio expected a sync function, but {getattr(fn, '__qualname__', fn)!r} appears to be"
                            " asynchronous")
        return value
    raise failure  # outside the handler: the App's exception and its frames are not kept


class _Job:
    """One call handed to the pool, and its way back."""

    __slots__ = ("fn", "args", "context", "run", "task", "result", "slot", "cancel_register")

    def __init__(self, fn: Any, args: dict[str, Any], context: contextvars.Context, run: _Returns,
                 task: trio.lowlevel.Task, slot: HeldSlot | None):
        self.fn: Any = fn
        self.args: dict[str, Any] | None = args
        self.context: contextvars.Context | None = context
        self.run = run
        self.task: trio.lowlevel.Task | None = task  # None once the caller gave up on it
        self.result: Any = None  # the outcome, set in the thread
        self.slot = slot
        self.cancel_register: list[Any] = [None]  # trio.from_thread.check_cancelled reads it

    def abort(self, raise_cancel: Any) -> trio.lowlevel.Abort:
        # the deadline, a halt or a signal: the thread is left running, its result dropped
        self.cancel_register[0] = raise_cancel
        self.task = None
        return trio.lowlevel.Abort.SUCCEEDED


class _Returns:
    """The results of one trio run's calls on their way back to its event loop: a thread appends
    and asks for a drain only when none is pending, so one wake-up serves every result that
    arrived meanwhile. The drain gives back the thread's limiter token (and a held slot) and
    wakes the call's task, unless it gave up on the call."""

    __slots__ = ("token", "done", "pending")

    def __init__(self, token: trio.lowlevel.TrioToken):
        self.token = token
        self.done: collections.deque[_Job] = collections.deque()
        self.pending = False

    def deliver(self, job: _Job) -> None:  # in the worker thread
        self.done.append(job)
        if not self.pending:
            self.pending = True
            try:
                self.token.run_sync_soon(self.drain)
            except trio.RunFinishedError:  # the run ended: every call of it was given up on
                pass

    def drain(self) -> None:  # on the event loop
        self.pending = False  # before reading: a result appended from now on asks again
        done = self.done
        limiter = thread_limiter()
        while done:
            job = done.popleft()
            result = job.result
            try:
                limiter.release_on_behalf_of(job)
                if job.slot is not None:
                    job.slot.release()
            except BaseException as exc:  # noqa: BLE001 - given to the call rather than crash the loop
                result = outcome.Error(exc)
            if job.task is not None:
                trio.lowlevel.reschedule(job.task, result)


_RETURNS: trio.lowlevel.RunVar[_Returns] = trio.lowlevel.RunVar("toolloop_thread_returns")


class _Pool:
    """Threads that take calls from one queue. ``idle`` counts the threads waiting on it that no
    call has claimed yet; a call that finds none starts a thread of its own, so it never queues
    behind a busy one. A call claims a thread and is queued under one lock, under which a thread
    that waited long enough ends only if the queue is empty, so no call is ever left behind."""

    def __init__(self) -> None:
        self.jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self.lock = threading.Lock()
        self.idle = 0

    def submit(self, job: _Job) -> None:
        with self.lock:
            if self.idle:
                self.idle -= 1
                self.jobs.put(job)
                return
        # no thread idle: a new one, given this call as its first (if it cannot start, nothing
        # is left behind in the queue)
        threading.Thread(target=self._work, args=(job,), name="toolloop call", daemon=True).start()

    def _work(self, job: _Job) -> None:
        jobs, lock = self.jobs, self.lock
        while True:
            _run_job(job)
            run = job.run
            with lock:
                self.idle += 1
            run.deliver(job)
            del job, run  # an idle thread keeps nothing of the call it ran
            while True:
                try:
                    job = jobs.get(timeout=IDLE_S)
                    break
                except queue.Empty:
                    with lock:
                        if jobs.empty():
                            self.idle -= 1
                            return


def _run_job(job: _Job) -> None:
    context = job.context
    assert context is not None and job.args is not None
    if PARENT_TASK_DATA is not None:  # trio.from_thread works in the tool as in a thread trio started
        PARENT_TASK_DATA.token = job.run.token
        PARENT_TASK_DATA.abandon_on_cancel = True
        PARENT_TASK_DATA.cancel_register = job.cancel_register
        PARENT_TASK_DATA.task_register = [None]
    try:
        job.result = outcome.Value(context.run(_guarded, job.fn, job.args))
    except BaseException as exc:  # noqa: BLE001 - raised again in the calling task
        job.result = outcome.Error(exc)
    job.fn = job.args = job.context = None  # nothing of the call kept alive by an idle thread


_POOL = _Pool()


async def run_in_thread(fn: Any, args: dict[str, Any], slot: HeldSlot | None = None) -> Any:
    """``fn(**args)`` in a worker thread, abandoned (left running) if cancelled. The thread sees
    the caller's context variables (the running call, for dispatch)."""
    await trio.lowlevel.checkpoint_if_cancelled()
    task = trio.lowlevel.current_task()
    try:
        returns = _RETURNS.get()
    except LookupError:
        returns = _Returns(trio.lowlevel.current_trio_token())
        _RETURNS.set(returns)
    context = contextvars.copy_context()
    if context.get(current_async_library_cvar) is not None:
        context.run(current_async_library_cvar.set, None)  # the thread is in no async library
    job = _Job(fn, args, context, returns, task, slot)
    limiter = thread_limiter()
    try:
        limiter.acquire_on_behalf_of_nowait(job)
    except trio.WouldBlock:
        await limiter.acquire_on_behalf_of(job)
    try:
        _POOL.submit(job)
    except BaseException:
        limiter.release_on_behalf_of(job)
        raise
    if slot is not None:
        slot.handed_over = True
    result: Any = await trio.lowlevel.wait_task_rescheduled(job.abort)
    return result


class ThreadExecutor(Executor):
    """``fn(**args)`` in a worker thread of the engine."""

    name = "thread"
    abandons = True  # a timed-out thread is left running
    holds_slot = True  # ... and keeps the tool's slot until it really ends

    async def run(self, tool: ToolSpec, args: dict[str, Any], prepared: Any, slot: HeldSlot | None) -> Any:
        return await run_in_thread(tool.fn, args, slot)


def make(run: object) -> ThreadExecutor:
    return ThreadExecutor()
