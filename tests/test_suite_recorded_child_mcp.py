"""A recorded ``toolloop test`` case over a routed plan whose ``plan:`` tool runs a child plan
with a registry of its own, whose MCP tools take their schemas from their server: the export's
manifest keeps what the child run's servers offered too (from the child run's contract snapshot),
so a case under ``tools: recorded`` starts no server at all, while ``tools: live`` still starts
the child's. A real MCP server over stdio that counts its starts, a real model server on
127.0.0.1, the CLI in subprocesses."""

from __future__ import annotations

import json
import sys

from conftest import jsonl, write
from regkit import openai_profile, recorded_suite
from test_suite_recorded_mcp import FINAL, KEY, SERVER, one_call_suite, starts


def call(tool: str, args: dict) -> str:
    return json.dumps({"action": "call", "tool": tool, "args": args, "reason": "r"})


def setup(tmp_path, server):
    command = json.dumps([sys.executable, str(SERVER), "--count", str(tmp_path / "starts")])
    profile = openai_profile(server.openai_base)
    # the child's registry: its MCP tool takes description and schema from the server
    write(tmp_path / "kid" / "reg.yml", f"""
        version: 1
        subagents:
          k:
            runner_defaults: {{tool_timeout_s: 20}}
            tools:
              srv:
                mcp: {{command: {command}, allow: [echo]}}
                effect: read
    """)
    write(tmp_path / "kid" / "research.yml", f"""
        version: 1
        registry: reg.yml
        subagent: k
        mode: routed
        goal: Say it back.
        inputs: {{type: object, required: [question], properties: {{question: {{type: string}}}}}}
        allowed_tools: [srv]
        router_profile: {profile}
        final_profile: {profile}
        budget: {{max_iterations: 4, max_tokens: 100000, max_tool_calls: 3, timeout_s: 60}}
        final_schema: {{type: object, required: [answer], properties: {{answer: {{type: string}}}}}}
    """)
    write(tmp_path / "reg.yml", """
        version: 1
        subagents:
          t:
            runner_defaults: {tool_timeout_s: 60}
            tools:
              research:
                plan: kid/research.yml
                description: Research one question and return an answer.
    """)
    return write(tmp_path / "plan.yml", f"""
        version: 1
        registry: reg.yml
        subagent: t
        mode: routed
        goal: Ask the child.
        allowed_tools: [research]
        router_profile: {profile}
        final_profile: {profile}
        budget: {{max_iterations: 4, max_tokens: 100000, max_tool_calls: 4, timeout_s: 60}}
        final_schema: {{type: object, required: [answer]}}
    """)


def test_a_recorded_case_whose_child_plan_has_mcp_tools_starts_no_server(tmp_path, model_server, cli):
    plan = setup(tmp_path, model_server)
    model_server.script(call("research", {"question": "hi"}), call("srv", {"text": "hi"}), FINAL,
                        '{"answer": "hi"}', FINAL, '{"answer": "hi"}')
    ran = cli("run", str(plan), "--format", "jsonl", env={"TL_TEST_KEY": KEY})
    assert ran.returncode == 0, ran.stderr.decode()
    records = jsonl(ran.stdout)
    receipts = [r for r in records if r["type"] == "receipt"]
    assert [(r["tool"], r["status"]) for r in receipts] == [("research", "ok")], records
    exported = cli("runs", "export", records[-1]["run_id"])
    assert exported.returncode == 0, exported.stderr.decode()
    offer = jsonl(exported.stdout)[0]["mcp_tools"]["k/srv"]  # the child run's server's offer
    assert offer["name"] == "echo" and offer["input_schema"]["required"] == ["text"]
    one_call_suite(tmp_path, exported.stdout, "research")
    before = starts(tmp_path)
    proc = cli("test", str(tmp_path / "suite.yml"))
    assert proc.returncode == 0, proc.stdout.decode() + proc.stderr.decode()
    assert [r["status"] for r in jsonl(proc.stdout) if r["type"] == "test"] == ["pass"]
    assert starts(tmp_path) == before  # the child's server never started either

    # a toolloop.lock beside the child's registry still checks what the fixture says it offered
    assert cli("lock", str(tmp_path / "kid" / "reg.yml")).returncode == 0  # lists the server itself
    before = starts(tmp_path)
    lines = exported.stdout.decode().splitlines()
    changed = json.loads(lines[0])
    changed["mcp_tools"]["k/srv"]["input_schema"]["required"] = []
    write(tmp_path / "fixture.jsonl", "\n".join([json.dumps(changed), *lines[1:]]))
    locked = cli("test", str(tmp_path / "suite.yml"))
    assert locked.returncode != 0 and b"TL372" in locked.stdout + locked.stderr, locked
    assert starts(tmp_path) == before
    write(tmp_path / "fixture.jsonl", exported.stdout.decode())
    (tmp_path / "kid" / "toolloop.lock").unlink()

    # under tools: live the child's server is started (its read tools may run)
    write(tmp_path / "suite.yml", (tmp_path / "suite.yml").read_text().replace("tools: recorded", "tools: live"))
    cli("test", str(tmp_path / "suite.yml"))
    assert starts(tmp_path) > before


def test_a_recorded_case_whose_child_plan_was_never_called_starts_no_server(tmp_path, model_server, cli):
    """The run's contract snapshot keeps what the servers of every child plan it could run
    offered at admission, so a case admits a child plan the recording never called from the
    fixture too, with no server."""
    plan = setup(tmp_path, model_server)
    model_server.script(FINAL, '{"answer": "hi"}')  # the model answers at once: no child run
    ran = cli("run", str(plan), "--format", "jsonl", env={"TL_TEST_KEY": KEY})
    assert ran.returncode == 0, ran.stderr.decode()
    records = jsonl(ran.stdout)
    assert [r for r in records if r["type"] == "receipt"] == [], records
    exported = cli("runs", "export", records[-1]["run_id"])
    assert exported.returncode == 0, exported.stderr.decode()
    offer = jsonl(exported.stdout)[0]["mcp_tools"]["k/srv"]
    assert offer["name"] == "echo" and offer["input_schema"]["required"] == ["text"]
    recorded_suite(tmp_path, exported.stdout, "{final: {answer: hi}}")
    before = starts(tmp_path)
    proc = cli("test", str(tmp_path / "suite.yml"))
    assert proc.returncode == 0, proc.stdout.decode() + proc.stderr.decode()
    assert [r["status"] for r in jsonl(proc.stdout) if r["type"] == "test"] == ["pass"]
    assert starts(tmp_path) == before


def test_an_export_leaves_out_a_name_two_registries_offer_differently():
    """The offers of the run and of every run under it, at any depth, by "subagent/tool"; one that
    a child's registry offers otherwise than another is left out (its server is listed again)."""
    from toolloop_cli.engine.replay import _offered

    def offer(text: str) -> dict:
        return {"name": "echo", "description": text, "input_schema": {"type": "object"}}

    snapshots = {
        "top": {"t/srv": {"offered": offer("top")}, "t/same": {"offered": offer("same")}},
        "kid": {"k/srv": {"offered": offer("kid")}, "t/srv": {"offered": offer("another server")},
                "t/same": {"offered": offer("same")}},
        "grandkid": {"g/deep": {"offered": offer("deep")}, "g/plain": {"server_tool": "x"}},
    }
    below = {"kid": ["grandkid"]}

    class Journal:
        def contract_of(self, run_id):
            return {"mcp_tools": snapshots[run_id]}

        def receipts_of(self, run_id):
            return [{"seq": 0, "child_run_id": c} for c in below.get(run_id, [])] + [{"seq": 1, "child_run_id": None}]

    got = _offered(Journal(), "top", ["kid"])
    assert got == {"t/same": offer("same"), "k/srv": offer("kid"), "g/deep": offer("deep")}
