"""Rules that used to be written two or three times, each now stated once and read by every path
that needs it: the order of dispatched receipts, the resume keep/rerun table and the timeout
fallback."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from toolloop_cli.contract.compiled import timeout_of
from toolloop_cli.engine.dispatch_order import dispatched_by_parent, take_dispatched
from toolloop_cli.engine.history import in_output_order
from toolloop_cli.engine.recording import Recording
from toolloop_cli.engine.rerun import resume_action, write_in_flight
from toolloop_cli.engine.resume import _kept_children
from toolloop_cli.engine.settle import Children
from toolloop_cli.receipts import Receipt


def rec(seq: int, completion: int, parent: int | None = None) -> dict:
    return {"receipt_id": f"r{seq}", "seq": seq, "completion_seq": completion,
            "parent_receipt_id": f"r{parent}" if parent is not None else None}


# plan calls 0 and 1; 0 dispatched 5 (finished second) and 4 (finished first), 4 dispatched 6
JOURNAL = [rec(0, 0), rec(1, 5), rec(4, 1, parent=0), rec(5, 3, parent=0), rec(6, 2, parent=4)]
PRINTED = [0, 4, 6, 5, 1]


def test_dispatched_receipts_follow_their_parent_depth_first_in_the_order_they_finished():
    by_parent, loose = dispatched_by_parent(JOURNAL, lambda r: r["seq"] < 2)
    assert loose == []
    assert [r["seq"] for r in take_dispatched(by_parent, 0, lambda r: r["seq"])] == [4, 6, 5]
    assert by_parent == {}  # each is handed out once


def test_settlement_resume_and_runs_show_print_dispatched_receipts_in_the_same_order():
    # runs show: the journal read back
    assert [r["seq"] for r in in_output_order(list(reversed(JOURNAL)), 2)] == PRINTED
    # resume: the kept parent's children, put back where settlement prints them
    kept = _kept_children({r["seq"]: {**r, **_receipt_fields(r)} for r in JOURNAL}, {0, 1}, {0, 1})
    children = Children()
    for parent, child in kept:
        children.add(parent, child)
    assert [r.seq for r in children.take(0)] == [4, 6, 5]
    # settlement: receipts added as they finish
    live = Children()
    for r in sorted(JOURNAL[2:], key=lambda r: r["completion_seq"]):
        live.add(int(r["parent_receipt_id"][1:]), Receipt.from_record({**r, **_receipt_fields(r)}))
    assert [r.seq for r in live.take(0)] == [4, 6, 5]


def _receipt_fields(r: dict) -> dict:
    return {"type": "receipt", "run_id": "run", "subagent": "s", "tool": "t", "parallel_batch_id": None,
            "item_key": None, "call_key": None, "iteration": None, "status": "ok", "abandoned": False,
            "attempts": 1, "cache": "miss", "args_sha256": "0" * 64, "args": {}, "result": None, "error": None,
            "envelope": None, "started_at": None, "finished_at": None, "duration_ms": 0.0}


STATUSES = [None, "ok", "error", "timeout", "invalid_output", "invalid_input", "interrupted", "cancelled",
            "skipped", "denied", "duplicate", "budget_exceeded"]


@pytest.mark.parametrize("status", STATUSES)
@pytest.mark.parametrize("retry_failed, retry_interrupted", [(False, False), (True, False), (False, True)])
@pytest.mark.parametrize("started", [False, True])
def test_a_routed_resume_keeps_and_reruns_by_the_same_table_as_a_lanes_resume(status, retry_failed,
                                                                               retry_interrupted, started):
    tool = SimpleNamespace(id="write_note", at_most_once=True)
    receipts = {} if status is None else {3: {"seq": 3, "tool": "write_note", "status": status}}
    recording = Recording(answers=[], receipts=receipts, started={3} if started else set(),
                          retry_failed=retry_failed, retry_interrupted=retry_interrupted)
    expected = resume_action(status, in_flight_write=write_in_flight(status, started, True),
                             retry_failed=retry_failed, retry_interrupted=retry_interrupted)
    assert recording.action(3, tool) == expected
    assert (recording.kept_receipt(3, tool) is not None) == (expected == "keep")
    assert recording.write_in_flight(3, tool) == (expected == "interrupted")


def test_a_routed_resume_with_retry_failed_runs_a_failed_write_again():
    """A write that ended ``error`` is run again with --retry-failed, as in a lanes run; it is not
    reported as having been in flight (its receipt says it ended)."""
    tool = SimpleNamespace(id="write_note", at_most_once=True)
    recording = Recording(answers=[], receipts={0: {"seq": 0, "tool": "write_note", "status": "error"}},
                          started={0}, retry_failed=True)
    assert recording.action(0, tool) == "run"
    assert not recording.write_in_flight(0, tool)


def test_a_receipt_of_another_tool_counts_as_none_and_replay_keeps_nothing():
    tool = SimpleNamespace(id="read_page", at_most_once=False)
    recording = Recording(answers=[], receipts={0: {"seq": 0, "tool": "write_note", "status": "ok"}}, started=set())
    assert recording.action(0, tool) == "run"
    replay = Recording(answers=[], receipts={0: {"seq": 0, "tool": "read_page", "status": "ok"}}, started=set(),
                       replay=True)
    assert replay.action(0, tool) is None and replay.kept_receipt(0, tool) is None


def test_the_timeout_fallback_order():
    assert timeout_of(5.0, 10.0, 20.0) == 5.0  # the tool's own
    assert timeout_of(None, 10.0, 20.0) == 10.0  # its subagent's tool_timeout_s
    assert timeout_of(None, None, 20.0) == 20.0  # the run's --default-timeout
    assert timeout_of(None, None, None) is None
    assert timeout_of(None) is None


def _model_ctx(max_tool_calls: int = 5):
    from conftest import APP
    from toolloop_cli.contract.registry import load_registry
    from toolloop_cli.engine.budget import BudgetLedger
    from toolloop_cli.engine.context import RunContext
    from toolloop_cli.plan.routed import Budget

    contract, problems = load_registry(str(APP / "registry.yml"))
    assert contract is not None, problems
    ctx = RunContext("run", contract, subagent="t")
    ctx.services.budget = BudgetLedger(Budget(max_iterations=5, max_tokens=1000, max_tool_calls=max_tool_calls,
                                              timeout_s=60.0))
    return ctx, contract.subagents["t"].tools


def test_the_checks_on_a_call_a_model_proposes_in_their_order():
    from toolloop_cli.engine.gates import proposal_problem

    ctx, tools = _model_ctx()
    pay, limited = tools["pay"], tools["limited"]
    kind, why = proposal_problem(ctx, pay, {"amount": "ten"}, ran_before=True)
    assert kind == "invalid_args" and why.startswith("the arguments fail the input schema of 'pay': ")
    assert proposal_problem(ctx, pay, {"amount": 10}, ran_before=True) == (
        "duplicate", "'pay' already ran with these exact arguments in this run")
    assert proposal_problem(ctx, pay, {"amount": 10}, ran_before=False) is None
    ctx.ledger.count(limited)
    ctx.ledger.count(limited)
    assert proposal_problem(ctx, limited, {}, ran_before=False) == (
        "over_budget", "'limited' has made its max_calls (2) in this run")
    for _ in range(5):
        ctx.services.budget.count_tool_call()
    assert proposal_problem(ctx, pay, {"amount": 10}, ran_before=False) == (
        "over_budget", "the run's tool-call budget (5) is used up")
    # a value the journal withheld (the redaction marker) is not held against the schema
    from toolloop_cli.engine.redact import REDACTED

    assert proposal_problem(ctx, pay, {"amount": REDACTED}, ran_before=False, withheld=True) == (
        "over_budget", "the run's tool-call budget (5) is used up")


def test_the_gate_does_not_check_again_what_a_proposal_was_checked_for():
    """A model's call reaches the gate only after ``proposal_problem``: the gate goes on to the
    approval gate, while a dispatched call's schema, max_calls and budget are the gate's."""
    import trio

    from toolloop_cli.engine.gates import Go, Refuse, check_call

    ctx, tools = _model_ctx(max_tool_calls=1)
    echo, limited = tools["echo"], tools["limited"]
    ctx.ledger.count(limited)
    ctx.ledger.count(limited)

    async def gate(tool, args, source):
        return await check_call(ctx, tool, args, source=source, item_key=None, call_key=None)

    assert isinstance(trio.run(gate, limited, {}, "model"), Go)
    refused = trio.run(gate, limited, {}, "dispatch")
    assert isinstance(refused, Refuse) and refused.status == "budget_exceeded"
    assert isinstance(trio.run(gate, echo, {}, "dispatch"), Go)  # takes the one tool call left
    refused = trio.run(gate, echo, {}, "dispatch")
    assert isinstance(refused, Refuse) and refused.message == "the run's tool-call budget (max_tool_calls) is used up"
