"""How a Ray call's start report and reply reach the event loop (``executors/ray.py`` ``_Task``):
through callbacks on the task's two item refs, in whatever order Ray's thread makes them, with
the same outcome the blocking follower gave: a failure before the start ends the call with that
failure and no process id, a reply that overtakes its start report still starts and ends the
call, and a call whose refs cannot be had ahead is followed by a thread. And what the task is
sent: the call's values as one argument, the identity from which the worker gives
``current_call()`` the same identity as in the head."""

from __future__ import annotations

import threading

import trio
import trio.testing

from toolloop_cli.engine.executors import ray as ray_executor


class FakeRef:
    def __init__(self):
        self.callback = None

    def _on_completed(self, callback):
        self.callback = callback


class FakeGen:
    """A generator task whose two item refs are known ahead, as Ray 2.5x gives them."""

    def __init__(self):
        self.refs = [FakeRef(), FakeRef()]

    def _get_next_ref_n(self, n):
        assert n == 2
        return self.refs


def fire(ref: FakeRef, value) -> None:
    """The callback as Ray makes it: from a thread of its own."""
    t = threading.Thread(target=ref.callback, args=(value,))
    t.start()
    t.join()


def follow(script):
    async def main():
        gen = FakeGen()
        task = ray_executor._Task(None, gen)
        with trio.fail_after(5):  # virtual time: a call that never ends fails here, not hangs
            await script(task, gen.refs)
        return task

    return trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def test_the_start_then_the_reply():
    async def script(task, refs):
        fire(refs[0], 4242)
        await task.started.wait()
        assert not task.done.is_set()
        fire(refs[1], ("ok", {"x": 1}))
        await task.done.wait()

    task = follow(script)
    assert task.pid == 4242 and task.reply.unwrap() == ("ok", {"x": 1})


def test_a_failure_before_the_start_ends_the_call_with_it():
    class SetupFailed(Exception):
        pass

    async def script(task, refs):
        fire(refs[0], SetupFailed("no env"))
        await task.done.wait()
        assert task.started.is_set()
        fire(refs[1], RuntimeError("the stream's end"))  # the later item's error changes nothing

    task = follow(script)
    assert task.pid is None
    error = ray_executor._error_of(task.reply)
    assert isinstance(error, SetupFailed) and str(error) == "no env"


def test_a_reply_that_overtakes_its_start_report_still_ends_the_call():
    async def script(task, refs):
        fire(refs[1], ("ok", 1))
        await task.done.wait()
        assert task.started.is_set()
        fire(refs[0], 77)

    task = follow(script)
    assert task.reply.unwrap() == ("ok", 1)


def test_a_lost_worker_reaches_the_call_as_the_reply_s_error():
    async def script(task, refs):
        fire(refs[0], 9)
        fire(refs[1], ConnectionError("worker died"))
        await task.done.wait()

    task = follow(script)
    assert task.pid == 9 and isinstance(task.reply.error, ConnectionError)


def test_without_refs_ahead_a_thread_follows_the_blocking_iterator():
    class FakeRay:
        @staticmethod
        def get(value):
            return value

    class OldGen:  # a Ray without _get_next_ref_n: items only through next()
        def __init__(self):
            self.items = iter([5150, ("ok", "old")])

        def __next__(self):
            return next(self.items)

    async def main():
        task = ray_executor._Task(FakeRay, OldGen())
        await task.done.wait()
        return task

    task = trio.run(main)
    assert task.pid == 5150 and task.reply.unwrap() == ("ok", "old")


# --- what the task is sent: the call as one argument, with the call's identity ---------------------


def in_worker(call):
    """The task's body as a Ray worker runs it, after the call crossed a process boundary."""
    import pickle

    return list(ray_executor.toolloop_call(pickle.loads(pickle.dumps(call))))


def test_the_worker_gives_current_call_the_identity_the_head_had():
    from toolloop_cli.engine import identity

    for made in ("pending", "object"):  # as the engine sets it, and as a program sets a whole identity
        if made == "pending":
            token = identity.set_pending("run1", 7, "item", "c1", 2, {"team": "a"}, "rc1")
        else:
            token = identity.set_current(identity.CallIdentity("run1", 7, "item", "c1", 2, {"team": "a"},
                                                               identity.idempotency_key("run1", 7), "rc1"))
        try:
            head = identity.current_call()
            fields = ray_executor._identity()
        finally:
            identity.reset_current(token)
        start, reply = in_worker(("toolloop_cli.engine.identity:current_call", {}, False, 10_000, fields))
        assert reply == ("ok", head) and head.idempotency_key == identity.idempotency_key("run1", 7), made
        assert dict(head.labels) == {"team": "a"} and head.attempt == 2 and head.receipt_id == "rc1"
        assert identity.current_identity() is None  # the worker's identity ends with its call


def test_outside_a_call_the_worker_has_no_identity():
    assert ray_executor._identity() is None
    _start, reply = in_worker(("toolloop_cli.engine.identity:current_call", {}, False, 10_000, None))
    assert reply[:2] == ("error", "LookupError")
