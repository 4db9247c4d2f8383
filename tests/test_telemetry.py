"""OpenTelemetry traces of runs, exported to a loopback OTLP collector on 127.0.0.1 (HTTP and
gRPC) and decoded with opentelemetry-proto: one trace per run, every call in it (also those that
never ran), model requests with their tokens, approvals, supervisor and guardrail records as
events, labels as attributes, and no redacted value anywhere in what is exported."""

from __future__ import annotations

import json
import sys

import pytest
from conftest import APP, jsonl, write
from otlp_collector import start_grpc, start_http
from regkit import openai_profile, registry_yaml
from test_resume import kill_when_logged, last_run_id, popen
from test_store import parallel_plan, state_registry

REG = APP / "registry.yml"
CANARY = "pw-canary-7f3a9c"
KEY = "sk-telemetry-canary"
ERROR = 2  # the OTLP status code for an error


@pytest.fixture
def collector():
    c = start_http()
    yield c
    c.stop()


def otel_env(collector, **more: str) -> dict:
    return {"OTEL_EXPORTER_OTLP_ENDPOINT": collector.endpoint, "OTEL_BSP_SCHEDULE_DELAY": "50", **more}


def by_receipt(collector) -> dict:
    return {s.attributes["toolloop.receipt_id"]: s for s in collector.named("execute_tool")}


def assert_no_canary(collector, *canaries: str) -> None:
    assert collector.bodies, "nothing was exported"
    for raw in collector.bodies:
        for canary in canaries:
            assert canary.encode() not in raw


def test_a_batch_run_is_one_trace_with_every_call_in_it(cli, tmp_path, collector):
    plan = write(tmp_path / "plan.yml", json.dumps({
        "version": 1, "registry": str(REG), "subagent": "t", "mode": "parallel", "max_concurrency": 1,
        "lanes": [
            {"item_key": "s", "calls": [{"tool": "secret_echo", "call_key": "login",
                                         "args": {"user": "ann", "password": CANARY}}]},
            {"item_key": "p", "calls": [{"tool": "pay", "call_key": "pay", "args": {"amount": 500}}]},
            {"item_key": "b", "calls": [{"tool": "boom", "args": {"message": "no"}}, {"tool": "echo", "args": {}}]},
            {"item_key": "e", "calls": [{"tool": "echo", "call_key": "hello", "args": {"n": 1}}]}]}))
    proc = cli("run", str(plan), "--format", "jsonl", "--approve", "none", "--label", "ticket=T-1",
               env=otel_env(collector))
    assert proc.returncode == 1, proc.stderr.decode()
    *receipts, summary = jsonl(proc.stdout)
    assert [r["status"] for r in receipts] == ["ok", "denied", "error", "skipped", "ok"]
    assert receipts[0]["result"]["token"] == "[REDACTED]"  # the tool got the canary; nothing shows it

    (root,) = collector.named("invoke_agent")
    assert root.parent_span_id == "" and root.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert root.attributes["toolloop.run_id"] == summary["run_id"]
    assert root.attributes["toolloop.status"] == "failed" and root.status_code == ERROR
    assert root.attributes["toolloop.chain_sha256"] == summary["chain_sha256"]
    assert root.attributes["toolloop.label.ticket"] == "T-1"
    assert root.attributes["toolloop.parallel_batch_id"] == receipts[0]["parallel_batch_id"]
    assert root.resource["service.name"] == "toolloop"
    spans = by_receipt(collector)
    assert sorted(spans) == sorted(r["receipt_id"] for r in receipts)
    for r in receipts:
        span = spans[r["receipt_id"]]
        assert span.name == f"execute_tool {r['tool']}"
        assert span.trace_id == root.trace_id and span.parent_span_id == root.span_id
        a = span.attributes
        assert (a["gen_ai.operation.name"], a["gen_ai.tool.name"], a["gen_ai.tool.call.id"]) == (
            "execute_tool", r["tool"], r["receipt_id"])
        assert (a["toolloop.status"], a["toolloop.seq"], a["toolloop.item_key"], a["toolloop.call_key"]) == (
            r["status"], r["seq"], r["item_key"], r["call_key"])
        assert a["toolloop.label.ticket"] == "T-1"
        assert (span.status_code == ERROR) == (r["status"] != "ok")
    denied = spans[receipts[1]["receipt_id"]]
    assert [(e["name"], e["attributes"]["toolloop.decision"]) for e in denied.events] == [
        ("toolloop.approval", "rejected")]
    assert spans[receipts[2]["receipt_id"]].attributes["error.type"] == receipts[2]["error"]["kind"]
    assert_no_canary(collector, CANARY)


def test_calls_interrupted_on_resume_get_spans_in_the_resumed_trace(cli, tmp_path, collector):
    state_registry(tmp_path)
    log, gate = tmp_path / "log", tmp_path / "gate"
    plan = parallel_plan(tmp_path, [{"item_key": "w", "calls": [
        {"call_key": "c0", "tool": "gate_write", "args": {"log": str(log), "key": "w", "gate": str(gate)}},
        {"call_key": "c1", "tool": "read", "args": {"log": str(log), "key": "w-after"}}]}])
    proc = popen(tmp_path, "run", str(plan), "--format", "jsonl", "--label", "ticket=T-2")
    kill_when_logged(tmp_path, proc, log, 1)
    gate.touch()
    resumed = cli("resume", last_run_id(tmp_path), "--format", "jsonl", env=otel_env(collector))
    assert resumed.returncode == 1, resumed.stderr.decode()
    receipts = jsonl(resumed.stdout)[:-1]
    assert [r["status"] for r in receipts] == ["interrupted", "skipped"]
    spans = by_receipt(collector)
    assert [spans[r["receipt_id"]].attributes["toolloop.status"] for r in receipts] == ["interrupted", "skipped"]
    (root,) = collector.named("invoke_agent")
    assert root.attributes["toolloop.label.ticket"] == "T-2"  # the resumed run keeps its labels


def routed(tmp_path, server):
    write(tmp_path / "reg.yml", registry_yaml("echo", "login", "write_file"))
    profile = openai_profile(server.openai_base)
    return write(tmp_path / "plan.yml", f"""
        version: 1
        registry: reg.yml
        subagent: t
        mode: routed
        goal: Do the thing.
        router_profile: {profile}
        final_profile: {profile}
        budget: {{max_iterations: 8, max_tokens: 100000, max_tool_calls: 6, timeout_s: 60}}
        final_schema: {{type: object, required: [answer]}}
        supervisor:
          rules: [{{when: iteration_reached, gte: 3}}]
          on_violation: steer
          steer_message: Stop repeating yourself.
        guardrails:
          observations: [testapp.guards:mask_secret]
    """)


def call(tool: str, args: dict) -> str:
    return json.dumps({"action": "call", "tool": tool, "args": args, "reason": "r"})


def test_a_routed_run_has_chat_spans_with_tokens_and_events_for_what_governed_it(cli, tmp_path, model_server,
                                                                                 collector):
    plan = routed(tmp_path, model_server)
    model_server.script(call("login", {"user": "ann", "password": CANARY}), call("echo", {"secret": "x"}),
                        call("echo", {"secret": "y"}), call("write_file", {"path": str(tmp_path / "f")}),
                        '{"action": "final", "reason": "enough"}', '{"answer": 1}')
    proc = cli("run", str(plan), "--format", "jsonl", "--approve", "none", "--label", "team=ops",
               env={"TL_TEST_KEY": KEY, **otel_env(collector)})
    assert proc.returncode == 0, proc.stderr.decode()
    records = jsonl(proc.stdout)
    receipts = [r for r in records if r["type"] == "receipt"]
    assert [r["status"] for r in receipts] == ["ok", "ok", "ok", "denied"]
    chats = collector.named("chat")
    assert len(chats) == len(model_server.requests) == 6
    (root,) = collector.named("invoke_agent")
    for span in chats:
        a = span.attributes
        assert span.name == "chat m" and span.parent_span_id == root.span_id
        assert (a["gen_ai.operation.name"], a["gen_ai.request.model"], a["gen_ai.response.model"]) == (
            "chat", "m", "loopback-model")
        assert (a["gen_ai.usage.input_tokens"], a["gen_ai.usage.output_tokens"]) == (10, 5)
        assert a["toolloop.label.team"] == "ops"
    assert sorted(s.attributes["toolloop.role"] for s in chats) == ["final"] + ["router"] * 5
    assert root.attributes["gen_ai.usage.input_tokens"] == 60
    spans = by_receipt(collector)
    assert [spans[r["receipt_id"]].attributes["toolloop.iteration"] for r in receipts] == [1, 2, 3, 4]
    assert [e["attributes"]["toolloop.decision"] for e in spans[receipts[3]["receipt_id"]].events] == ["rejected"]
    events = [(e["name"], e["attributes"]) for e in root.events]
    names = [n for n, _ in events]
    assert names.count("toolloop.decision") == 5
    sup = [a for n, a in events if n == "toolloop.supervisor"]
    assert sup and sup[0]["toolloop.rule"] == "iteration_reached" and sup[0]["toolloop.action"] == "steer"
    guard = [a for n, a in events if n == "toolloop.guardrail"]
    assert [(g["toolloop.guard"], g["toolloop.action"]) for g in guard] == [
        ("testapp.guards:mask_secret", "mask"), ("testapp.guards:mask_secret", "mask")]
    assert_no_canary(collector, CANARY, KEY)


def test_grpc_is_used_when_the_protocol_says_so(cli, tmp_path):
    grpc_collector = start_grpc()
    try:
        plan = write(tmp_path / "plan.yml", json.dumps({
            "version": 1, "registry": str(REG), "subagent": "t", "mode": "sequential",
            "calls": [{"tool": "echo", "args": {}}, {"tool": "echo", "args": {}}]}))
        proc = cli("run", str(plan), "--format", "jsonl",
                   env={**otel_env(grpc_collector), "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"})
        assert proc.returncode == 0, proc.stderr.decode()
        assert len(grpc_collector.named("execute_tool")) == 2 and len(grpc_collector.named("invoke_agent")) == 1
    finally:
        grpc_collector.stop()


def test_nothing_of_opentelemetry_is_imported_without_the_variable(cli, tmp_path, collector):
    plan = write(tmp_path / "plan.yml", json.dumps({
        "version": 1, "registry": str(REG), "subagent": "t", "mode": "sequential",
        "calls": [{"tool": "echo", "args": {}}]}))
    off = cli("run", str(plan), "--format", "jsonl", env={"PYTHONPROFILEIMPORTTIME": "1"})
    assert off.returncode == 0 and b"import time:" in off.stderr
    assert b"opentelemetry" not in off.stderr and b"grpc" not in off.stderr
    on = cli("run", str(plan), "--format", "jsonl", env={"PYTHONPROFILEIMPORTTIME": "1", **otel_env(collector)})
    assert on.returncode == 0 and b"opentelemetry" in on.stderr
    assert b"grpc" not in on.stderr  # the gRPC exporter only when the protocol asks for it
    disabled = cli("run", str(plan), "--format", "jsonl",
                   env={"PYTHONPROFILEIMPORTTIME": "1", "OTEL_SDK_DISABLED": "true", **otel_env(collector)})
    assert disabled.returncode == 0 and b"opentelemetry" not in disabled.stderr
    assert len(collector.named("invoke_agent")) == 1  # only the run that asked for it


def test_the_variable_without_the_extra_is_a_warning_and_the_run_goes_on(cli, tmp_path, collector):
    plan = write(tmp_path / "plan.yml", json.dumps({
        "version": 1, "registry": str(REG), "subagent": "t", "mode": "sequential",
        "calls": [{"tool": "echo", "args": {}}]}))
    blocked = ("import sys; sys.modules['opentelemetry'] = None; sys.argv = ['toolloop', *sys.argv[1:]];"
               "from toolloop_cli.cli.app import main; main()")
    import subprocess

    import os

    proc = subprocess.run([sys.executable, "-c", blocked, "run", str(plan), "--format", "jsonl"], cwd=tmp_path,
                          capture_output=True, env={**os.environ, **otel_env(collector)}, timeout=120)
    assert proc.returncode == 0, proc.stderr.decode()
    assert b"pip install 'toolloop-cli[otel]'" in proc.stderr and b"Traceback" not in proc.stderr
    assert jsonl(proc.stdout)[-1]["status"] == "ok"
    assert collector.spans == []


def test_a_collector_that_is_down_does_not_fail_the_run(cli, tmp_path):
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    plan = write(tmp_path / "plan.yml", json.dumps({
        "version": 1, "registry": str(REG), "subagent": "t", "mode": "sequential",
        "calls": [{"tool": "echo", "args": {}}]}))
    proc = cli("run", str(plan), "--format", "jsonl",
               env={"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}", "OTEL_EXPORTER_OTLP_TIMEOUT": "1"})
    assert proc.returncode == 0, proc.stderr.decode()
    assert jsonl(proc.stdout)[-1]["status"] == "ok" and b"Traceback" not in proc.stderr
    assert proc.stderr.decode().count("telemetry: spans may not reach the collector") == 1


def test_model_request_spans_name_the_provider_and_a_failed_request_has_one(cli, tmp_path, model_server, collector):
    from modelserver import Reply

    plan = routed(tmp_path, model_server)
    model_server.script(call("echo", {"n": 1}), Reply("the model is not loaded", status=400))
    proc = cli("run", str(plan), "--format", "jsonl", "--approve", "none", env={"TL_TEST_KEY": KEY, **otel_env(collector)})
    assert proc.returncode == 1, proc.stderr.decode()
    assert jsonl(proc.stdout)[-1]["outcome"] == "provider_error"
    answered, failed = sorted(collector.named("chat"), key=lambda s: s.attributes["toolloop.model_answer"])
    assert answered.attributes["gen_ai.provider.name"] == failed.attributes["gen_ai.provider.name"] == "openai"
    assert answered.status_code != ERROR and "error.type" not in answered.attributes
    assert failed.status_code == ERROR and failed.attributes["error.type"] == "provider_error"
    assert "HTTP 400" in failed.status_message
    assert "gen_ai.usage.input_tokens" not in failed.attributes and failed.attributes["toolloop.role"] == "router"
    assert_no_canary(collector, KEY)
