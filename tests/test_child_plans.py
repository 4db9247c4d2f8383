"""Agents as tools: a registry tool `plan: FILE` runs a routed plan as a child run, from
sequential, parallel and routed parents, under one budget ledger (real HTTP on 127.0.0.1)."""

from __future__ import annotations

import json


from conftest import APP, jsonl, write
from modelserver import Reply
from regkit import openai_profile

KEY = "sk-child-canary"
FINAL = '{"action": "final", "reason": "enough"}'


def call(tool: str, args: dict) -> str:
    return json.dumps({"action": "call", "tool": tool, "args": args, "reason": "r"})


def setup(tmp_path, server, *, max_depth: int | None = None, child_budget: str = "{max_iterations: 4, max_tokens: 100000, max_tool_calls: 3, timeout_s: 60}",
          child_tools: str = "[echo]", extra_tools: str = ""):
    profile = openai_profile(server.openai_base)
    write(tmp_path / "research.yml", f"""
        version: 1
        registry: reg.yml
        subagent: t
        mode: routed
        goal: Research one question.
        inputs: {{type: object, required: [question], properties: {{question: {{type: string}}}}}}
        allowed_tools: {child_tools}
        router_profile: {profile}
        final_profile: {profile}
        budget: {child_budget}
        final_schema: {{type: object, required: [answer], properties: {{answer: {{type: string}}}}}}
    """)
    depth = f"max_depth: {max_depth}, " if max_depth is not None else ""
    write(tmp_path / "reg.yml", f"""
        version: 1
        app_root: {APP}
        subagents:
          t:
            runner_defaults: {{{depth}tool_timeout_s: 60}}
            tools:
              echo:
                callable: testapp.tools:echo
                description: Returns its arguments.
                input_schema: {{type: object}}
                output_schema: {{}}
              research:
                plan: research.yml
                description: Research one question and return an answer.
              {extra_tools}
    """)
    return profile


def plan(tmp_path, body: dict, name: str = "plan.yml"):
    return write(tmp_path / name, json.dumps({"version": 1, "registry": "reg.yml", "subagent": "t", **body}))


def test_a_child_plan_called_from_a_sequential_plan(tmp_path, model_server, cli):
    setup(tmp_path, model_server)
    p = plan(tmp_path, {"mode": "sequential", "calls": [{"tool": "research", "args": {"question": "why?"}}]})
    model_server.script(call("echo", {"q": 1}), FINAL, '{"answer": "because"}')
    proc = cli("run", str(p), "--format", "jsonl", env={"TL_TEST_KEY": KEY})
    assert proc.returncode == 0, proc.stderr.decode()
    records = jsonl(proc.stdout)
    assert [r["type"] for r in records] == ["receipt", "summary"]  # the child's records are not printed
    receipt = records[0]
    assert receipt["status"] == "ok" and receipt["result"] == {"answer": "because"}
    child = receipt["child_run_id"]
    assert child and child != records[-1]["run_id"]
    shown = jsonl(cli("runs", "show", child, "--format", "jsonl").stdout)
    assert [r["type"] for r in shown] == ["decision", "receipt", "decision", "summary"]
    assert shown[-1]["parent_run_id"] == records[-1]["run_id"]
    assert shown[-1]["parent_receipt_id"] == receipt["receipt_id"]
    assert "why?" in json.dumps(model_server.requests[0].json["messages"])  # the arguments are its context


def test_one_routed_agent_per_lane_and_failures_carry_the_outcome(tmp_path, model_server, cli):
    setup(tmp_path, model_server)
    p = plan(tmp_path, {"mode": "parallel", "max_concurrency": 1, "lanes": [
        {"item_key": "a", "calls": [{"tool": "research", "args": {"question": "a"}}]},
        {"item_key": "b", "calls": [{"tool": "research", "args": {"question": "b"}}]}]})
    model_server.script(FINAL, '{"answer": "A"}', '{"action": "abort", "reason": "no"}')
    proc = cli("run", str(p), "--format", "jsonl", env={"TL_TEST_KEY": KEY})
    receipts = jsonl(proc.stdout)[:-1]
    assert [(r["item_key"], r["status"]) for r in receipts] == [("a", "ok"), ("b", "error")]
    assert receipts[1]["error"]["kind"] == "aborted" and receipts[1]["child_run_id"]
    assert proc.returncode == 1


def test_a_child_spends_its_parents_budget(tmp_path, model_server, cli):
    profile = setup(tmp_path, model_server)
    p = write(tmp_path / "parent.yml", f"""
        version: 1
        registry: reg.yml
        subagent: t
        mode: routed
        goal: Ask the researcher.
        allowed_tools: [research]
        router_profile: {profile}
        final_profile: {profile}
        budget: {{max_iterations: 5, max_tokens: 1000, max_tool_calls: 3, timeout_s: 60}}
        final_schema: {{type: object}}
    """)
    model_server.script(Reply(call("research", {"question": "q"}), 100, 10),  # parent turn 1
                        Reply(FINAL, 400, 10), Reply('{"answer": "x"}', 500, 10))  # the child spends 920
    proc = cli("run", str(p), "--format", "jsonl", env={"TL_TEST_KEY": KEY})
    summary = jsonl(proc.stdout)[-1]
    assert summary["outcome"] == "budget_exceeded", summary  # no further parent request
    assert summary["loop"]["by_part"]["children"]["tokens"] == 920
    assert summary["loop"]["tokens"] == {"input": 1000, "output": 30}
    assert model_server.pending == 0 and len(model_server.requests) == 3
    # the child's requests were capped to what the parent had left
    assert model_server.requests[2].json["max_tokens"] <= 1000 - 110 - 410


def test_nesting_past_max_depth_is_refused_at_admission(tmp_path, model_server, cli):
    setup(tmp_path, model_server, max_depth=0)
    p = plan(tmp_path, {"mode": "sequential", "calls": [{"tool": "research", "args": {"question": "q"}}]})
    proc = cli("run", str(p), env={"TL_TEST_KEY": KEY})
    assert proc.returncode == 3 and b"TL422" in proc.stderr and b"max_depth" in proc.stderr
    assert model_server.requests == []


def test_a_child_paused_for_approval_pauses_its_parent_and_resumes_with_it(tmp_path, model_server, cli):
    gated = """gated:
                callable: testapp.tools:marker
                description: Writes a file; a person approves.
                effect: write
                approval: required
                input_schema: {type: object, required: [path], properties: {path: {type: string}}}
                output_schema: {}"""
    setup(tmp_path, model_server, child_tools="[gated]", extra_tools=gated)
    target = str(tmp_path / "written.txt")
    p = plan(tmp_path, {"mode": "sequential", "calls": [{"tool": "research", "args": {"question": "q"}}]})
    model_server.script(call("gated", {"path": target}))
    paused = cli("run", str(p), "--format", "jsonl", env={"TL_TEST_KEY": KEY})
    assert paused.returncode == 4, paused.stderr.decode()
    assert jsonl(paused.stdout)[-1]["status"] == "stopped"
    child = paused.stderr.decode().split("runs child run ")[1].split(",")[0]
    assert cli("approve", child, "1", "--approve").returncode == 0
    model_server.script(FINAL, '{"answer": "done"}')
    parent_id = jsonl(paused.stdout)[-1]["run_id"]
    done = cli("resume", parent_id, "--format", "jsonl", env={"TL_TEST_KEY": KEY})
    assert done.returncode == 0, done.stderr.decode()
    receipt = jsonl(done.stdout)[0]
    assert receipt["status"] == "ok" and receipt["child_run_id"] == child and receipt["result"] == {"answer": "done"}
    assert open(target).read() == "ran\n"
