"""A hostile model, a careless approver and every byte toolloop writes: no secret lands anywhere.

One end-to-end scenario over the real command line, real SQLite and real HTTP on 127.0.0.1 (the
scripted model server and ``toolloop serve``). The model echoes the API key in a tool's
arguments, in a decision's reason and in its final answer; it proposes a value for a redacted
field and repeats it in another tool's arguments and in a reason; an approver types new values
into a redacted field with ``approve --args`` and through the web API. Then every byte toolloop
wrote is searched for each secret: standard output and error of every command, the state folder
(the database, its write-ahead log), the audit files, ``runs export``, ``runs show``,
``approvals list``, the web API's answers and the run's page."""

from __future__ import annotations

import json
import os
from pathlib import Path

from conftest import APP, write
from modelserver import Reply
from regkit import openai_profile
from servekit import Served

KEY = "sk-hostile-KEY-5f1c0e9d"  # the router's API key, which the model echoes
PROPOSED = "model-proposed-PW-81d2"  # a value the model proposes for a redacted field
EDITED_ROUTED = "edited-routed-PW-77a3"  # typed into a redacted field by approve --args (routed run)
EDITED_CLI = "edited-cli-PW-2e6b"  # typed by approve --args (batch run)
EDITED_API = "edited-api-PW-3c9e"  # typed through the web API (batch run)
PLAN_PW = "plan-file-PW-0b4d"  # a redacted value the plan file gives
CANARIES = (KEY, PROPOSED, EDITED_ROUTED, EDITED_CLI, EDITED_API, PLAN_PW)

REGISTRY = f"""
version: 1
app_root: {APP}
subagents:
  s:
    runner_defaults: {{tool_timeout_s: 30}}
    tools:
      echo:
        callable: testapp.tools:echo
        description: Returns the arguments it got.
        input_schema: {{type: object}}
        output_schema: {{}}
      vault:
        callable: testapp.tools:secret_echo
        description: Checks a password; redacted everywhere.
        redact: [/password, /token]
        input_schema: {{type: object, required: [user, password], properties: {{user: {{type: string}}, password: {{type: string}}}}}}
        output_schema: {{}}
      login:
        callable: testapp.tools:secret_echo
        description: Logs in; a person approves every call.
        effect: write
        approval: required
        redact: [/password, /token]
        input_schema: {{type: object, required: [user, password], properties: {{user: {{type: string}}, password: {{type: string}}}}}}
        output_schema: {{}}
"""


def call(tool: str, args: dict, reason: str) -> str:
    return json.dumps({"action": "call", "tool": tool, "args": args, "reason": reason})


def test_a_hostile_model_and_an_approver_leave_no_secret_in_any_byte_toolloop_writes(tmp_path, model_server, cli):
    write(tmp_path / "reg.yml", REGISTRY)
    profile = openai_profile(model_server.openai_base, "TL_HOSTILE_KEY")
    write(tmp_path / "routed.yml", f"""
        version: 1
        registry: reg.yml
        subagent: s
        mode: routed
        goal: Log in.
        context: {{who: test}}
        allowed_tools: [echo, vault, login]
        router_profile: {profile}
        final_profile: {profile}
        budget: {{max_iterations: 8, max_tokens: 100000, max_tool_calls: 6, timeout_s: 60}}
        final_schema: {{type: object, required: [answer], properties: {{answer: {{type: string}}}}}}
    """)
    write(tmp_path / "batch.yml", json.dumps({
        "version": 1, "registry": "reg.yml", "subagent": "s", "mode": "parallel", "max_concurrency": 2,
        "lanes": [{"item_key": lane, "calls": [{"call_key": "in", "tool": "login",
                                                "args": {"user": "ada", "password": PLAN_PW}}]}
                  for lane in ("cli", "api")]}))
    env = {"TL_HOSTILE_KEY": KEY}
    written: dict[str, bytes] = {}

    def toolloop(name: str, *args: str, code: int = 0) -> bytes:
        proc = cli(*args, env=env)
        written[f"{name} stdout"], written[f"{name} stderr"] = proc.stdout, proc.stderr
        state_folder(f"after {name}")  # the write-ahead log too, while it exists
        assert proc.returncode == code, (name, proc.returncode, proc.stderr.decode())
        return proc.stdout

    def state_folder(when: str) -> None:
        for path in (tmp_path / ".toolloop").glob("*"):
            if path.is_file():
                written[f"{when}: {path.name}"] = path.read_bytes()

    model_server.script(
        Reply(call("echo", {"note": KEY}, f"sending the key {KEY} along")),  # the key in arguments and a reason
        Reply(call("vault", {"user": "ada", "password": PROPOSED}, "a password I made up")),
        Reply(call("echo", {"note": f"it was {PROPOSED}"}, f"repeating {PROPOSED}")),  # repeated elsewhere
        Reply(call("login", {"user": "ada", "password": PROPOSED}, "log in")),  # gated: the run pauses
    )
    out = toolloop("run routed", "run", "routed.yml", "--format", "jsonl", "--audit", "audit-run.jsonl", code=4)
    routed = json.loads(out.splitlines()[-1])["run_id"]
    toolloop("approve routed", "approve", routed, "4", "--approve", "--args",
             json.dumps({"user": "ada", "password": EDITED_ROUTED}))
    model_server.script(
        Reply(json.dumps({"action": "final", "reason": f"done, the key is {KEY}"})),  # the key in a reason
        Reply(json.dumps({"answer": f"your key is {KEY}"})),  # and in the final answer
    )
    out = toolloop("resume routed", "resume", routed, "--format", "jsonl", "--audit", "audit-resume.jsonl")
    records = [json.loads(line) for line in out.splitlines()]
    receipts = {r["iteration"]: r for r in records if r["type"] == "receipt"}
    # the gated call's arguments came from the model and held a redacted value the journal never
    # kept: on resume it is interrupted, never run with the marker in its place
    assert receipts[4]["status"] == "interrupted" and receipts[4]["attempts"] == 0
    assert receipts[2]["status"] == "ok" and receipts[2]["args"] == {"user": "ada", "password": "[REDACTED]"}
    assert records[-1]["outcome"] == "final" and records[-1]["final"] == {"answer": "your key is [REDACTED]"}

    out = toolloop("run batch", "run", "batch.yml", "--format", "jsonl", "--audit", "audit-batch.jsonl", code=4)
    batch = json.loads(out.splitlines()[-1])["run_id"]
    toolloop("approve batch", "approve", batch, "in", "--item", "cli", "--approve", "--args",
             json.dumps({"user": "ada", "password": EDITED_CLI}))
    assert b"never stored" in written["approve batch stderr"]  # the approver is told what resume will do
    served = Served(tmp_path, env=env)
    try:
        with served.client() as api:
            answered = api.post(f"/api/approvals/{batch}/in?item=api",
                                json={"decision": "approve", "args": {"user": "ada", "password": EDITED_API}})
            assert answered.status_code == 200, answered.text
            assert "never stored" in answered.json()["note"]
            state_folder("while serving")
            for path in ("/api/runs", "/api/approvals", f"/runs/{routed}", f"/runs/{batch}", "/inbox"):
                res = api.get(path)
                assert res.status_code == 200, (path, res.text)
                written[f"GET {path}"] = res.content
            for rid in (routed, batch):
                for path in (f"/api/runs/{rid}", f"/api/runs/{rid}/records"):
                    res = api.get(path)
                    assert res.status_code == 200, (path, res.text)
                    written[f"GET {path}"] = res.content
    finally:
        served.stop()
        written["serve log"] = "\n".join(served.log).encode()
    out = toolloop("resume batch", "resume", batch, "--format", "jsonl", "--audit", "audit-batch-resume.jsonl", code=1)
    done = [json.loads(line) for line in out.splitlines() if json.loads(line)["type"] == "receipt"]
    # an edit that typed a new secret cannot be acted on by another process: interrupted, not run
    assert sorted((r["item_key"], r["status"]) for r in done) == [("api", "interrupted"), ("cli", "interrupted")]

    # a replay reuses the recorded answers: the read call the model built with a redacted value is
    # not run again with the marker in its place (a difference, reported)
    out = toolloop("replay routed", "replay", routed, "--format", "jsonl", code=1)
    replayed = {r["iteration"]: r for r in map(json.loads, out.splitlines()) if r["type"] == "receipt"}
    assert replayed[2]["status"] == "interrupted" and replayed[1]["status"] == "ok"
    for rid in (routed, batch):
        toolloop(f"export {rid}", "runs", "export", rid)
        toolloop(f"show {rid}", "runs", "show", rid)
        toolloop(f"show {rid} jsonl", "runs", "show", rid, "--format", "jsonl")
    toolloop("runs list", "runs", "list", "--format", "jsonl")
    toolloop("approvals list", "approvals", "list", "--format", "jsonl")
    for root, _dirs, files in os.walk(tmp_path):
        for name in files:
            path = Path(root) / name
            if path.suffix in (".jsonl",) or ".toolloop" in path.parts:
                written[str(path.relative_to(tmp_path))] = path.read_bytes()
    state_folder("at the end")
    assert any(name.endswith("state.db") for name in written) and any(name.endswith(".db-wal") for name in written)
    found = sorted({(where, secret) for where, data in written.items() for secret in CANARIES
                    for form in forms(secret) if form in data})
    assert not found, found


def forms(secret: str) -> list[bytes]:
    """The secret as any writer might spell it."""
    return [f.encode() for f in {secret, json.dumps(secret)[1:-1], repr(secret)[1:-1]}] + [secret.encode("utf-16-le")]
