"""``toolloop mcp serve`` in a real process: the SDK's own client over standard input and output
and over Streamable HTTP (token, Host and Origin checks, a clean stop on SIGTERM), and toolloop
on both sides of the protocol."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
from conftest import jsonl, write
from mcpserve_kit import receipts, write_registry

pytest.importorskip("mcp")
trio = pytest.importorskip("trio")

TOKEN = "tok-mcp-serve-canary-9f3a"


def _text(result) -> str:
    return "".join(c.text for c in result.content)


def test_the_sdk_client_initializes_pings_lists_and_calls_over_stdio(tmp_path, cli):
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    reg = write_registry(tmp_path)
    state = tmp_path / "state"
    got: dict = {}

    async def main():
        params = StdioServerParameters(command=sys.executable, cwd=str(tmp_path), args=[
            "-m", "toolloop_cli", "mcp", "serve", str(reg), "--state-dir", str(state)])
        async with stdio_client(params) as (read, write_):
            async with ClientSession(read, write_) as session:
                await session.initialize()
                await session.send_ping()
                got["tools"] = [t.name for t in (await session.list_tools()).tools]
                got["echo"] = await session.call_tool("echo", {"n": 7})
                # a tool that prints cannot corrupt the protocol: standard output is the server's
                got["printer"] = await session.call_tool("printer", {"text": "hello from the tool"})
                got["after"] = await session.call_tool("echo", {"n": 8})

    trio.run(main)
    assert "echo" in got["tools"] and got["echo"].structured_content == {"received": {"n": 7}}
    assert not got["printer"].is_error and not got["after"].is_error
    listed = cli("runs", "list", "--state-dir", str(state), "--format", "jsonl")
    [run] = jsonl(listed.stdout)
    assert (run["mode"], run["status"], run["calls"]) == ("mcp", "ok", 3)
    shown = jsonl(cli("runs", "show", run["run_id"], "--state-dir", str(state), "--format", "jsonl").stdout)
    assert [r["call_key"] for r in shown if r["type"] == "receipt"] == ["0", "1", "2"]
    assert shown[-1]["type"] == "summary" and shown[-1]["mode"] == "mcp" and shown[-1]["status"] == "ok"


class Serving:
    """``toolloop mcp serve --transport http`` on a free loopback port."""

    def __init__(self, tmp_path, *extra: str, env: dict | None = None):
        self.state = tmp_path / "state"
        reg = write_registry(tmp_path)
        full_env = {**os.environ, "NO_COLOR": "1", **(env or {})}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "toolloop_cli", "mcp", "serve", str(reg), "--transport", "http", "--port", "0",
             "--state-dir", str(self.state), *extra], cwd=tmp_path, env=full_env,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        self.url = self.token = None
        while self.token is None:
            line = self.proc.stderr.readline()  # type: ignore[union-attr]
            assert line, f"the server did not start: {''.join(self.lines)}"
            self.lines.append(line)
            if (m := re.search(r"serving MCP on (http://\S+/mcp)", line)):
                self.url = m.group(1)
            if (m := re.search(r"token: (\S+)", line)):
                self.token = m.group(1)
            if "no token" in line:
                self.token = ""

    def stop(self, sig=signal.SIGTERM) -> tuple[int, str, str]:
        self.proc.send_signal(sig)
        out, err = self.proc.communicate(timeout=60)
        return self.proc.returncode, out, "".join(self.lines) + err


def test_http_needs_the_generated_token_and_refuses_foreign_host_and_origin(tmp_path):
    import httpx

    server = Serving(tmp_path)
    try:
        body = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
        auth = {"Authorization": f"Bearer {server.token}"}
        assert httpx.post(server.url, json=body).status_code == 401
        assert httpx.post(server.url, json=body, headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert httpx.post(server.url, json=body, headers={**auth, "Host": "evil.example:80"}).status_code == 403
        assert httpx.post(server.url, json=body, headers={**auth, "Origin": "http://evil.example"}).status_code == 403
        ok = httpx.post(server.url, json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}},
            headers={**auth, "Accept": "application/json, text/event-stream", "Origin": server.url.rsplit("/", 1)[0]})
        assert ok.status_code == 200
    finally:
        code, _out, err = server.stop()
    assert code == 0
    assert re.search(r"token: \S{20,}", err), err  # generated, printed once on standard error


def test_http_sdk_client_calls_and_sigterm_stops_with_calls_in_flight_settled(tmp_path):
    import httpx
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    log = tmp_path / "log.txt"
    server = Serving(tmp_path, env={"TOOLLOOP_MCP_TOKEN": TOKEN})
    got: dict = {}

    async def main():
        async with httpx.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60) as client:
            async with streamable_http_client(server.url, http_client=client) as streams:
                async with ClientSession(streams[0], streams[1]) as session:
                    await session.initialize()
                    await session.send_ping()
                    got["tools"] = len((await session.list_tools()).tools)
                    got["login"] = await session.call_tool("login", {"user": "ann", "password": "pw-canary-77"})
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(session.call_tool, "hold_write",
                                           {"log": str(log), "key": "k", "seconds": 60})
                        deadline = time.monotonic() + 60
                        while not log.exists() and time.monotonic() < deadline:
                            await trio.sleep(0.05)  # the call is running once its log line is written
                        server.proc.send_signal(signal.SIGTERM)
                        with trio.move_on_after(30):
                            await trio.to_thread.run_sync(server.proc.wait)
                        nursery.cancel_scope.cancel()

    try:
        trio.run(main)
    except BaseException:  # noqa: BLE001 - the client may see its connection go as the server stops
        pass
    code, out, err = server.stop()
    assert code == 0, err
    assert got["tools"] == 11 and got["login"].structured_content == {"user": "ann", "token": "[REDACTED]"}
    assert "stopped: run" in err and "failed" in err
    run_id = _run_id(err)
    shown, run = receipts(server.state, run_id)
    assert [(r["tool"], r["status"]) for r in shown] == [("login", "ok"), ("hold_write", "interrupted")]
    assert run["status"] == "failed"
    for blob in [out.encode(), err.encode()] + [p.read_bytes() for p in server.state.glob("state.db*")]:
        assert TOKEN.encode() not in blob and b"pw-canary-77" not in blob


def _run_id(err: str) -> str:
    return re.search(r"run (\d{8}T\d{6}Z-[0-9a-f]{8})", err).group(1)


def test_no_token_is_refused_off_loopback_and_several_subagents_need_one_named(tmp_path, cli):
    reg = write_registry(tmp_path)
    refused = cli("mcp", "serve", str(reg), "--transport", "http", "--host", "0.0.0.0", "--no-token")
    assert refused.returncode == 2 and b"--no-token is refused" in refused.stderr
    two = write(tmp_path / "two.yml", """
        version: 1
        subagents:
          a: {runner_defaults: {tool_timeout_s: 5}, tools: {}}
          b: {runner_defaults: {tool_timeout_s: 5}, tools: {}}
    """)
    several = cli("mcp", "serve", str(two))
    assert several.returncode == 2 and b"name one with --subagent" in several.stderr, several.stderr


def test_toolloop_on_both_sides_receipts_on_each(tmp_path, cli):
    inner_reg = write_registry(tmp_path)
    inner_state = tmp_path / "inner"
    write(tmp_path / "front.yml", f"""
        version: 1
        subagents:
          f:
            runner_defaults: {{tool_timeout_s: 60}}
            tools:
              remote:
                mcp: {{command: [{sys.executable}, -m, toolloop_cli, mcp, serve, {inner_reg}, --state-dir, {inner_state}],
                       allow: [echo, boom], trusted: true}}
    """)
    write(tmp_path / "plan.yml", json.dumps({"version": 1, "registry": "front.yml", "subagent": "f", "mode": "sequential",
                                             "calls": [{"tool": "remote.echo", "args": {"n": 5}}]}))
    done = cli("run", "plan.yml", "--format", "jsonl", "--state-dir", str(tmp_path / "outer"), timeout=240)
    assert done.returncode == 0, done.stderr
    outer = jsonl(done.stdout)
    assert outer[0]["tool"] == "remote.echo" and outer[0]["status"] == "ok"
    assert outer[0]["result"] == {"received": {"n": 5}}
    inner_runs = jsonl(cli("runs", "list", "--state-dir", str(inner_state), "--format", "jsonl").stdout)
    served = [r for r in inner_runs if r["calls"]]
    assert [(r["mode"], r["status"], r["calls"]) for r in served] == [("mcp", "ok", 1)]
    shown, _run = receipts(inner_state, served[0]["run_id"])
    assert [(r["tool"], r["args"], r["status"]) for r in shown] == [("echo", {"n": 5}, "ok")]


def test_without_the_mcp_extra_the_server_exits_2_with_the_install_line(tmp_path, cli):
    from test_extras import hide

    reg = write_registry(tmp_path)
    hidden = cli("mcp", "serve", str(reg), env=hide(tmp_path / "a", "mcp"))
    assert hidden.returncode == 2 and b"pip install 'toolloop-cli[mcp]'" in hidden.stderr
    assert b"Traceback" not in hidden.stderr
    http = cli("mcp", "serve", str(reg), "--transport", "http", env=hide(tmp_path / "b", "hypercorn"))
    assert http.returncode == 2 and b"hypercorn is not installed" in http.stderr


def test_sigterm_stops_a_stdio_server_whose_client_keeps_standard_input_open(tmp_path):
    reg = write_registry(tmp_path)
    log = tmp_path / "log.txt"
    proc = subprocess.Popen([sys.executable, "-m", "toolloop_cli", "mcp", "serve", str(reg), "--state-dir",
                             str(tmp_path / "state")], cwd=tmp_path, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    try:
        messages = [
            {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}},
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
             "params": {"name": "hold_write", "arguments": {"log": str(log), "key": "k", "seconds": 60}}},
        ]
        proc.stdin.write(b"".join(json.dumps(m).encode() + b"\n" for m in messages))
        proc.stdin.flush()
        assert json.loads(proc.stdout.readline())["id"] == 1
        deadline = time.monotonic() + 60
        while not log.exists() and time.monotonic() < deadline:
            time.sleep(0.05)  # the call is running once its log line is written
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
    finally:
        proc.kill()
    err = proc.stderr.read().decode()
    assert code == 0, err
    shown, run = receipts(tmp_path / "state", _run_id(err))
    assert [(r["tool"], r["status"]) for r in shown] == [("hold_write", "interrupted")]
    assert run["status"] == "failed" and "stopped: run" in err
