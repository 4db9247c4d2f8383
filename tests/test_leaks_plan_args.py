"""A run secret written literally in a plan's call arguments (here the token of ``toolloop
serve``, ``TOOLLOOP_SERVE_TOKEN``, one of the run's credentials) never lands in the journal: the
``calls`` table withholds arguments that hold one, as it withholds a redacted value, and a resume
rebuilds them from the plan file (the call still gets the value). The state database, its
write-ahead log, ``runs show`` and ``runs export`` are searched for it. Real subprocesses, a real
state database."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from conftest import jsonl, state_bytes, write
from regkit import registry_yaml

TOKEN = "serve-token-PLAN-9c1e47"


def setup(tmp_path) -> Path:
    write(tmp_path / "reg.yml", registry_yaml("echo", "log_gated"))
    return write(tmp_path / "plan.yml", json.dumps({
        "version": 1, "registry": "reg.yml", "subagent": "t", "mode": "sequential",
        "calls": [{"tool": "echo", "args": {"note": f"use {TOKEN} here", "n": 1}},
                  {"tool": "log_gated", "args": {"log": str(tmp_path / "log.txt"), "key": TOKEN}}]}))


def written(tmp_path) -> bytes:
    return state_bytes(tmp_path / ".toolloop")


def test_a_run_secret_written_in_a_plans_arguments_is_never_journaled_and_a_resume_still_gives_it(tmp_path, cli):
    plan = setup(tmp_path)
    env = {"TOOLLOOP_SERVE_TOKEN": TOKEN}
    paused = cli("run", str(plan), "--format", "jsonl", env=env)
    assert paused.returncode == 4, paused.stderr.decode()
    run_id = jsonl(paused.stdout)[-1]["run_id"]
    assert TOKEN.encode() not in paused.stdout + paused.stderr
    assert TOKEN.encode() not in written(tmp_path)  # state.db and its WAL while the run is paused
    db = sqlite3.connect(tmp_path / ".toolloop" / "state.db")
    try:
        rows = db.execute("SELECT seq, args, args_sha256 FROM calls WHERE run_id=? ORDER BY seq", (run_id,)).fetchall()
    finally:
        db.close()
    assert [(seq, args) for seq, args, _sha in rows] == [(0, None), (1, None)] and all(sha for *_x, sha in rows)

    assert cli("approve", run_id, "--all-pending", "--approve", env=env).returncode == 0
    done = cli("resume", run_id, "--format", "jsonl", env=env)
    assert done.returncode == 0, done.stderr.decode()
    assert (tmp_path / "log.txt").read_text().split() == [TOKEN]  # rebuilt from the plan: the call got it
    shown = cli("runs", "show", run_id, "--format", "jsonl", env=env)
    exported = cli("runs", "export", run_id, env=env)
    for out in (done, shown, exported):
        assert TOKEN.encode() not in out.stdout + out.stderr
    assert TOKEN.encode() not in written(tmp_path)


def test_a_run_secret_in_a_lanes_payload_is_never_journaled_and_a_resume_still_gives_it(tmp_path, cli):
    setup(tmp_path)
    plan = write(tmp_path / "lanes.yml", json.dumps({
        "version": 1, "registry": "reg.yml", "subagent": "t", "mode": "parallel", "max_concurrency": 2,
        "lanes": [{"item_key": "a", "payload": {"log": str(tmp_path / "log.txt"), "key": TOKEN},
                   "calls": [{"call_key": "w", "tool": "log_gated"}]}]}))
    env = {"TOOLLOOP_SERVE_TOKEN": TOKEN}
    paused = cli("run", str(plan), "--format", "jsonl", env=env)
    assert paused.returncode == 4, paused.stderr.decode()
    run_id = jsonl(paused.stdout)[-1]["run_id"]
    assert TOKEN.encode() not in written(tmp_path)
    assert cli("approve", run_id, "--all-pending", "--approve", env=env).returncode == 0
    done = cli("resume", run_id, "--format", "jsonl", env=env)
    assert done.returncode == 0, done.stderr.decode()
    assert (tmp_path / "log.txt").read_text().split() == [TOKEN]
    for out in (done, cli("runs", "show", run_id, "--format", "jsonl", env=env), cli("runs", "export", run_id, env=env)):
        assert TOKEN.encode() not in out.stdout + out.stderr
    assert TOKEN.encode() not in written(tmp_path)
