"""Budgets that pause (``budget.on_exceeded: pause``) and ``resume --raise``: each budget that runs
out pauses the run naming it, a raise lets it go on from the same turn with nothing asked again,
and what a raise may not be. Runs in process through ``Launch`` with a scripted provider."""

from __future__ import annotations

import json

import pytest
import trio
import trio.testing

from conftest import APP, write
from regkit import RecordSink as Sink, openai_profile, registry_yaml
from toolloop_cli.engine.launch import Launch, RunOptions
from toolloop_cli.errors import UsageError
from toolloop_cli.providers import ModelReply
from toolloop_cli.providers.scripted import ScriptedProvider

FINAL = '{"action": "final", "reason": "enough"}'
ANSWER = '{"answer": 1}'
PRICE = ", price: {input_per_mtok: 1000000, output_per_mtok: 0}"  # a dollar per input token


def call(tool: str, **args: object) -> str:
    return json.dumps({"action": "call", "tool": tool, "args": args, "reason": "look"})


def plan_file(tmp_path, budget: str, *, price: str = "", name: str = "plan.yml", extra: str = "",
              tools: str = "[echo, log_run]") -> str:
    return str(write(tmp_path / name, f"""
        version: 1
        registry: {APP / 'registry.yml'}
        subagent: t
        mode: routed
        goal: Find x.
        allowed_tools: {tools}
        router_profile: {{provider: openai, model: m{price}}}
        final_profile: {{provider: openai, model: m{price}}}
        budget: {budget}
        final_schema: {{type: object, required: [answer]}}
        {extra}
    """))



def start(tmp_path, path: str, provider: ScriptedProvider, **hooks) -> tuple[list[dict], dict]:
    launch = Launch(tmp_path / "state")
    prepared = launch.admit(path, RunOptions())
    sink = Sink()
    result = launch.start(prepared, sink, handle_signals=False, providers={"openai": provider}, **hooks)
    return sink.got, result.summary


def resume(tmp_path, run_id: str, provider: ScriptedProvider, *, by: str = "ops", hooks: dict | None = None,
           **raises: float):
    launch = Launch(tmp_path / "state")
    prepared = launch.resume(run_id, raises=raises, by=by)
    sink = Sink()
    result = launch.start(prepared, sink, handle_signals=False, providers={"openai": provider}, **(hooks or {}))
    return sink.got, result.summary


def scripted(*replies) -> ScriptedProvider:
    return ScriptedProvider([ModelReply(r[0], r[1], r[2], "m") if isinstance(r, tuple) else r for r in replies])


def sup(records: list[dict]) -> list[tuple]:
    return [(r["iteration"], r["rule"], r["action"], r["reason"]) for r in records if r["type"] == "supervisor"]


def test_max_iterations_pauses_then_a_raise_goes_on_from_the_same_turn(tmp_path):
    path = plan_file(tmp_path, "{max_iterations: 2, max_tokens: 100000, max_tool_calls: 5, timeout_s: 30,"
                               " on_exceeded: pause}")
    first = scripted(call("echo", a=1), call("echo", a=2))
    records, summary = start(tmp_path, path, first)
    assert summary["outcome"] == "paused" and summary["status"] == "stopped" and summary["error"] is None
    assert summary["paused_by"]["kind"] == "budget" and summary["paused_by"]["budget"] == "max_iterations"
    assert summary["paused_by"]["limits"]["max_iterations"] == 2 and summary["paused_by"]["used"]["max_iterations"] == 2
    assert sup(records) == [(2, "budget", "pause", "max_iterations 2 ran out: the router took its 2 turns")]
    rid = summary["run_id"]

    second = scripted(FINAL, ANSWER)
    records, summary = resume(tmp_path, rid, second, max_iterations=4)
    assert summary["outcome"] == "final" and summary["final"] == {"answer": 1}
    assert len(second.requests) == 2  # the two recorded turns were not asked again
    assert sup(records) == [(2, "budget", "pause", "max_iterations 2 ran out: the router took its 2 turns"),
                            (2, "operator", "raise", "max_iterations 2 -> 4")]
    raised = [r for r in records if r["type"] == "supervisor" and r["action"] == "raise"][0]
    assert raised["by"] == "ops"
    assert [r["type"] for r in records] == ["decision", "receipt", "decision", "receipt", "supervisor", "supervisor",
                                            "decision", "summary"]
    assert summary["paused_by"] is None and summary["loop"]["iterations"] == 3


def test_the_reply_that_crossed_max_tokens_is_kept_and_acted_on_after_the_raise(tmp_path):
    path = plan_file(tmp_path, "{max_iterations: 6, max_tokens: 100, max_tool_calls: 5, timeout_s: 30,"
                               " on_exceeded: pause}")
    first = scripted((call("echo", a=1), 60, 10), (call("echo", a=2), 60, 10))
    records, summary = start(tmp_path, path, first)
    assert summary["outcome"] == "paused" and summary["paused_by"]["budget"] == "max_tokens"
    # the second reply crossed the budget: no decision for it yet, and its call did not run
    assert [r["type"] for r in records] == ["decision", "receipt", "supervisor", "summary"]
    assert sup(records)[0][:3] == (2, "budget", "pause")
    assert "max_tokens ran out: the run used 140 tokens of its max_tokens 100" == sup(records)[0][3]
    rid = summary["run_id"]
    with pytest.raises(UsageError) as bare:
        resume(tmp_path, rid, scripted())
    assert str(bare.value) == (f"run {rid} is paused because the budget max_tokens of {rid} ran out (used 140 of 100);"
                               f" raise it to go on: toolloop resume {rid} --raise max_tokens=VALUE (VALUE above 140)")
    with pytest.raises(UsageError, match="not above max_tokens as it stands"):
        resume(tmp_path, rid, scripted(), max_tokens=120)  # above the limit, not above what was used
    second = scripted(FINAL, ANSWER)
    records, summary = resume(tmp_path, rid, second, max_tokens=1000)
    assert summary["outcome"] == "final"
    decisions = [r for r in records if r["type"] == "decision"]
    assert [(d["iteration"], d["args"]) for d in decisions[:2]] == [(1, {"a": 1}), (2, {"a": 2})]
    receipts = [r for r in records if r["type"] == "receipt"]
    assert [r["result"] for r in receipts] == [{"received": {"a": 1}}, {"received": {"a": 2}}]
    assert len(second.requests) == 2  # the crossing reply was not asked again


def test_max_cost_usd_pauses_and_a_cost_raise_is_recorded_with_its_values(tmp_path):
    path = plan_file(tmp_path, "{max_iterations: 6, max_tokens: 100000, max_tool_calls: 5, timeout_s: 30,"
                               " max_cost_usd: 1.0, on_exceeded: pause}", price=PRICE)
    records, summary = start(tmp_path, path, scripted((call("echo", a=1), 2, 0)))
    assert summary["paused_by"]["budget"] == "max_cost_usd" and summary["outcome"] == "paused"
    rid = summary["run_id"]
    records, summary = resume(tmp_path, rid, scripted((FINAL, 0, 0), (ANSWER, 0, 0)), max_cost_usd=2.5)
    assert summary["outcome"] == "final"
    assert ("operator", "raise", "max_cost_usd 1.0 -> 2.5") in [s[1:] for s in sup(records)]


def test_max_tool_calls_keeps_the_proposal_and_checks_it_again_on_resume(tmp_path):
    path = plan_file(tmp_path, "{max_iterations: 6, max_tokens: 100000, max_tool_calls: 1, timeout_s: 30,"
                               " on_exceeded: pause}")
    records, summary = start(tmp_path, path, scripted(call("echo", a=1), call("echo", a=2)))
    assert summary["paused_by"]["budget"] == "max_tool_calls"
    # the proposal that found no call left is not rejected: it has no decision record yet
    assert [(r["type"], r.get("rejected")) for r in records] == [("decision", None), ("receipt", None),
                                                                ("supervisor", None), ("summary", None)]
    records, summary = resume(tmp_path, summary["run_id"], scripted(FINAL, ANSWER), max_tool_calls=2)
    decisions = [r for r in records if r["type"] == "decision"]
    assert [(d["iteration"], d["rejected"]) for d in decisions] == [(1, None), (2, None), (3, None)]
    assert [r["status"] for r in records if r["type"] == "receipt"] == ["ok", "ok"]
    assert summary["outcome"] == "final" and summary["loop"]["tool_calls"] == 2


def test_the_subagents_max_calls_cap_still_rejects_under_pause(tmp_path):
    path = str(write(tmp_path / "plan.yml", f"""
        version: 1
        registry: {APP / 'registry.yml'}
        subagent: restricted
        mode: routed
        goal: Find x.
        router_profile: {{provider: openai, model: m}}
        final_profile: {{provider: openai, model: m}}
        budget: {{max_iterations: 6, max_tokens: 100000, max_tool_calls: 9, timeout_s: 30, on_exceeded: pause}}
        final_schema: {{type: object, required: [answer]}}
    """))
    replies = [call("echo", a=i) for i in range(4)] + [FINAL, ANSWER]
    records, summary = start(tmp_path, path, scripted(*replies))
    assert summary["outcome"] == "final"  # runner_defaults.max_calls 3 rejects the fourth, as without pause
    assert [r.get("rejected") for r in records if r["type"] == "decision"][3] == "over_budget"


def test_raise_refusals(tmp_path):
    path = plan_file(tmp_path, "{max_iterations: 1, max_tokens: 100000, max_tool_calls: 5, timeout_s: 30,"
                               " on_exceeded: pause}")
    rid = start(tmp_path, path, scripted(call("echo", a=1)))[1]["run_id"]
    with pytest.raises(UsageError, match="not a budget; raise one of max_iterations, max_tokens"):
        resume(tmp_path, rid, scripted(), max_iterations=3, max_turns=3)
    with pytest.raises(UsageError, match=r"--raise max_iterations=1: not above max_iterations as it stands for"):
        resume(tmp_path, rid, scripted(), max_iterations=1)
    with pytest.raises(UsageError, match="the value must be a finite number"):
        resume(tmp_path, rid, scripted(), max_iterations=float("inf"))
    with pytest.raises(UsageError, match="max_iterations counts whole units"):
        resume(tmp_path, rid, scripted(), max_iterations=2.5)
    with pytest.raises(UsageError, match="has no max_cost_usd budget to raise"):
        resume(tmp_path, rid, scripted(), max_iterations=3, max_cost_usd=3)
    # nothing was journaled by a refused raise: the run still goes on with a good one
    records, summary = resume(tmp_path, rid, scripted(FINAL, ANSWER), max_iterations=2)
    assert summary["outcome"] == "final"
    ended = plan_file(tmp_path, "{max_iterations: 1, max_tokens: 100000, max_tool_calls: 5, timeout_s: 30}",
                      name="ended.yml")
    other = start(tmp_path, ended, scripted(call("echo", a=1)))[1]
    assert other["outcome"] == "max_iterations" and other["paused_by"] is None
    with pytest.raises(UsageError, match=f"--raise: run {other['run_id']} is not paused by a budget"):
        resume(tmp_path, other["run_id"], scripted(), max_iterations=3)


def test_the_command_line_pauses_with_exit_4_refuses_a_bare_resume_and_resumes_with_raise(tmp_path, model_server,
                                                                                          cli):
    base = model_server.openai_base
    profile = openai_profile(base)
    plan = write(tmp_path / "cli.yml", f"""
        version: 1
        registry: {APP / 'registry.yml'}
        subagent: t
        mode: routed
        goal: Find x.
        allowed_tools: [echo]
        router_profile: {profile}
        final_profile: {profile}
        budget: {{max_iterations: 1, max_tokens: 100000, max_tool_calls: 5, timeout_s: 30, on_exceeded: pause}}
        final_schema: {{type: object, required: [answer]}}
    """)
    env = {"TL_TEST_KEY": "sk-pause-canary"}
    model_server.script(call("echo", a=1))
    paused = cli("run", str(plan), "--format", "jsonl", env=env)
    assert paused.returncode == 4, paused.stderr.decode()
    summary = json.loads(paused.stdout.decode().splitlines()[-1])
    rid = summary["run_id"]
    assert summary["status"] == "stopped" and summary["paused_by"]["budget"] == "max_iterations"
    assert (f"paused: the budget max_iterations ran out (used 1); resume with: toolloop resume {rid}"
            " --raise max_iterations=VALUE") in paused.stderr.decode()
    bare = cli("resume", rid, "--format", "jsonl", env=env)
    assert bare.returncode == 2 and bare.stdout == b""
    assert (f"run {rid} is paused because the budget max_iterations of {rid} ran out (used 1 of 1); raise it to go"
            f" on: toolloop resume {rid} --raise max_iterations=VALUE (VALUE above 1)") in bare.stderr.decode()
    assert cli("resume", rid, "--raise", "max_iterations", env=env).returncode == 2
    model_server.script(FINAL, ANSWER)
    done = cli("resume", rid, "--raise", "max_iterations=3", "--format", "jsonl", env=env)
    assert done.returncode == 0, done.stderr.decode()
    records = [json.loads(line) for line in done.stdout.decode().splitlines()]
    raised = [r for r in records if r["type"] == "supervisor" and r["action"] == "raise"]
    assert [(r["reason"], bool(r["by"])) for r in raised] == [("max_iterations 1 -> 3", True)]
    assert cli("runs", "verify", rid).returncode == 0  # the raise is a link of the run's hash chain
    again = cli("resume", rid, "--raise", "max_iterations=9", env=env)
    assert again.returncode == 2 and b"is not paused by a budget" in again.stderr
    written = b"".join(p.read_bytes() for p in (tmp_path / ".toolloop").glob("state.db*"))
    assert b"sk-pause-canary" not in written + paused.stdout + paused.stderr + done.stdout + done.stderr


def test_timeout_s_pauses_cancelling_the_running_call_and_a_raise_runs_it_again(tmp_path):
    path = plan_file(tmp_path, "{max_iterations: 6, max_tokens: 100000, max_tool_calls: 5, timeout_s: 5,"
                               " on_exceeded: pause}", tools="[hold]")
    clock = {"clock": trio.testing.MockClock(autojump_threshold=0)}
    records, summary = start(tmp_path, path, scripted(call("hold", key="k", seconds=8)), **clock)
    assert summary["outcome"] == "paused" and summary["error"] is None
    assert summary["paused_by"]["budget"] == "timeout_s"
    receipts = [r for r in records if r["type"] == "receipt"]
    assert [r["status"] for r in receipts] == ["cancelled"]
    ((it, rule, action, reason),) = sup(records)
    assert (it, rule, action) == (1, "budget", "pause") and reason.startswith("timeout_s 5 s ran out: the loop ran ")
    clock = {"clock": trio.testing.MockClock(autojump_threshold=0)}
    records, summary = resume(tmp_path, summary["run_id"], scripted(FINAL, ANSWER), hooks=clock, timeout_s=30)
    assert summary["outcome"] == "final", summary
    assert [r["status"] for r in records if r["type"] == "receipt"] == ["ok"]  # the call ran again, in time
    assert [s[1:3] for s in sup(records)] == [("budget", "pause"), ("operator", "raise")]
    assert sup(records)[1][3] == "timeout_s 5.0 -> 30.0"


def test_time_spent_paused_is_not_charged_to_timeout_s():
    from toolloop_cli.engine.recording import seconds_used

    # an hour passed between the run's pause and its resume: only the loop's own time counts
    receipts = [{"duration_ms": 1500.0, "started_at": "2026-01-01T10:00:00.000000Z"},
                {"duration_ms": 500.0, "started_at": "2026-01-01T11:00:00.000000Z"}]
    answers = [{"duration_ms": 1000.0}, {"duration_ms": 250.0}]
    assert seconds_used(receipts, answers) == pytest.approx(3.25)


def family(tmp_path, parent_budget: str, child_budget: str) -> str:
    write(tmp_path / "reg.yml", registry_yaml("echo", "research", tool_timeout_s=60, max_depth=1))
    write(tmp_path / "research.yml", f"""
        version: 1
        registry: reg.yml
        subagent: t
        mode: routed
        goal: Research one question.
        allowed_tools: [echo]
        router_profile: {{provider: openai, model: m}}
        final_profile: {{provider: openai, model: m}}
        budget: {child_budget}
        final_schema: {{type: object, required: [answer]}}
    """)
    return str(write(tmp_path / "parent.yml", f"""
        version: 1
        registry: reg.yml
        subagent: t
        mode: routed
        goal: Answer with research.
        allowed_tools: [research]
        router_profile: {{provider: openai, model: m}}
        final_profile: {{provider: openai, model: m}}
        budget: {parent_budget}
        final_schema: {{type: object, required: [answer]}}
    """))


def test_a_child_paused_by_its_budget_pauses_its_parent_and_one_raise_resumes_both(tmp_path):
    path = family(tmp_path, "{max_iterations: 6, max_tokens: 100000, max_tool_calls: 4, timeout_s: 60}",
                  "{max_iterations: 1, max_tokens: 100000, max_tool_calls: 4, timeout_s: 60, on_exceeded: pause}")
    # one provider answers both runs, in the order they ask: parent turn 1, child turn 1
    records, summary = start(tmp_path, path, scripted(call("research", q="why?"), call("echo", a=1)))
    assert summary["outcome"] == "paused" and summary["status"] == "stopped"
    paused_by = summary["paused_by"]
    assert paused_by["kind"] == "child" and paused_by["child"]["kind"] == "budget"
    assert paused_by["child"]["budget"] == "max_iterations"
    child = paused_by["child_run_id"]
    assert [r["type"] for r in records] == ["decision", "summary"]  # the call has no receipt yet
    parent = summary["run_id"]
    with pytest.raises(UsageError, match=f"budget max_iterations of child run {child} ran out"):
        resume(tmp_path, parent, scripted())
    # 8 is above the parent's max_iterations (6) too: raised there as well
    provider = scripted(FINAL, '{"answer": "because"}', FINAL, ANSWER)
    records, summary = resume(tmp_path, parent, provider, max_iterations=8)
    assert summary["outcome"] == "final" and summary["final"] == {"answer": 1}
    assert len(provider.requests) == 4  # nothing recorded was asked again
    receipts = [r for r in records if r["type"] == "receipt"]
    assert [(r["tool"], r["status"], r["result"]) for r in receipts] == [("research", "ok", {"answer": "because"})]
    assert ("operator", "raise", "max_iterations 6 -> 8") in [s[1:] for s in sup(records)]
    store = Launch(tmp_path / "state").open(create=False)
    try:
        child_records = [rec for _n, rec in store.records_of(child)]
        child_run = store.get_run(child)
    finally:
        store.close()
    assert child_run["status"] == "ok"
    assert [(r["rule"], r["action"], r["reason"]) for r in child_records if r["type"] == "supervisor"] == [
        ("budget", "pause", "max_iterations 1 ran out: the router took its 1 turns"),
        ("operator", "raise", "max_iterations 1 -> 8")]


def test_the_web_apis_resume_takes_raise_and_answers_422_where_resume_would_exit_2(tmp_path, model_server,
                                                                                   monkeypatch):
    import getpass

    from servekit import Served, events

    monkeypatch.chdir(tmp_path)  # the server's state folder: .toolloop here
    profile = openai_profile(model_server.openai_base)
    path = str(write(tmp_path / "api.yml", f"""
        version: 1
        registry: {APP / 'registry.yml'}
        subagent: t
        mode: routed
        goal: Find x.
        allowed_tools: [echo]
        router_profile: {profile}
        final_profile: {profile}
        budget: {{max_iterations: 1, max_tokens: 100000, max_tool_calls: 5, timeout_s: 30, on_exceeded: pause}}
        final_schema: {{type: object, required: [answer]}}
    """))
    launch = Launch(tmp_path / ".toolloop")
    prepared = launch.admit(path, RunOptions())
    rid = launch.start(prepared, Sink(), handle_signals=False,
                       providers={"openai": scripted(call("echo", a=1))}).summary["run_id"]
    served = Served(tmp_path, env={"TL_TEST_KEY": "sk-api-canary"})
    try:
        with served.client() as api:
            bare = api.post(f"/api/runs/{rid}/resume")
            assert bare.status_code == 422
            assert bare.json()["error"].endswith(f"toolloop resume {rid} --raise max_iterations=VALUE (VALUE above 1)")
            low = api.post(f"/api/runs/{rid}/resume", json={"raise": {"max_iterations": 1}})
            assert low.status_code == 422 and "not above max_iterations" in low.json()["error"]
            assert api.post(f"/api/runs/{rid}/resume", json={"raise": "max_iterations=3"}).status_code == 400
            model_server.script(FINAL, ANSWER)
            started = api.post(f"/api/runs/{rid}/resume", json={"raise": {"max_iterations": 3}})
            assert started.status_code == 202, started.text
            # 202 comes once the resume has reopened the run: following it ends with its new summary
            records = [r for _kind, r in events(api, rid)]
            assert records[-1]["status"] == "ok" and records[-1]["final"] == {"answer": 1}
        raised = [r for r in records if r["type"] == "supervisor" and r["action"] == "raise"]
        assert [(r["reason"], r["by"]) for r in raised] == [("max_iterations 1 -> 3", getpass.getuser())]
    finally:
        assert served.stop() == 0, "\n".join(served.log)


def test_a_child_that_spends_what_its_parent_had_left_pauses_a_parent_that_pauses(tmp_path):
    path = family(tmp_path, "{max_iterations: 6, max_tokens: 40, max_tool_calls: 4, timeout_s: 60, on_exceeded: pause}",
                  "{max_iterations: 6, max_tokens: 100000, max_tool_calls: 4, timeout_s: 60}")
    # each reply is charged 15 tokens: the parent's turn, then the child's two, which leave the parent none
    provider = scripted(call("research", q="why?"), call("echo", a=1), call("echo", a=2), call("echo", a=3))
    records, summary = start(tmp_path, path, provider)
    assert len(provider.requests) == 3  # no further model request once the parent's budget is spent
    receipts = [r for r in records if r["type"] == "receipt"]
    assert [(r["tool"], r["status"], r["error"]["kind"]) for r in receipts] == [("research", "error", "budget_exceeded")]
    assert summary["outcome"] == "paused" and summary["paused_by"]["kind"] == "budget"
    assert summary["paused_by"]["budget"] == "max_tokens" and summary["paused_by"]["used"]["max_tokens"] == 45


def test_the_table_of_a_run_paused_by_a_childs_budget_says_which_budget_to_raise():
    import io

    from rich.console import Console

    from toolloop_cli.render.views import routed_ending

    out = io.StringIO()
    summary = {"outcome": "paused", "route": None, "final": None, "error": None,
               "paused_by": {"kind": "child", "child_run_id": "c", "child": {"kind": "budget", "budget": "max_tokens"}}}
    routed_ending(Console(file=out, width=120, no_color=True), summary)
    assert "final answer: none yet (the run is paused; raise its max_tokens with resume --raise to go on)" in out.getvalue()
    out = io.StringIO()
    routed_ending(Console(file=out, width=120, no_color=True), {**summary, "paused_by": {"kind": "approval"}})
    assert "final answer: none yet (the run is paused; resume it to go on)" in out.getvalue()


def test_a_replay_of_a_raised_run_meets_each_raise_where_it_was_made(tmp_path):
    path = plan_file(tmp_path, "{max_iterations: 2, max_tokens: 100000, max_tool_calls: 5, timeout_s: 30,"
                               " on_exceeded: pause}")
    rid = start(tmp_path, path, scripted(call("echo", a=1), call("echo", a=2)))[1]["run_id"]
    resume(tmp_path, rid, scripted(FINAL, ANSWER), max_iterations=4)
    launch = Launch(tmp_path / "state")
    prepared = launch.replay(rid)
    sink = Sink()
    result = launch.start(prepared, sink, handle_signals=False)
    assert result.summary["outcome"] == "final"
    assert [s[1:] for s in sup(sink.got)][-1] == ("operator", "raise", "max_iterations 2 -> 4")
    assert launch.replay_differences(prepared, result) == []


def test_paused_by_says_approval_for_a_gated_call_and_is_null_for_a_run_that_did_not_pause(tmp_path):
    path = plan_file(tmp_path, "{max_iterations: 4, max_tokens: 100000, max_tool_calls: 5, timeout_s: 30,"
                               " on_exceeded: pause}", tools="[echo, pay]")
    summary = start(tmp_path, path, scripted(call("pay", amount=500)))[1]
    assert summary["outcome"] == "paused" and summary["paused_by"]["kind"] == "approval"
    assert summary["paused_by"]["limits"]["max_iterations"] == 4 and summary["paused_by"]["used"]["max_iterations"] == 1
    with pytest.raises(UsageError, match="is not paused by a budget"):
        resume(tmp_path, summary["run_id"], scripted(), max_iterations=9)
    done = start(tmp_path, path, scripted(FINAL, ANSWER))[1]
    assert done["outcome"] == "final" and done["paused_by"] is None
