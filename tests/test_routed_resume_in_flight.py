"""A routed run killed while an at-most-once write was in flight: on resume the write settles
``interrupted`` (it may have happened) and counts as one call toward its tool's ``max_calls``, so
the model's next proposal of that tool is rejected once the cap is reached, in the resumed session
and in a later one that keeps the receipt. A real model server on 127.0.0.1, real subprocesses."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from types import SimpleNamespace

from conftest import jsonl, write
from regkit import openai_profile, recorded_suite, registry_yaml, routed_plan_yaml, state_rows
from test_resume import wait_for
from test_store import read_log

from toolloop_cli.engine.rerun import IN_FLIGHT, counts_as_made, in_flight_by_form

KEY = "sk-in-flight-canary"
FINAL = '{"action": "final", "reason": "enough"}'


def setup(tmp_path, server):
    extra = {"log_gate": "effect: write  # toolloop: ignore[TL353] (nothing to approve in a test)\nmax_calls: 1"}
    write(tmp_path / "reg.yml", registry_yaml("log_gate", extra=extra))
    profile = openai_profile(server.openai_base)
    return write(tmp_path / "plan.yml", routed_plan_yaml(profile, "Write things."))


def write_call(tmp_path, key: str) -> str:
    args = {"log": str(tmp_path / "log"), "key": key, "gate": str(tmp_path / "gate")}
    return json.dumps({"action": "call", "tool": "log_gate", "args": args, "reason": key})


def test_a_write_in_flight_counts_toward_max_calls_when_the_routed_run_resumes(tmp_path, model_server, cli):
    plan = setup(tmp_path, model_server)
    model_server.script(write_call(tmp_path, "w"))
    env = {**os.environ, "TL_TEST_KEY": KEY, "NO_COLOR": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "toolloop_cli", "run", str(plan), "--format", "jsonl"],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    wait_for(lambda: read_log(tmp_path / "log") == ["w"] or proc.poll() is not None, "the write to start")
    assert proc.poll() is None, proc.communicate()
    proc.kill()
    proc.communicate()
    (tmp_path / "gate").touch()
    run_id = json.loads(cli("runs", "list", "--format", "jsonl").stdout.decode().splitlines()[0])["run_id"]

    # the model proposes the write again, then ends
    model_server.script(write_call(tmp_path, "again"), FINAL, '{"answer": 1}')
    done = cli("resume", run_id, "--format", "jsonl", env={"TL_TEST_KEY": KEY})
    records = jsonl(done.stdout)
    receipts = [(r["tool"], r["status"]) for r in records if r["type"] == "receipt"]
    assert receipts == [("log_gate", "interrupted")], records
    assert read_log(tmp_path / "log") == ["w"]  # the second write never started: the cap was reached
    decisions = [(r["reason"], r["rejected"]) for r in records if r["type"] == "decision"]
    assert decisions == [("w", None), ("again", "over_budget"), ("enough", None)], records
    # what the model was told: the tool's cap, not the run's tool-call budget (1 of 6 used)
    assert "has made its max_calls (1)" in json.dumps(model_server.requests[-2].json["messages"])
    assert done.returncode == 0 and records[-1]["status"] == "ok", done.stderr.decode()

    # a test case recorded from it replays the same: the export keeps no start marker, and the
    # write's copy is known by its form, so the model's second proposal is rejected there too
    exported = cli("runs", "export", run_id)
    assert exported.returncode == 0, exported.stderr.decode()
    recorded_suite(tmp_path, exported.stdout, "{final: {answer: 1}, calls: [{tool: log_gate, status: interrupted}]}")
    case = cli("test", str(tmp_path / "suite.yml"))
    assert case.returncode == 0, case.stdout.decode() + case.stderr.decode()
    assert read_log(tmp_path / "log") == ["w"]

    # a fork from turn 2 takes the interrupted write as recorded: it counts there too, so the
    # fork's live proposal of the tool is rejected even with --execute-writes
    model_server.script(write_call(tmp_path, "forked"), FINAL, '{"answer": 2}')
    fork = cli("replay", run_id, "--from", "2", "--execute-writes", "--format", "jsonl", env={"TL_TEST_KEY": KEY})
    assert fork.returncode == 0, fork.stderr.decode()
    forked = jsonl(fork.stdout)
    assert [(r["tool"], r["status"]) for r in forked if r["type"] == "receipt"] == [("log_gate", "interrupted")]
    assert [r["rejected"] for r in forked if r["type"] == "decision"] == [None, "over_budget", None], forked
    assert read_log(tmp_path / "log") == ["w"]
    # the fork's journal holds the write's start marker as its own: a later reading of the fork
    # knows it was in flight from the journal, not from the receipt's wording
    fork_id = forked[-1]["run_id"]
    assert state_rows(tmp_path, f"SELECT seq FROM starts WHERE run_id='{fork_id}'") == [(0,)]

    # a fork written before forks copied start markers (the marker gone, as that code left it):
    # its copy is still recognised, so a fork of it rejects the live proposal the same way
    con = sqlite3.connect(tmp_path / ".toolloop" / "state.db")
    with con:
        con.execute("DELETE FROM starts WHERE run_id=?", (fork_id,))
    con.close()
    model_server.script(write_call(tmp_path, "forked again"), FINAL, '{"answer": 3}')
    again = cli("replay", fork_id, "--from", "2", "--execute-writes", "--format", "jsonl", env={"TL_TEST_KEY": KEY})
    assert again.returncode == 0, again.stderr.decode()
    refork = jsonl(again.stdout)
    assert [r["rejected"] for r in refork if r["type"] == "decision"] == [None, "over_budget", None], refork
    assert read_log(tmp_path / "log") == ["w"]


def test_only_the_journal_start_marker_says_a_write_was_in_flight():
    """A receipt settled ``interrupted`` with the in-flight wording but no start marker (a tool's
    own message, or an engine message reworded) is not a write that may have happened; the same
    receipt with its start marker is. A journal of the old shape is read by its exact form only."""
    said = SimpleNamespace(seq=4, attempts=0, cache="off", status="interrupted",
                           error={"kind": "interrupted", "message": IN_FLIGHT})
    assert not counts_as_made(said, started={1, 2})
    assert counts_as_made(said, started={4})
    own = {"seq": 4, "status": "error", "attempts": 1, "error": {"kind": "RuntimeError", "message": IN_FLIGHT}}
    unran = {"seq": 5, "status": "interrupted", "attempts": 0, "error": {"kind": "ToolError", "message": IN_FLIGHT}}
    legacy = {"seq": 6, "status": "interrupted", "attempts": 0, "error": {"kind": "interrupted", "message": IN_FLIGHT}}
    assert in_flight_by_form([own, unran, legacy]) == {6}
