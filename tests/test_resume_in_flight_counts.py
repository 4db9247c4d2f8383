"""A write settled ``interrupted`` on resume (its start was committed, it has no receipt: it may
have happened) counts as one call toward its tool's ``max_calls``, in the session that settles it
and in every later one that keeps its receipt, as a call that ran does. Real subprocesses (the run
is killed while the write is in flight), a real state database."""

from __future__ import annotations

import json

from conftest import APP, jsonl, write
from test_resume import kill_when_logged, last_run_id, popen
from test_store import read_log


def tool(fn: str, **extra: object) -> dict:
    return {"callable": f"testapp.tools:{fn}", "description": fn, "input_schema": {"type": "object"},
            "output_schema": {}, **extra}


def setup(tmp_path, later: list[dict]):
    """Lane ``w`` makes the one write ``once`` allows; the lane after it dispatches another."""
    write(tmp_path / "reg.yml", json.dumps({"version": 1, "app_root": str(APP), "subagents": {"t": {
        "runner_defaults": {"tool_timeout_s": 30},
        "tools": {"once": tool("log_gate", effect="write", max_calls=1),
                  "router": tool("route_sync", dispatch=["once"]),
                  "gated": tool("echo", approval="required")}}}}))
    log, gate = tmp_path / "log", tmp_path / "gate"
    args = {"log": str(log), "gate": str(gate)}
    lanes = [{"item_key": "w", "calls": [{"call_key": "write", "tool": "once", "args": {**args, "key": "w"}}]},
             {"item_key": "d", "calls": [*later, {"call_key": "route", "tool": "router", "args": {
                 "target": "once", "args": {**args, "key": "again"}, "catch": True}}]}]
    body = {"version": 1, "registry": "reg.yml", "subagent": "t", "mode": "parallel", "max_concurrency": 1,
            "lanes": lanes}
    return write(tmp_path / "plan.yml", json.dumps(body)), log, gate


def crash_in_flight(tmp_path, plan, log, gate) -> str:
    proc = popen(tmp_path, "run", str(plan), "--format", "jsonl")
    kill_when_logged(tmp_path, proc, log, 1)  # the write started: its start marker is committed
    gate.touch()
    return last_run_id(tmp_path)


def shown(records: list[dict]) -> list[tuple]:
    return [(r["item_key"], r["call_key"] if r.get("parent_receipt_id") is None else "dispatched", r["status"])
            for r in records if r["type"] == "receipt"]


def test_a_write_settled_interrupted_on_resume_counts_toward_max_calls(tmp_path, cli):
    plan, log, gate = setup(tmp_path, [])
    run_id = crash_in_flight(tmp_path, plan, log, gate)
    done = cli("resume", run_id, "--format", "jsonl")
    records = jsonl(done.stdout)
    assert shown(records) == [("w", "write", "interrupted"), ("d", "route", "ok"),
                              ("d", "dispatched", "budget_exceeded")], records
    assert read_log(log) == ["w"]  # the write that may have happened is the tool's one call


def test_a_kept_interrupted_write_counts_toward_max_calls_on_a_later_resume(tmp_path, cli):
    plan, log, gate = setup(tmp_path, [{"call_key": "ask", "tool": "gated", "args": {}}])
    run_id = crash_in_flight(tmp_path, plan, log, gate)
    paused = cli("resume", run_id, "--format", "jsonl")  # the write settles interrupted; lane d waits
    assert paused.returncode == 4, paused.stderr.decode()
    assert shown(jsonl(paused.stdout))[0] == ("w", "write", "interrupted")
    assert cli("approve", run_id, "--all-pending", "--approve").returncode == 0
    done = cli("resume", run_id, "--format", "jsonl")
    records = jsonl(done.stdout)
    assert shown(records) == [("w", "write", "interrupted"), ("d", "ask", "ok"), ("d", "route", "ok"),
                              ("d", "dispatched", "budget_exceeded")], records
    assert read_log(log) == ["w"]
