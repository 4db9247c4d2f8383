"""A run secret written literally in a ``--lanes`` file (here the token of ``toolloop serve``,
``TOOLLOOP_SERVE_TOKEN``, one of the run's credentials) never lands in the journal, whether the
lanes are spooled as they are admitted or admitted one by one as they start (``--stream``): a
call's arguments or a lane's payload that hold one are journaled as their hash only, and a resume
given the file again rebuilds them (the call still gets the value). The state database, its
write-ahead log, the output, ``runs show`` and ``runs export`` are searched for it. Real
subprocesses, a real state database."""

from __future__ import annotations

import json
import sqlite3

import pytest

from conftest import jsonl, state_bytes, write
from regkit import registry_yaml

TOKEN = "serve-token-LANES-4d7a21"


def setup(tmp_path) -> tuple:
    write(tmp_path / "reg.yml", registry_yaml("echo", "log_gated"))
    plan = write(tmp_path / "plan.yml", json.dumps({
        "version": 1, "registry": "reg.yml", "subagent": "t", "mode": "parallel", "max_concurrency": 1,
        "lanes": []}))
    log = tmp_path / "log.txt"
    lanes = tmp_path / "lanes.jsonl"
    lanes.write_text(
        json.dumps({"item_key": "a", "calls": [{"tool": "echo", "args": {"note": f"use {TOKEN} here", "n": 1}}]}) + "\n"
        + json.dumps({"item_key": "b", "payload": {"log": str(log), "key": TOKEN},
                      "calls": [{"call_key": "w", "tool": "log_gated"}]}) + "\n"
        + json.dumps({"item_key": "c", "calls": [{"tool": "log_gated", "args": {"log": str(log), "key": TOKEN}}]}) + "\n")
    return plan, lanes, log


def written(tmp_path) -> bytes:
    return state_bytes(tmp_path / ".toolloop")


@pytest.mark.parametrize("stream", [False, True], ids=["spooled", "streamed"])
def test_a_run_secret_written_in_a_lanes_file_is_never_journaled_and_a_resume_still_gives_it(tmp_path, cli, stream):
    plan, lanes, log = setup(tmp_path)
    env = {"TOOLLOOP_SERVE_TOKEN": TOKEN}
    paused = cli("run", str(plan), "--lanes", str(lanes), *(["--stream"] if stream else []), "--format", "jsonl", env=env)
    assert paused.returncode == 4, paused.stderr.decode()
    run_id = jsonl(paused.stdout)[-1]["run_id"]
    assert TOKEN.encode() not in paused.stdout + paused.stderr
    assert TOKEN.encode() not in written(tmp_path)  # state.db and its WAL while the run is paused
    db = sqlite3.connect(tmp_path / ".toolloop" / "state.db")
    try:
        calls = db.execute("SELECT seq, args, args_sha256 FROM calls WHERE run_id=? ORDER BY seq", (run_id,)).fetchall()
        payload = db.execute("SELECT payload, payload_sha256 FROM lanes WHERE run_id=? AND item_key='b'",
                             (run_id,)).fetchone()
    finally:
        db.close()
    assert [(seq, args) for seq, args, _sha in calls] == [(0, None), (1, None), (2, None)]
    assert all(sha for *_x, sha in calls)
    assert payload is not None and payload[1] and TOKEN not in (payload[0] or "")

    assert cli("approve", run_id, "--all-pending", "--approve", env=env).returncode == 0
    done = cli("resume", run_id, "--lanes", str(lanes), "--format", "jsonl", env=env)
    assert done.returncode == 0, done.stderr.decode()
    # rebuilt from the lanes file: both calls got the value
    assert log.read_text().split() == [TOKEN, TOKEN]
    shown = cli("runs", "show", run_id, "--format", "jsonl", env=env)
    exported = cli("runs", "export", run_id, env=env)
    for out in (done, shown, exported):
        assert out.returncode == 0 and TOKEN.encode() not in out.stdout + out.stderr
    assert TOKEN.encode() not in written(tmp_path)
