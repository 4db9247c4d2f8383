"""MCP servers over stdio as third parties against a real stdio server
(tests/mcp_stdio_server.py): a server that writes noise on its standard output, a server that
starts slowly, one start per run, and the environment a server gets (the SDK's safe default, the
registry's ``env`` and ``pass_env``, nothing else), its handed-through values hidden everywhere."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from conftest import ROOT, jsonl, write

SERVER = ROOT / "tests" / "mcp_stdio_server.py"
SAFE = {"HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER"}
PASSED = "pass-env-canary-7f3a"  # handed through with pass_env: a secret
UNRELATED = "unrelated-canary-91c2"  # in toolloop's environment, never the server's
ARGUMENT = "redacted-arg-canary-4d0e"  # a redacted argument the noisy server prints


def registry(tmp_path: Path, *flags: str, mcp_extra: str = "", timeout: float = 20) -> Path:
    command = json.dumps([sys.executable, str(SERVER), *flags])
    return write(tmp_path / "reg.yml", f"""
        version: 1
        subagents:
          w:
            runner_defaults: {{tool_timeout_s: {timeout}}}
            tools:
              srv:
                mcp: {{command: {command}, allow: [env, echo, leak, crash]{mcp_extra}}}
                effect: read
                redact: [/text]
    """)


def plan(tmp_path: Path, calls: list[dict], name: str = "plan.yml") -> Path:
    return write(tmp_path / name, json.dumps(
        {"version": 1, "registry": "reg.yml", "subagent": "w", "mode": "sequential", "calls": calls}))


def everything_written(tmp_path: Path, *procs) -> bytes:
    """Standard output and error of the commands, and every file they wrote (state, audit)."""
    out = b"".join(p.stdout + p.stderr for p in procs)
    for path in tmp_path.rglob("*"):
        if path.is_file() and path.suffix not in (".yml", ".py"):
            out += path.read_bytes()
    return out


def only_toolloop_lines(stderr: bytes) -> list[str]:
    """The lines of standard error that toolloop did not write."""
    return [ln for ln in stderr.decode().splitlines() if ln.strip() and not ln.startswith("toolloop: ")]


# --- a noisy server --------------------------------------------------------------------------


def test_a_server_writing_noise_on_stdout_is_ignored_never_a_traceback_quoting_it(cli, tmp_path):
    registry(tmp_path, "--noise")
    p = plan(tmp_path, [{"tool": "srv.echo", "args": {"text": ARGUMENT}}, {"tool": "srv.echo", "args": {"text": "b"}}])
    ran = cli("run", str(p), "--format", "jsonl", "--audit", "audit.jsonl")
    assert ran.returncode == 0, ran.stderr.decode()
    assert [(r["status"], r["result"]) for r in jsonl(ran.stdout)[:-1]] == [("ok", {"text": "[REDACTED]"})] * 2
    assert only_toolloop_lines(ran.stderr) == []
    listed = cli("tools", "reg.yml", "--format", "jsonl")
    assert listed.returncode == 0 and only_toolloop_lines(listed.stderr) == []
    called = cli("call", "reg.yml", "w", "srv.echo", "--args", json.dumps({"text": ARGUMENT}))
    assert called.returncode == 0 and only_toolloop_lines(called.stderr) == []
    assert b"Traceback" not in everything_written(tmp_path, ran, listed, called)
    assert ARGUMENT.encode() not in everything_written(tmp_path, ran, listed, called)


# --- start-up: its own bound, once per run ----------------------------------------------------


def test_each_server_starts_once_per_run_admission_and_calls_alike(cli, tmp_path):
    count = tmp_path / "starts.txt"
    registry(tmp_path, "--count", str(count))
    p = plan(tmp_path, [{"tool": "srv.echo", "args": {"text": "a"}}, {"tool": "srv.env", "args": {}},
                        {"tool": "srv.echo", "args": {"text": "c"}}])
    ran = cli("run", str(p), "--format", "jsonl")
    assert ran.returncode == 0, ran.stderr.decode()
    assert len(count.read_text().splitlines()) == 1  # admission listed it, the run called that one
    called = cli("call", "reg.yml", "w", "srv.echo", "--args", '{"text": "x"}')
    assert called.returncode == 0, called.stderr.decode()
    assert len(count.read_text().splitlines()) == 2
    resumed = cli("resume", jsonl(ran.stdout)[-1]["run_id"], "--retry-failed", "--format", "jsonl")
    assert resumed.returncode == 0, resumed.stderr.decode()
    assert len(count.read_text().splitlines()) == 3
    pids = [int(x) for x in count.read_text().split()]
    assert all(not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text()
               for pid in pids)  # every server was stopped with its command


def test_a_slow_start_counts_against_no_calls_timeout_at_admission_or_in_the_run(cli, tmp_path):
    """Starting the server takes longer than the tools' timeout: admission listed it with that
    timeout and refused the plan; now starting and listing have their own bound."""
    registry(tmp_path, "--slow-start", "2", timeout=0.5)
    p = plan(tmp_path, [{"tool": "srv.echo", "args": {"text": "a"}}])
    ran = cli("run", str(p), "--format", "jsonl")
    assert ran.returncode == 0, ran.stderr.decode()
    assert jsonl(ran.stdout)[0]["status"] == "ok"


def test_a_server_started_by_the_run_itself_is_prepared_before_the_calls_deadline(tmp_path):
    """Without admission in this process (a contract run as a library), the call that needs the
    server starts it, and the start is not the call's time."""
    import trio

    from toolloop_cli.contract.registry import load_registry
    from toolloop_cli.engine import RunContext, execute_call

    contract, problems = load_registry(write(tmp_path / "reg.yml", f"""
        version: 1
        subagents:
          w:
            tools:
              echo:
                mcp: {{command: {json.dumps([sys.executable, str(SERVER), "--slow-start", "2"])}, allow: [echo]}}
                effect: read
                description: Say it back.
                input_schema: {{type: object}}
                output_schema: {{type: object}}
                timeout_s: 0.5
    """))
    assert contract is not None, problems
    ctx = RunContext("run-test", contract)
    tool = contract.subagents["w"].tools["echo"]

    async def main():
        async with ctx.services.executors.opened():
            return await execute_call(ctx, tool, {"text": "hi"}, seq=0, item_key=None, call_key="0")

    receipt, value, _ = trio.run(main)
    assert receipt.status == "ok", receipt
    assert value == {"text": "hi"}


def test_starting_is_bounded_on_its_own_and_a_server_that_does_not_start_is_a_clear_finding(tmp_path, monkeypatch):
    from toolloop_cli.contract import mcp_servers
    from toolloop_cli.contract.mcp import discovered, resolve_server_tools
    from toolloop_cli.contract.registry import load_registry

    monkeypatch.setattr(mcp_servers, "START_TIMEOUT_S", 0.5)
    contract, problems = load_registry(registry(tmp_path, "--slow-start", "30"))
    assert contract is not None, problems
    _sub, found = discovered(lambda servers: resolve_server_tools(contract.subagents["w"], servers))
    assert {p.code for p in found} == {"TL313"} and found
    assert "could not be started or listed: it did not start within 0.5s" in found[0].message
    missing = write(tmp_path / "missing.yml", """
        version: 1
        subagents:
          w:
            runner_defaults: {tool_timeout_s: 5}
            tools:
              srv: {mcp: {command: [/no/such/server], allow: [echo]}, effect: read}
    """)
    contract, problems = load_registry(missing)
    _sub, found = discovered(lambda servers: resolve_server_tools(contract.subagents["w"], servers))
    assert [p.code for p in found] == ["TL313"]
    assert "'/no/such/server'" in found[0].message and "Traceback" not in found[0].message


# --- the environment a server gets -----------------------------------------------------------


def test_a_server_gets_the_safe_environment_env_and_pass_env_and_nothing_else(cli, tmp_path):
    registry(tmp_path, mcp_extra=", env: {LITERAL: plain}, pass_env: [HANDED, NOT_SET_HERE]")
    p = plan(tmp_path, [{"tool": "srv.env", "args": {}}, {"tool": "srv.leak", "args": {"name": "HANDED"}}])
    env = {"HANDED": PASSED, "UNRELATED_TOKEN": UNRELATED, "OPENAI_API_KEY": UNRELATED}
    ran = cli("run", str(p), "--format", "jsonl", "--audit", "audit.jsonl", env=env)
    assert ran.returncode == 1, ran.stderr.decode()
    got, leaked = jsonl(ran.stdout)[:2]
    server_env = got["result"]["env"]
    assert set(server_env) <= SAFE | {"LITERAL", "HANDED", "LC_CTYPE"}  # LC_CTYPE: Python's own, in the server
    assert "UNRELATED_TOKEN" not in server_env and "OPENAI_API_KEY" not in server_env
    assert "NOT_SET_HERE" not in server_env
    assert server_env["LITERAL"] == "plain"
    assert server_env["HANDED"] == "[REDACTED]" and got["result"]["sizes"]["HANDED"] == len(PASSED)
    assert leaked["status"] == "error" and leaked["error"]["message"] == "cannot go on with HANDED=[REDACTED]"
    run_id = jsonl(ran.stdout)[-1]["run_id"]
    shown = cli("runs", "show", run_id, "--format", "jsonl")
    exported = cli("runs", "export", run_id)
    called = cli("call", "reg.yml", "w", "srv.env", "--args", "{}", env=env)
    assert called.returncode == 0, called.stderr.decode()
    written = everything_written(tmp_path, ran, shown, exported, called)
    assert PASSED.encode() not in written and UNRELATED.encode() not in written


@pytest.mark.parametrize("mcp, message", [
    ('{command: [x], pass_env: ["1BAD"], allow: [a]}', "names '1BAD', which is not an environment variable's name"),
    ('{command: [x], env: {A: b}, pass_env: [A], allow: [a]}', "names 'A', which mcp.env sets too"),
    ('{command: [x], pass_env: [A, A], allow: [a]}', "names 'A' twice"),
    ('{url: "http://127.0.0.1:1/mcp", pass_env: [A], allow: [a]}', "mcp.pass_env of tool 't' applies to a server"
                                                                    " started with 'command'"),
    ('{command: [x], pass_env: A, allow: [a]}', "pass_env"),
])
def test_pass_env_is_a_list_of_variable_names_for_a_stdio_server(cli, tmp_path, mcp, message):
    write(tmp_path / "reg.yml", f"""
        version: 1
        subagents:
          w:
            runner_defaults: {{tool_timeout_s: 5}}
            tools:
              t: {{mcp: {mcp}, effect: read}}
    """)
    proc = cli("validate", "reg.yml", "--format", "json")
    assert proc.returncode == 1, proc.stdout.decode() + proc.stderr.decode()
    findings = json.loads(proc.stdout)
    assert any(message in f["message"] for f in findings if f["level"] == "error"), findings


def test_the_registry_schema_for_editors_knows_pass_env():
    schema = json.loads((ROOT / "docs" / "schemas" / "registry.schema.json").read_text())
    mcp = schema["$defs"]["McpDecl"]["properties"]
    assert mcp["pass_env"]["type"] == "array" and mcp["pass_env"]["items"]["type"] == "string"


def test_a_server_that_dies_is_said_with_its_last_words_and_its_standard_error_is_not_toolloops(cli, tmp_path):
    registry(tmp_path)
    lanes = [{"item_key": "a", "calls": [{"tool": "srv.crash", "args": {}}]},
             {"item_key": "b", "calls": [{"tool": "srv.echo", "args": {"text": "x"}}]}]
    p = write(tmp_path / "par.yml", json.dumps({"version": 1, "registry": "reg.yml", "subagent": "w",
                                                "mode": "parallel", "max_concurrency": 1, "lanes": lanes}))
    ran = cli("run", str(p), "--format", "jsonl")
    assert ran.returncode == 1, ran.stderr.decode()
    crashed, after = jsonl(ran.stdout)[:2]
    for receipt in (crashed, after):
        assert receipt["status"] == "error"
        assert receipt["error"]["message"].endswith("stopped during the run; the last line it wrote on standard"
                                                    " error: fatal: the disk is gone"), receipt["error"]
    assert only_toolloop_lines(ran.stderr) == []


def test_a_short_handed_through_value_is_hidden_only_where_it_stands_as_a_whole_token():
    from toolloop_cli.contract.mcp import hide

    assert hide("mode=on, one, long-canary-value and on", ["on", "long-canary-value"]) == \
        "mode=[REDACTED], one, [REDACTED] and [REDACTED]"
