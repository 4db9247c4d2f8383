"""The state store: where it lives, WAL, schema versions and migrations, leases, and the rule
that a receipt is committed before it is written out."""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from conftest import APP, jsonl, write
from toolloop_cli.errors import RunError, StateError
from toolloop_cli.store import MIGRATIONS, SCHEMA_VERSION, JournalWriter, Store, holder_alive, lease_token, state_dir

# A registry for the state tests: every tool logs each execution to a file (one line per run).
REGISTRY = f"""
version: 1
app_root: {APP}
subagents:
  s:
    runner_defaults: {{tool_timeout_s: 30, max_calls: 100000}}
    tools:
      read:
        callable: testapp.tools:log_run
        description: Logs and sleeps; a read.
        input_schema: {{type: object, required: [log, key], properties: {{log: {{type: string}}, key: {{type: string}}, seconds: {{type: number}}}}}}
        output_schema: {{type: object, required: [key]}}
      read_async:
        callable: testapp.tools:log_run_async
        description: Logs and sleeps on the event loop; a read.
        input_schema: {{type: object, required: [log, key], properties: {{log: {{type: string}}, key: {{type: string}}, seconds: {{type: number}}}}}}
        output_schema: {{type: object, required: [key]}}
      write:
        callable: testapp.tools:log_run
        description: Logs and sleeps; a write (at most once).
        effect: write
        input_schema: {{type: object, required: [log, key], properties: {{log: {{type: string}}, key: {{type: string}}, seconds: {{type: number}}}}}}
        output_schema: {{type: object, required: [key]}}
      gate_read:
        callable: testapp.tools:log_gate
        description: Logs, then waits for a gate file; a read.
        input_schema: {{type: object}}
        output_schema: {{type: object}}
      gate_write:
        callable: testapp.tools:log_gate
        description: Logs, then waits for a gate file; a write.
        effect: destructive
        input_schema: {{type: object}}
        output_schema: {{type: object}}
      gate_idem:
        callable: testapp.tools:log_gate
        description: Logs, then waits for a gate file; an idempotent write.
        effect: write
        idempotent: true
        input_schema: {{type: object}}
        output_schema: {{type: object}}
      fail_once:
        callable: testapp.tools:log_fail_once
        description: Fails the first time.
        input_schema: {{type: object}}
        output_schema: {{type: object}}
      cached:
        callable: testapp.tools:log_run
        description: Logs; cacheable.
        cacheable: true
        input_schema: {{type: object}}
        output_schema: {{type: object, required: [key]}}
      cached_fail:
        callable: testapp.tools:log_fail_once
        description: Fails the first time; cacheable.
        cacheable: true
        input_schema: {{type: object}}
        output_schema: {{type: object}}
      cached_bad:
        callable: testapp.tools:log_run
        description: Logs; cacheable, but its result never fits the schema.
        cacheable: true
        input_schema: {{type: object}}
        output_schema: {{type: object, required: [missing]}}
      big:
        callable: testapp.tools:big
        description: A large result.
        input_schema: {{type: object}}
        output_schema: {{}}
      secret:
        callable: testapp.tools:secret_echo
        description: Takes a password that is never journaled.
        effect: write
        redact: [/password, /token]
        input_schema: {{type: object, required: [user, password], properties: {{user: {{type: string}}, password: {{type: string}}}}}}
        output_schema: {{type: object}}
"""


def state_registry(folder: Path) -> Path:
    return write(folder / "reg.yml", REGISTRY)


def parallel_plan(folder: Path, lanes: list[dict], mc: int = 4, name: str = "plan.yml") -> Path:
    body = {"version": 1, "registry": "reg.yml", "subagent": "s", "mode": "parallel", "max_concurrency": mc,
            "lanes": lanes}
    return write(folder / name, json.dumps(body))


def sequential_plan(folder: Path, calls: list[dict], name: str = "plan.yml") -> Path:
    body = {"version": 1, "registry": "reg.yml", "subagent": "s", "mode": "sequential", "calls": calls}
    return write(folder / name, json.dumps(body))


def receipt_record(seq: int, status: str = "ok") -> dict:
    """A whole receipt record of run 'r', as the journal holds one."""
    from toolloop_cli.receipts import Receipt

    return Receipt(run_id="r", seq=seq, completion_seq=seq, subagent="s", tool="t", parallel_batch_id=None,
                   item_key=None, call_key=str(seq), parent_receipt_id=None, iteration=None, receipt_id=f"id{seq}",
                   status=status, abandoned=False, attempts=1, cache="off", args_sha256=None, args={}, result=None,
                   error=None, envelope=None, started_at=None, finished_at=None, duration_ms=0.0).as_record()


def read_log(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


def committed(db: Path, run_id: str | None = None) -> dict[int, dict]:
    """Receipts committed in a state database, read through a connection of our own."""
    con = sqlite3.connect(db)
    try:
        sql = "SELECT seq, record FROM receipts" + (" WHERE run_id=?" if run_id else "")
        return {seq: json.loads(rec) for seq, rec in con.execute(sql, (run_id,) if run_id else ())}
    finally:
        con.close()


# --- where the state lives -----------------------------------------------------------------


def test_state_dir_flag_wins_over_env_and_default(monkeypatch, tmp_path):
    monkeypatch.delenv("TOOLLOOP_STATE_DIR", raising=False)
    assert state_dir(None) == Path(".toolloop")
    monkeypatch.setenv("TOOLLOOP_STATE_DIR", str(tmp_path / "env"))
    assert state_dir(None) == tmp_path / "env"
    assert state_dir(str(tmp_path / "flag")) == tmp_path / "flag"


def test_cli_state_in_cwd_then_env_then_flag(cli, tmp_path):
    state_registry(tmp_path)
    plan = sequential_plan(tmp_path, [{"tool": "read", "args": {"log": str(tmp_path / "log"), "key": "k"}}])
    r = cli("run", str(plan), "--format", "jsonl")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / ".toolloop" / "state.db").is_file()
    r = cli("run", str(plan), "--format", "jsonl", env={"TOOLLOOP_STATE_DIR": str(tmp_path / "env")})
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "env" / "state.db").is_file()
    r = cli("run", str(plan), "--format", "jsonl", "--state-dir", str(tmp_path / "flag"),
            env={"TOOLLOOP_STATE_DIR": str(tmp_path / "env")})
    assert r.returncode == 0, r.stderr
    run_id = jsonl(r.stdout)[-1]["run_id"]
    assert set(committed(tmp_path / "flag" / "state.db")) == {0}
    assert run_id not in {rec["run_id"] for rec in committed(tmp_path / "env" / "state.db").values()}


def test_wal_and_current_schema(tmp_path):
    store = Store(tmp_path)
    assert store.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert store.schema_version == SCHEMA_VERSION == len(MIGRATIONS)
    store.close()


# --- schema versions ---------------------------------------------------------------------------


def test_migrating_an_empty_database(tmp_path):
    (tmp_path / "state.db").write_bytes(b"")  # an empty file is an empty database
    store = Store(tmp_path)
    tables = {r[0] for r in store.db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"runs", "lanes", "calls", "starts", "receipts", "cache", "decisions", "model_answers", "approvals"} <= tables
    assert store.schema_version == SCHEMA_VERSION
    store.close()
    again = Store(tmp_path)  # opening an up-to-date database changes nothing
    assert again.schema_version == SCHEMA_VERSION
    again.close()


def test_a_later_migration_upgrades_in_place_and_keeps_data(tmp_path):
    store = Store(tmp_path)
    store.put("k", "tool", {"v": 1})
    store.close()
    newer = MIGRATIONS + [("ALTER TABLE runs ADD COLUMN note TEXT",)]
    store = Store(tmp_path, migrations=newer)
    assert store.schema_version == SCHEMA_VERSION + 1
    assert "note" in {r[1] for r in store.db.execute("PRAGMA table_info(runs)")}
    assert store.get("k") == ({"v": 1},)
    store.close()


def test_a_failing_migration_leaves_the_old_version(tmp_path):
    Store(tmp_path).close()
    broken = MIGRATIONS + [("ALTER TABLE runs ADD COLUMN note TEXT", "THIS IS NOT SQL")]
    with pytest.raises(StateError):
        Store(tmp_path, migrations=broken)
    store = Store(tmp_path)
    assert store.schema_version == SCHEMA_VERSION
    assert "note" not in {r[1] for r in store.db.execute("PRAGMA table_info(runs)")}
    store.close()


def test_a_database_from_a_newer_toolloop_is_refused(tmp_path, cli):
    Store(tmp_path / "st").close()
    con = sqlite3.connect(tmp_path / "st" / "state.db")
    con.execute(f"PRAGMA user_version={SCHEMA_VERSION + 3}")
    con.close()
    with pytest.raises(RunError) as exc:
        Store(tmp_path / "st")
    assert str(exc.value) == (
        f"the state database {tmp_path / 'st' / 'state.db'} has schema version {SCHEMA_VERSION + 3}, newer than"
        f" this toolloop understands ({SCHEMA_VERSION}); upgrade toolloop, or use another --state-dir"
    )
    r = cli("runs", "list", "--state-dir", str(tmp_path / "st"))
    assert r.returncode == 1
    assert b"newer than this toolloop understands" in r.stderr
    assert b"Traceback" not in r.stderr


def test_not_a_database(tmp_path, cli):
    (tmp_path / "st").mkdir()
    (tmp_path / "st" / "state.db").write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StateError, match="is damaged: file is not a database"):
        Store(tmp_path / "st")
    r = cli("runs", "list", "--state-dir", "st")
    assert r.returncode == 2
    assert r.stderr.decode() == (f"toolloop: error: the state database {Path('st', 'state.db')} is damaged: file is not"
                                 " a database; restore it from a copy, or use another --state-dir\n")


def test_two_openers_of_a_fresh_folder_migrate_once(tmp_path):
    errors: list = []
    barrier = threading.Barrier(4)

    def open_it() -> None:
        try:
            barrier.wait()
            Store(tmp_path).close()
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=open_it) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert Store(tmp_path).schema_version == SCHEMA_VERSION


def test_reading_commands_never_create_a_database(cli, tmp_path):
    r = cli("runs", "list")
    assert r.returncode == 2
    assert r.stderr.decode() == "toolloop: error: no state database at .toolloop/state.db (run a plan first, or pass --state-dir)\n"
    assert not (tmp_path / ".toolloop").exists()


# --- commit before output ----------------------------------------------------------------------


def test_every_receipt_is_committed_before_it_is_emitted(tmp_path):
    from toolloop_cli.engine.run import RunOptions, execute_plan
    from toolloop_cli.plan.admit import admit_plan

    state_registry(tmp_path)
    log = tmp_path / "log"
    plan = parallel_plan(tmp_path, [
        {"item_key": f"i{i}", "calls": [{"call_key": f"c{j}", "tool": "read_async",
                                         "args": {"log": str(log), "key": f"{i}-{j}", "seconds": 0.001}}
                                        for j in range(3)]}
        for i in range(5)
    ])
    store = Store(tmp_path / "st")
    second = sqlite3.connect(tmp_path / "st" / "state.db", check_same_thread=False)
    seen: list[dict] = []

    def emit(record: dict) -> None:
        if record["type"] == "receipt":
            row = second.execute("SELECT record FROM receipts WHERE run_id=? AND seq=?",
                                 (record["run_id"], record["seq"])).fetchone()
            assert row is not None, f"receipt {record['seq']} was emitted before it was committed"
            assert json.loads(row[0]) == record
        else:  # the summary comes last, after the run's row is final
            status, summary = second.execute("SELECT status, summary FROM runs WHERE run_id=?",
                                             (record["run_id"],)).fetchone()
            assert status == "ok" and json.loads(summary) == record
        seen.append(record)

    result = execute_plan(admit_plan(plan), store, emit, RunOptions(handle_signals=False))
    store.close()
    second.close()
    assert result.exit_code == 0
    assert [r["type"] for r in seen] == ["receipt"] * 15 + ["summary"]
    assert [r["seq"] for r in seen[:-1]] == list(range(15))


def test_journal_keeps_committing_after_the_output_breaks(tmp_path):
    store = Store(tmp_path)
    failures: list = []

    def emit(record: dict, _line: bytes | None) -> None:
        if record["seq"] == 2:
            raise BrokenPipeError("reader went away")

    writer = JournalWriter(store, emit, on_error=failures.append)
    for seq in range(6):
        writer(receipt_record(seq))
    with pytest.raises(BrokenPipeError):
        writer.close()
    assert len(failures) == 1
    assert sorted(r["seq"] for r in store.receipts_of("r")) == list(range(6))
    store.close()


def test_journal_hands_records_on_in_order(tmp_path):
    store = Store(tmp_path)
    got: list[int] = []
    writer = JournalWriter(store, lambda r, _line: got.append(r["seq"]), max_batch=7)
    for seq in range(1000):
        writer(receipt_record(seq))
    writer.close()
    assert got == list(range(1000))
    assert len(store.receipts_of("r")) == 1000
    store.close()


# --- leases --------------------------------------------------------------------------------------


def _run_row(store: Store, run_id: str = "r1") -> None:
    store.create_run({"run_id": run_id, "mode": "sequential", "plan_path": "p", "plan_sha256": "x",
                      "registry_path": "r", "contract_sha256": "c", "options": {}, "total_calls": 0})


def test_lease_is_compare_and_set(tmp_path):
    store = Store(tmp_path)
    _run_row(store)
    a, b = lease_token(), lease_token()
    assert store.acquire_lease("r1", a)
    assert store.acquire_lease("r1", a)  # re-entrant for its holder
    assert not store.acquire_lease("r1", b)
    assert store.lease_owner("r1") == a
    store.release_lease("r1", b)  # not the holder: no effect
    assert store.lease_owner("r1") == a
    store.release_lease("r1", a)
    assert store.acquire_lease("r1", b)
    assert not store.acquire_lease("missing", a)
    store.close()


def test_lease_of_a_dead_process_is_taken_over(tmp_path):
    code = "from toolloop_cli.store import lease_token; print(lease_token())"
    dead = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert holder_alive(dead) is False
    store = Store(tmp_path)
    _run_row(store)
    store.db.execute("UPDATE runs SET lease_owner=?, lease_until=? WHERE run_id='r1'", (dead, 4e9))
    assert store.acquire_lease("r1", lease_token())
    store.close()


def test_a_reused_pid_is_not_the_holder(tmp_path):
    pid, host, start, rand = lease_token().split(":")
    assert holder_alive(f"{pid}:{host}:{start}:{rand}") is True
    assert holder_alive(f"{pid}:{host}:{int(start) + 1}:{rand}") is False  # same pid, another process
    parent = os.getppid()
    assert holder_alive(f"{parent}:{host}:1:{rand}") is False  # a live pid that started at another time
    assert holder_alive(f"{pid}:{socket.gethostname()}x:{start}:{rand}") is None  # another host


def test_lease_from_another_host_waits_for_its_expiry(tmp_path):
    store = Store(tmp_path)
    _run_row(store)
    other = "1:some-other-host:100:0123456789ab"
    store.db.execute("UPDATE runs SET lease_owner=?, lease_until=? WHERE run_id='r1'", (other, 4e9))
    assert not store.acquire_lease("r1", lease_token())
    store.db.execute("UPDATE runs SET lease_until=1 WHERE run_id='r1'")
    assert store.acquire_lease("r1", lease_token())
    store.close()


def test_a_fresh_run_holds_its_lease_until_it_finishes(tmp_path):
    from toolloop_cli.engine.run import RunOptions, execute_plan
    from toolloop_cli.plan.admit import admit_plan

    state_registry(tmp_path)
    plan = sequential_plan(tmp_path, [{"tool": "read", "args": {"log": str(tmp_path / "log"), "key": "k"}}])
    store = Store(tmp_path / "st")
    owners: list = []

    def emit(record: dict) -> None:
        if record["type"] == "receipt":
            owners.append(sqlite3.connect(tmp_path / "st" / "state.db").execute(
                "SELECT lease_owner FROM runs").fetchone()[0])

    execute_plan(admit_plan(plan), store, emit, RunOptions(handle_signals=False))
    assert owners and owners[0] is not None and owners[0].startswith(f"{os.getpid()}:")
    assert store.lease_owner(store.list_runs()[0]["run_id"]) is None
    store.close()


def test_a_version_1_database_is_migrated(tmp_path):
    old = Store(tmp_path, migrations=MIGRATIONS[:1])
    assert old.schema_version == 1
    old.db.execute("INSERT INTO lanes (run_id, lane, item_key, payload) VALUES ('r', 0, 'a', '{\"x\": 1}')")
    old.close()
    store = Store(tmp_path)
    assert store.schema_version == SCHEMA_VERSION >= 2
    assert store.lanes_of("r") == [(0, "a", {"x": 1}, None)]
    store.close()


def test_a_store_failure_stops_the_run_with_a_clear_error(tmp_path):
    from toolloop_cli.engine.run import RunOptions, execute_plan
    from toolloop_cli.plan.admit import admit_plan

    class FullDisk(Store):
        def mark_started(self, run_id: str, seq: int) -> None:
            raise sqlite3.OperationalError("database or disk is full")

    state_registry(tmp_path)
    log = tmp_path / "log"
    plan = sequential_plan(tmp_path, [{"tool": "read", "args": {"log": str(log), "key": "r"}},
                                      {"tool": "write", "args": {"log": str(log), "key": "w"}}])
    store = FullDisk(tmp_path / "st")
    got: list = []
    with pytest.raises(RunError, match=r"the state database could not be written \(database or disk is full\)"):
        execute_plan(admit_plan(plan), store, got.append, RunOptions(handle_signals=False))
    assert read_log(log) == ["r"]  # the write never ran without its start marker
    run = store.list_runs()[0]
    assert run["status"] == "interrupted" and run["lease_owner"] is None
    assert [r["seq"] for r in store.receipts_of(run["run_id"])] == [0]
    store.close()


def test_each_record_is_linked_by_the_digest_of_the_text_it_is_stored_as(tmp_path):
    """A receipt's link is taken of the JSON bytes it is stored from: the digest and each link are
    those of the text the journal holds (non-ASCII text, escapes, an integer past 64 bits, a
    receipt replaced by a later one), in one transaction with answers and other records, and the
    chain holds (``runs verify``'s check)."""
    from toolloop_cli.chain import link_sha256, record_sha256, verify

    store = Store(tmp_path / "state")
    base = {"type": "receipt", "run_id": "r1", "seq": 0, "completion_seq": 0, "subagent": "t", "tool": "echo",
            "parallel_batch_id": None, "item_key": None, "call_key": "0", "parent_receipt_id": None,
            "iteration": None, "receipt_id": "r", "status": "ok", "abandoned": False, "attempts": 1, "cache": "off",
            "args_sha256": None, "args": {}, "result": {}, "error": None, "envelope": None, "started_at": None,
            "finished_at": None, "duration_ms": 1.5}
    receipts = [{**base, "seq": 0, "args": {"name": "Zoë — 東京 🚀", "quote": "a\"b\\c\n\t\u0001"}},
                {**base, "seq": 1, "result": {"big": 1 << 70, "neg": -(1 << 65), "f": 0.1}},
                {**base, "seq": 2, "result": {}}]
    store.put_records(receipts[:2], [({"type": "decision", "run_id": "r1", "n": 0}, 1)],
                      [{"type": "model_answer", "run_id": "r1", "n": 0, "role": "router", "request_sha256": "x",
                        "model": "m", "text": "ü", "input_tokens": 1, "output_tokens": 2}])
    store.put_receipts([receipts[2], {**base, "seq": 0, "status": "error", "error": {"message": "é"}}])
    links, current = store.chain_of("r1")
    assert [(link.kind, link.ref) for link in links] == [
        ("model_answer", 0), ("receipt", 0), ("receipt", 1), ("record", 0), ("receipt", 2), ("receipt", 0)]
    previous = ""
    for link in links:
        if (link.kind, link.ref) != ("receipt", 0) or link.n == 5:  # the first receipt 0 was replaced
            assert link.record_sha256 == record_sha256(current[(link.kind, link.ref)])
        assert link.link_sha256 == link_sha256(previous, link.kind, link.ref, link.record_sha256)
        previous = link.link_sha256
    assert json.loads(current[("receipt", 1)])["result"]["big"] == 1 << 70
    assert verify(links, current).ok
    store.close()
