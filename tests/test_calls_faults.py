"""Faults in App code end in clear receipts, memory stays bounded, and the run goes on: a
callable that raises, hangs, returns something that is not JSON, prints to standard output, or
returns 100 MB."""

from __future__ import annotations

import json
import tracemalloc

import pytest

from conftest import jsonl
from test_calls_common import admitted, plan_file, run_plan, tool

TOOLS = {
    "boom": tool("boom"),
    "boom_async": tool("boom_async"),
    "hang_thread": tool("sleep_sync", timeout_s=0.3),
    "hang_async": tool("hang_async", timeout_s=0.3),
    "not_json": tool("not_json"),
    "big": tool("big"),
    "big_process": tool("big", isolation="process"),
    "echo": tool("echo"),
    "printer": tool("printer"),
    "printer_process": tool("printer", isolation="process"),
}


def lanes_of(*calls: dict) -> list[dict]:
    return [{"item_key": str(i), "calls": [c]} for i, c in enumerate(calls)]


def test_every_fault_is_a_receipt_and_the_run_goes_on(tmp_path):
    plan = admitted(tmp_path, TOOLS, lanes=lanes_of(
        {"tool": "boom", "args": {"message": "it broke"}},
        {"tool": "boom_async", "args": {}},
        {"tool": "hang_thread", "args": {"seconds": 30}},
        {"tool": "hang_async", "args": {}},
        {"tool": "not_json", "args": {}},
        {"tool": "echo", "args": {"still": "running"}},
    ), mc=6)
    got, _, state = run_plan(plan, mock=False)
    assert [(r["status"], r["error"] and r["error"]["kind"], r["abandoned"]) for r in got] == [
        ("error", "RuntimeError", False),
        ("error", "RuntimeError", False),
        ("timeout", "timeout", True),
        ("timeout", "timeout", False),
        ("invalid_output", "not_json", False),
        ("ok", None, False),
    ]
    assert got[0]["error"]["message"] == "it broke"
    assert got[4]["error"]["message"] == "result is not JSON: Type is not JSON serializable: set"
    assert got[5]["result"] == {"received": {"still": "running"}}
    assert state.counts["ok"] == 1 and state.counts["timeout"] == 2


def test_a_huge_result_is_refused_without_copying_it(tmp_path):
    plan = admitted(tmp_path, TOOLS, calls=[{"tool": "big", "args": {"n": 100_000_000}}])
    tracemalloc.start()
    try:
        got, _, _ = run_plan(plan, mock=False)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert got[0]["status"] == "invalid_output"
    assert got[0]["error"] == {"kind": "output_too_large", "message": (
        "result dropped: 100000002 bytes or more exceed the output cap of 16777216 bytes (--max-output-bytes)")}
    assert peak < 130_000_000  # the string itself, and no serialised copy of it


def test_a_huge_result_never_leaves_its_worker_process(tmp_path):
    plan = admitted(tmp_path, TOOLS, calls=[{"tool": "big_process", "args": {"n": 100_000_000}}])
    tracemalloc.start()
    try:
        got, _, _ = run_plan(plan, mock=False)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (got[0]["status"], got[0]["error"]["kind"]) == ("invalid_output", "output_too_large")
    assert peak < 20_000_000


def test_the_output_cap_is_the_flag(tmp_path, cli):
    plan = plan_file(tmp_path, TOOLS, calls=[{"call_key": "small", "tool": "big", "args": {"n": 1000}},
                                             {"call_key": "large", "tool": "big", "args": {"n": 5000}}])
    proc = cli("run", str(plan), "--format", "jsonl", "--max-output-bytes", "2000")
    recs = jsonl(proc.stdout)
    assert [r["status"] for r in recs] == ["ok", "invalid_output", "failed"]
    assert "2000 bytes" in recs[1]["error"]["message"]


def test_a_long_error_message_is_cut(tmp_path):
    plan = admitted(tmp_path, TOOLS, calls=[{"tool": "boom_async", "args": {"message": "x" * 1_000_000}}])
    got, _, _ = run_plan(plan)
    msg = got[0]["error"]["message"]
    assert len(msg) < 9000 and msg.endswith("… (1000000 characters)")


@pytest.mark.parametrize("printer", ["printer", "printer_process"])
def test_printing_tools_cannot_corrupt_standard_output(tmp_path, cli, printer):
    noise = 'not json {"type": "receipt"'
    plan = plan_file(tmp_path, TOOLS, calls=[{"call_key": "p", "tool": printer, "args": {"text": noise}},
                                             {"call_key": "e", "tool": "echo", "args": {"a": 1}}])
    proc = cli("run", str(plan), "--format", "jsonl")
    assert proc.returncode == 0, proc.stderr.decode()
    lines = proc.stdout.decode().splitlines()
    assert [json.loads(line)["type"] for line in lines] == ["receipt", "receipt", "summary"]
    assert noise in proc.stderr.decode()
