"""State that cleans up after itself: the state folder keeps out of git, and ``runs prune`` deletes
finished runs (never paused or running ones) and the cache entries only they used."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import time

import pytest

from conftest import APP, jsonl, write
from toolloop_cli.store import lease_token

REGISTRY = f"""
version: 1
app_root: {APP}
subagents:
  t:
    runner_defaults: {{tool_timeout_s: 10}}
    tools:
      cached:
        callable: testapp.tools:echo
        description: Cacheable.
        cacheable: true
        input_schema: {{type: object}}
        output_schema: {{}}
      plain:
        callable: testapp.tools:echo
        description: Not cacheable.
        input_schema: {{type: object}}
        output_schema: {{}}
      gated:
        callable: testapp.tools:echo
        description: Always asks.
        approval: {{when: "true"}}
        input_schema: {{type: object}}
        output_schema: {{}}
"""

DAY = 86400


def run(cli, tmp_path, tool: str, args: dict | None = None, expect: int = 0) -> str:
    write(tmp_path / "reg.yml", REGISTRY)
    write(tmp_path / f"{tool}.yml", json.dumps({"version": 1, "registry": "reg.yml", "subagent": "t",
                                                "mode": "sequential", "calls": [{"tool": tool, "args": args or {}}]}))
    r = cli("run", f"{tool}.yml", "--format", "jsonl")
    assert r.returncode == expect, r.stderr
    return jsonl(r.stdout)[-1]["run_id"]


def db(tmp_path) -> sqlite3.Connection:
    return sqlite3.connect(tmp_path / ".toolloop" / "state.db", isolation_level=None)


def age(tmp_path, run_id: str, days: float, **columns) -> None:
    """Make a run look ``days`` old (and set other columns of its row)."""
    con = db(tmp_path)
    try:
        when = time.time() - days * DAY
        sets = ", ".join(f"{k}=?" for k in columns)
        con.execute(f"UPDATE runs SET started_at=?, finished_at=?{', ' + sets if sets else ''} WHERE run_id=?",
                    (when, when + 1, *columns.values(), run_id))
    finally:
        con.close()


def cache_age(tmp_path, days: float) -> None:
    """Make the cache entries look written ``days`` ago (inside a run aged the same)."""
    con = db(tmp_path)
    try:
        con.execute("UPDATE cache SET created_at=?", (time.time() - days * DAY + 0.5,))
    finally:
        con.close()


def run_ids(cli) -> list[str]:
    return [r["run_id"] for r in jsonl(cli("runs", "list", "--format", "jsonl").stdout)]


def count(tmp_path, table: str) -> int:
    con = db(tmp_path)
    try:
        return con.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
    finally:
        con.close()


def test_the_state_folder_keeps_itself_out_of_git(cli, tmp_path):
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    run(cli, tmp_path, "plain")
    assert (tmp_path / ".toolloop" / ".gitignore").read_text().splitlines()[-1] == "*"
    status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=tmp_path,
                            capture_output=True, text=True, check=True).stdout
    assert ".toolloop" not in status and "plain.yml" in status
    # a new folder named with --state-dir gets one too; an existing folder of the user's is left alone
    write(tmp_path / "mine" / "notes.txt", "mine\n")
    for folder in ("fresh/state", "mine"):
        r = cli("run", "plain.yml", "--format", "jsonl", "--state-dir", folder)
        assert r.returncode == 0, r.stderr
    assert (tmp_path / "fresh" / "state" / ".gitignore").is_file()
    assert not (tmp_path / "mine" / ".gitignore").exists()


def test_prune_older_than_keeps_paused_and_running_runs(cli, tmp_path):
    old_cached = run(cli, tmp_path, "cached", {"x": 1})
    old_plain = run(cli, tmp_path, "plain")
    paused = run(cli, tmp_path, "gated", expect=4)
    running = run(cli, tmp_path, "plain", {"y": 2})
    recent = run(cli, tmp_path, "plain", {"z": 3})
    age(tmp_path, old_cached, 45)
    cache_age(tmp_path, 45)  # written while old_cached ran
    for rid in (old_plain, paused):
        age(tmp_path, rid, 40)
    age(tmp_path, running, 38, status="running", lease_owner=lease_token(), lease_until=time.time() + DAY)
    assert count(tmp_path, "cache") == 1
    r = cli("runs", "prune", "--older-than", "30d")
    assert r.returncode == 0, r.stderr
    message = r.stderr.decode()
    assert message.startswith("pruned 2 runs (2 receipts) and 1 cache entry; 1 finished run kept; freed "), message
    assert set(run_ids(cli)) == {paused, running, recent}
    assert count(tmp_path, "cache") == 0
    assert count(tmp_path, "receipts") == 2 and count(tmp_path, "calls") == 3
    # the paused run still resumes
    assert cli("approve", paused, "0", "--approve").returncode == 0
    assert cli("resume", paused, "--format", "jsonl").returncode == 0
    # nothing older is left
    r = cli("runs", "prune", "--older-than", "30d")
    assert r.returncode == 0 and r.stderr.decode() == "nothing to prune: 2 finished runs kept\n"


def test_prune_keep_counts_finished_runs_only_and_keeps_cache_a_remaining_run_read(cli, tmp_path):
    first = run(cli, tmp_path, "cached", {"x": 1})     # writes the cache entry
    age(tmp_path, first, 3)
    cache_age(tmp_path, 3)
    second = run(cli, tmp_path, "cached", {"x": 1})    # reads it
    paused = run(cli, tmp_path, "gated", expect=4)
    third = run(cli, tmp_path, "plain")
    r = cli("runs", "prune", "--keep", "2")
    assert r.returncode == 0, r.stderr
    assert r.stderr.decode().startswith("pruned 1 run (1 receipts) and 0 cache entries; 2 finished runs kept;")
    assert set(run_ids(cli)) == {second, paused, third}
    assert count(tmp_path, "cache") == 1  # the run kept read it
    # both options: older than AGE and not among the N most recent
    age(tmp_path, second, 2)
    r = cli("runs", "prune", "--older-than", "1d", "--keep", "1")
    assert r.stderr.decode().startswith("pruned 1 run "), r.stderr
    assert set(run_ids(cli)) == {paused, third}


@pytest.mark.parametrize("args, message", [
    ([], "give --older-than AGE, --keep N, or both"),
    (["--older-than", "a month"], "--older-than 'a month' is not an age"),
    (["--keep", "-1"], "--keep must be 0 or more"),
])
def test_prune_usage_errors(cli, tmp_path, args, message):
    run(cli, tmp_path, "plain")
    r = cli("runs", "prune", *args)
    assert r.returncode == 2 and message in r.stderr.decode()
    assert len(run_ids(cli)) == 1
