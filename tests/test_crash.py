"""Crash safety: a run SIGKILLed at random moments loses no committed receipt, never
runs a call with a committed ok receipt again, and once resumed ends with the same receipts as
a run that was never interrupted. A WAL torn at any byte loses no commit before the tear and
shows no commit after it."""

from __future__ import annotations

import json
import random
import shutil
import sqlite3
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from conftest import jsonl
from test_resume import popen, wait_for
from test_store import committed, parallel_plan, read_log, state_registry
from toolloop_cli.store import Store

LANES, CALLS = 6, 5
TOTAL = LANES * CALLS
VOLATILE = ("run_id", "parallel_batch_id", "receipt_id", "completion_seq", "started_at", "finished_at", "duration_ms")
SEEDS = [1, 2, 3, 4, 5, 6, 7, 8]
REPORT: dict[str, int] = Counter()


def crash_plan(tmp_path: Path) -> tuple[Path, Path]:
    """Four lanes of reads (sync and async) and two lanes of at-most-once writes."""
    log = tmp_path / "log"
    rng = random.Random(0)
    tools = ["read", "read_async", "read", "read_async", "write", "write"]
    lanes = [{"item_key": f"lane{i}", "calls": [
        {"call_key": f"c{j}", "tool": tools[i],
         "args": {"log": str(log), "key": f"{i}-{j}", "seconds": round(rng.uniform(0.005, 0.05), 3)}}
        for j in range(CALLS)]} for i in range(LANES)]
    return parallel_plan(tmp_path, lanes, mc=4), log


def stable(rec: dict) -> dict:
    return {k: v for k, v in rec.items() if k not in VOLATILE}


def complete_lines(raw: bytes) -> list[dict]:
    """Records fully written before the kill (a torn last line is dropped)."""
    lines = raw.split(b"\n")
    return [json.loads(line) for line in lines[:-1] if line.strip()]


def state_at(db: Path) -> tuple[dict[int, dict], set[int]]:
    con = sqlite3.connect(db)
    try:
        starts = {s for (s,) in con.execute("SELECT seq FROM starts")}
    finally:
        con.close()
    return committed(db), starts


@pytest.fixture(scope="module")
def baseline(tmp_path_factory) -> tuple[Path, list[dict]]:
    """A folder with the plan, and the receipts of the plan run without interruption."""
    folder = tmp_path_factory.mktemp("crash")
    state_registry(folder)
    plan, log = crash_plan(folder)
    r = subprocess.run([*_cmd(), "run", str(plan), "--format", "jsonl", "--state-dir", "base"], cwd=folder,
                       capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr
    log.unlink()
    return folder, jsonl(r.stdout)


def _cmd() -> list[str]:
    import sys

    return [sys.executable, "-m", "toolloop_cli"]


@pytest.mark.parametrize("seed", SEEDS)
def test_sigkill_at_a_random_moment_then_resume(baseline, seed, cli):
    folder, uninterrupted = baseline
    plan, log = folder / "plan.yml", folder / "log"
    log.unlink(missing_ok=True)
    state = folder / f"st{seed}"
    rng = random.Random(seed)
    executions = rng.randint(1, TOTAL - 1)

    proc = popen(folder, "run", str(plan), "--format", "jsonl", "--state-dir", state.name)
    wait_for(lambda: len(read_log(log)) >= executions or proc.poll() is not None, f"{executions} executions")
    proc.kill()
    raw_out, _ = proc.communicate()
    seen = [r for r in complete_lines(raw_out) if r["type"] == "receipt"]
    at_kill, starts = state_at(state / "state.db")
    ran_before = Counter(read_log(log))
    run_id = at_kill[min(at_kill)]["run_id"] if at_kill else _run_id(state)

    # committed before written: everything printed is in the journal, as printed
    for rec in seen:
        assert at_kill[rec["seq"]] == rec

    first = cli("resume", run_id, "--format", "jsonl", "--state-dir", state.name, cwd=folder)
    assert first.returncode in (0, 1), first.stderr
    assert b"Traceback" not in first.stderr
    out = jsonl(first.stdout)
    receipts = {r["seq"]: r for r in out[:-1]}
    assert sorted(receipts) == list(range(TOTAL))
    # nothing committed is lost or changed
    for seq, rec in at_kill.items():
        if rec["status"] == "ok":
            assert receipts[seq] == rec
    interrupted = {s for s, r in receipts.items() if r["status"] == "interrupted"}
    # only writes whose start was committed, with no receipt, are reported interrupted
    for seq in interrupted:
        assert receipts[seq]["tool"] == "write" and seq in starts and seq not in at_kill
    assert {s: r["status"] for s, r in receipts.items() if s not in interrupted} == {
        s: ("skipped" if any(i < s and receipts[i]["item_key"] == r["item_key"] for i in interrupted) else "ok")
        for s, r in receipts.items() if s not in interrupted}
    final = out
    if interrupted:
        assert first.returncode == 1
        again = cli("resume", run_id, "--retry-interrupted", "--format", "jsonl", "--state-dir", state.name,
                    cwd=folder)
        assert again.returncode == 0, again.stderr
        final = jsonl(again.stdout)
    assert final[-1]["status"] == "ok"

    # the same receipts as a run never interrupted, apart from times, ids and completion order
    assert [stable(r) for r in final[:-1]] == [stable(r) for r in uninterrupted[:-1]]
    # every receipt printed before the kill is in the final set unchanged
    for rec in seen:
        assert final[rec["seq"]] == rec
    # no call with a committed ok receipt ran again; at-most-once writes ran once unless retried
    ran = Counter(read_log(log))
    for seq, rec in at_kill.items():
        if rec["status"] == "ok":
            assert ran[rec["args"]["key"]] == 1, rec["args"]["key"]
    for rec in final[:-1]:
        key = rec["args"]["key"]
        if rec["seq"] in interrupted:  # it may or may not have begun before the kill; retried once
            assert ran_before[key] <= 1 and ran[key] - ran_before[key] == 1, key
        elif rec["tool"] == "write":
            assert ran[key] == 1, key
        else:
            assert 1 <= ran[key] <= 2 and ran[key] - ran_before[key] <= 1, key
    REPORT["runs"] += 1
    REPORT["committed_at_kill"] += len(at_kill)
    REPORT["seen_before_kill"] += len(seen)
    REPORT["recovered"] += sum(1 for s, r in at_kill.items() if final[s] == r)
    REPORT["lost"] += sum(1 for s, r in at_kill.items() if r["status"] == "ok" and final[s] != r)
    REPORT["interrupted_writes"] += len(interrupted)
    REPORT["reexecuted_reads"] += sum(1 for r in final[:-1] if r["tool"] != "write" and ran[r["args"]["key"]] == 2)
    print(f"\ncrash seed {seed}: killed after {executions} executions; {len(at_kill)} receipts committed, "
          f"{len(seen)} printed; {len(interrupted)} writes interrupted; report so far {dict(REPORT)}")


def _run_id(state: Path) -> str:
    con = sqlite3.connect(state / "state.db")
    try:
        return con.execute("SELECT run_id FROM runs").fetchone()[0]
    finally:
        con.close()


# --- torn WAL ---------------------------------------------------------------------------------


def test_a_torn_wal_keeps_every_commit_before_the_tear(tmp_path):
    rng = random.Random(42)
    src = tmp_path / "src"
    store = Store(src)
    store.db.execute("PRAGMA wal_autocheckpoint=0")  # every commit stays in the WAL file
    store.create_run({"run_id": "r", "mode": "parallel", "plan_path": "p", "plan_sha256": "x", "registry_path": "r",
                      "contract_sha256": "c", "options": {}, "total_calls": 60})
    store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    wal = src / "state.db-wal"
    assert wal.stat().st_size == 0
    history: list[tuple[int, dict[int, dict]]] = [(0, {})]  # (WAL size after the commit, receipts then)
    current: dict[int, dict] = {}
    for batch in range(40):
        records = []
        for _ in range(rng.randint(1, 6)):
            seq = rng.randrange(60)
            # a later commit may settle a call differently (cancelled, then interrupted or ok)
            status = rng.choice(["ok", "error", "cancelled", "interrupted", "skipped"])
            records.append({"type": "receipt", "run_id": "r", "seq": seq, "status": status,
                            "result": {"batch": batch, "pad": "x" * rng.randint(0, 3000)} if status == "ok" else None})
        store.put_receipts(records)
        for r in records:
            current[r["seq"]] = r
        history.append((wal.stat().st_size, dict(current)))
    shutil.copy(src / "state.db", tmp_path / "state.db.copy")
    shutil.copy(wal, tmp_path / "state.db-wal.copy")
    store.close()

    size = history[-1][0]
    cuts = {0, 31, 32, size, size - 1} | {rng.randrange(size) for _ in range(60)}
    cuts |= {end + d for end, _ in history[1::7] for d in (-1, 0, 1)}
    checked = 0
    for cut in sorted(c for c in cuts if 0 <= c <= size):
        torn = tmp_path / f"torn{cut}"
        torn.mkdir()
        shutil.copy(tmp_path / "state.db.copy", torn / "state.db")
        shutil.copy(tmp_path / "state.db-wal.copy", torn / "state.db-wal")
        with open(torn / "state.db-wal", "r+b") as fh:
            fh.truncate(cut)
        expected = [state for end, state in history if end <= cut][-1]
        reopened = Store(torn)
        try:
            assert reopened.db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
            rows = reopened.db.execute("SELECT seq, status, record FROM receipts WHERE run_id='r'").fetchall()
            got = {}
            for seq, status, text in rows:
                rec = json.loads(text)  # intact JSON
                assert rec["seq"] == seq and rec["status"] == status  # consistent, no phantom status
                got[seq] = rec
            assert got == expected, f"cut at byte {cut}"
            assert reopened.get_run("r")["total_calls"] == 60
        finally:
            reopened.close()
        checked += 1
    assert checked > 60
