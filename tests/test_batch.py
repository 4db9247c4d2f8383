"""Sequential and parallel batches in-process: order, streaming, bounds, failure semantics."""

from __future__ import annotations

import json

import jsonschema
import pytest
import trio
import trio.testing

from conftest import APP, write
from toolloop_cli.engine import HaltPolicy, RunContext, run_batch, run_lanes, run_parallel_batch
from toolloop_cli.plan.admit import admit_plan
from toolloop_cli.record_schema import receipt_schema

REG = APP / "registry.yml"


@pytest.fixture(autouse=True)
def _reset_counters():
    from testapp import tools

    tools.reset()
    yield tools


def admitted(tmp_path, lanes: list[dict] | None = None, calls: list[dict] | None = None, mc: int = 4):
    if calls is not None:
        body = {"version": 1, "registry": str(REG), "subagent": "t", "mode": "sequential", "calls": calls}
    else:
        body = {"version": 1, "registry": str(REG), "subagent": "t", "mode": "parallel",
                "max_concurrency": mc, "lanes": lanes}
    return admit_plan(write(tmp_path / "plan.yml", json.dumps(body)))


def run(plan, mc=None, halt=None, clock=True):
    ctx = RunContext("run-test", plan.contract)
    got: list = []
    times: list = []

    def sink(r):
        got.append(r)
        times.append(trio.current_time())

    async def main():
        if plan.mode == "sequential":
            return await run_batch(ctx, plan.lanes[0].calls, sink, halt=halt)
        return await run_parallel_batch(ctx, plan.lanes, mc or plan.max_concurrency, sink, halt=halt)

    kw = {"clock": trio.testing.MockClock(autojump_threshold=0)} if clock else {}
    state = trio.run(main, **kw)
    return got, times, state, ctx


def hold_lane(key: str, *durations: float) -> dict:
    return {"item_key": key, "calls": [{"call_key": f"c{i}", "tool": "hold", "args": {"key": f"{key}-{i}", "seconds": d}}
                                       for i, d in enumerate(durations)]}


def test_receipts_come_in_input_order_and_record_completion_order(tmp_path):
    plan = admitted(tmp_path, [hold_lane("slow", 5.0), hold_lane("fast", 1.0), hold_lane("mid", 3.0)])
    got, _, state, _ = run(plan)
    assert [r.seq for r in got] == [0, 1, 2]
    assert [r.item_key for r in got] == ["slow", "fast", "mid"]
    assert [r.completion_seq for r in got] == [2, 0, 1]
    assert state.counts["ok"] == 3


def test_receipts_stream_as_soon_as_their_prefix_is_done(tmp_path):
    # lane 0 is quick, lane 1 slow: receipt 0 must not wait for lane 1
    plan = admitted(tmp_path, [hold_lane("quick", 1.0), hold_lane("slow", 9.0)])
    got, times, _, _ = run(plan)
    assert [r.seq for r in got] == [0, 1]
    assert times[0] == pytest.approx(1.0) and times[1] == pytest.approx(9.0)


def test_concurrency_is_bounded_and_lanes_overlap(tmp_path, _reset_counters):
    plan = admitted(tmp_path, [hold_lane(f"l{i}", 1.0, 1.0) for i in range(20)], mc=3)
    got, _, _, _ = run(plan)
    assert len(got) == 40 and all(r.status == "ok" for r in got)
    assert _reset_counters.IN_FLIGHT["max"] == 3
    assert _reset_counters.IN_FLIGHT["calls"] == 40


def test_calls_inside_a_lane_are_serial(tmp_path, _reset_counters):
    plan = admitted(tmp_path, [hold_lane("only", 1.0, 1.0, 1.0)], mc=8)
    got, times, _, _ = run(plan)
    assert times == [pytest.approx(1.0), pytest.approx(2.0), pytest.approx(3.0)]
    assert _reset_counters.IN_FLIGHT["max"] == 1


def test_tool_source_limit_holds_whatever_max_concurrency_says(tmp_path, _reset_counters):
    lanes = [{"item_key": f"l{i}", "calls": [{"tool": "hold_limited", "args": {"key": str(i), "seconds": 1.0}}]}
             for i in range(10)]
    plan = admitted(tmp_path, lanes, mc=8)
    got, times, _, _ = run(plan)
    assert _reset_counters.IN_FLIGHT["max"] == 2
    assert max(times) == pytest.approx(5.0)


def test_a_failed_call_skips_the_rest_of_its_lane_only(tmp_path):
    lanes = [
        {"item_key": "bad", "calls": [{"tool": "boom", "args": {"message": "nope"}}, {"tool": "echo", "args": {}}]},
        {"item_key": "good", "calls": [{"tool": "echo", "args": {"x": 1}}, {"tool": "echo", "args": {"y": 2}}]},
    ]
    got, _, state, _ = run(admitted(tmp_path, lanes), clock=False)
    assert [(r.item_key, r.status) for r in got] == [("bad", "error"), ("bad", "skipped"), ("good", "ok"), ("good", "ok")]
    assert got[0].error == {"kind": "RuntimeError", "message": "nope"}
    assert got[0].result is None
    assert got[1].attempts == 0 and got[1].started_at is None and "ended error" in got[1].error["message"]
    assert state.counts["error"] == 1 and state.counts["skipped"] == 1


def test_wrong_output_is_invalid_output_never_ok(tmp_path):
    got, _, _, _ = run(admitted(tmp_path, calls=[{"tool": "wrong_output", "args": {"a": 1}}]), clock=False)
    (r,) = got
    assert r.status == "invalid_output" and r.result is None
    assert "missing" in r.error["message"]


def test_the_callable_gets_exactly_the_admitted_arguments(tmp_path):
    args = {"nested": {"k": [1, 2]}, "text": "é", "n": None}
    got, _, _, _ = run(admitted(tmp_path, calls=[{"tool": "echo", "args": args}]), clock=False)
    assert got[0].result == {"received": args}
    assert got[0].args == args


FAILS_AT_1S = [{"item_key": "fails", "calls": [{"tool": "hold", "args": {"key": "f", "seconds": 1.0}},
                                                {"tool": "boom_async", "args": {}}]}]


def test_halt_now_cancels_in_flight_and_skips_the_rest(tmp_path):
    plan = admitted(tmp_path, FAILS_AT_1S + [hold_lane(f"l{i}", 5.0) for i in range(5)], mc=3)
    got, times, state, _ = run(plan, halt=HaltPolicy.parse("now,fail=1"))
    assert [r.status for r in got] == ["ok", "error", "cancelled", "cancelled"] + ["skipped"] * 3
    assert max(times) == pytest.approx(1.0)  # nothing waited for the 5 s calls
    assert got[2].error["message"] == "the batch was halted (--halt now,fail=1)"
    assert state.halted


def test_halt_soon_lets_in_flight_finish(tmp_path):
    plan = admitted(tmp_path, FAILS_AT_1S + [hold_lane(f"l{i}", 5.0) for i in range(5)], mc=3)
    got, times, state, _ = run(plan, halt=HaltPolicy.parse("soon,fail=10%"))
    assert [r.status for r in got] == ["ok", "error", "ok", "ok"] + ["skipped"] * 3
    assert max(times) == pytest.approx(5.0)
    assert state.halted


@pytest.mark.parametrize("text", ["now", "later,fail=1", "now,fail=0", "soon,fail=150%", "now,fails=1"])
def test_bad_halt_policies_are_refused(text):
    with pytest.raises(ValueError, match="--halt"):
        HaltPolicy.parse(text)


def test_every_receipt_validates_against_the_published_schema(tmp_path):
    lanes = [hold_lane("a", 1.0), {"item_key": "b", "calls": [{"tool": "boom_async", "args": {}}, {"tool": "echo"}]}]
    got, _, _, _ = run(admitted(tmp_path, lanes))
    validator = jsonschema.Draft202012Validator(receipt_schema())
    for r in got:
        validator.validate(r.as_record())
    assert len(got) == 3


def test_receipts_are_deterministic_apart_from_times_and_ids(tmp_path):
    lanes = [hold_lane(f"l{i}", float(i % 3 + 1), 1.0) for i in range(8)] + [
        {"item_key": "bad", "calls": [{"tool": "boom_async", "args": {}}, {"tool": "echo"}]}]
    plan = admitted(tmp_path, lanes, mc=3)

    def stable(r):
        d = r.as_record()
        for k in ("run_id", "receipt_id", "started_at", "finished_at", "duration_ms", "parallel_batch_id",
                  "completion_seq"):  # completion order is timing, like the times
            d.pop(k)
        return d

    first = [stable(r) for r in run(plan)[0]]
    second = [stable(r) for r in run(plan)[0]]
    assert first == second and len(first) == 18


def test_resume_style_prior_receipts_are_emitted_in_order(tmp_path):
    plan = admitted(tmp_path, [hold_lane("a", 1.0, 1.0), hold_lane("b", 1.0)])
    first, _, _, _ = run(plan)
    ctx = RunContext("run-test", plan.contract)
    got: list = []

    async def main():
        await run_lanes(ctx, plan.lanes, 2, got.append, skip_seqs=frozenset({0, 2}), prior=[first[0], first[2]])

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert [r.seq for r in got] == [0, 1, 2]
    assert got[0] is first[0] and got[2] is first[2]


def test_workers_stay_within_a_window_of_the_emission_point(tmp_path, monkeypatch, _reset_counters):
    import toolloop_cli.engine.lanes as batch

    monkeypatch.setattr(batch, "LOOKAHEAD_CALLS", 10)
    # lane 0 takes long; with a window of max(10, 64 * 2) calls the others may not run ahead unboundedly
    lanes = [hold_lane("slow", 9.0)] + [hold_lane(f"l{i}", 0.001) for i in range(300)]
    got, times, _, _ = run(admitted(tmp_path, lanes, mc=2))
    assert [r.seq for r in got] == list(range(301))
    # lanes within the window of the stuck first receipt started at once; the rest waited for it
    starts = _reset_counters.STARTS
    assert max(starts[f"l{i}-0"] for i in range(127)) < 1.0
    assert min(starts[f"l{i}-0"] for i in range(130, 300)) >= 9.0


def test_halt_while_workers_wait_for_the_window_skips_the_rest(tmp_path, monkeypatch):
    import toolloop_cli.engine.lanes as batch

    monkeypatch.setattr(batch, "LOOKAHEAD_CALLS", 10)
    lanes = FAILS_AT_1S + [hold_lane(f"l{i}", 0.001) for i in range(300)]
    got, times, state, _ = run(admitted(tmp_path, lanes, mc=2), halt=HaltPolicy.parse("now,fail=1"))
    assert [r.seq for r in got] == list(range(302))
    assert got[1].status == "error" and got[-1].status == "skipped"
    assert max(times) == pytest.approx(1.0)


def test_a_write_start_is_marked_only_once_it_holds_its_source_slot(tmp_path):
    lanes = [{"item_key": k, "calls": [{"tool": "hold_write", "args": {"key": k, "seconds": 5.0}}]} for k in "ab"]
    plan = admitted(tmp_path, lanes, mc=2)
    ctx = RunContext("run-test", plan.contract)
    marked: list = []

    def before_start(info):
        marked.append((info[0], trio.current_time()))

    ctx.services.before_start = before_start
    got: list = []

    async def main():
        await run_parallel_batch(ctx, plan.lanes, 2, got.append)

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    # the second write waited for the slot: its marker was committed when it got it, not before
    assert sorted(t for _, t in marked) == [pytest.approx(0.0), pytest.approx(5.0)]
    assert [r.status for r in got] == ["ok", "ok"]
