"""A run loads MCP's modules only where its registry declares an MCP server: a one-call plan of a
plain callable imports neither ``contract/mcp.py`` nor the token store, and a plan whose registry
declares a server (a real stdio MCP server) loads them and runs as before."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from conftest import ROOT
from test_lazy_imports import run_watching

WATCHED = ("toolloop_cli.contract.mcp", "toolloop_cli.contract.mcp_tokens", "toolloop_cli.contract.mcp_servers")
SERVER = ROOT / "tests" / "mcp_stdio_server.py"


def _run(tmp_path: Path, *args: str) -> tuple[int, dict, str]:
    return run_watching(tmp_path, *args, watched=WATCHED)


def _plan(tmp_path: Path, tool: str) -> None:
    (tmp_path / "app.py").write_text("async def noop(**kw):\n    return {}\n")
    (tmp_path / "reg.yml").write_text(f"version: 1\nsubagents:\n  b:\n    tools:\n      t: {tool}\n")
    (tmp_path / "one.yml").write_text(
        "version: 1\nregistry: reg.yml\nsubagent: b\nmode: sequential\ncalls:\n  - {tool: t, args: {text: hi}}\n")


def test_a_run_without_an_mcp_server_loads_no_mcp_module(tmp_path):
    _plan(tmp_path, "{callable: 'app:noop', description: does nothing, timeout_s: 5, input_schema: {}, output_schema: {}}")
    code, imported, out = _run(tmp_path, "run", "one.yml", "--format", "jsonl", "--state-dir", str(tmp_path / "s"))
    assert code == 0, out
    assert json.loads(out.splitlines()[0])["status"] == "ok"
    assert imported == dict.fromkeys(WATCHED, False)


def test_a_run_with_an_mcp_server_loads_them_and_runs(tmp_path):
    command = json.dumps([sys.executable, str(SERVER)])
    _plan(tmp_path, f"{{mcp: {{command: {command}, allow: [echo]}}, effect: read, timeout_s: 20}}")
    code, imported, out = _run(tmp_path, "run", "one.yml", "--format", "jsonl", "--state-dir", str(tmp_path / "s"))
    assert code == 0, out
    receipt = json.loads(out.splitlines()[0])
    assert receipt["status"] == "ok" and "hi" in json.dumps(receipt["result"]), receipt
    assert imported == dict.fromkeys(WATCHED, True)
