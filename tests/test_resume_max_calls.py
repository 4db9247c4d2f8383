"""A resumed sequential or parallel run counts the calls it keeps toward each tool's
``max_calls``, as the run that made them did: a call dispatched after the resume (the
production router checks ``max_calls`` as each dispatched call starts) is refused once the kept
calls and the new ones reach the cap, so a resumed batch never makes a tool run more often than
its registry allows. Real subprocesses, a real state database."""

from __future__ import annotations

import json

import pytest

from conftest import APP, jsonl, write


def tool(fn: str, **extra: object) -> dict:
    return {"callable": f"testapp.tools:{fn}", "description": fn, "input_schema": {"type": "object"},
            "output_schema": {}, **extra}


def route(key: str, x: int) -> dict:
    return {"call_key": key, "tool": "router", "args": {"target": "limited", "args": {"x": x}, "catch": True}}


def setup(tmp_path, mode: str):
    write(tmp_path / "reg.yml", json.dumps({"version": 1, "app_root": str(APP), "subagents": {"t": {
        "runner_defaults": {"tool_timeout_s": 10},
        "tools": {"limited": tool("echo", max_calls=1), "router": tool("route_sync", dispatch=["limited"]),
                  "gated": tool("echo", approval="required")}}}}))
    calls = [route("one", 1), {"call_key": "ask", "tool": "gated", "args": {}}, route("two", 2)]
    body: dict = {"version": 1, "registry": "reg.yml", "subagent": "t", "mode": mode}
    if mode == "sequential":
        body["calls"] = calls
    else:  # one lane: the approval holds the call after it until the resume
        body.update(max_concurrency=1, lanes=[{"item_key": "a", "calls": calls}])
    return write(tmp_path / "plan.yml", json.dumps(body))


@pytest.mark.parametrize("mode", ["sequential", "parallel"])
def test_a_resumed_batch_counts_its_kept_calls_toward_max_calls(tmp_path, cli, mode):
    plan = setup(tmp_path, mode)
    paused = cli("run", str(plan), "--format", "jsonl")
    assert paused.returncode == 4, paused.stderr.decode()
    first = jsonl(paused.stdout)
    run_id = first[-1]["run_id"]
    assert [(r["tool"], r["status"]) for r in first if r["type"] == "receipt"][:2] == [("router", "ok"), ("limited", "ok")]

    assert cli("approve", run_id, "--all-pending", "--approve").returncode == 0
    done = cli("resume", run_id, "--format", "jsonl")
    receipts = [r for r in jsonl(done.stdout) if r["type"] == "receipt"]
    got = [(r["call_key"] if r.get("parent_receipt_id") is None else "dispatched", r["tool"], r["status"])
           for r in receipts]
    # the dispatched call kept from the first session is limited's one call: the second is refused
    assert got == [("one", "router", "ok"), ("dispatched", "limited", "ok"), ("ask", "gated", "ok"),
                   ("two", "router", "ok"), ("dispatched", "limited", "budget_exceeded")], got
    assert receipts[3]["result"]["receipt"] == "budget_exceeded"
