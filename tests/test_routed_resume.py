"""Routed runs resumed after a kill (recorded answers reused, settled calls not run again) and
replayed from their recording (identical, divergent, offline)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading

from conftest import jsonl, write
from modelserver import Reply
from regkit import openai_profile, registry_yaml
from test_resume import wait_for
from test_store import committed

KEY = "sk-resume-canary"
FINAL = '{"action": "final", "reason": "enough"}'


def setup(tmp_path, server, budget: str = "{max_iterations: 6, max_tokens: 100000, max_tool_calls: 4, timeout_s: 60}"):
    write(tmp_path / "reg.yml", registry_yaml("log_run", "whoami"))
    profile = openai_profile(server.openai_base)
    return write(tmp_path / "plan.yml", f"""
        version: 1
        registry: reg.yml
        subagent: t
        mode: routed
        goal: Log things.
        router_profile: {profile}
        final_profile: {profile}
        budget: {budget}
        final_schema: {{type: object, required: [answer]}}
    """)


def log_call(key: str, log: str) -> str:
    return json.dumps({"action": "call", "tool": "log_run", "args": {"log": log, "key": key}, "reason": key})


def toolloop(*args: str, cwd) -> list[str]:
    return [sys.executable, "-m", "toolloop_cli", *args]


def test_a_run_killed_mid_loop_resumes_without_asking_or_running_again(tmp_path, model_server, cli):
    log = str(tmp_path / "log.txt")
    plan = setup(tmp_path, model_server)
    arrived = threading.Event()

    def second_turn(_request):
        arrived.set()  # the run is waiting on the model for its second turn: kill it now
        return Reply(FINAL, hold=threading.Event())

    model_server.script(log_call("a", log), Reply(handler=second_turn))
    env = {**os.environ, "TL_TEST_KEY": KEY, "NO_COLOR": "1"}
    proc = subprocess.Popen(toolloop("run", str(plan), "--format", "jsonl", cwd=tmp_path), cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert arrived.wait(60), "the run never asked for its second turn"
    # the request does not wait for the call's receipt: killed once the journal holds it
    wait_for(lambda: committed(tmp_path / ".toolloop" / "state.db"), "the call's receipt to be committed")
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    run_id = json.loads(cli("runs", "list", "--format", "jsonl").stdout.decode().splitlines()[0])["run_id"]
    asked_before = len(model_server.requests)
    model_server.script(FINAL, '{"answer": "a"}')
    done = cli("resume", run_id, "--format", "jsonl", env={"TL_TEST_KEY": KEY})
    assert done.returncode == 0, done.stderr.decode()
    records = jsonl(done.stdout)
    assert [r["type"] for r in records] == ["decision", "receipt", "decision", "summary"]
    assert records[1]["status"] == "ok" and records[-1]["final"] == {"answer": "a"}
    assert open(log).read().split() == ["a"]  # the call that had settled did not run again
    assert len(model_server.requests) - asked_before == 2  # the first turn's answer was reused
    shown = jsonl(cli("runs", "show", run_id, "--format", "jsonl").stdout)
    assert shown == records


def test_replay_reports_no_difference_then_a_difference_and_offline_runs_no_tool(tmp_path, model_server, cli):
    log = str(tmp_path / "log.txt")
    plan = setup(tmp_path, model_server)
    model_server.script(log_call("a", log), FINAL, '{"answer": 1}')
    first = cli("run", str(plan), "--format", "jsonl", env={"TL_TEST_KEY": KEY})
    assert first.returncode == 0, first.stderr.decode()
    run_id = jsonl(first.stdout)[-1]["run_id"]
    asked = len(model_server.requests)
    same = cli("replay", run_id, "--format", "jsonl")  # no key, no model: the recording answers
    assert same.returncode == 0, same.stderr.decode()
    assert b"no difference" in same.stderr
    assert [r["type"] for r in jsonl(same.stdout)] == ["decision", "receipt", "decision", "summary"]
    assert open(log).read().split() == ["a", "a"]  # the read tool ran again
    offline = cli("replay", run_id, "--offline", "--format", "jsonl")
    assert offline.returncode == 0 and open(log).read().split() == ["a", "a"]  # no tool ran
    assert len(model_server.requests) == asked  # no model was asked either

    model_server.script('{"action": "call", "tool": "whoami", "args": {}, "reason": "pid"}', FINAL, '{"answer": 2}')
    second = cli("run", str(plan), "--format", "jsonl", env={"TL_TEST_KEY": KEY})
    run_id = jsonl(second.stdout)[-1]["run_id"]
    diverged = cli("replay", run_id, "--format", "jsonl")
    assert diverged.returncode == 1
    assert b"receipt 0 (whoami, iteration 1): differs in args_sha256" not in diverged.stderr
    assert b"receipt 0 (whoami, iteration 1): differs in result" in diverged.stderr


def test_replay_of_a_run_with_a_cacheable_read_tool_runs_it_again_and_finds_no_difference(tmp_path, model_server, cli):
    log = str(tmp_path / "log.txt")
    plan = setup(tmp_path, model_server)
    reg = tmp_path / "reg.yml"
    reg.write_text(reg.read_text().replace("description: Logs each execution to a file.",
                                           "description: Logs each execution to a file.\n        cacheable: true"))
    runs = []
    for answer in (1, 2):  # the first run fills the cache (miss), the second takes it (hit)
        model_server.script(log_call("a", log), FINAL, json.dumps({"answer": answer}))
        proc = cli("run", str(plan), "--format", "jsonl", env={"TL_TEST_KEY": KEY})
        assert proc.returncode == 0, proc.stderr.decode()
        records = jsonl(proc.stdout)
        runs.append(records[-1]["run_id"])
        assert records[1]["cache"] == ("miss" if answer == 1 else "hit")
    assert open(log).read().split() == ["a"]
    for n, run_id in enumerate(runs):
        same = cli("replay", run_id, "--format", "jsonl")
        assert same.returncode == 0, same.stderr.decode()
        assert b"differs" not in same.stderr and b"no difference" in same.stderr
        assert jsonl(same.stdout)[1]["cache"] == "off"  # the cache is bypassed: the tool ran again
        assert open(log).read().split() == ["a"] * (n + 2)
