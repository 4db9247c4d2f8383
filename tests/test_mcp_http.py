"""MCP tools over Streamable HTTP against the mcp SDK's own server on 127.0.0.1
(tests/mcp_http_server.py): a required header from the environment, sent and hidden everywhere;
a per-request timeout; annotations trusted only when the registry says so; schema hashes in
toolloop.lock, and a server whose schemas changed refused by run and validate."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, jsonl, write

TOKEN = "tok-mcp-http-canary-5b1e"
SERVER = ROOT / "tests" / "mcp_http_server.py"


class Server:
    def __init__(self, variant: int = 1):
        env = {**os.environ, "MCP_TEST_TOKEN": TOKEN}
        self.proc = subprocess.Popen([sys.executable, str(SERVER), "--variant", str(variant)], env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        line = self.proc.stdout.readline().strip()  # type: ignore[union-attr]
        assert line.isdigit(), f"the MCP server did not start ({line!r})"
        self.url = f"http://127.0.0.1:{line}/mcp"

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def server():
    s = Server()
    yield s
    s.stop()


def registry(tmp_path, url: str, tools: str = "", trusted: bool = False, timeout: float = 10) -> Path:
    return write(tmp_path / "reg.yml", f"""
        version: 1
        subagents:
          w:
            runner_defaults: {{tool_timeout_s: {timeout}}}
            tools:
              tickets:
                mcp: {{url: "{url}", headers_env: {{X-Api-Key: TICKETS_TOKEN}},
                       allow: [lookup, add_comment, delete_ticket, no_hints, slow, whoami, fail_loudly],
                       trusted: {str(trusted).lower()}}}
              {tools}
    """)


def plan(tmp_path, calls: list[dict], name: str = "plan.yml") -> Path:
    return write(tmp_path / name, json.dumps(
        {"version": 1, "registry": "reg.yml", "subagent": "w", "mode": "sequential", "calls": calls}))


def env(**more: str) -> dict:
    return {"TICKETS_TOKEN": TOKEN, **more}


def everything_written(tmp_path, *procs) -> bytes:
    """Standard output and error of the commands, the audit file and the whole state folder."""
    out = b"".join(p.stdout + p.stderr for p in procs)
    for path in tmp_path.rglob("*"):
        if path.is_file() and path.suffix not in (".yml", ".py"):
            out += path.read_bytes()
    return out


def test_tools_run_over_http_with_the_header_and_its_value_never_appears(cli, tmp_path, server):
    registry(tmp_path, server.url, trusted=True)
    p = plan(tmp_path, [
        {"tool": "tickets.lookup", "args": {"q": "OPS-1"}},
        {"tool": "tickets.add_comment", "args": {"ticket": "OPS-1", "text": "hello"}},
        {"tool": "tickets.whoami", "args": {}},
    ])
    ran = cli("run", str(p), "--format", "jsonl", "--audit", "audit.jsonl", env=env())
    assert ran.returncode == 0, ran.stderr.decode()
    receipts = jsonl(ran.stdout)[:-1]
    assert [r["status"] for r in receipts] == ["ok", "ok", "ok"]
    assert json.loads(receipts[0]["result"]["content"][0]["text"]) == {"q": "OPS-1", "found": True}
    assert json.loads(receipts[2]["result"]["content"][0]["text"])["token"] == "[REDACTED]"
    failing = cli("run", str(plan(tmp_path, [{"tool": "tickets.fail_loudly", "args": {}}], "fail.yml")),
                  "--format", "jsonl", env=env())
    assert failing.returncode == 1
    error = jsonl(failing.stdout)[0]["error"]
    assert error["message"] == "Error executing tool fail_loudly: token [REDACTED] is not allowed here"
    shown = cli("runs", "show", jsonl(ran.stdout)[-1]["run_id"], "--contract")
    assert b"TICKETS_TOKEN" in shown.stdout  # the variable's name is part of the contract, never its value
    assert TOKEN.encode() not in everything_written(tmp_path, ran, failing, shown)


def test_without_the_header_the_server_refuses_and_admission_says_so(cli, tmp_path, server):
    registry(tmp_path, server.url)
    p = plan(tmp_path, [{"tool": "tickets.lookup", "args": {"q": "x"}}])
    unset = cli("run", str(p), "--format", "jsonl")
    assert unset.returncode == 3, unset.stderr.decode()
    assert b"TL313" in unset.stderr and b"environment variable TICKETS_TOKEN" in unset.stderr
    wrong = cli("run", str(p), "--format", "jsonl", env={"TICKETS_TOKEN": "not-the-token"})
    assert wrong.returncode == 3 and b"TL313" in wrong.stderr and b"could not be reached" in wrong.stderr
    assert b"not-the-token" not in wrong.stderr and b"Traceback" not in wrong.stderr
    port = server.url.split(":")[2].split("/")[0]
    # a wrong token is said as what it is: the server's 401, where, and which variable to check
    assert f"http://127.0.0.1:{port} answered HTTP 401 Unauthorized: check the value of TICKETS_TOKEN".encode() \
        in wrong.stderr


def test_annotations_give_the_effect_only_from_a_trusted_server(cli, tmp_path, server):
    def effects(trusted: bool) -> tuple[dict, bytes]:
        registry(tmp_path, server.url, trusted=trusted, tools="""
              pinned:
                mcp: {url: "%s", headers_env: {X-Api-Key: TICKETS_TOKEN}, allow: [delete_ticket]}
                effect: read""" % server.url)
        proc = cli("tools", "reg.yml", "--format", "jsonl", env=env())
        assert proc.returncode == 0, proc.stderr.decode()
        lint = cli("validate", "reg.yml", "--format", "json")
        return {r["tool"]: r["effect"] for r in jsonl(proc.stdout)}, lint.stdout

    trusted, lint = effects(True)
    assert trusted == {"tickets.lookup": "read", "tickets.add_comment": "write", "tickets.delete_ticket": "destructive",
                       "tickets.no_hints": "destructive",  # no hints: the specification's defaults
                       "tickets.slow": "read", "tickets.whoami": "read", "tickets.fail_loudly": "read",
                       "pinned": "read"}  # the registry's effect wins
    assert "TL316" not in lint.decode()
    untrusted, lint = effects(False)
    assert set(untrusted.values()) == {"write", "read"} and untrusted["pinned"] == "read"
    assert all(v == "write" for k, v in untrusted.items() if k != "pinned")
    (warning,) = [f for f in json.loads(lint) if f["code"] == "TL316"]
    assert warning["level"] == "warning" and "tickets" in warning["message"] and warning["line"] == 6


def test_a_trusted_server_can_make_a_write_idempotent_an_untrusted_one_cannot(tmp_path, server):
    # the annotations decide at-most-once delivery (an idempotent write may run again on resume)
    from toolloop_cli.contract.registry import load_registry
    from toolloop_cli.plan.admit import admit_plan

    registry(tmp_path, server.url, trusted=True)
    os.environ["TICKETS_TOKEN"] = TOKEN
    try:
        admitted = admit_plan(plan(tmp_path, [{"tool": "tickets.add_comment", "args": {"ticket": "a", "text": "b"}}]))
        tool = admitted.subagent.tools["tickets.add_comment"]
        assert (tool.effect, tool.idempotent) == ("write", True)
        registry(tmp_path, server.url, trusted=False)
        contract, _ = load_registry(tmp_path / "reg.yml")
        tool = contract.subagents["w"].tools["tickets.add_comment"]
        assert (tool.effect, tool.idempotent) == ("write", False)
    finally:
        os.environ.pop("TICKETS_TOKEN", None)


def test_a_tool_timeout_bounds_each_request(cli, tmp_path, server):
    registry(tmp_path, server.url, timeout=1)
    p = plan(tmp_path, [{"tool": "tickets.slow", "args": {"seconds": 30}}, {"tool": "tickets.lookup", "args": {"q": "x"}}])
    ran = cli("run", str(p), "--format", "jsonl", env=env())
    assert ran.returncode == 1, ran.stderr.decode()
    first, second = jsonl(ran.stdout)[:2]
    assert first["status"] == "timeout" and first["duration_ms"] < 20_000
    assert second["status"] == "skipped"


def test_answers_that_outlive_their_timeout_leave_standard_error_to_toolloop(cli, tmp_path, server):
    """The SDK logged a traceback when an answer came back after its request had timed out:
    standard error carries toolloop's lines only."""
    registry(tmp_path, server.url, timeout=1, trusted=True)
    lanes = [{"item_key": "late", "calls": [{"tool": "tickets.slow", "args": {"seconds": 1.5}}]},
             {"item_key": "busy", "calls": [{"tool": "tickets.slow", "args": {"seconds": 0.6}} for _ in range(5)]}]
    p = write(tmp_path / "par.yml", json.dumps({"version": 1, "registry": "reg.yml", "subagent": "w",
                                                "mode": "parallel", "max_concurrency": 2, "lanes": lanes}))
    ran = cli("run", str(p), "--format", "jsonl", env=env())
    assert [ln for ln in ran.stderr.decode().splitlines() if not ln.startswith("toolloop: ")] == []
    assert ran.returncode == 1
    statuses = [r["status"] for r in jsonl(ran.stdout)[:-1]]
    assert statuses == ["timeout"] + ["ok"] * 5


def test_lock_records_schema_hashes_and_a_changed_server_is_refused(cli, tmp_path, server):
    registry(tmp_path, server.url, trusted=True)
    locked = cli("lock", "reg.yml", env=env())
    assert locked.returncode == 0, locked.stderr.decode()
    lock = json.loads((tmp_path / "toolloop.lock").read_text())["registries"]["reg.yml"]
    assert sorted(lock["mcp"]) == sorted(f"w/tickets.{n}" for n in (
        "lookup", "add_comment", "delete_ticket", "no_hints", "slow", "whoami", "fail_loudly"))
    p = plan(tmp_path, [{"tool": "tickets.lookup", "args": {"q": "x"}}])
    assert cli("run", str(p), "--format", "jsonl", env=env()).returncode == 0
    assert cli("validate", "reg.yml", env=env()).returncode == 0

    changed = Server(variant=2)  # the same tools, but lookup now takes another argument
    try:
        registry(tmp_path, changed.url, trusted=True)
        refused = cli("run", str(plan(tmp_path, [{"tool": "tickets.whoami", "args": {}}], "p2.yml")),
                      "--format", "jsonl", env=env())
        assert refused.returncode == 3, refused.stderr.decode()
        lines = [ln for ln in refused.stderr.decode().splitlines() if " TL372 " in ln]
        assert len(lines) == 1 and lines[0].startswith("reg.yml:6:")
        assert "the schemas of tool 'lookup'" in lines[0] and "changed since toolloop.lock" in lines[0]
        lint = cli("validate", "reg.yml", "--format", "json", env=env())
        assert lint.returncode == 1
        assert [f["code"] for f in json.loads(lint.stdout) if f["level"] == "error"] == ["TL372"]
        assert cli("lock", "reg.yml", env=env()).returncode == 0  # reviewed: lock again
        assert cli("run", str(plan(tmp_path, [{"tool": "tickets.lookup", "args": {"q": "x", "limit": 2}}], "p3.yml")),
                   "--format", "jsonl", env=env()).returncode == 0
    finally:
        changed.stop()


@pytest.mark.parametrize("mcp, message", [
    ('{allow: [x]}', "needs exactly one of 'command' or 'url', found neither"),
    ('{command: [srv], url: "http://127.0.0.1:1/mcp", allow: [x]}', "found both"),
    ('{url: "ftp://127.0.0.1/mcp", allow: [x]}', "must be an http:// or https:// address"),
    ('{url: "http://127.0.0.1:1/mcp", env: {A: b}, allow: [x]}', "mcp.env of tool 't'"),
    ('{command: [srv], headers_env: {A: B}, allow: [x]}', "mcp.headers_env of tool 't'"),
])
def test_a_server_declaration_that_is_neither_stdio_nor_http_is_a_finding(cli, tmp_path, mcp, message):
    write(tmp_path / "reg.yml", f"""
        version: 1
        subagents:
          w:
            runner_defaults: {{tool_timeout_s: 5}}
            tools:
              t:
                mcp: {mcp}
                effect: read
    """)
    proc = cli("validate", "reg.yml", "--format", "json")
    assert proc.returncode == 1
    (finding,) = json.loads(proc.stdout)
    assert finding["code"] == "TL317" and message in finding["message"]


def test_mcp_requests_carry_the_calls_idempotency_key_in_meta(cli, tmp_path, server):
    from toolloop_cli.engine.identity import idempotency_key

    write(tmp_path / "reg.yml", f"""
        version: 1
        subagents:
          w:
            runner_defaults: {{tool_timeout_s: 10}}
            tools:
              meta:
                mcp: {{url: "{server.url}", headers_env: {{X-Api-Key: TICKETS_TOKEN}}, allow: [request_meta],
                       trusted: true}}
    """)
    ran = cli("run", str(plan(tmp_path, [{"tool": "meta", "args": {}}])), "--format", "jsonl", env=env())
    assert ran.returncode == 0, ran.stderr.decode()
    receipt, summary = jsonl(ran.stdout)
    shown = receipt["result"]
    key = shown.get("key") if "key" in shown else json.loads(shown["content"][0]["text"])["key"]
    assert key == idempotency_key(summary["run_id"], 0)
