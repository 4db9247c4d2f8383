"""``toolloop replay`` of a routed run that was resumed past a supervisor pause goes past that
pause too (the recorded run did), so replaying an unchanged run reports no difference; a pause
the recorded run still stands at stops the replay there, as it stopped the run. A real model
server on 127.0.0.1, the CLI in subprocesses."""

from __future__ import annotations

import json

from conftest import jsonl, write
from regkit import openai_profile, registry_yaml, routed_plan_yaml

KEY = "sk-replay-pause-canary"
FINAL = '{"action": "final", "reason": "enough"}'


def look(log) -> str:
    return json.dumps({"action": "call", "tool": "log_run", "args": {"log": str(log), "key": "a"}, "reason": "look"})


def setup(tmp_path, server):
    write(tmp_path / "reg.yml", registry_yaml("log_run"))
    profile = openai_profile(server.openai_base)
    # a result that repeats the one before pauses the run (no_progress): at turn 2 here
    return write(tmp_path / "plan.yml", routed_plan_yaml(profile, "Find x.", pause_on_no_progress=True))


def test_replay_goes_past_a_pause_the_recorded_run_was_resumed_past(tmp_path, model_server, cli):
    plan = setup(tmp_path, model_server)
    model_server.script(look(tmp_path / "one"), look(tmp_path / "two"))
    paused = cli("run", str(plan), "--format", "jsonl", env={"TL_TEST_KEY": KEY})
    assert paused.returncode == 4, paused.stderr.decode()
    run_id = jsonl(paused.stdout)[-1]["run_id"]
    assert jsonl(paused.stdout)[-1]["paused_by"]["kind"] == "supervisor"

    # replayed while it stands paused: the replay stops at the same pause, as the run did
    still = cli("replay", run_id, "--format", "jsonl")
    assert still.returncode == 0, still.stderr.decode()
    assert jsonl(still.stdout)[-1]["outcome"] == "paused"
    assert b"differs" not in still.stderr and b"no difference" in still.stderr, still.stderr

    model_server.script(FINAL, '{"answer": 1}')
    done = cli("resume", run_id, "--format", "jsonl", env={"TL_TEST_KEY": KEY})
    assert done.returncode == 0, done.stderr.decode()
    assert jsonl(done.stdout)[-1]["outcome"] == "final"
    asked = len(model_server.requests)

    # replayed after the resume went past the pause: so does the replay, with no difference
    same = cli("replay", run_id, "--format", "jsonl")
    assert same.returncode == 0, same.stderr.decode()
    assert b"differs" not in same.stderr and b"no difference" in same.stderr, same.stderr
    replayed = jsonl(same.stdout)
    assert replayed[-1]["outcome"] == "final" and replayed[-1]["final"] == {"answer": 1}
    assert [r["type"] for r in replayed if r["type"] in ("decision", "receipt")] == [
        "decision", "receipt", "decision", "receipt", "decision"]
    assert len(model_server.requests) == asked  # the recording answered every turn
