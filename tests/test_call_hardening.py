"""One call against careless tools: results JSON cannot hold, arguments changed in place, a
non-idempotent write that times out, damaged cache entries."""

from __future__ import annotations

import json

import pytest

from conftest import APP, jsonl, write
from test_calls_common import admitted, run_plan


def rtool(fn: str, **extra) -> dict:
    return {"callable": f"testapp.results:{fn}", "description": fn, "input_schema": extra.pop("input_schema", {}),
            "output_schema": extra.pop("output_schema", {}), **extra}


@pytest.mark.parametrize("fn, status", [("nan", "invalid_output"), ("infinity", "invalid_output"),
                                        ("a_date", "invalid_output"), ("big_int", "ok")])
def test_results_json_cannot_hold_are_invalid_output_and_big_integers_pass(tmp_path, fn, status):
    plan = admitted(tmp_path, {fn: rtool(fn)}, calls=[{"tool": fn, "args": {}}])
    got, _, _ = run_plan(plan, mock=False)
    assert got[0]["status"] == status, got[0]
    if status == "ok":
        assert got[0]["result"] == {"n": 2**100}
    else:
        assert got[0]["error"]["kind"] == "not_json" and got[0]["result"] is None


def test_a_tool_that_changes_its_arguments_in_place_changes_no_receipt(tmp_path):
    tools = {"pop": rtool("pop_password", redact=["/creds/password"])}
    plan = admitted(tmp_path, tools, calls=[{"tool": "pop", "args": {"creds": {"user": "ada", "password": "hunter2"}}}])
    got, _, _ = run_plan(plan, mock=False)
    assert got[0]["status"] == "ok"
    assert got[0]["args"] == {"creds": {"user": "ada", "password": "[REDACTED]"}}
    assert plan.lanes[0].calls[0].args == {"creds": {"user": "ada", "password": "hunter2"}}


def test_a_non_idempotent_write_is_never_tried_again_after_a_timeout(tmp_path):
    target = tmp_path / "writes.txt"
    tools = {"w": rtool("slow_write", effect="write", timeout_s=0.2,
                        retry={"max_attempts": 3, "backoff_s": 0.01, "on": ["error"]})}
    plan = admitted(tmp_path, tools, calls=[{"tool": "w", "args": {"path": str(target), "seconds": 0.5}}])
    got, _, _ = run_plan(plan, mock=False)
    assert got[0]["status"] == "timeout" and got[0]["attempts"] == 1


def test_damaged_cache_entries_are_misses_with_a_warning(cli, tmp_path):
    write(tmp_path / "reg.yml", f"""
        version: 1
        app_root: {APP}
        subagents:
          t:
            runner_defaults: {{tool_timeout_s: 5}}
            tools:
              look:
                callable: testapp.tools:echo
                description: Cached.
                cacheable: true
                input_schema: {{type: object}}
                output_schema: {{type: object, required: [received]}}
    """)
    plan = write(tmp_path / "plan.yml", json.dumps({"version": 1, "registry": "reg.yml", "subagent": "t",
                                                    "mode": "sequential", "calls": [{"tool": "look", "args": {"k": 1}}]}))
    first = cli("run", str(plan))
    assert jsonl(first.stdout)[0]["cache"] == "miss"
    import sqlite3

    db = sqlite3.connect(tmp_path / ".toolloop" / "state.db")
    for damage in ("{not json", '{"other": 1}'):
        db.execute("UPDATE cache SET result=?", (damage,))
        db.commit()
        proc = cli("run", str(plan))
        assert proc.returncode == 0, proc.stderr.decode()
        receipt = jsonl(proc.stdout)[0]
        assert receipt["status"] == "ok" and receipt["cache"] == "miss" and receipt["result"] == {"received": {"k": 1}}
        assert b"warning: cache entry of 'look' ignored" in proc.stderr
    assert jsonl(cli("run", str(plan)).stdout)[0]["cache"] == "hit"  # the entry was replaced
    db.close()


def test_integers_beyond_64_bits_stay_exact_through_run_and_call(cli, tmp_path):
    big = 2**100
    write(tmp_path / "reg.yml", f"""
        version: 1
        app_root: {APP}
        subagents:
          t:
            runner_defaults: {{tool_timeout_s: 5}}
            tools:
              echo:
                callable: testapp.tools:echo
                description: Returns its arguments.
                input_schema: {{type: object}}
                output_schema: {{}}
    """)
    plan = write(tmp_path / "plan.yml", json.dumps({"version": 1, "registry": "reg.yml", "subagent": "t",
                                                    "mode": "sequential", "calls": [{"tool": "echo", "args": {"n": big}}]}))
    ran = cli("run", str(plan), "--format", "jsonl")
    assert ran.returncode == 0, ran.stderr.decode()
    assert f'"received":{{"n":{big}}}' in ran.stdout.decode()
    called = cli("call", str(tmp_path / "reg.yml"), "t", "echo", "--args", f'{{"n": {big}}}', "--format", "jsonl")
    assert called.returncode == 0, called.stderr.decode()
    assert f'"received":{{"n":{big}}}' in called.stdout.decode()
    shown = cli("runs", "show", jsonl(ran.stdout)[-1]["run_id"], "--format", "jsonl")
    assert f'"n":{big}' in shown.stdout.decode()
