"""Convergence rules (same_error, ping_pong, no_progress) with a rule's own steer_message: each rule's
condition on the supervisor's state, and each in a real routed run in process, on the same
supervisor path as the other rules (a supervisor record per hit; abort, pause or steer)."""

from __future__ import annotations

import json

import pytest

from conftest import APP, write
from toolloop_cli.engine.run import RunOptions, execute_plan
from toolloop_cli.errors import ConfigError
from toolloop_cli.plan.admit import admit_plan
from toolloop_cli.providers.scripted import ScriptedProvider
from toolloop_cli.router.convergence import Convergence
from toolloop_cli.router.supervisor import Rule, SupervisorState, check_rules
from toolloop_cli.store import Store

FINAL = '{"action": "final", "reason": "enough"}'
ANSWER = '{"answer": 1}'


def rule(when: str, action: str = "abort", **kw) -> Rule:
    return Rule(0, when, action, **kw)  # type: ignore[arg-type]


def state(conv: Convergence, iteration: int = 1) -> SupervisorState:
    return SupervisorState(iteration, convergence=conv.seen())


def error(kind: str = "error", message: str = "RuntimeError: down") -> dict:
    return {"kind": kind, "message": message}


# -- the conditions ---------------------------------------------------------------------------


def test_same_error_counts_failures_of_one_tool_with_the_same_kind_and_message_not_in_a_row():
    conv = Convergence()
    r = (rule("same_error", count=3),)
    conv.settled("fetch", "error", None, error())
    conv.settled("fetch", "ok", {"a": 1}, None)  # an ok receipt between them does not reset the count
    conv.settled("fetch", "timeout", None, error())
    conv.settled("fetch", "error", None, error(message="RuntimeError: other"))
    conv.settled("other", "error", None, error())
    conv.settled("fetch", "denied", None, error())  # neither error nor timeout: not counted
    assert check_rules(r, state(conv)) == []
    conv.settled("fetch", "error", None, error())
    (hit,) = check_rules(r, state(conv))
    assert hit.reason == "'fetch' failed 3 times with the same error (error: RuntimeError: down) (limit 3)"
    assert check_rules((rule("same_error", count=3, tool="other"),), state(conv)) == []


def test_ping_pong_fires_when_the_last_proposals_alternate_between_exactly_two_calls():
    conv = Convergence()
    r = (rule("ping_pong", count=2),)
    for pair in (("a", "1"), ("b", "1"), ("a", "1")):
        conv.proposed(*pair)
    assert check_rules(r, state(conv)) == []  # three proposals: not yet two round trips
    conv.proposed("b", "1")
    (hit,) = check_rules(r, state(conv))
    assert hit.reason == "the last 4 proposed calls alternate between two calls ('a' and 'b') (limit 2 round trips)"
    conv.proposed("b", "1")  # the same call twice in a row breaks the alternation
    assert check_rules(r, state(conv)) == []
    three = Convergence()
    for pair in (("a", "1"), ("b", "1"), ("a", "2"), ("b", "1")):  # the same tool with other arguments
        three.proposed(*pair)
    assert check_rules(r, state(three)) == []


def test_no_progress_counts_ok_results_in_a_row_that_are_empty_or_seen_before():
    conv = Convergence()
    r = (rule("no_progress", count=3),)
    conv.settled("t", "ok", {"items": [1]}, None)  # new: not in the row
    conv.settled("t", "ok", {"items": [1]}, None)  # seen before
    conv.settled("t", "ok", [], None)  # empty
    assert check_rules(r, state(conv)) == []
    conv.settled("t", "error", None, error())  # a receipt that is not ok breaks the row
    for value in (None, "", {}):
        conv.settled("t", "ok", value, None)
    (hit,) = check_rules(r, state(conv))
    assert hit.reason == "3 ok results in a row were empty or repeated an earlier result (limit 3)"
    conv.settled("t", "ok", {"items": [2]}, None)  # a new result breaks it too
    assert check_rules(r, state(conv)) == []
    assert Convergence().seen().no_progress_row == 0
    zero = Convergence()
    zero.settled("t", "ok", 0, None)  # 0 and false are results, not empty ones
    zero.settled("t", "ok", False, None)
    assert zero.seen().no_progress_row == 0


# -- in a routed run --------------------------------------------------------------------------


def plan_file(tmp_path, supervisor: str) -> str:
    write(tmp_path / "reg.yml", f"""
        version: 1
        app_root: {APP}
        subagents:
          t:
            runner_defaults: {{tool_timeout_s: 10}}
            tools:
              fetch:
                callable: testapp.tools:unavailable
                description: Fails the same way whatever it is given.
                input_schema: {{type: object}}
                output_schema: {{}}
              search:
                callable: testapp.tools:nothing
                description: Finds nothing.
                input_schema: {{type: object}}
                output_schema: {{}}
              list:
                callable: testapp.tools:same
                description: The same list every time.
                input_schema: {{type: object}}
                output_schema: {{}}
    """)
    return str(write(tmp_path / "plan.yml", f"""
        version: 1
        registry: reg.yml
        subagent: t
        mode: routed
        goal: Find x.
        router_profile: {{provider: openai, model: m}}
        final_profile: {{provider: openai, model: m}}
        budget: {{max_iterations: 12, max_tokens: 100000, max_tool_calls: 12, timeout_s: 30}}
        final_schema: {{type: object, required: [answer]}}
        supervisor:
        {supervisor}
    """))


def call(tool: str, **args: object) -> str:
    return json.dumps({"action": "call", "tool": tool, "args": args, "reason": "try"})


def run(tmp_path, path: str, *replies: str) -> tuple[list[dict], dict, ScriptedProvider]:
    provider = ScriptedProvider(list(replies))
    store = Store(tmp_path / "state")
    got: list = []
    try:
        result = execute_plan(admit_plan(path), store, got.append,
                              RunOptions(handle_signals=False, providers={"openai": provider}))
    finally:
        store.close()
    return got, result.summary, provider


def supervisor_records(records: list[dict]) -> list[tuple]:
    return [(r["iteration"], r["rule"], r["action"]) for r in records if r["type"] == "supervisor"]


def test_same_error_steers_with_its_own_message_which_the_model_sees_next_turn(tmp_path):
    path = plan_file(tmp_path, """  rules:
            - {when: same_error, count: 2, steer_message: "fetch keeps failing the same way; answer without it."}
          on_violation: steer""")
    records, summary, provider = run(tmp_path, path, call("fetch", a=1), call("fetch", a=2), FINAL, ANSWER)
    assert summary["outcome"] == "final"
    assert supervisor_records(records) == [(2, "same_error", "steer")]
    (sup,) = [r for r in records if r["type"] == "supervisor"]
    assert sup["reason"] == "'fetch' failed 2 times with the same error (RuntimeError: service unavailable) (limit 2)"
    third_turn = json.dumps(list(provider.requests[2].messages))
    assert "fetch keeps failing the same way; answer without it." in third_turn
    assert "fetch keeps failing" not in json.dumps(list(provider.requests[1].messages))


def test_ping_pong_aborts_the_run_counting_rejected_duplicates(tmp_path):
    path = plan_file(tmp_path, """  rules:
            - {when: ping_pong, count: 2}
          on_violation: abort""")
    # the third and fourth proposals repeat calls that already ran: rejected as duplicates, still counted
    records, summary, _ = run(tmp_path, path, call("search", q="a"), call("list", q="b"), call("search", q="a"),
                              call("list", q="b"))
    assert summary["outcome"] == "aborted" and summary["status"] == "failed"
    assert [r.get("rejected") for r in records if r["type"] == "decision"] == [None, None, "duplicate", "duplicate"]
    assert supervisor_records(records) == [(4, "ping_pong", "abort")]
    assert summary["error"]["message"].startswith("the supervisor rule ping_pong aborted the run")


def test_no_progress_pauses_the_run_where_a_failed_call_broke_the_row(tmp_path):
    path = plan_file(tmp_path, """  rules:
            - {when: no_progress, count: 2}
          on_violation: pause""")
    records, summary, _ = run(tmp_path, path, call("search", q="a"), call("fetch"), call("search", q="b"),
                              call("list"), call("list", q="again"), call("search", q="c"))
    assert summary["outcome"] == "paused" and summary["status"] == "stopped"
    assert summary["paused_by"]["kind"] == "supervisor"
    # search's {} is empty (1), fetch fails (the row is broken), search again (1), list is new (0), list
    # repeats it (1), search finds nothing again (2): the rule fires at turn 6
    assert supervisor_records(records) == [(6, "no_progress", "pause")]


def test_a_rule_without_its_own_steer_message_still_needs_the_supervisors(tmp_path):
    own = plan_file(tmp_path, """  rules:
            - {when: no_progress, count: 2, steer_message: "Stop."}
            - {when: ping_pong, count: 3, steer_message: "Pick one."}
          on_violation: steer""")
    spec = admit_plan(own).routed
    assert [r.steer_message for r in spec.supervisor.rules] == ["Stop.", "Pick one."]
    missing = plan_file(tmp_path, """  rules:
            - {when: no_progress, count: 2, steer_message: "Stop."}
            - {when: same_error, count: 3}
          on_violation: steer""")
    with pytest.raises(ConfigError) as refused:
        admit_plan(missing)
    assert [p.message for p in refused.value.problems] == ["on_violation: steer needs a steer_message"]
