"""A routed run killed while an at-most-once write was in flight: on resume the write settles
``interrupted`` (it may have happened) and counts as one call toward its tool's ``max_calls``, so
the model's next proposal of that tool is rejected once the cap is reached, in the resumed session
and in a later one that keeps the receipt. A real model server on 127.0.0.1, real subprocesses."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from conftest import jsonl, write
from regkit import openai_profile, registry_yaml, routed_plan_yaml
from test_resume import wait_for
from test_store import read_log

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

    # a fork from turn 2 takes the interrupted write as recorded: it counts there too, so the
    # fork's live proposal of the tool is rejected even with --execute-writes
    model_server.script(write_call(tmp_path, "forked"), FINAL, '{"answer": 2}')
    fork = cli("replay", run_id, "--from", "2", "--execute-writes", "--format", "jsonl", env={"TL_TEST_KEY": KEY})
    assert fork.returncode == 0, fork.stderr.decode()
    forked = jsonl(fork.stdout)
    assert [(r["tool"], r["status"]) for r in forked if r["type"] == "receipt"] == [("log_gate", "interrupted")]
    assert [r["rejected"] for r in forked if r["type"] == "decision"] == [None, "over_budget", None], forked
    assert read_log(tmp_path / "log") == ["w"]
