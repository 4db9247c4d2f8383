"""The engine's pool of worker threads for sync callables (``engine/executors/thread.py``): a call
never waits behind a busy thread, threads are reused rather than one per call, a call given up on
(its deadline, a cancellation) is left running and keeps its thread token and its tool's slot until
it really ends, results that arrive together all reach their tasks, and the thread sees the
caller's context and can reach the event loop through ``trio.from_thread``."""

from __future__ import annotations

import contextvars
import threading
import time

import pytest
import trio
import trio.testing

from toolloop_cli.engine.executors import thread as pool_module
from toolloop_cli.engine.executors.failure import ToolRaised
from toolloop_cli.engine.executors.thread import HeldSlot, run_in_thread, thread_limiter

VAR: contextvars.ContextVar[str] = contextvars.ContextVar("test_thread_pool", default="unset")


@pytest.fixture
def fresh_pool(monkeypatch):
    pool = pool_module._Pool()
    monkeypatch.setattr(pool_module, "_POOL", pool)
    return pool


def run(fn, *args, clock=None):
    return trio.run(fn, *args, clock=clock or trio.testing.MockClock(autojump_threshold=0))


async def until(predicate) -> None:
    """Let the event loop take what the threads hand back until ``predicate()`` holds (virtual
    time: the MockClock jumps while the loop waits for the threads). The guard only turns a hang
    into a failure: it is not a bound on how fast threads are."""
    guard = time.monotonic() + 120
    while not predicate():
        assert time.monotonic() < guard, "what the test waits for never happened"
        await trio.sleep(0.01)


def test_calls_that_block_together_each_get_a_thread(fresh_pool):
    # every call waits until all of them are running: a call queued behind a busy thread would
    # break the barrier (its timeout only bounds a failing run of this test)
    n = 12
    barrier = threading.Barrier(n, timeout=30)

    async def main():
        got = []

        async def one(i):
            got.append(await run_in_thread(lambda i: (barrier.wait(), i)[1], {"i": i}))

        async with trio.open_nursery() as nursery:
            for i in range(n):
                nursery.start_soon(one, i)
        return sorted(got)

    assert run(main) == list(range(n))
    assert not barrier.broken


def test_threads_are_reused_not_one_per_call(fresh_pool):
    seen: set[int] = set()
    lock = threading.Lock()

    def where():
        with lock:
            seen.add(threading.get_ident())
        return threading.get_ident()

    async def main():
        async def lane():
            for _ in range(50):
                await run_in_thread(where, {})

        async with trio.open_nursery() as nursery:
            for _ in range(4):
                nursery.start_soon(lane)
        return thread_limiter().borrowed_tokens

    borrowed = run(main)
    # 200 calls on 4 lanes: a thread is given back before its lane's next call
    assert 1 <= len(seen) <= 4
    assert borrowed == 0


def test_a_call_given_up_on_keeps_its_token_and_slot_until_its_thread_ends(fresh_pool):
    release = threading.Event()
    ended = threading.Event()
    after: dict[str, object] = {}

    def blocked():
        release.wait(60)
        ended.set()
        return "late"

    async def main():
        tool_limiter = trio.CapacityLimiter(1)
        borrower = object()
        await tool_limiter.acquire_on_behalf_of(borrower)
        slot = HeldSlot(tool_limiter, borrower)
        with trio.move_on_after(5) as scope:
            await run_in_thread(blocked, {}, slot)
        assert scope.cancelled_caught  # the deadline, while the thread still runs
        assert slot.handed_over and not ended.is_set()
        after["held"] = (thread_limiter().borrowed_tokens, tool_limiter.borrowed_tokens)
        release.set()
        await until(lambda: tool_limiter.borrowed_tokens == 0)
        after["freed"] = (thread_limiter().borrowed_tokens, tool_limiter.borrowed_tokens)

    run(main)
    assert ended.is_set()
    assert after == {"held": (1, 1), "freed": (0, 0)}


def test_a_cancelled_call_returns_at_once_and_other_calls_go_on(fresh_pool):
    release = threading.Event()

    async def main():
        got = []

        async def cancelled(scope_box):
            with trio.CancelScope() as scope:
                scope_box.append(scope)
                await run_in_thread(release.wait, {"timeout": 60})
            got.append(("cancelled", scope.cancelled_caught))

        async def other():
            got.append(("other", await run_in_thread(lambda: 7, {})))

        box: list[trio.CancelScope] = []
        async with trio.open_nursery() as nursery:
            nursery.start_soon(cancelled, box)
            await until(lambda: box)
            nursery.start_soon(other)
            await until(lambda: len(got) == 1)
            box[0].cancel()
        release.set()
        await until(lambda: thread_limiter().borrowed_tokens == 0)
        return got

    assert run(main) == [("other", 7), ("cancelled", True)]


def test_a_cancelled_caller_never_starts_the_callable(fresh_pool):
    ran = []

    async def main():
        with trio.CancelScope() as scope:
            scope.cancel()
            await run_in_thread(ran.append, {"object": 1})
        return scope.cancelled_caught, thread_limiter().borrowed_tokens

    assert run(main) == (True, 0)
    assert ran == []


def test_failures_leave_the_thread_as_tool_raised_and_the_thread_lives_on(fresh_pool):
    def boom(kind):
        raise {"exit": SystemExit, "key": KeyboardInterrupt, "value": ValueError}[kind]("no")

    async def main():
        got = []
        for kind in ("exit", "key", "value"):
            try:
                await run_in_thread(boom, {"kind": kind})
            except ToolRaised as exc:
                got.append((exc.kind, str(exc)))
        got.append(await run_in_thread(lambda: "still here", {}))
        return got

    got = run(main)
    assert [k for k, _ in got[:3]] == ["SystemExit", "KeyboardInterrupt", "ValueError"]
    assert got[3] == "still here"


def test_a_sync_callable_that_returns_a_coroutine_is_an_error(fresh_pool):
    async def coro():
        return 1

    async def main():
        with pytest.raises(TypeError, match="appears to be asynchronous"):
            await run_in_thread(lambda: coro(), {})

    run(main)


def test_the_thread_sees_the_callers_context_and_can_reach_the_loop(fresh_pool):
    async def in_loop():
        return trio.lowlevel.current_task() is not None

    def tool():
        return VAR.get(), trio.from_thread.run(in_loop), trio.from_thread.run_sync(lambda: "sync")

    async def main():
        VAR.set("caller's")
        return await run_in_thread(tool, {})

    assert run(main) == ("caller's", True, "sync")


def test_threads_that_end_when_idle_never_strand_a_call(fresh_pool, monkeypatch):
    # with no idle wait at all, a thread ends as soon as the queue is empty: every call must
    # still find a thread, whichever way the ends and the new calls interleave
    monkeypatch.setattr(pool_module, "IDLE_S", 0.0)

    async def main():
        total = []

        async def lane(k):
            for i in range(40):
                total.append(await run_in_thread(lambda k, i: k * 100 + i, {"k": k, "i": i}))

        async with trio.open_nursery() as nursery:
            for k in range(6):
                nursery.start_soon(lane, k)
        return sorted(total)

    assert run(main) == sorted(k * 100 + i for k in range(6) for i in range(40))
    assert fresh_pool.idle >= 0


def test_each_event_loop_has_a_thread_limiter_of_its_own(fresh_pool):
    # a thread abandoned by one run keeps its token of that run's limiter only: a later run in the
    # same process (as `toolloop serve` resumes runs) starts with every token free
    hold = threading.Event()

    async def abandons():
        with trio.move_on_after(1):
            await run_in_thread(hold.wait, {"timeout": 60})
        return thread_limiter(), thread_limiter().borrowed_tokens

    async def later():
        return thread_limiter(), thread_limiter().borrowed_tokens

    try:
        first, held = run(abandons)
        second, free = run(later)
    finally:
        hold.set()
    assert held == 1 and free == 0 and first is not second
