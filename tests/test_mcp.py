"""MCP tools against a real MCP server from PyPI (mcp-server-time), over stdio."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from conftest import jsonl, write

SERVER = shutil.which("mcp-server-time") or str(Path(sys.executable).parent / "mcp-server-time")


def registry(tmp_path, extra: str = "") -> Path:
    return write(tmp_path / "reg.yml", f"""
        version: 1
        subagents:
          w:
            runner_defaults: {{tool_timeout_s: 20, allowed_tools: [clock.get_current_time, clock.convert_time, now]}}
            tools:
              clock:
                mcp: {{command: [{SERVER}, --local-timezone, UTC], allow: [get_current_time, convert_time]}}
              now:
                mcp: {{command: [{SERVER}, --local-timezone, UTC], allow: [get_current_time]}}
                description: The time now (pinned).
                {extra}
    """)


def plan(tmp_path, calls: list[dict]) -> Path:
    registry(tmp_path)
    return write(tmp_path / "plan.yml", json.dumps(
        {"version": 1, "registry": "reg.yml", "subagent": "w", "mode": "sequential", "calls": calls}))


def test_mcp_tools_run_with_server_schemas_and_errors_become_receipts(cli, tmp_path):
    p = plan(tmp_path, [
        {"tool": "clock.get_current_time", "args": {"timezone": "UTC"}},
        {"tool": "now", "args": {"timezone": "Europe/Paris"}},
        {"tool": "clock.convert_time", "args": {"source_timezone": "UTC", "time": "12:00",
                                                "target_timezone": "Asia/Tokyo"}},
    ])
    proc = cli("run", str(p))
    assert proc.returncode == 0, proc.stderr.decode()[-3000:]
    receipts = jsonl(proc.stdout)[:-1]
    assert [r["status"] for r in receipts] == ["ok", "ok", "ok"]
    assert receipts[0]["result"]["timezone"] == "UTC" and "datetime" in receipts[0]["result"]
    assert receipts[1]["result"]["timezone"] == "Europe/Paris"
    assert receipts[2]["result"]["target"]["timezone"] == "Asia/Tokyo"


def test_an_mcp_error_result_is_an_error_receipt_with_the_server_text(cli, tmp_path):
    p = plan(tmp_path, [{"tool": "now", "args": {"timezone": "Mars/Base"}},
                        {"tool": "now", "args": {"timezone": "UTC"}}])
    proc = cli("run", str(p))
    assert proc.returncode == 1
    first, second = jsonl(proc.stdout)[:-1]
    assert first["status"] == "error" and "Mars/Base" in first["error"]["message"]
    assert second["status"] == "skipped"


def test_arguments_are_admitted_against_the_server_input_schema(cli, tmp_path):
    p = plan(tmp_path, [{"tool": "now", "args": {"timezone": 5}},
                        {"tool": "clock.get_current_time", "args": {"tz": "UTC"}}])
    proc = cli("run", str(p))
    assert proc.returncode == 3, proc.stderr.decode()
    lines = proc.stderr.decode().splitlines()
    assert [line.split()[2] for line in lines if " error " in line] == ["TL404", "TL404"]
    assert [(r["type"], r["status"]) for r in jsonl(proc.stdout)] == [("summary", "rejected")]  # nothing ran


def test_tools_lists_expanded_names_and_server_descriptions(cli, tmp_path):
    registry(tmp_path)
    proc = cli("tools", "reg.yml", "--format", "jsonl")
    assert proc.returncode == 0, proc.stderr.decode()
    rows = {r["tool"]: r for r in jsonl(proc.stdout)}
    assert sorted(rows) == ["clock.convert_time", "clock.get_current_time", "now"]
    assert rows["now"]["description"] == "The time now (pinned)."
    assert rows["clock.convert_time"]["mcp_name"] == "convert_time"
    assert rows["clock.get_current_time"]["description"]  # from the server's tools/list


def test_parallel_mcp_calls_keep_input_order(cli, tmp_path):
    registry(tmp_path)
    lanes = [{"item_key": f"k{i}", "calls": [{"tool": "now", "args": {"timezone": tz}}]}
             for i, tz in enumerate(["UTC", "Europe/Paris", "Asia/Tokyo", "America/New_York"] * 3)]
    p = write(tmp_path / "par.yml", json.dumps({"version": 1, "registry": "reg.yml", "subagent": "w",
                                                "mode": "parallel", "max_concurrency": 4, "lanes": lanes}))
    proc = cli("run", str(p))
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    receipts = jsonl(proc.stdout)[:-1]
    assert [r["result"]["timezone"] for r in receipts] == [lane["calls"][0]["args"]["timezone"] for lane in lanes]


def test_toolloop_call_runs_an_mcp_tool(cli, tmp_path):
    reg = registry(tmp_path)
    proc = cli("call", str(reg), "w", "now", "--args", '{"timezone": "UTC"}')
    assert proc.returncode == 0, proc.stderr.decode()[-3000:]
    receipt, summary = jsonl(proc.stdout)
    assert receipt["tool"] == "now" and receipt["status"] == "ok" and receipt["result"]["timezone"] == "UTC"
    assert summary["status"] == "ok"


def test_an_mcp_tool_runs_through_execute_call_in_an_opened_run(tmp_path):
    import trio

    import dataclasses

    from toolloop_cli.contract.mcp import discovered, resolve_server_tools
    from toolloop_cli.contract.registry import load_registry
    from toolloop_cli.engine import RunContext, execute_call

    contract, problems = load_registry(registry(tmp_path))
    assert contract is not None, problems
    compiled = contract.subagents["w"].tools["now"]
    sub, problems = discovered(lambda servers: resolve_server_tools(contract.subagents["w"], servers))
    assert problems == []
    # the compiled contract is left as it was: the filled-in tool is in the copy returned
    assert contract.subagents["w"].tools["now"] is compiled and compiled.from_server
    assert sub.tools["now"].description and not sub.tools["now"].from_server
    contract = dataclasses.replace(contract, subagents={**contract.subagents, "w": sub})
    ctx = RunContext("run-test", contract)
    tool = contract.subagents["w"].tools["now"]

    async def main():
        async with ctx.services.executors.opened():
            return await execute_call(ctx, tool, {"timezone": "UTC"}, seq=0, item_key=None, call_key="0")

    receipt, value, _ = trio.run(main)
    assert receipt.status == "ok" and value["timezone"] == "UTC"


def test_tools_exits_non_zero_when_a_server_cannot_be_reached(cli, tmp_path):
    registry(tmp_path, extra="")
    text = (tmp_path / "reg.yml").read_text()
    (tmp_path / "reg.yml").write_text(text + "      gone:\n        mcp: {command: [no-such-mcp-server-here], allow: [x]}\n")
    proc = cli("tools", "reg.yml", "--format", "jsonl")
    assert proc.returncode == 1
    err = proc.stderr.decode()
    assert " error TL313 " in err and "could not be started" in err
    assert err.splitlines()[-1] == ("toolloop: 1 MCP problem above: the tools of a server that could not be reached"
                                    " are not listed")
    assert "now" in {r["tool"] for r in jsonl(proc.stdout)}  # the servers that answered are listed


def test_validate_says_which_mcp_tools_it_did_not_check_against_their_servers(cli, tmp_path):
    registry(tmp_path)
    proc = cli("validate", "reg.yml")
    assert proc.returncode == 0, proc.stderr.decode()
    assert proc.stderr.decode().splitlines() == [
        "reg.yml: 3 MCP tools (w/clock.get_current_time, w/clock.convert_time, w/now) not checked against their"
        " servers: validate a plan that uses them, or run toolloop tools reg.yml, to reach the servers",
        "checked 1 registry: 2 warnings"]  # (the registry's own warnings)
    # a plan of that subagent reaches them
    p = plan(tmp_path, [{"tool": "now", "args": {"timezone": "UTC"}}])
    proc = cli("validate", "reg.yml", str(p))
    assert proc.returncode == 0, proc.stderr.decode()
    assert proc.stderr.decode() == "checked 1 registry and 1 plan: 2 warnings\n"


def test_a_routed_plan_calls_an_mcp_tool(cli, tmp_path):
    registry(tmp_path)
    answers = [{"action": "call", "tool": "now", "args": {"timezone": "UTC"}, "reason": "the time is needed"},
               {"action": "final", "reason": "known"}, {"answer": "done"}]
    write(tmp_path / "answers.jsonl", "".join(json.dumps({
        "type": "model_answer", "run_id": "recorded", "n": n, "role": "final" if n == 3 else "router", "model": "m",
        "request_sha256": None, "text": json.dumps(a), "input_tokens": 1, "output_tokens": 1}) + "\n"
        for n, a in enumerate(answers, start=1)))
    profile = "{provider: replay, fixture: answers.jsonl}"
    p = write(tmp_path / "routed.yml", f"""
        version: 1
        registry: reg.yml
        subagent: w
        mode: routed
        goal: Say what time it is.
        router_profile: {profile}
        final_profile: {profile}
        budget: {{max_iterations: 4, max_tokens: 1000, max_tool_calls: 2, timeout_s: 60}}
        final_schema: {{type: object, required: [answer]}}
    """)
    proc = cli("run", str(p), "--format", "jsonl")
    assert proc.returncode == 0, proc.stderr.decode()[-3000:]
    records = jsonl(proc.stdout)
    (receipt,) = [r for r in records if r["type"] == "receipt"]
    assert receipt["tool"] == "now" and receipt["status"] == "ok" and receipt["result"]["timezone"] == "UTC"
    assert records[-1]["outcome"] == "final" and records[-1]["final"] == {"answer": "done"}


def test_admission_starts_no_server_it_asks_for_the_listing_it_lacks(tmp_path):
    """Admission has no side effects: given no listing of a server its plan needs, it raises
    ServersNeeded naming that server, with the MCP host (and its event loop) never loaded; the
    discovery step lists the server, and admission then fills the tools in from what it offers."""
    import subprocess
    import sys

    p = plan(tmp_path, [{"tool": "now", "args": {"timezone": "UTC"}}])
    code = (
        "import sys\n"
        "from toolloop_cli.contract.mcp import ServersNeeded\n"
        "from toolloop_cli.plan.admit import admit_plan\n"
        "try:\n"
        f"    admit_plan({str(p)!r}, servers={{}})\n"
        "except ServersNeeded as need:\n"
        "    print([d.allow for d in need.decls], 'toolloop_cli.contract.mcp_servers' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "[['get_current_time', 'convert_time']] False", out.stderr  # one server, both tools'

    from toolloop_cli.contract.mcp import discovered
    from toolloop_cli.plan.admit import admit_plan

    servers: dict = {}
    admitted = discovered(lambda found: admit_plan(p, servers=found), servers)
    assert len(servers) == 1  # the one server both tools share, listed once
    tool = admitted.subagent.tools["now"]
    assert tool.input_schema["properties"]["timezone"] and not tool.from_server
    assert admit_plan(p, servers=servers).subagent.tools["now"].input_schema == tool.input_schema


def test_the_discovery_step_runs_from_a_callers_trio_loop(tmp_path):
    """A caller that owns a trio loop awaits the discovery step there (the sessions stay on the
    MCP host), then admits with what it found."""
    import trio

    from toolloop_cli.contract.mcp_servers import discovered_async
    from toolloop_cli.plan.admit import admit_plan

    p = plan(tmp_path, [{"tool": "clock.get_current_time", "args": {"timezone": "UTC"}}])
    admitted = trio.run(discovered_async, lambda found: admit_plan(p, servers=found))
    assert admitted.subagent.tools["clock.get_current_time"].input_schema["properties"]["timezone"]


def test_a_child_plans_mcp_servers_are_listed_before_its_parent_is_admitted_again(tmp_path, monkeypatch):
    """A child plan's registry may name servers its parent's does not: admission asks for them
    (ServersNeeded goes up through the parent), the discovery step lists them, and the parent is
    admitted again with the child's MCP tools filled in."""
    from toolloop_cli.contract.mcp import discovered
    from toolloop_cli.plan.admit import admit_plan

    monkeypatch.setenv("TL_TEST_KEY", "sk-unused")
    registry(tmp_path)  # the child's registry, reg.yml: MCP tools
    profile = "{provider: openai, model: m, base_url: 'http://127.0.0.1:9/v1', api_key_env: TL_TEST_KEY}"
    write(tmp_path / "child.yml", f"""
        version: 1
        registry: reg.yml
        subagent: w
        mode: routed
        goal: Tell the time.
        allowed_tools: [now]
        router_profile: {profile}
        final_profile: {profile}
        budget: {{max_iterations: 2, max_tokens: 1000, max_tool_calls: 1, timeout_s: 30}}
    """)
    write(tmp_path / "parent_reg.yml", """
        version: 1
        subagents:
          p:
            runner_defaults: {tool_timeout_s: 30}
            tools:
              ask: {plan: child.yml, description: Ask the time.}
    """)
    parent = write(tmp_path / "parent.yml", json.dumps({
        "version": 1, "registry": "parent_reg.yml", "subagent": "p", "mode": "sequential",
        "calls": [{"tool": "ask", "args": {}}]}))
    attempts: list[int] = []

    def admit(found):
        attempts.append(len(found))
        return admit_plan(parent, servers=found)

    admitted = discovered(admit)
    assert attempts == [0, 1]  # asked for the child's server once, then admitted with it
    child = next(iter(admitted.child_plans.values()))
    assert child.subagent.tools["now"].input_schema["properties"]["timezone"]
