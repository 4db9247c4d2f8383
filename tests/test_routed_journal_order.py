"""The routed loop and its journal: a model request never waits for the journal thread, not even
right after a call's receipt (the journal commits in queue order, so the answer it brings is never
committed before the receipt handed in before it); a call's gate and start come only after the
answer and the decision that lead to it, and every record before them, are committed; a run killed
while the model answers and its last receipt is still uncommitted resumes as one killed while the
call ran (a read runs again, a write is settled ``interrupted``; the answer after it was never
journaled); and each observation is rendered into the router's prompt once, then kept."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import threading

import pytest

from conftest import APP, jsonl, write
from modelserver import Reply
from regkit import openai_profile, registry_yaml, routed_plan_yaml
from test_store import read_log
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


def test_a_model_request_after_a_call_goes_out_while_its_receipt_is_committed_and_the_next_gate_waits(
        tmp_path, monkeypatch):
    # the journal thread holds the first receipt's commit until the second request is sent: a loop
    # that waited for the receipt before asking again would only ask once the hold gave up
    released, held, commits = threading.Event(), [], []
    put = Store.put_records

    def slow_put(self, receipts, others=(), answers=()):
        if any(r["seq"] == 0 for r in receipts):
            held.append(released.wait(timeout=10))
        commits.append(([r["seq"] for r in receipts], [a["n"] for a in answers]))
        put(self, receipts, others, answers)

    def in_journal() -> tuple[int, int, int]:
        db = sqlite3.connect(tmp_path / "state" / "state.db")
        try:
            return tuple(db.execute(sql).fetchone()[0] for sql in (  # type: ignore[return-value]
                "SELECT count(*) FROM receipts", "SELECT count(*) FROM model_answers",
                "SELECT count(*) FROM records WHERE type = 'decision'"))
        finally:
            db.close()

    at_request: list[tuple[int, int, int]] = []

    def second(_request):
        at_request.append(in_journal())
        released.set()
        return '{"action": "call", "tool": "echo", "args": {"x": 2}, "reason": "again"}'

    gated: list[tuple[int, int, int]] = []
    check_call = routed_module.check_call

    async def checked(ctx, tool, args, **kw):
        gated.append(in_journal())
        return await check_call(ctx, tool, args, **kw)

    monkeypatch.setattr(Store, "put_records", slow_put)
    monkeypatch.setattr(routed_module, "check_call", checked)
    summary = run(tmp_path, ScriptedProvider([CALL_ECHO, second, FINAL, ANSWER]))
    assert summary["outcome"] == "final"
    assert held == [True]  # the second request went out while the first receipt's commit was held
    assert at_request == [(0, 1, 1)]  # ... and the journal did not hold that receipt yet
    # the second call's gate waited for everything before it: the receipt, its answer and decision
    assert gated == [(0, 1, 1), (1, 2, 2)]
    # the second answer was never committed before the receipt handed in before it
    first_with = {what: next(i for i, c in enumerate(commits) if what[1] in c[what[0]]) for what in ((0, 0), (1, 2))}
    assert first_with[(0, 0)] <= first_with[(1, 2)], commits


# the journal never commits a receipt: a run is killed with its last receipt still uncommitted
HOLD_RECEIPTS = """
import sys, threading
from toolloop_cli.store import Store
put = Store.put_records
def held(self, receipts, others=(), answers=()):
    if receipts:
        threading.Event().wait()
    put(self, receipts, others, answers)
Store.put_records = held
from toolloop_cli.cli.app import main
main()
"""


@pytest.mark.parametrize("effect", ["read", "write"])
def test_a_run_killed_while_the_model_answers_before_the_receipt_is_committed_resumes_safely(
        tmp_path, model_server, cli, effect):
    extra = {"log_gate": "effect: write  # toolloop: ignore[TL353] (nothing to approve in a test)"}
    write(tmp_path / "reg.yml", registry_yaml("log_gate", extra=extra if effect == "write" else None))
    plan = write(tmp_path / "plan.yml", routed_plan_yaml(openai_profile(model_server.openai_base), "Log."))
    (tmp_path / "gate").touch()
    args = {"log": str(tmp_path / "log"), "key": "w", "gate": str(tmp_path / "gate")}
    arrived = threading.Event()

    def second_turn(_request):
        arrived.set()  # asked again while the call's receipt is still uncommitted: kill it now
        return Reply(FINAL, hold=threading.Event())

    model_server.script(json.dumps({"action": "call", "tool": "log_gate", "args": args, "reason": "w"}),
                        Reply(handler=second_turn))
    env = {**os.environ, "TL_TEST_KEY": "sk-order", "NO_COLOR": "1"}
    proc = subprocess.Popen([sys.executable, "-c", HOLD_RECEIPTS, "run", str(plan), "--format", "jsonl"],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    asked = arrived.wait(60)
    proc.kill()
    assert asked, f"the run never asked for its second turn: {proc.communicate()}"
    proc.communicate()
    db = sqlite3.connect(tmp_path / ".toolloop" / "state.db")
    try:  # the call's answer and decision are journaled; its receipt and the answer after it are not
        assert db.execute("SELECT count(*) FROM receipts").fetchone()[0] == 0
        assert db.execute("SELECT n FROM model_answers").fetchall() == [(1,)]
        run_id = db.execute("SELECT run_id FROM runs").fetchone()[0]
    finally:
        db.close()
    assert read_log(tmp_path / "log") == ["w"]

    asked_before = len(model_server.requests)
    model_server.script(FINAL, '{"answer": 1}')
    done = cli("resume", run_id, "--format", "jsonl", env={"TL_TEST_KEY": "sk-order"})
    assert done.returncode == 0, done.stderr.decode()
    records = jsonl(done.stdout)
    receipts = [r["status"] for r in records if r["type"] == "receipt"]
    if effect == "read":  # a read runs again, its new receipt the one the model is told
        assert receipts == ["ok"] and read_log(tmp_path / "log") == ["w", "w"]
    else:  # a write whose start was committed may have happened: settled interrupted, not run again
        assert receipts == ["interrupted"] and read_log(tmp_path / "log") == ["w"]
    assert len(model_server.requests) - asked_before == 2  # the first answer reused, the second asked again
    assert records[-1]["outcome"] == "final"


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
    # the answer and the decision it holds commit together (the call's gate waits for both); the
    # call's receipt commits on its own or, as no request waits for it, with the next turn's answer
    commits: list[tuple[list, list, list]] = []
    put = Store.put_records

    def noted(self, receipts, others=(), answers=()):
        commits.append(([r["seq"] for r in receipts], [o[0]["type"] for o in others], [a["n"] for a in answers]))
        put(self, receipts, others, answers)

    monkeypatch.setattr(Store, "put_records", noted)
    summary = run(tmp_path, ScriptedProvider([CALL_ECHO, '{"action": "call", "tool": "echo", "args": {"x": 2},'
                                                         ' "reason": "again"}', FINAL, ANSWER]))
    assert summary["outcome"] == "final"
    # in queue order, each answer with its decision, each receipt after the decision of its call
    assert [x for c in commits for x in [*(("receipt", s) for s in c[0]), *(("answer", n) for n in c[2]),
                                          *((t, None) for t in c[1])]][:6] == [
        ("answer", 1), ("decision", None), ("receipt", 0), ("answer", 2), ("decision", None), ("receipt", 1)]
    assert all(("decision" in c[1]) == bool(c[2]) for c in commits[:4] if c[1] or c[2]), commits
    store = Store(tmp_path / "state")
    try:  # every answer, in order, and the run's hash chain over them and the records holds
        assert [a["n"] for a in store.model_answers_of(summary["run_id"])] == [1, 2, 3, 4]
        verdict = verify_run(store, store.get_run(summary["run_id"]))
    finally:
        store.close()
    assert verdict is not None and verdict.ok, verdict
