"""A call of a routed run's first attempt that started (its start marker committed) but never got
a receipt, on a path a resumed run no longer takes: its start marker is set aside with the answers
and receipts went past (``went_past``, kind ``start``), not left as a call in flight of the
resumed run. Otherwise a later resume finds the marker at that seq and settles the resumed run's
own write there ``interrupted`` though it never started. A real model server on 127.0.0.1, real
subprocesses killed where a crash would stop them."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from conftest import jsonl, write
from regkit import openai_profile, registry_yaml, routed_plan_yaml, state_rows as rows
from test_resume import wait_for
from test_store import read_log

KEY = "sk-went-past-canary"
FINAL = '{"action": "final", "reason": "enough"}'


def setup(tmp_path, server):
    extra = {"log_gate": "effect: write  # toolloop: ignore[TL353] (nothing to approve in a test)"}
    write(tmp_path / "reg.yml", registry_yaml("flaky", "log_gate", extra=extra))
    profile = openai_profile(server.openai_base)
    return write(tmp_path / "plan.yml", routed_plan_yaml(profile, "Write things.", pause_on_no_progress=True))


def decide(tool: str, **args: object) -> str:
    return json.dumps({"action": "call", "tool": tool, "args": args, "reason": tool})


def toolloop(tmp_path, *args: str) -> subprocess.Popen:
    env = {**os.environ, "TL_TEST_KEY": KEY, "NO_COLOR": "1"}
    return subprocess.Popen([sys.executable, "-m", "toolloop_cli", *args, "--format", "jsonl"], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def kill(proc: subprocess.Popen) -> None:
    assert proc.poll() is None, proc.communicate()
    proc.kill()
    proc.communicate()


def test_a_started_call_went_past_is_not_in_flight_for_the_resumed_run(tmp_path, model_server, cli):
    plan = setup(tmp_path, model_server)
    flog, log, marker, gate = (str(tmp_path / n) for n in ("flog", "log", "marker", "gate"))
    # first attempt: turn 1 fails, turn 2 is ok, turn 3's write starts and the process dies in it
    model_server.script(decide("flaky", log=flog, key="a", marker=marker),
                        decide("flaky", log=flog + "2", key="a", marker=marker),
                        decide("log_gate", log=log, key="old", gate=gate))
    first = toolloop(tmp_path, "run", str(plan))
    wait_for(lambda: read_log(tmp_path / "log") == ["old"] or first.poll() is not None, "the write to start")
    kill(first)
    run_id = rows(tmp_path, "SELECT run_id FROM runs")[0][0]
    assert rows(tmp_path, "SELECT seq FROM starts") == [(2,)]
    (tmp_path / "gate").touch()

    # second attempt: turn 1 runs again and is ok now, which the model was never told, so the
    # first attempt's turns 2 and 3 (their answers, turn 2's receipt, turn 3's write's start) are a
    # path this run did not take; asked anew, the model repeats turn 1's result and the supervisor
    # pauses the run there
    asked = len(model_server.requests)
    model_server.script(decide("flaky", log=flog + "2", key="a", marker=marker))
    paused = cli("resume", run_id, "--retry-failed", "--format", "jsonl", env={"TL_TEST_KEY": KEY})
    assert paused.returncode == 4, paused.stderr.decode()
    assert len(model_server.requests) == asked + 1  # turn 1's answer was reused, turn 2 asked anew
    assert rows(tmp_path, "SELECT seq FROM starts") == []  # no call of the run's own is in flight
    assert rows(tmp_path, "SELECT kind, ref FROM went_past ORDER BY n") == [
        ("model_answer", 2), ("model_answer", 3), ("receipt", 1), ("start", 2)]

    # third attempt, past the pause: the write the model now proposes at that seq never started: it runs
    model_server.script(decide("log_gate", log=log, key="new", gate=gate), FINAL, '{"answer": 1}')
    done = cli("resume", run_id, "--format", "jsonl", env={"TL_TEST_KEY": KEY})
    assert done.returncode == 0, done.stderr.decode()
    records = jsonl(done.stdout)
    assert [(r["tool"], r["status"]) for r in records if r["type"] == "receipt"] == [
        ("flaky", "ok"), ("flaky", "ok"), ("log_gate", "ok")], records
    assert read_log(tmp_path / "log") == ["old", "new"]

    # the start set aside is exported with the other records went past, and the chain holds
    manifest = jsonl(cli("runs", "export", run_id).stdout)[0]
    moved = [m for m in manifest["went_past"] if m["kind"] == "start"]
    assert len(moved) == 1 and moved[0]["ref"] == 2 and moved[0]["record"]["seq"] == 2, manifest["went_past"]
    assert isinstance(moved[0]["record"]["started_at"], str)
    assert cli("runs", "verify", run_id).returncode == 0
