"""Approvals at scale: ``approvals list``, ``approve --all-pending``, pending requests in ``runs show``,
who answered (``--approver``), and an ``approve`` that reads the journal only."""

from __future__ import annotations

import getpass
import json
import sqlite3

import pytest

from conftest import APP, jsonl, write

REGISTRY = f"""
version: 1
app_root: {APP}
subagents:
  t:
    runner_defaults: {{tool_timeout_s: 10}}
    tools:
      pay:
        callable: testapp.tools:echo
        description: Pays; a person approves above 100.
        effect: write
        approval: {{when: "args.amount > 100"}}
        input_schema: {{type: object, required: [amount], properties: {{amount: {{type: integer}}}}}}
        output_schema: {{}}
      vault:
        callable: testapp.tools:echo
        description: Opens the vault; always asks.
        effect: destructive
        approval: {{when: "true"}}
        redact: [/password]
        input_schema: {{type: object, required: [user, password], properties: {{user: {{type: string}}, password: {{type: string}}}}}}
        output_schema: {{}}
"""


def paused_run(cli, tmp_path, lanes: int = 3, extra: list | None = None) -> str:
    write(tmp_path / "reg.yml", REGISTRY)
    plan = {"version": 1, "registry": "reg.yml", "subagent": "t", "mode": "parallel", "max_concurrency": 2, "lanes": [
        {"item_key": f"k{i}", "calls": [{"tool": "pay", "call_key": "pay", "args": {"amount": 200 + i}}]}
        for i in range(lanes)] + (extra or [])}
    write(tmp_path / "plan.yml", json.dumps(plan))
    r = cli("run", "plan.yml", "--format", "jsonl")
    assert r.returncode == 4, r.stderr
    return jsonl(r.stdout)[-1]["run_id"]


def approvals_table(tmp_path) -> list[tuple]:
    con = sqlite3.connect(tmp_path / ".toolloop" / "state.db")
    try:
        return con.execute("SELECT item_key, call_key, state, approver, message, answered_at IS NOT NULL"
                           " FROM approvals ORDER BY item_key").fetchall()
    finally:
        con.close()


def test_approvals_list_shows_every_pending_request_with_its_exact_redacted_arguments(cli, tmp_path):
    rid = paused_run(cli, tmp_path, extra=[
        {"item_key": "v", "calls": [{"tool": "vault", "call_key": "open", "args": {"user": "ada", "password": "s3cret"}}]}])
    r = cli("approvals", "list", "--format", "jsonl")
    assert r.returncode == 0, r.stderr
    records = jsonl(r.stdout)
    assert [(q["item_key"], q["call_key"], q["tool"], q["effect"], q["args"]) for q in records] == [
        ("k0", "pay", "pay", "write", {"amount": 200}),
        ("k1", "pay", "pay", "write", {"amount": 201}),
        ("k2", "pay", "pay", "write", {"amount": 202}),
        ("v", "open", "vault", "destructive", {"user": "ada", "password": "[REDACTED]"}),
    ]
    assert all(q["type"] == "approval_request" and q["run_id"] == rid and not q["args_withheld"] for q in records)
    assert records[0]["approval"] == "args.amount > 100" and records[0]["seq"] == 0
    assert b"s3cret" not in r.stdout
    # one run's requests, by prefix; json is one array of the same records
    r = cli("approvals", "list", rid[:17], "--format", "json")
    assert json.loads(r.stdout) == records
    # a person's table fits 80 columns and shows the arguments
    r = cli("approvals", "list", "--format", "table", env={"COLUMNS": "80"})
    text = r.stdout.decode()
    assert all(len(line) <= 80 for line in text.splitlines()), text
    assert '{"amount":200}' in text and " pay " in text and "s3cret" not in text
    text = cli("approvals", "list", "--format", "table", env={"COLUMNS": "160"}).stdout.decode()
    assert '{"user":"ada","password":"[REDACTED]"}' in text and "s3cret" not in text


def test_arguments_that_cannot_be_read_again_are_shown_withheld(cli, tmp_path):
    write(tmp_path / "reg.yml", REGISTRY)
    write(tmp_path / "plan.yml", json.dumps({"version": 1, "registry": "reg.yml", "subagent": "t", "mode": "parallel",
                                             "max_concurrency": 1, "lanes": []}))
    lane = {"item_key": "s", "calls": [{"tool": "vault", "call_key": "open", "args": {"user": "b", "password": "pw"}}]}
    r = cli("run", "plan.yml", "--lanes", "-", "--format", "jsonl", input=json.dumps(lane).encode() + b"\n")
    assert r.returncode == 4, r.stderr
    (request,) = jsonl(cli("approvals", "list", "--format", "jsonl").stdout)
    assert request["args"] is None and request["args_withheld"] is True and request["tool"] == "vault"


def test_runs_show_lists_the_pending_requests_before_the_summary(cli, tmp_path):
    rid = paused_run(cli, tmp_path, lanes=2)
    records = jsonl(cli("runs", "show", rid, "--format", "jsonl").stdout)
    assert [r["type"] for r in records] == ["approval_request", "approval_request", "summary"]
    assert records[-1]["status"] == "stopped"
    cli("approve", rid, "pay", "--item", "k0", "--approve")
    records = jsonl(cli("runs", "show", rid, "--format", "jsonl").stdout)
    assert [(r["type"], r.get("item_key")) for r in records] == [("approval_request", "k1"), ("summary", None)]


def test_approve_all_pending_and_who_answered(cli, tmp_path):
    rid = paused_run(cli, tmp_path, lanes=12)
    r = cli("approve", rid, "--all-pending", "--approve", "--approver", "ops-lead")
    assert r.returncode == 0, r.stderr
    assert r.stderr.decode() == (f"approved 12 calls (pay --item k0, pay --item k1, pay --item k10, pay --item k11,"
                                 f" pay --item k2 and 7 more); continue with: toolloop resume {rid}\n")
    rows = approvals_table(tmp_path)
    assert len(rows) == 12 and {(state, who, answered) for _i, _c, state, who, _m, answered in rows} == {
        ("approved", "ops-lead", 1)}
    # nothing waits any more
    r = cli("approve", rid, "--all-pending", "--approve")
    assert r.returncode == 1 and r.stderr.decode() == f"toolloop: error: no call waits for approval in run {rid}\n"
    r = cli("resume", rid, "--format", "jsonl")
    assert r.returncode == 0, r.stderr
    assert [rec["status"] for rec in jsonl(r.stdout)[:-1]] == ["ok"] * 12


def test_reject_all_pending_with_a_message_and_the_login_name(cli, tmp_path):
    rid = paused_run(cli, tmp_path, lanes=2)
    r = cli("approve", rid, "--all-pending", "--reject", "--message", "not this quarter")
    assert r.returncode == 0, r.stderr
    assert {(who, message) for _i, _c, _s, who, message, _a in approvals_table(tmp_path)} == {
        (getpass.getuser(), "not this quarter")}
    records = jsonl(cli("resume", rid, "--format", "jsonl").stdout)
    assert [(rec["status"], rec["error"]["message"]) for rec in records[:-1]] == [
        ("denied", "tool 'pay' needs approval (args.amount > 100): not this quarter")] * 2


@pytest.mark.parametrize("args, message", [
    (["--all-pending", "pay", "--approve"], "--all-pending answers every waiting call of the run: give no CALL_KEY,"
                                            " --item or --args with it"),
    (["--all-pending", "--approve", "--args", "{}"], "--all-pending answers every waiting call"),
    (["--approve"], "name the call (CALL_KEY, with --item in a parallel run), or give --all-pending"),
    (["--all-pending"], "give exactly one of --approve or --reject"),
])
def test_approve_usage_errors(cli, tmp_path, args, message):
    rid = paused_run(cli, tmp_path, lanes=1)
    r = cli("approve", rid, *args)
    assert r.returncode == 2
    assert message in r.stderr.decode() and "Traceback" not in r.stderr.decode()
    assert approvals_table(tmp_path)[0][2] == "pending"  # nothing was answered


def test_approve_reads_the_journal_only_unless_args_need_a_schema_check(cli, tmp_path):
    rid = paused_run(cli, tmp_path, lanes=2)
    # approving does not import the App, the engine or the registry's compiler ...
    r = cli("approve", rid, "pay", "--item", "k0", "--approve", env={"PYTHONPROFILEIMPORTTIME": "1"})
    assert r.returncode == 0, r.stderr
    imported = {line.rsplit("|", 1)[-1].strip() for line in r.stderr.decode().splitlines() if line.startswith("import time:")}
    assert "toolloop_cli.store" in imported
    assert not {m for m in imported if m.startswith(("toolloop_cli.engine", "toolloop_cli.contract", "testapp", "trio"))}
    # ... so it works while the registry cannot be read at all
    (tmp_path / "reg.yml").write_text("version: [\n")
    r = cli("approve", rid, "pay", "--item", "k1", "--reject")
    assert r.returncode == 0, r.stderr
    # --args are checked against the tool's input schema, which needs the registry
    write(tmp_path / "reg.yml", REGISTRY)
    rid = paused_run(cli, tmp_path, lanes=1)
    r = cli("approve", rid, "pay", "--item", "k0", "--approve", "--args", '{"amount": "lots"}')
    assert r.returncode == 1 and "--args fail the tool's input schema" in r.stderr.decode()
    r = cli("approve", rid, "pay", "--item", "k0", "--approve", "--args", '{"amount": 150}')
    assert r.returncode == 0, r.stderr


def test_a_call_named_without_its_lane_says_where_it_waits_and_how_to_pick(cli, tmp_path):
    rid = paused_run(cli, tmp_path, lanes=3)
    r = cli("approve", rid, "pay", "--approve")
    assert r.returncode == 2
    assert r.stderr.decode() == (
        f"toolloop: error: call 'pay' waits in 3 lanes of run {rid}: k0, k1, k2\n"
        f"  hint: pick one with --item ITEM_KEY (e.g. toolloop approve {rid} pay --item k0 --approve),"
        " or answer every waiting call of the run with --all-pending\n")
    assert {state for _i, _c, state, *_rest in approvals_table(tmp_path)} == {"pending"}  # nothing answered
    # an answer names the lane it went to
    r = cli("approve", rid, "pay", "--item", "k1", "--approve")
    assert r.returncode == 0
    assert r.stderr.decode() == f"approved pay in lane k1; continue with: toolloop resume {rid}\n"


def test_a_call_that_waits_in_one_lane_only_is_answered_there(cli, tmp_path):
    rid = paused_run(cli, tmp_path, lanes=2)
    assert cli("approve", rid, "pay", "--item", "k0", "--reject").returncode == 0
    r = cli("approve", rid, "pay", "--approve")
    assert r.returncode == 0, r.stderr
    assert r.stderr.decode() == f"approved pay in lane k1; continue with: toolloop resume {rid}\n"
    assert [(item, state) for item, _c, state, *_rest in approvals_table(tmp_path)] == [
        ("k0", "rejected"), ("k1", "approved")]
    r = cli("approve", rid, "pay", "--approve")
    assert r.returncode == 1 and "no call 'pay' waits for approval" in r.stderr.decode()


def test_answering_an_answered_call_says_who_answered_and_what_comes_next(cli, tmp_path):
    rid = paused_run(cli, tmp_path, lanes=2)
    assert cli("approve", rid, "pay", "--item", "k0", "--approve", "--approver", "ada").returncode == 0
    r = cli("approve", rid, "pay", "--item", "k0", "--reject", "--approver", "bob")
    assert r.returncode == 1
    assert r.stderr.decode() == (
        f"toolloop: error: call 'pay' in lane 'k0' of run {rid} was already approved by ada; the run has not read"
        f" the answer yet; nothing changed\n  hint: continue with: toolloop resume {rid}\n")
    assert cli("resume", rid, "--format", "jsonl").returncode == 4  # k1 still waits
    r = cli("approve", rid, "pay", "--item", "k0", "--reject")
    assert r.returncode == 1
    assert r.stderr.decode() == (f"toolloop: error: call 'pay' in lane 'k0' of run {rid} was already answered by ada,"
                                 " and the answer was used; nothing changed\n")
    assert [(item, state, who) for item, _c, state, who, *_rest in approvals_table(tmp_path)] == [
        ("k0", "used", "ada"), ("k1", "pending", None)]
