"""A recorded ``toolloop test`` case over a plan whose MCP tools take their schemas from their
server runs with no server: the export's manifest keeps what each MCP tool's server offered when
the run was admitted (``mcp_tools``), and a case under ``tools: recorded`` is admitted from it
instead of listing the server. A case under ``tools: live`` still lists it. A real MCP server
over stdio (it counts its starts), a real model server on 127.0.0.1, the CLI in subprocesses."""

from __future__ import annotations

import json
import sys

from conftest import ROOT, jsonl, write
from regkit import openai_profile, recorded_suite

SERVER = ROOT / "tests" / "mcp_stdio_server.py"
KEY = "sk-suite-mcp-canary"
FINAL = '{"action": "final", "reason": "enough"}'


def setup(tmp_path, server):
    command = json.dumps([sys.executable, str(SERVER), "--count", str(tmp_path / "starts")])
    # no schema, no description in the registry: both come from the server's tools/list
    write(tmp_path / "reg.yml", f"""
        version: 1
        subagents:
          t:
            runner_defaults: {{tool_timeout_s: 20}}
            tools:
              srv:
                mcp: {{command: {command}, allow: [echo]}}
                effect: read
    """)
    profile = openai_profile(server.openai_base)
    return write(tmp_path / "plan.yml", f"""
        version: 1
        registry: reg.yml
        subagent: t
        mode: routed
        goal: Say hello.
        allowed_tools: [srv]
        router_profile: {profile}
        final_profile: {profile}
        budget: {{max_iterations: 4, max_tokens: 100000, max_tool_calls: 4, timeout_s: 60}}
        final_schema: {{type: object, required: [answer]}}
    """)


def starts(tmp_path) -> int:
    path = tmp_path / "starts"
    return len(path.read_text().splitlines()) if path.exists() else 0


def one_call_suite(tmp_path, export: bytes, tool: str) -> None:
    """``suite.yml``: one recorded case over ``export`` whose one call, of ``tool``, is ok and
    whose final answer is ``{answer: hi}``."""
    recorded_suite(tmp_path, export, f"{{final: {{answer: hi}}, calls: [{{tool: {tool}, status: ok}}]}}")


def test_a_recorded_case_over_mcp_tools_with_server_schemas_starts_no_server(tmp_path, model_server, cli):
    plan = setup(tmp_path, model_server)
    call = json.dumps({"action": "call", "tool": "srv", "args": {"text": "hi"}, "reason": "say it"})
    model_server.script(call, FINAL, '{"answer": "hi"}')
    ran = cli("run", str(plan), "--format", "jsonl", env={"TL_TEST_KEY": KEY})
    assert ran.returncode == 0, ran.stderr.decode()
    run_id = jsonl(ran.stdout)[-1]["run_id"]
    exported = cli("runs", "export", run_id)
    manifest = jsonl(exported.stdout)[0]
    offer = manifest["mcp_tools"]["t/srv"]
    assert offer["name"] == "echo" and offer["description"] == "Say the text back."
    assert offer["input_schema"]["required"] == ["text"]
    one_call_suite(tmp_path, exported.stdout, "srv")
    before = starts(tmp_path)
    asked = len(model_server.requests)
    proc = cli("test", str(tmp_path / "suite.yml"))
    assert proc.returncode == 0, proc.stdout.decode() + proc.stderr.decode()
    assert [r["status"] for r in jsonl(proc.stdout) if r["type"] == "test"] == ["pass"]
    assert starts(tmp_path) == before  # admitted from the fixture: the server never started
    assert len(model_server.requests) == asked

    # a toolloop.lock still checks what the fixture says the server offered
    assert cli("lock", str(tmp_path / "reg.yml")).returncode == 0
    assert cli("test", str(tmp_path / "suite.yml")).returncode == 0
    changed = json.loads(exported.stdout.decode().splitlines()[0])
    changed["mcp_tools"]["t/srv"]["input_schema"]["required"] = []
    write(tmp_path / "fixture.jsonl", "\n".join([json.dumps(changed), *exported.stdout.decode().splitlines()[1:]]))
    locked = cli("test", str(tmp_path / "suite.yml"))
    assert locked.returncode != 0 and b"TL372" in locked.stdout + locked.stderr, locked
    write(tmp_path / "fixture.jsonl", exported.stdout.decode())
    (tmp_path / "toolloop.lock").unlink()

    # the same case with the server gone: it still runs (nothing of the server is needed)
    write(tmp_path / "reg.yml", (tmp_path / "reg.yml").read_text().replace(str(SERVER), str(tmp_path / "gone.py")))
    gone = cli("test", str(tmp_path / "suite.yml"))
    assert gone.returncode == 0, gone.stdout.decode() + gone.stderr.decode()

    # under tools: live the server is listed (its read tools run)
    live = (tmp_path / "suite.yml").read_text().replace("tools: recorded", "tools: live")
    write(tmp_path / "suite.yml", live)
    refused = cli("test", str(tmp_path / "suite.yml"))
    assert refused.returncode != 0 and b"could not be started" in refused.stdout + refused.stderr, refused
