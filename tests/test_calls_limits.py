"""Source limits (``concurrency``): hard caps per tool across every lane of the run,
whatever --max-concurrency says."""

from __future__ import annotations

import pytest

from test_calls_common import admitted, run_plan, tool


@pytest.fixture(autouse=True)
def tools_module():
    from testapp import tools

    tools.reset()
    tools.reset_governed()
    yield tools


def lanes(tool_id: str, n: int, args) -> list[dict]:
    return [{"item_key": f"l{i}", "calls": [{"tool": tool_id, "args": args(i)}]} for i in range(n)]


def test_max_in_flight_holds_across_lanes_for_async_tools(tmp_path, tools_module):
    plan = admitted(tmp_path, {"h": tool("hold", concurrency={"max_in_flight": 2})},
                    lanes=lanes("h", 20, lambda i: {"key": str(i), "seconds": 1}), mc=20)
    got, _, _ = run_plan(plan)
    assert all(r["status"] == "ok" for r in got)
    assert tools_module.IN_FLIGHT["max"] == 2 and tools_module.IN_FLIGHT["calls"] == 20


def test_max_in_flight_holds_across_lanes_for_threads(tmp_path, tools_module):
    plan = admitted(tmp_path, {"h": tool("hold_sync", concurrency={"max_in_flight": 3})},
                    lanes=lanes("h", 12, lambda i: {"key": str(i), "seconds": 0.02}), mc=12)
    got, _, _ = run_plan(plan, mock=False)
    assert all(r["status"] == "ok" for r in got)
    assert tools_module.SYNC_FLIGHT["max"] == 3


def test_an_abandoned_thread_keeps_its_slot_until_it_really_ends(tmp_path, tools_module):
    # the first call times out but its thread runs on for 0.4 s: the source is still busy, so
    # the second call may not start before it ends
    plan = admitted(tmp_path, {"h": tool("hold_sync", timeout_s=0.1, concurrency={"max_in_flight": 1})},
                    lanes=[{"item_key": "a", "calls": [{"tool": "h", "args": {"key": "a", "seconds": 0.4}}]},
                           {"item_key": "b", "calls": [{"tool": "h", "args": {"key": "b", "seconds": 0.01}}]}], mc=2)
    got, _, _ = run_plan(plan, mock=False)
    assert [(r["status"], r["abandoned"]) for r in got] == [("timeout", True), ("ok", False)]
    assert tools_module.SYNC_FLIGHT["max"] == 1


def test_waiting_for_a_slot_is_not_the_call_s_time(tmp_path, tools_module):
    # ten calls of 1 s through one slot, each with a 1.5 s timeout: none times out
    plan = admitted(tmp_path, {"h": tool("hold", timeout_s=1.5, concurrency={"max_in_flight": 1})},
                    lanes=lanes("h", 10, lambda i: {"key": str(i), "seconds": 1}), mc=10)
    got, _, _ = run_plan(plan)
    assert [r["status"] for r in got] == ["ok"] * 10


def test_per_second_spaces_the_starts_across_lanes(tmp_path, tools_module):
    plan = admitted(tmp_path, {"s": tool("stamp", concurrency={"per_second": 5})},
                    lanes=lanes("s", 20, lambda i: {"key": str(i)}), mc=20)
    got, _, _ = run_plan(plan)  # mock clock: four seconds of spacing, no wall time
    assert all(r["status"] == "ok" for r in got)
    stamps = sorted(tools_module.STAMPS)
    gaps = [b - a for a, b in zip(stamps, stamps[1:])]
    assert min(gaps) >= 0.2 - 1e-9
    assert stamps[-1] - stamps[0] == pytest.approx(19 * 0.2)


def test_both_limits_together(tmp_path, tools_module):
    plan = admitted(tmp_path, {"h": tool("hold", concurrency={"max_in_flight": 3, "per_second": 10})},
                    lanes=lanes("h", 30, lambda i: {"key": str(i), "seconds": 2}), mc=30)
    got, _, _ = run_plan(plan)
    assert all(r["status"] == "ok" for r in got)
    assert tools_module.IN_FLIGHT["max"] == 3


def test_retries_pass_the_limits_again(tmp_path, tools_module):
    spec = tool("flaky_async", retry={"max_attempts": 3, "backoff_s": 0.01, "on": ["error"]},
                concurrency={"per_second": 2})
    plan = admitted(tmp_path, {"f": spec}, lanes=lanes("f", 4, lambda i: {"key": str(i), "failures": 2}), mc=4)
    got, _, _ = run_plan(plan)
    assert [r["attempts"] for r in got] == [3] * 4
    starts = sorted(t for ts in tools_module.TRIES.values() for t in ts)
    assert min(b - a for a, b in zip(starts, starts[1:])) >= 0.5 - 1e-9
