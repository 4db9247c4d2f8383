"""The audit stream (``--audit FILE``: admitted, started, retried, finished, evidence_failed)
and the registry's ``evidence`` hook, which sees every finished receipt, redacted, and can never
break a run."""

from __future__ import annotations

import json

import pytest

from test_calls_common import admitted, plan_file, run_plan, tool

TOOLS = {
    "flaky": tool("flaky_async", retry={"max_attempts": 3, "backoff_s": 0.5, "on": ["error"]}),
    "echo": tool("echo", redact=["/password"]),
}


@pytest.fixture(autouse=True)
def tools_module():
    from testapp import tools

    tools.reset_governed()
    yield tools


def test_audit_events_follow_each_call(tmp_path):
    plan = admitted(tmp_path, TOOLS, calls=[{"call_key": "f", "tool": "flaky", "args": {"key": "k", "failures": 1}}])
    audit: list = []
    got, _, _ = run_plan(plan, audit=audit)
    assert [(e["event"], e.get("attempt")) for e in audit] == [
        ("admitted", None), ("started", 1), ("retried", 1), ("started", 2), ("finished", None)]
    for e in audit:
        assert e["run_id"] == "run-test" and e["seq"] == 0 and e["tool"] == "flaky" and e["call_key"] == "f"
        assert e["receipt_id"] == got[0]["receipt_id"]
    retried, finished = audit[2], audit[4]
    assert retried["status"] == "error" and retried["error"] == {"kind": "RuntimeError", "message": "planned failure of k"}
    assert 0.25 <= retried["retry_in_s"] <= 0.5
    assert (finished["status"], finished["attempts"], finished["cache"]) == ("ok", 2, "off")


def test_the_audit_file_is_json_lines_of_the_run(tmp_path, cli):
    plan = plan_file(tmp_path, TOOLS, calls=[{"call_key": "a", "tool": "echo", "args": {"password": "pw-123456"}},
                                             {"call_key": "b", "tool": "flaky", "args": {"key": "k", "failures": 1}}])
    audit = tmp_path / "audit.jsonl"
    proc = cli("run", str(plan), "--format", "jsonl", "--audit", str(audit))
    assert proc.returncode == 0, proc.stderr.decode()
    events = [json.loads(line) for line in audit.read_text().splitlines()]
    assert [(e["event"], e["seq"]) for e in events] == [
        ("admitted", 0), ("started", 0), ("finished", 0),
        ("admitted", 1), ("started", 1), ("retried", 1), ("started", 1), ("finished", 1)]
    assert all(e["at"].endswith("Z") for e in events)
    assert "pw-123456" not in audit.read_text()


def test_the_evidence_hook_sees_every_finished_receipt_redacted(tmp_path, tools_module):
    plan = admitted(tmp_path, TOOLS, evidence="testapp.tools:evidence_collect", calls=[
        {"call_key": "a", "tool": "echo", "args": {"password": "pw-123456"}},
        {"call_key": "b", "tool": "flaky", "args": {"key": "k", "failures": 5}},
    ])
    got, _, _ = run_plan(plan, mock=False)
    assert tools_module.EVIDENCE == got
    assert tools_module.EVIDENCE[0]["args"] == {"password": "[REDACTED]"}


def test_a_failing_evidence_hook_is_reported_and_never_breaks_the_run(tmp_path):
    plan = admitted(tmp_path, TOOLS, evidence="testapp.tools:evidence_fail", calls=[
        {"call_key": "a", "tool": "echo", "args": {"password": "pw-123456"}},
        {"call_key": "b", "tool": "echo", "args": {"x": 1}},
    ])
    audit: list = []
    got, _, state = run_plan(plan, mock=False, audit=audit)
    assert [r["status"] for r in got] == ["ok", "ok"] and state.counts["ok"] == 2
    failed = [e for e in audit if e["event"] == "evidence_failed"]
    assert [e["seq"] for e in failed] == [0, 1]
    assert failed[0]["error"] == {"kind": "RuntimeError",
                                  "message": "evidence store down for {'password': '[REDACTED]'}"}


def test_the_audit_table_of_the_docs_lists_every_event_the_engine_emits():
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    emitted = set()
    for source in (root / "toolloop_cli").rglob("*.py"):
        emitted |= set(re.findall(r"emit_audit\(\s*\"(\w+)\"", source.read_text(encoding="utf-8")))
    assert {"admitted", "started", "retried", "finished", "evidence_failed", "provider_failed"} <= emitted
    doc = (root / "docs" / "calls.md").read_text(encoding="utf-8").split("## Audit events", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"^\| `(\w+)` \|", doc, flags=re.M))
    assert listed == emitted
