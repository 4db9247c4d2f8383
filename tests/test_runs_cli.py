"""toolloop runs list / runs show: the journal read back."""

from __future__ import annotations

import json
import sqlite3

import pytest

from conftest import jsonl
from test_resume import last_run_id, popen, wait_for
from test_store import committed, parallel_plan, read_log, sequential_plan, state_registry


def three_runs(cli, tmp_path) -> list[str]:
    state_registry(tmp_path)
    log = tmp_path / "log"
    ok = sequential_plan(tmp_path, [{"tool": "read", "args": {"log": str(log), "key": "a"}}], name="ok.yml")
    bad = sequential_plan(tmp_path, [
        {"tool": "fail_once", "args": {"log": str(log), "key": "f", "marker": str(tmp_path / "m")}},
        {"tool": "read", "args": {"log": str(log), "key": "b"}}], name="bad.yml")
    par = parallel_plan(tmp_path, [
        {"item_key": f"i{i}", "calls": [{"call_key": "c", "tool": "read", "args": {"log": str(log), "key": f"p{i}"}}]}
        for i in range(3)], name="par.yml")
    ids = []
    for plan, code in ((ok, 0), (bad, 1), (par, 0)):
        r = cli("run", str(plan), "--format", "jsonl")
        assert r.returncode == code, r.stderr
        ids.append(jsonl(r.stdout)[-1]["run_id"])
    return ids


def test_runs_list_newest_first(cli, tmp_path):
    ids = three_runs(cli, tmp_path)
    r = cli("runs", "list", "--format", "jsonl")
    assert r.returncode == 0 and r.stderr == b""
    rows = jsonl(r.stdout)
    assert [row["run_id"] for row in rows] == ids[::-1]
    assert [(row["type"], row["mode"], row["status"], row["calls"], row["counts"]) for row in rows] == [
        ("run", "parallel", "ok", 3, {"ok": 3}),
        ("run", "sequential", "failed", 2, {"error": 1, "skipped": 1}),
        ("run", "sequential", "ok", 1, {"ok": 1}),
    ]
    assert [row["plan"] for row in rows] == [str(tmp_path / n) for n in ("par.yml", "bad.yml", "ok.yml")]
    assert all(row["started_at"].endswith("Z") and len(row["started_at"]) == 27 for row in rows)
    assert rows[0]["started_at"] >= rows[1]["started_at"] >= rows[2]["started_at"]

    as_json = cli("runs", "list", "--format", "json")
    assert json.loads(as_json.stdout) == rows
    table = cli("runs", "list", "--format", "table").stdout.decode()
    assert all(i in table for i in ids) and "parallel" in table and "failed" in table


@pytest.mark.parametrize("fmt", ["jsonl", "json"])
def test_runs_show_reproduces_the_output_byte_for_byte(cli, tmp_path, fmt):
    state_registry(tmp_path)
    log = tmp_path / "log"
    plan = parallel_plan(tmp_path, [
        {"item_key": f"i{i}", "calls": [
            {"call_key": "a", "tool": "read_async", "args": {"log": str(log), "key": f"{i}a", "seconds": 0.001 * i}},
            {"call_key": "b", "tool": "cached", "args": {"log": str(log), "key": "shared"}},
            {"call_key": "c", "tool": "secret", "args": {"user": "ada", "password": f"pw{i}"}}]}
        for i in range(4)
    ] + [{"item_key": "bad", "calls": [{"call_key": "x", "tool": "cached_bad", "args": {"log": str(log), "key": "x"}},
                                       {"call_key": "y", "tool": "read", "args": {"log": str(log), "key": "y"}}]}])
    run = cli("run", str(plan), "--format", fmt)
    assert run.returncode == 1
    run_id = (jsonl(run.stdout) if fmt == "jsonl" else json.loads(run.stdout))[-1]["run_id"]
    shown = cli("runs", "show", run_id, "--format", fmt)
    assert shown.returncode == 0 and shown.stderr == b""
    assert shown.stdout == run.stdout

    resumed = cli("resume", run_id, "--format", fmt)
    assert resumed.returncode == 1
    assert cli("runs", "show", run_id, "--format", fmt).stdout == resumed.stdout


def test_runs_show_of_a_killed_run(cli, tmp_path):
    state_registry(tmp_path)
    log, gate = tmp_path / "log", tmp_path / "gate"
    plan = sequential_plan(tmp_path, [
        {"call_key": "a", "tool": "read", "args": {"log": str(log), "key": "a"}},
        {"call_key": "g", "tool": "gate_read", "args": {"log": str(log), "key": "g", "gate": str(gate)}},
    ])
    proc = popen(tmp_path, "run", str(plan), "--format", "jsonl")

    def first_committed() -> bool:
        try:
            return len(committed(tmp_path / ".toolloop" / "state.db")) == 1
        except sqlite3.Error:
            return False

    wait_for(lambda: read_log(log) == ["a", "g"] and first_committed(), "the second call to be in flight")
    proc.kill()
    proc.communicate()
    run_id = last_run_id(tmp_path)
    shown = cli("runs", "show", run_id, "--format", "jsonl")
    assert shown.returncode == 0
    assert [(r["call_key"], r["status"]) for r in jsonl(shown.stdout)] == [("a", "ok")]
    assert shown.stderr.decode() == (f"toolloop: run {run_id} is interrupted and has no summary yet;"
                                     f" resume with: toolloop resume {run_id}\n")
    listed = jsonl(cli("runs", "list", "--format", "jsonl").stdout)
    assert (listed[0]["status"], listed[0]["counts"]) == ("interrupted", {"ok": 1})
    gate.touch()
    done = cli("resume", run_id, "--format", "jsonl")
    assert done.returncode == 0
    assert read_log(log) == ["a", "g", "g"]


def test_runs_show_unknown_and_ambiguous_ids(cli, tmp_path):
    ids = three_runs(cli, tmp_path)
    r = cli("runs", "show", "nope")
    assert r.returncode == 2
    assert r.stderr.decode() == "toolloop: error: no run 'nope' in .toolloop/state.db (see 'toolloop runs list')\n"
    common = ids[0][:8]  # the same date: every run matches
    r = cli("runs", "show", common)
    assert r.returncode == 2
    assert r.stderr.decode().startswith(f"toolloop: error: run id '{common}' is ambiguous: ")
    assert cli("runs", "show", ids[1][:-3], "--format", "jsonl").returncode == 0


def test_an_empty_list_says_so_on_a_table_and_stays_empty_in_a_pipe(cli, tmp_path):
    three_runs(cli, tmp_path)
    table = cli("runs", "list", "--format", "table", "--label", "ticket=none")
    assert table.returncode == 0 and table.stdout == b""
    assert table.stderr.decode() == "toolloop: no run has ticket=none\n"
    piped = cli("runs", "list", "--format", "jsonl", "--label", "ticket=none")
    assert (piped.returncode, piped.stdout, piped.stderr) == (0, b"", b"")
    waiting = cli("approvals", "list", "--format", "table")
    assert waiting.returncode == 0 and waiting.stdout == b""
    assert waiting.stderr.decode() == "toolloop: no call waits for approval\n"
    piped = cli("approvals", "list", "--format", "jsonl")
    assert (piped.returncode, piped.stdout, piped.stderr) == (0, b"", b"")
