"""A lane worker's attempts borrow the worker's cancel scope as their deadline (one watchdog per
run instead of a cancel scope per call). What that must keep, under trio's mock clock: a tool's
own scopes, nurseries and sleeps nest inside the deadline; a timed-out call is settled as
``timeout`` and retried per its policy, its backoff not cancelled; the worker goes on with the
next call in a fresh scope; a halt still cancels a call in flight and a retry's backoff."""

from __future__ import annotations

import json
import sys

import pytest
import trio
import trio.testing

from conftest import write
from toolloop_cli.engine import HaltPolicy, RunContext, run_lanes
from toolloop_cli.plan.admit import admit_plan

APP_TEXT = '''
import trio

CLOCK = []
TRIES = {}


async def nests(inner_s, total_s):
    # scopes, a nursery and sleeps of the tool's own, inside the engine's deadline
    with trio.move_on_after(inner_s):
        await trio.sleep(1000)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.sleep, total_s)
        await trio.sleep(total_s / 2)
    return {"at": trio.current_time()}


async def sleeper(s, fail=False):
    await trio.sleep(s)
    if fail:
        raise RuntimeError("failed on purpose")
    return {"at": trio.current_time()}


async def slow_then_fast(key):
    TRIES.setdefault(key, []).append(trio.current_time())
    if len(TRIES[key]) == 1:
        await trio.sleep(1000)
    return {"at": trio.current_time()}


async def late(jump, checkpoints):
    # the result comes after the deadline: the clock moves under a task that does not wait, then
    # (with checkpoints) the watchdog runs while the task's own waits are shielded from it
    CLOCK[0].jump(jump)
    for _ in range(checkpoints):
        await trio.lowlevel.cancel_shielded_checkpoint()
    return {"at": trio.current_time()}
'''


@pytest.fixture
def app(tmp_path, monkeypatch):
    write(tmp_path / "deadlineapp.py", APP_TEXT)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("deadlineapp", None)
    yield tmp_path
    sys.modules.pop("deadlineapp", None)


def plan_of(app, lanes, *, mc=1, retry=None, timeout=5, own_timeouts=None):
    tools = {}
    for name in ("nests", "sleeper", "slow_then_fast", "late"):
        spec = {"callable": f"deadlineapp:{name}", "description": name, "input_schema": {},
                "output_schema": {"type": "object"}}
        if name in (own_timeouts or {}):
            spec["timeout_s"] = own_timeouts[name]
        if retry is not None:
            spec["retry"] = retry
        tools[name] = spec
    reg = write(app / "reg.yml", json.dumps({"version": 1, "app_root": str(app), "subagents": {
        "d": {"runner_defaults": {"tool_timeout_s": timeout}, "tools": tools}}}))
    return admit_plan(write(app / "plan.yml", json.dumps({
        "version": 1, "registry": str(reg), "subagent": "d", "mode": "parallel", "max_concurrency": mc,
        "lanes": [{"item_key": f"l{i}", "calls": [{"tool": t, "args": a} for t, a in calls]}
                  for i, calls in enumerate(lanes)]})))


def run(plan, halt=None):
    import deadlineapp

    clock = trio.testing.MockClock(autojump_threshold=0)
    deadlineapp.CLOCK[:] = [clock]
    ctx = RunContext("run-test", plan.contract)
    got = []

    async def main():
        return await run_lanes(ctx, plan.lanes, plan.max_concurrency,
                               lambda r: got.append((r, trio.current_time())), halt=halt)

    state = trio.run(main, clock=clock)
    return got, state


def test_a_tools_own_scopes_nursery_and_sleeps_nest_inside_the_deadline(app):
    plan = plan_of(app, [[("nests", {"inner_s": 1, "total_s": 2})],  # done at 3 s, within 5 s
                         [("nests", {"inner_s": 1, "total_s": 10})],  # its nursery still sleeps at 5 s
                         [("nests", {"inner_s": 2, "total_s": 1})]])  # one worker: after a timeout
    got, _ = run(plan)
    assert [(r.status, r.attempts) for r, _ in got] == [("ok", 1), ("timeout", 1), ("ok", 1)]
    assert [at for _, at in got] == [pytest.approx(3.0), pytest.approx(8.0), pytest.approx(11.0)]
    assert got[0][0].result == {"at": pytest.approx(3.0)} and got[2][0].result == {"at": pytest.approx(11.0)}
    assert got[1][0].error == {"kind": "timeout", "message": "no result within 5s"}


def test_a_timed_out_call_is_retried_and_its_backoff_is_not_cancelled(app):
    import deadlineapp

    plan = plan_of(app, [[("slow_then_fast", {"key": "a"}), ("sleeper", {"s": 1})]],
                   retry={"max_attempts": 2, "backoff_s": 2, "on": ["timeout"]})
    got, _ = run(plan)
    assert [(r.status, r.attempts) for r, _ in got] == [("ok", 2), ("ok", 1)]
    first, second = deadlineapp.TRIES["a"]
    assert first == 0 and 5 + 1 <= second <= 5 + 2  # the timeout, then a backoff of 1 to 2 s, waited out
    assert got[0][1] == pytest.approx(second) and got[1][1] == pytest.approx(second + 1)


def test_a_late_result_is_a_timeout_and_the_worker_goes_on(app):
    plan = plan_of(app, [[("late", {"jump": 6, "checkpoints": 0})],  # never waits: the watchdog never runs
                         [("late", {"jump": 6, "checkpoints": 2})],  # the watchdog fires while it returns
                         [("sleeper", {"s": 1})], [("sleeper", {"s": 4})]])
    got, _ = run(plan)
    assert [(r.status, r.attempts) for r, _ in got] == [("timeout", 1), ("timeout", 1), ("ok", 1), ("ok", 1)]
    assert [at for _, at in got] == [pytest.approx(6.0), pytest.approx(12.0), pytest.approx(13.0),
                                     pytest.approx(17.0)]


def test_halt_now_cancels_a_call_in_flight_and_a_retry_backoff_after_a_timeout(app):
    plan = plan_of(app, [[("slow_then_fast", {"key": "b"})],  # times out at 5 s, then waits 10-20 s
                         [("sleeper", {"s": 7, "fail": True})],  # fails at 7 s: halt now
                         [("sleeper", {"s": 100})]],  # in flight at 7 s
                   mc=3, retry={"max_attempts": 2, "backoff_s": 20, "on": ["timeout"]}, timeout=50)
    got, state = run(plan, halt=HaltPolicy.parse("now,fail=1"))
    # a retry waiting 10 to 20 s after the 50 s timeout would end past 60 s: the halt at 7 s ends it
    assert [r.status for r, _ in got] == ["cancelled", "error", "cancelled"]
    assert all(at == pytest.approx(7.0) for _, at in got)
    assert state.halted


@pytest.mark.parametrize("_round", range(12))
def test_a_halt_at_the_moment_a_deadline_fires_cancels_the_retry(app, _round):
    import deadlineapp

    # both at 5 s: in whichever order trio runs them, the timed-out call's retry is cancelled
    plan = plan_of(app, [[("slow_then_fast", {"key": "c"})], [("sleeper", {"s": 5, "fail": True})]],
                   mc=2, retry={"max_attempts": 3, "backoff_s": 1, "on": ["timeout"]}, timeout=50,
                   own_timeouts={"slow_then_fast": 5})
    got, _ = run(plan, halt=HaltPolicy.parse("now,fail=1"))
    assert [r.status for r, _ in got] == ["cancelled", "error"]
    assert len(deadlineapp.TRIES["c"]) == 1  # never tried again
