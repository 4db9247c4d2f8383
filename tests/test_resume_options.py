"""resume --halt replaces the run's policy; --accept-contract-change goes on under a changed
registry and says so; --order completion prints receipts as they are committed."""

from __future__ import annotations

import json

from conftest import APP, jsonl, write

REG = """
version: 1
app_root: {app}
subagents:
  t:
    runner_defaults: {{tool_timeout_s: 10}}
    tools:
      echo:
        callable: testapp.tools:echo
        description: {desc}
        input_schema: {{type: object}}
        output_schema: {{}}
      boom:
        callable: testapp.tools:boom
        description: Always raises.
        input_schema: {{type: object}}
        output_schema: {{}}
      hold:
        callable: testapp.tools:hold
        description: Waits.
        input_schema: {{type: object, required: [key], properties: {{key: {{type: string}}, seconds: {{type: number}}}}}}
        output_schema: {{}}
"""


def setup(tmp_path, desc: str = "Returns its arguments."):
    write(tmp_path / "reg.yml", REG.format(app=APP, desc=desc))


def plan(tmp_path, body: dict):
    return write(tmp_path / "plan.yml", json.dumps({"version": 1, "registry": "reg.yml", "subagent": "t", **body}))


def test_resume_takes_a_new_halt_policy(cli, tmp_path):
    setup(tmp_path)
    lanes = [{"item_key": f"l{i}", "calls": [{"tool": "boom", "args": {}}]} for i in range(4)]
    p = plan(tmp_path, {"mode": "parallel", "max_concurrency": 1, "lanes": lanes})
    first = cli("run", str(p), "--halt", "soon,fail=1")
    assert first.returncode == 4
    rid = jsonl(first.stdout)[-1]["run_id"]
    assert [r["status"] for r in jsonl(first.stdout)[:-1]] == ["error", "skipped", "skipped", "skipped"]
    again = cli("resume", rid, "--halt", "soon,fail=100%")
    assert again.returncode == 1  # every lane ran: the new policy never tripped
    assert [r["status"] for r in jsonl(again.stdout)[:-1]] == ["error", "error", "error", "error"]
    assert cli("resume", rid, "--halt", "later").returncode == 2


def test_a_changed_registry_needs_accept_contract_change(cli, tmp_path):
    setup(tmp_path)
    p = plan(tmp_path, {"mode": "sequential", "calls": [{"tool": "boom", "args": {}}, {"tool": "echo", "args": {}}]})
    rid = jsonl(cli("run", str(p)).stdout)[-1]["run_id"]
    setup(tmp_path, desc="Returns what it got.")  # echo, which has a call left, changed
    refused = cli("resume", rid, "--retry-failed")
    assert refused.returncode == 3 and b"echo" in refused.stderr and b"--accept-contract-change" in refused.stderr
    done = cli("resume", rid, "--retry-failed", "--accept-contract-change")
    summary = jsonl(done.stdout)[-1]
    assert summary["contract_changed"] is True and summary["counts"]["error"] == 1
    assert cli("resume", rid, "--retry-failed").returncode == 1  # the run now holds the new contract


def test_order_completion_prints_as_calls_finish_with_the_same_journal(cli, tmp_path):
    setup(tmp_path)
    lanes = [{"item_key": "slow", "calls": [{"tool": "hold", "args": {"key": "s", "seconds": 1.5}}]},
             {"item_key": "fast", "calls": [{"tool": "hold", "args": {"key": "f", "seconds": 0}}]}]
    p = plan(tmp_path, {"mode": "parallel", "max_concurrency": 2, "lanes": lanes})
    proc = cli("run", str(p), "--order", "completion")
    receipts = jsonl(proc.stdout)[:-1]
    assert [r["item_key"] for r in receipts] == ["fast", "slow"]
    assert [r["seq"] for r in receipts] == [1, 0]
    shown = jsonl(cli("runs", "show", jsonl(proc.stdout)[-1]["run_id"], "--format", "jsonl").stdout)[:-1]
    assert [r["item_key"] for r in shown] == ["slow", "fast"]  # the journal keeps input order
