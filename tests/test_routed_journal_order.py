"""The routed loop and its journal: a model request waits for the journal thread only after a
call's receipt (what the model is told of an effect is committed first), not after a turn that had
no call (the journal commits in queue order); a call's gate and start come only after the answer and
the decision that lead to it are committed; and each observation is rendered into the router's
prompt once, then kept."""

from __future__ import annotations

import sqlite3
import threading

from conftest import APP, write
from toolloop_cli.chain import verify_run
from toolloop_cli.engine import routed_calls as routed_module  # where a routed turn gates its call
from toolloop_cli.engine.run import RunOptions, execute_plan
from toolloop_cli.plan.admit import admit_plan
from toolloop_cli.providers.scripted import ScriptedProvider
from toolloop_cli.router import decisions
from toolloop_cli.router.decisions import RouterPrompt, router_messages
from toolloop_cli.router.observations import observe_receipt, observe_rejection
from toolloop_cli.router.views import Budgets, LoopView, ToolView
from toolloop_cli.store import Store

CALL_ECHO = '{"action": "call", "tool": "echo", "args": {"x": 1}, "reason": "look"}'
UNKNOWN = '{"action": "call", "tool": "nope", "args": {}, "reason": "try"}'
FINAL = '{"action": "final", "reason": "enough"}'
ANSWER = '{"answer": 1}'


def plan_file(tmp_path) -> str:
    return str(write(tmp_path / "plan.yml", f"""
        version: 1
        registry: {APP / "registry.yml"}
        subagent: t
        mode: routed
        goal: Find x.
        allowed_tools: [echo]
        router_profile: {{provider: openai, model: m}}
        final_profile: {{provider: openai, model: m}}
        budget: {{max_iterations: 6, max_tokens: 100000, max_tool_calls: 3, timeout_s: 30}}
        final_schema: {{type: object}}
    """))


def run(tmp_path, provider: ScriptedProvider) -> dict:
    store = Store(tmp_path / "state")
    try:
        result = execute_plan(admit_plan(plan_file(tmp_path)), store, lambda _r: None,
                              RunOptions(handle_signals=False, providers={"openai": provider}))
    finally:
        store.close()
    return result.summary


def test_the_next_model_request_does_not_wait_for_the_last_answer_to_be_committed(tmp_path, monkeypatch):
    # the journal thread holds the first answer's commit until the second request is sent: a loop
    # that waited for the journal before asking again would only ask once the hold gave up
    released, held = threading.Event(), []
    put = Store.put_records

    def slow_put(self, receipts, others=(), answers=()):
        if any(a["n"] == 1 for a in answers):
            held.append(released.wait(timeout=10))
        put(self, receipts, others, answers)

    def second(_request):
        released.set()
        return FINAL

    monkeypatch.setattr(Store, "put_records", slow_put)
    summary = run(tmp_path, ScriptedProvider([UNKNOWN, second, ANSWER]))
    assert summary["outcome"] == "final"
    assert held == [True]  # the second request went out while the first answer was still queued
    store = Store(tmp_path / "state")
    try:  # and the journal holds every answer, in order, all the same
        assert [a["n"] for a in store.model_answers_of(summary["run_id"])] == [1, 2, 3]
    finally:
        store.close()


def test_a_call_is_gated_only_once_its_answer_and_decision_are_committed(tmp_path, monkeypatch):
    seen: list[tuple[int, int]] = []
    check_call = routed_module.check_call

    async def checked(ctx, tool, args, **kw):
        db = sqlite3.connect(tmp_path / "state" / "state.db")
        try:
            answers = db.execute("SELECT count(*) FROM model_answers").fetchone()[0]
            decisions_ = db.execute("SELECT count(*) FROM records WHERE type = 'decision'").fetchone()[0]
        finally:
            db.close()
        seen.append((answers, decisions_))
        return await check_call(ctx, tool, args, **kw)

    monkeypatch.setattr(routed_module, "check_call", checked)
    summary = run(tmp_path, ScriptedProvider([CALL_ECHO, '{"action": "call", "tool": "echo", "args": {"x": 2},'
                                                         ' "reason": "again"}', FINAL, ANSWER]))
    assert summary["outcome"] == "final"
    assert seen == [(1, 1), (2, 2)]  # each call's gate saw its own answer and decision in the journal


def test_a_model_request_after_a_call_waits_until_the_calls_receipt_is_committed(tmp_path):
    # the model is told a call's result only once a resume would find its receipt: killed while
    # the model thinks, the run never runs that call again
    receipts_in_journal: list[int] = []

    def second(_request):
        db = sqlite3.connect(tmp_path / "state" / "state.db")
        try:
            receipts_in_journal.append(db.execute("SELECT count(*) FROM receipts").fetchone()[0])
        finally:
            db.close()
        return FINAL

    summary = run(tmp_path, ScriptedProvider([CALL_ECHO, second, ANSWER]))
    assert summary["outcome"] == "final"
    assert receipts_in_journal == [1]


def view(observations=(), tools=None, instructions="Be brief.") -> LoopView:
    tools = tools or (ToolView("echo", "Returns <its> arguments.", {"type": "object"}, "read"),)
    return LoopView(goal="Find x.", context={"who": "t"}, instructions=instructions, tools=tools,
                    observations=tuple(observations), budgets=Budgets(5, 1000, 3, 30.0), steer=("go on",))


def test_the_router_prompt_renders_each_observation_once_and_writes_what_router_messages_writes(monkeypatch):
    rendered: list[int] = []
    show = decisions.show_observation

    def counting(o, p):
        rendered.append(o.iteration)
        return show(o, p)

    observations = [observe_receipt(1, "echo", "ok", {"x": "</observation>"}, args={"x": 1}),
                    observe_rejection(2, "nope", "unknown_tool", "not a tool", args={}),
                    observe_receipt(3, "echo", "error", {"kind": "boom"}, args={"x": 3})]
    expected = [router_messages(view(observations[:n])) for n in range(4)]
    monkeypatch.setattr(decisions, "show_observation", counting)
    prompt = RouterPrompt()
    assert [prompt.messages(view(observations[:n])) for n in range(4)] == expected
    assert rendered == [1, 2, 3]  # not 1, 1, 2, 1, 2, 3: earlier observations are kept, not rendered again


def test_the_router_prompt_renders_again_what_changed():
    observations = [observe_receipt(1, "echo", "ok", {"x": 1}), observe_receipt(2, "echo", "ok", {"x": 2})]
    prompt = RouterPrompt()
    prompt.messages(view(observations))
    other = [observations[0], observe_receipt(2, "echo", "ok", {"x": "changed"})]
    tools = (ToolView("other", "Another.", {"type": "object"}, "write"),)
    for v in (view(other), view(other, tools=tools), view(other, tools=tools, instructions=None), view()):
        assert prompt.messages(v) == router_messages(v)


def test_a_turns_answer_commits_with_its_decision_and_the_chain_holds(tmp_path, monkeypatch):
    # one transaction for the answer and the decision it holds (the call's gate waits for both),
    # another for the call's receipt (the next request waits for it): two a turn, not three
    commits: list[tuple[list, list, list]] = []
    put = Store.put_records

    def noted(self, receipts, others=(), answers=()):
        commits.append(([r["seq"] for r in receipts], [o[0]["type"] for o in others], [a["n"] for a in answers]))
        put(self, receipts, others, answers)

    monkeypatch.setattr(Store, "put_records", noted)
    summary = run(tmp_path, ScriptedProvider([CALL_ECHO, '{"action": "call", "tool": "echo", "args": {"x": 2},'
                                                         ' "reason": "again"}', FINAL, ANSWER]))
    assert summary["outcome"] == "final"
    assert commits[:4] == [([], ["decision"], [1]), ([0], [], []), ([], ["decision"], [2]), ([1], [], [])]
    store = Store(tmp_path / "state")
    try:  # every answer, in order, and the run's hash chain over them and the records holds
        assert [a["n"] for a in store.model_answers_of(summary["run_id"])] == [1, 2, 3, 4]
        verdict = verify_run(store, store.get_run(summary["run_id"]))
    finally:
        store.close()
    assert verdict is not None and verdict.ok, verdict
