"""`run --lanes - --stream`: each lane admitted just before it starts; rejected lanes reported."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import threading
import sys

from conftest import APP, jsonl, write

REG = APP / "registry.yml"


def plan(tmp_path):
    return write(tmp_path / "plan.yml", json.dumps({
        "version": 1, "registry": str(REG), "subagent": "t", "mode": "parallel", "max_concurrency": 2, "lanes": []}))


def line(item_key: str, *calls: dict) -> bytes:
    return json.dumps({"item_key": item_key, "calls": list(calls)}).encode() + b"\n"


def test_lanes_are_admitted_and_run_while_the_input_is_still_open(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "toolloop_cli", "run", str(plan(tmp_path)), "--lanes", "-", "--stream"],
                            cwd=tmp_path, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    watchdog = threading.Timer(60, proc.kill)  # a blocked read ends (and fails) instead of hanging
    watchdog.start()
    try:
        for i in range(3):
            proc.stdin.write(line(f"k{i}", {"tool": "echo", "args": {"i": i}}))
            proc.stdin.flush()
            receipt = json.loads(proc.stdout.readline())  # answered before the next lane is written
            assert (receipt["seq"], receipt["item_key"], receipt["status"]) == (i, f"k{i}", "ok")
        proc.stdin.close()
        rest = [json.loads(x) for x in proc.stdout.read().splitlines()]
        assert [r["type"] for r in rest] == ["summary"] and rest[0]["counts"]["ok"] == 3
        assert proc.wait(timeout=30) == 0
    finally:
        watchdog.cancel()
        proc.kill()
        proc.wait()


def test_a_rejected_lane_is_reported_and_the_others_run(cli, tmp_path):
    data = (line("a", {"tool": "echo", "args": {}})
            + line("b", {"tool": "ecko", "args": {}}, {"call_key": "second", "tool": "echo"})
            + b"not json\n"
            + line("a", {"tool": "echo"})
            + line("c", {"tool": "echo", "args": {"last": True}}))
    proc = cli("run", str(plan(tmp_path)), "--lanes", "-", "--stream", input=data)
    assert proc.returncode == 1
    receipts = jsonl(proc.stdout)[:-1]
    got = [(r["seq"], r["item_key"], r["call_key"], r["tool"], r["status"]) for r in receipts]
    assert got == [
        (0, "a", "0", "echo", "ok"),
        (1, "b", "0", "ecko", "invalid_input"),
        (2, "b", "second", "echo", "invalid_input"),
        (3, "a", "0", "echo", "invalid_input"),
        (4, "c", "0", "echo", "ok"),
    ]
    assert "TL402" in receipts[1]["error"]["message"] and "TL405" in receipts[3]["error"]["message"]
    err = proc.stderr.decode()
    assert "-:2:1: error TL402" in err and "-:3:1: error TL414" in err and "-:4:1: error TL405" in err
    assert "Traceback" not in err
    # admitted lanes are journaled (rejected ones only through their receipts)
    con = sqlite3.connect(tmp_path / ".toolloop" / "state.db")
    assert [r[0] for r in con.execute("SELECT item_key FROM lanes ORDER BY lane")] == ["a", "c"]
    assert con.execute("SELECT total_calls FROM runs").fetchone()[0] == 5
    con.close()
    shown = cli("runs", "show", jsonl(proc.stdout)[-1]["run_id"], "--format", "jsonl")
    assert shown.stdout == proc.stdout


def test_stream_needs_lanes_and_no_dry_run(cli, tmp_path):
    p = str(plan(tmp_path))
    assert cli("run", p, "--stream").returncode == 2
    assert cli("run", p, "--stream", "--lanes", "-", "--dry-run", input=b"").returncode == 2


def test_a_broken_line_alone_makes_the_run_failed_and_is_counted(cli, tmp_path):
    data = line("a", {"tool": "echo", "args": {}}) + b"{broken\n" + line("c", {"tool": "echo", "args": {}})
    proc = cli("run", str(plan(tmp_path)), "--lanes", "-", "--stream", input=data)
    assert proc.returncode == 1, proc.stderr.decode()
    records = jsonl(proc.stdout)
    assert [r["status"] for r in records[:-1]] == ["ok", "ok"]
    assert records[-1]["status"] == "failed" and records[-1]["rejected_lanes"] == 1


def test_a_streamed_key_seen_many_pages_before_is_still_a_duplicate(cli, tmp_path):
    data = b"".join(line(f"k{i}", {"tool": "echo", "args": {}}) for i in range(600)) + line("k7", {"tool": "echo"})
    proc = cli("run", str(plan(tmp_path)), "--lanes", "-", "--stream", input=data)
    assert proc.returncode == 1, proc.stderr.decode()
    receipts = jsonl(proc.stdout)[:-1]
    assert [r["status"] for r in receipts[:600]] == ["ok"] * 600
    assert receipts[600]["status"] == "invalid_input" and "first in lane 7" in receipts[600]["error"]["message"]
    assert "-:601:1: error TL405" in proc.stderr.decode()
