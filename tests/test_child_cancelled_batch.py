"""A ``plan:`` call of a sequential or parallel parent that is cut short (its own timeout) names the
child run it started (``child_run_id``), as a routed parent's receipt does; the child ended
interrupted with its summary. Replay fixtures, a real state database; the mock clock where the
timeout is the point (a halt is raised on the real clock: with the mock one, the clock would jump to
the plan call's own deadline whenever every task waits on the journal's thread)."""

from __future__ import annotations

import json

import pytest
import trio.testing

from conftest import write
from regkit import registry_yaml
from toolloop_cli.engine.run import RunOptions, execute_plan
from toolloop_cli.plan.admit import admit_plan
from toolloop_cli.store import Store


def parent_plan(tmp_path, mode: str, research_timeout: int | None = 5):
    fixture = tmp_path / "child.jsonl"
    fixture.write_text(json.dumps({"type": "model_answer", "n": 1, "role": "router", "model": "m", "input_tokens": 1,
                                   "output_tokens": 1, "text": json.dumps(
                                       {"action": "call", "tool": "slow_read", "reason": "r",
                                        "args": {"log": str(tmp_path / "child.log"), "key": "child", "seconds": 100}})}) + "\n")
    extra = {"research": f"timeout_s: {research_timeout}"} if research_timeout else {}
    write(tmp_path / "reg.yml", registry_yaml("slow_read", "log_gate", "boom_async", "research", tool_timeout_s=300, max_depth=1,
                                              extra=extra))
    write(tmp_path / "research.yml", """
        version: 1
        registry: reg.yml
        subagent: t
        mode: routed
        goal: Research one question.
        allowed_tools: [slow_read]
        router_profile: {provider: replay, fixture: child.jsonl}
        final_profile: {provider: replay, fixture: child.jsonl}
        budget: {max_iterations: 4, max_tokens: 100000, max_tool_calls: 3, timeout_s: 600}
        final_schema: {type: object}
    """)
    call = {"tool": "research", "args": {"question": "why?"}}
    body = {"calls": [call]} if mode == "sequential" else {"max_concurrency": 2, "lanes": [{"item_key": "a", "calls": [{"call_key": "r", **call}]}]}
    return write(tmp_path / "plan.yml", json.dumps({"version": 1, "registry": "reg.yml", "subagent": "t",
                                                     "mode": mode, **body}))


@pytest.mark.parametrize("mode", ["sequential", "parallel"])
def test_a_plan_call_cut_short_by_its_timeout_names_its_child_run(tmp_path, mode):
    path = parent_plan(tmp_path, mode)
    store = Store(tmp_path / "state")
    got: list = []
    try:
        execute_plan(admit_plan(str(path)), store, got.append,
                     RunOptions(handle_signals=False, clock=trio.testing.MockClock(autojump_threshold=0)))
        (receipt,) = [r for r in got if r["type"] == "receipt"]
        child = store.child_run(receipt["run_id"], receipt["seq"])
        stored = store.receipts_of(receipt["run_id"])[0]
    finally:
        store.close()
    assert receipt["tool"] == "research" and receipt["status"] == "timeout"
    assert child is not None and child["status"] == "interrupted"
    assert receipt["child_run_id"] == child["run_id"]
    assert stored["child_run_id"] == child["run_id"]


def test_a_plan_call_cancelled_by_a_halt_names_its_child_run(tmp_path):
    # lane a's plan call waits on its child's 100 s call; lane b waits until that call has started
    # (its log file exists), then fails: --halt now,fail=1 cancels the plan call (neither the child's
    # 100 s nor the call's 300 s timeout is ever reached)
    from toolloop_cli.engine.runstate import HaltPolicy

    parent_plan(tmp_path, "parallel", research_timeout=None)
    path = write(tmp_path / "halted.yml", json.dumps({
        "version": 1, "registry": "reg.yml", "subagent": "t", "mode": "parallel", "max_concurrency": 2,
        "lanes": [{"item_key": "a", "calls": [{"call_key": "r", "tool": "research", "args": {"question": "why?"}}]},
                  {"item_key": "b", "calls": [
                      {"call_key": "wait", "tool": "log_gate",
                       "args": {"log": str(tmp_path / "b.log"), "key": "b", "gate": str(tmp_path / "child.log")}},
                      {"call_key": "bad", "tool": "boom_async", "args": {}}]}]}))
    store = Store(tmp_path / "state")
    got: list = []
    try:
        execute_plan(admit_plan(str(path)), store, got.append,
                     RunOptions(handle_signals=False, halt=HaltPolicy("now", fail_count=1)))
        receipt = next(r for r in got if r["type"] == "receipt" and r["tool"] == "research")
        child = store.child_run(receipt["run_id"], receipt["seq"])
    finally:
        store.close()
    assert receipt["status"] == "cancelled"
    assert child is not None and child["status"] == "interrupted"
    assert receipt["child_run_id"] == child["run_id"]
    assert receipt["error"]["message"].endswith(f"its child run {child['run_id']} was cancelled with it and ended"
                                                " interrupted")
