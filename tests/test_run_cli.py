"""`toolloop run` and `toolloop call` end to end, in subprocesses, as users see them."""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import sys

import jsonschema
import pytest

from conftest import APP, DEMO, ROOT, jsonl, write
from toolloop_cli.record_schema import receipt_schema

REG = APP / "registry.yml"


def plan_file(tmp_path, body: dict, name: str = "plan.yml"):
    body = {"version": 1, "registry": str(REG), "subagent": "t", **body}
    return write(tmp_path / name, json.dumps(body))


def test_example_plan_streams_valid_jsonl(cli):
    proc = cli("run", str(ROOT / "plans" / "parallel.yml"))
    assert proc.returncode == 0, proc.stderr.decode()
    records = jsonl(proc.stdout)
    assert [r["type"] for r in records] == ["receipt"] * 6 + ["summary"]
    assert [r["seq"] for r in records[:-1]] == list(range(6))
    assert records[-1]["status"] == "ok" and records[-1]["counts"]["ok"] == 6
    validator = jsonschema.Draft202012Validator(receipt_schema())
    for r in records:
        validator.validate(r)
    assert proc.stderr == b""


def test_secret_arguments_are_redacted_in_output(cli):
    proc = cli("run", str(ROOT / "plans" / "sequential.yml"))
    assert proc.returncode == 0, proc.stderr.decode()
    login = [r for r in jsonl(proc.stdout) if r.get("tool") == "login"][0]
    assert login["args"] == {"user": "ada", "password": "[REDACTED]"}
    assert login["result"]["session_token"] == "[REDACTED]"
    assert b"correct-horse" not in proc.stdout


@pytest.mark.skipif(shutil.which("jq") is None, reason="jq is not installed (CI installs it)")
def test_output_pipes_through_jq_line_by_line(tmp_path):
    cmd = (f"{sys.executable} -m toolloop_cli run {ROOT / 'plans' / 'parallel.yml'} -j 2"
           " | jq -c 'select(.type==\"receipt\") | [.seq, .item_key, .status]'")
    proc = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], cwd=tmp_path, capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr.decode()
    rows = [json.loads(line) for line in proc.stdout.decode().splitlines()]
    assert rows == [[0, "doc-1", "ok"], [1, "doc-1", "ok"], [2, "doc-2", "ok"], [3, "doc-2", "ok"],
                    [4, "doc-3", "ok"], [5, "doc-3", "ok"]]


def test_reader_going_away_is_a_clean_exit(tmp_path):
    lanes = tmp_path / "lanes.jsonl"
    lanes.write_text("".join(json.dumps({"item_key": f"k{i}", "calls": [{"tool": "echo", "args": {"i": i}}]}) + "\n"
                             for i in range(3000)))
    p = plan_file(tmp_path, {"mode": "parallel", "max_concurrency": 4, "lanes": []})
    cmd = f"{sys.executable} -m toolloop_cli run {p} --lanes {lanes} | head -1"
    proc = subprocess.run(["bash", "-c", cmd], cwd=tmp_path, capture_output=True, timeout=120)
    assert proc.returncode == 0
    assert json.loads(proc.stdout)["seq"] == 0
    assert b"Traceback" not in proc.stderr and b"Exception" not in proc.stderr, proc.stderr.decode()


def test_ten_thousand_lanes_from_a_file_keep_order_and_counts(cli, tmp_path):
    n = 10_000
    lanes = tmp_path / "lanes.jsonl"
    with open(lanes, "w") as fh:
        for i in range(n):
            fh.write(json.dumps({"item_key": f"item-{i}", "calls": [
                {"call_key": "a", "tool": "hold", "args": {"key": str(i), "seconds": 0}},
                {"call_key": "b", "tool": "echo", "args": {"i": i}}]}) + "\n")
    p = plan_file(tmp_path, {"mode": "parallel", "lanes": []})
    proc = cli("run", str(p), "--lanes", str(lanes), "--max-concurrency", "8", timeout=300)
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    records = jsonl(proc.stdout)
    receipts, summary = records[:-1], records[-1]
    assert len(receipts) == 2 * n
    assert [r["seq"] for r in receipts] == list(range(2 * n))
    assert [r["item_key"] for r in receipts[::2]] == [f"item-{i}" for i in range(n)]
    assert [r["result"]["received"]["i"] for r in receipts[1::2]] == list(range(n))
    assert sorted(r["completion_seq"] for r in receipts) == list(range(2 * n))
    assert summary["counts"]["ok"] == 2 * n and summary["status"] == "ok"


def test_lanes_from_standard_input(cli, tmp_path):
    p = plan_file(tmp_path, {"mode": "parallel", "max_concurrency": 2, "lanes": []})
    data = b"".join(json.dumps({"item_key": f"s{i}", "calls": [{"tool": "echo", "args": {"i": i}}]}).encode() + b"\n"
                    for i in range(5))
    proc = cli("run", str(p), "--lanes", "-", input=data)
    assert proc.returncode == 0, proc.stderr.decode()
    assert [r["item_key"] for r in jsonl(proc.stdout)[:-1]] == [f"s{i}" for i in range(5)]


def test_a_rejected_plan_runs_nothing_and_lists_every_problem(cli, tmp_path):
    mark = tmp_path / "ran.txt"
    p = plan_file(tmp_path, {"mode": "parallel", "max_concurrency": 2, "lanes": [
        {"item_key": "a", "calls": [{"tool": "marker", "args": {"path": str(mark)}}]},
        {"item_key": "b", "calls": [{"tool": "nope", "args": {}}]},
        {"item_key": "a", "calls": [{"tool": "hold", "args": {"key": 5}}]},
    ]})
    proc = cli("run", str(p))
    assert proc.returncode == 3
    assert not mark.exists()
    (summary,) = jsonl(proc.stdout)  # the summary still ends standard output
    assert (summary["type"], summary["status"], summary["run_id"], summary["mode"]) == ("summary", "rejected", None,
                                                                                       "parallel")
    lines = proc.stderr.decode().splitlines()
    assert [line.split()[2] for line in lines[:-1]] == ["TL402", "TL405", "TL404"]
    assert all(line.startswith("plan.yml:1:") for line in lines[:-1])
    assert lines[-1] == "toolloop: plan rejected (3 errors); nothing ran"


def test_dry_run_shows_the_calls_and_runs_nothing(cli, tmp_path):
    mark = tmp_path / "ran.txt"
    p = plan_file(tmp_path, {"mode": "sequential", "calls": [
        {"tool": "marker", "args": {"path": str(mark)}}, {"tool": "sleep_async", "args": {"seconds": 0.1}}]})
    proc = cli("run", str(p), "--dry-run")
    assert proc.returncode == 0, proc.stderr.decode()
    assert not mark.exists()
    records = jsonl(proc.stdout)
    assert [r["type"] for r in records] == ["planned", "planned", "dry_run"]
    assert records[1]["timeout_s"] == 1 and records[2]["worst_case_s"] == 11.0
    assert not (tmp_path / ".toolloop").exists()


def test_exit_codes_follow_the_receipts(cli, tmp_path):
    failing = plan_file(tmp_path, {"mode": "sequential", "calls": [{"tool": "boom", "args": {}}]})
    proc = cli("run", str(failing))
    assert proc.returncode == 1
    assert jsonl(proc.stdout)[-1]["status"] == "failed"
    halted = plan_file(tmp_path, {"mode": "parallel", "max_concurrency": 1, "lanes": [
        {"item_key": "a", "calls": [{"tool": "boom", "args": {}}]},
        {"item_key": "b", "calls": [{"tool": "echo", "args": {}}]}]}, "halt.yml")
    proc = cli("run", str(halted), "--halt", "now,fail=1")
    assert proc.returncode == 4
    records = jsonl(proc.stdout)
    assert [r.get("status") for r in records] == ["error", "skipped", "stopped"]
    assert b"toolloop resume" in proc.stderr


def test_usage_errors_exit_2_without_traceback(cli, tmp_path):
    for args in (["run", "missing.yml"], ["run", str(DEMO), "--halt", "sometimes"], ["nonsense"],
                 ["run", str(ROOT / "plans" / "parallel.yml"), "--lanes", "nowhere.jsonl"]):
        proc = cli(*args)
        assert proc.returncode == 2, (args, proc.stderr.decode())
        assert b"Traceback" not in proc.stderr


def test_table_format_without_colour(cli):
    proc = cli("run", str(ROOT / "plans" / "sequential.yml"), "--format", "table")
    assert proc.returncode == 0, proc.stderr.decode()
    text = proc.stdout.decode()
    assert "receipts" in text and "transform" in text and "count_words" in text
    assert "\x1b[" not in text
    assert "ok run " in text


def test_json_format_is_one_array(cli):
    proc = cli("run", str(ROOT / "plans" / "sequential.yml"), "--format", "json")
    assert proc.returncode == 0
    data = json.loads(proc.stdout)
    assert [r["type"] for r in data] == ["receipt"] * 4 + ["summary"]


def test_output_is_readable_while_the_run_is_still_going(tmp_path):
    p = plan_file(tmp_path, {"mode": "parallel", "max_concurrency": 2, "lanes": [
        {"item_key": "quick", "calls": [{"tool": "echo", "args": {}}]},
        {"item_key": "slow", "calls": [{"tool": "hold", "args": {"key": "s", "seconds": 3}}]}]})
    proc = subprocess.Popen([sys.executable, "-m", "toolloop_cli", "run", str(p)], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    watchdog = threading.Timer(60, proc.kill)  # a blocked read ends (and fails) instead of hanging
    watchdog.start()
    try:
        first = json.loads(proc.stdout.readline())
        assert first["item_key"] == "quick"
        assert proc.poll() is None  # the slow lane is still running
        rest = [json.loads(line) for line in proc.stdout.read().splitlines()]
        assert [r["type"] for r in rest] == ["receipt", "summary"]
    finally:
        watchdog.cancel()
        proc.kill()
        proc.wait()


def test_call_runs_one_governed_call(cli):
    proc = cli("call", str(DEMO), "worker-a", "transform", "--args", '{"text": "hi"}')
    assert proc.returncode == 0, proc.stderr.decode()
    receipt, summary = jsonl(proc.stdout)
    assert receipt["result"] == {"text": "HI", "length": 2}
    assert summary["status"] == "ok"
    bad = cli("call", str(DEMO), "worker-a", "transform", "--args", '{"txt": "hi"}')
    assert bad.returncode == 3 and b"TL404" in bad.stderr
    assert cli("call", str(DEMO), "worker-a", "transform", "--args", "{oops").returncode == 2


def test_state_dir_flag_and_environment(cli, tmp_path):
    p = str(ROOT / "plans" / "sequential.yml")
    assert cli("run", p, "--state-dir", "flagged").returncode == 0
    assert (tmp_path / "flagged" / "state.db").exists()
    assert cli("run", p, env={"TOOLLOOP_STATE_DIR": str(tmp_path / "env")}).returncode == 0
    assert (tmp_path / "env" / "state.db").exists()


def test_approval_gates_fail_closed_unless_answered(cli, tmp_path):
    p = plan_file(tmp_path, {"mode": "parallel", "max_concurrency": 2, "lanes": [
        {"item_key": "small", "calls": [{"tool": "pay", "args": {"amount": 50}}]},
        {"item_key": "big", "calls": [{"tool": "pay", "args": {"amount": 500}}, {"tool": "echo", "args": {}}]}]})
    allowed = cli("run", str(p), "--approve", "all")
    assert allowed.returncode == 0 and [r["status"] for r in jsonl(allowed.stdout)[:-1]] == ["ok", "ok", "ok"]
    refused = cli("run", str(p), "--approve", "none")
    assert refused.returncode == 1
    assert [r["status"] for r in jsonl(refused.stdout)[:-1]] == ["ok", "denied", "skipped"]
    assert "rejected by --approve none" in jsonl(refused.stdout)[1]["error"]["message"]


def test_a_gated_call_pauses_the_run_until_a_person_answers(cli, tmp_path):
    p = plan_file(tmp_path, {"mode": "parallel", "max_concurrency": 2, "lanes": [
        {"item_key": "small", "calls": [{"tool": "pay", "args": {"amount": 50}}]},
        {"item_key": "big", "calls": [{"tool": "pay", "call_key": "pay", "args": {"amount": 500}},
                                      {"tool": "echo", "args": {"after": True}}]},
        {"item_key": "other", "calls": [{"tool": "echo", "args": {}}]}]})
    first = cli("run", str(p))
    assert first.returncode == 4, first.stderr.decode()
    records = jsonl(first.stdout)
    run_id = records[-1]["run_id"]
    assert [(r["item_key"], r["status"]) for r in records[:-1]] == [("small", "ok"), ("other", "ok")]
    assert records[-1]["status"] == "stopped"
    assert f"toolloop approve {run_id} pay --item big --approve|--reject" in first.stderr.decode()
    # nothing pending under that key; --args that fail the schema leave the request pending
    assert cli("approve", run_id, "nope", "--item", "big", "--approve").returncode == 1
    bad = cli("approve", run_id, "pay", "--item", "big", "--approve", "--args", '{"amount": "lots"}')
    assert bad.returncode == 1 and b"input schema" in bad.stderr
    assert cli("resume", run_id).returncode == 4  # still waiting
    good = cli("approve", run_id, "pay", "--item", "big", "--approve", "--args", '{"amount": 450}')
    assert good.returncode == 0, good.stderr.decode()
    assert cli("approve", run_id, "pay", "--item", "big", "--reject").returncode == 1  # answered once
    done = cli("resume", run_id)
    assert done.returncode == 0, done.stderr.decode()
    receipts = jsonl(done.stdout)[:-1]
    assert [(r["item_key"], r["status"]) for r in receipts] == [
        ("small", "ok"), ("big", "ok"), ("big", "ok"), ("other", "ok")]
    assert receipts[1]["args"] == {"amount": 450} and receipts[1]["result"] == {"received": {"amount": 450}}


def test_a_rejected_call_gets_a_denied_receipt_with_the_message(cli, tmp_path):
    p = plan_file(tmp_path, {"mode": "sequential", "calls": [
        {"tool": "pay", "call_key": "pay", "args": {"amount": 900}}, {"tool": "echo", "args": {}}]})
    run_id = jsonl(cli("run", str(p)).stdout)[-1]["run_id"]
    assert cli("approve", run_id, "pay", "--reject", "--message", "too much").returncode == 0
    done = cli("resume", run_id)
    assert done.returncode == 1
    denied, skipped = jsonl(done.stdout)[:-1]
    assert denied["status"] == "denied" and denied["error"]["message"].endswith("too much")
    assert skipped["status"] == "skipped"


def test_a_refused_registry_leaves_out_the_warnings_its_author_silenced(cli, tmp_path):
    # 'send' writes with no gate, accepted on its line; 'broken' names a module that is not there
    reg = write(tmp_path / "reg.yml", f"""version: 1
app_root: {APP}
subagents:
  t:
    runner_defaults: {{tool_timeout_s: 5}}
    tools:
      send:
        callable: testapp.tools:echo
        description: Writes.
        effect: write  # toolloop: ignore[TL353]
        input_schema: {{}}
        output_schema: {{}}
      broken:
        callable: no_such_module.tools:run
        description: Cannot import.
        input_schema: {{}}
        output_schema: {{}}
""")
    plan = write(tmp_path / "plan.yml", json.dumps({"version": 1, "registry": str(reg), "subagent": "t",
                                                     "mode": "sequential", "calls": [{"tool": "send", "args": {}}]}))
    for args in (("run", str(plan)), ("call", str(reg), "t", "send", "--args", "{}"), ("tools", str(reg))):
        proc = cli(*args)
        err = proc.stderr.decode()
        assert proc.returncode == 3, (args, err)
        assert "no_such_module" in err, args  # the error that refused it is shown
        assert "TL353" not in err, (args, err)
    proc = cli("validate", str(reg))
    assert proc.returncode == 1 and "TL353" not in proc.stderr.decode() + proc.stdout.decode()
