"""SIGINT and SIGTERM: calls in flight are cancelled, the journal stays intact, exit 130, no
traceback; a second signal forces the exit; resume finishes the run."""

from __future__ import annotations

import signal
import sqlite3
from collections import Counter

import pytest

from conftest import jsonl
from test_resume import popen, wait_for
from test_store import committed, parallel_plan, read_log, state_registry


def slow_plan(tmp_path, tool: str, lanes: int = 4, calls: int = 4, seconds: float = 0.15):
    log = tmp_path / "log"
    plan = parallel_plan(tmp_path, [
        {"item_key": f"i{i}", "calls": [{"call_key": f"c{j}", "tool": tool,
                                         "args": {"log": str(log), "key": f"{i}-{j}", "seconds": seconds}}
                                        for j in range(calls)]}
        for i in range(lanes)
    ], mc=lanes)
    return plan, log


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("tool", ["read", "read_async"])
def test_signal_cancels_cleanly_and_resume_finishes(cli, tmp_path, sig, tool):
    state_registry(tmp_path)
    plan, log = slow_plan(tmp_path, tool)
    proc = popen(tmp_path, "run", str(plan), "--format", "jsonl")
    wait_for(lambda: len(read_log(log)) >= 6 or proc.poll() is not None, "six executions")
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    err_text = err.decode()
    assert "Traceback" not in err_text
    name = signal.Signals(sig).name
    assert f"toolloop: {name}: cancelling the calls in flight (send it again to stop at once)\n" in err_text
    records = jsonl(out)
    run_id = records[-1]["run_id"]
    assert err_text.endswith(f"toolloop: interrupted; resume with: toolloop resume {run_id}\n")
    summary = records[-1]
    assert summary["type"] == "summary" and summary["status"] == "interrupted"
    receipts = records[:-1]
    statuses = Counter(r["status"] for r in receipts)
    assert set(statuses) <= {"ok", "cancelled"} and statuses["cancelled"] >= 1
    assert [r["seq"] for r in receipts] == sorted(r["seq"] for r in receipts)
    # the journal is intact and holds exactly what was printed
    db = tmp_path / ".toolloop" / "state.db"
    con = sqlite3.connect(db)
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert con.execute("SELECT status FROM runs").fetchone()[0] == "interrupted"
    con.close()
    assert {s: r for s, r in committed(db).items()} == {r["seq"]: r for r in receipts}
    ok_before = {r["args"]["key"] for r in receipts if r["status"] == "ok"}

    done = cli("resume", run_id, "--format", "jsonl")
    assert done.returncode == 0, done.stderr
    final = jsonl(done.stdout)
    assert [r["status"] for r in final[:-1]] == ["ok"] * 16
    assert final[-1]["status"] == "ok"
    runs = Counter(read_log(log))
    assert all(runs[k] == 1 for k in ok_before)  # nothing with an ok receipt ran again
    assert set(runs) == {f"{i}-{j}" for i in range(4) for j in range(4)}


def test_second_sigint_forces_exit_with_the_journal_intact(cli, tmp_path):
    """Nobody reads the output, so the run cannot finish writing it: the first SIGINT asks it to
    stop, the second forces it out. Every receipt was committed before it was due on stdout."""
    state_registry(tmp_path)
    plan = parallel_plan(tmp_path, [
        {"item_key": f"i{i}", "calls": [{"call_key": "c", "tool": "big", "args": {"n": 100_000}}]} for i in range(8)
    ])
    stderr_path = tmp_path / "stderr.txt"
    import os
    import subprocess
    import sys

    env = {**os.environ, "NO_COLOR": "1"}
    env.pop("TOOLLOOP_STATE_DIR", None)
    with open(stderr_path, "wb") as stderr:
        proc = subprocess.Popen([sys.executable, "-m", "toolloop_cli", "run", str(plan), "--format", "jsonl"],
                                cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=stderr)
    db = tmp_path / ".toolloop" / "state.db"

    def all_committed() -> bool:
        try:
            return len(committed(db)) == 8
        except sqlite3.Error:
            return False

    try:
        wait_for(all_committed, "every receipt to be committed")
        assert proc.poll() is None  # stuck writing to a pipe nobody reads
        proc.send_signal(signal.SIGINT)
        wait_for(lambda: b"cancelling" in stderr_path.read_bytes(), "the first notice")
        assert proc.poll() is None
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.stdout.close()
    assert proc.returncode == 130
    err = stderr_path.read_text()
    assert "Traceback" not in err
    assert "toolloop: SIGINT again: stopping now; every receipt written so far is in the journal\n" in err
    listed = jsonl(cli("runs", "list", "--format", "jsonl").stdout)
    assert listed[0]["status"] == "interrupted" and listed[0]["counts"] == {"ok": 8}
    done = cli("resume", listed[0]["run_id"], "--format", "jsonl")
    assert done.returncode == 0
    assert [r["status"] for r in jsonl(done.stdout)[:-1]] == ["ok"] * 8
