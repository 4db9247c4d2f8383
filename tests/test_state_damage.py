"""A damaged state database: a table dropped or renamed, a column gone, a malformed page, a
JSON column that does not parse, a value of the wrong kind, a schema version no toolloop writes.
Every command that reads the journal says so on one line naming the file (and the run and the
record where it can) and exits 2, never 70; one journal built by real runs, damaged by hand."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import APP
from regkit import openai_profile

from toolloop_cli.errors import StateError
from toolloop_cli.store import Store

REG = APP / "registry.yml"


def _cli(cwd: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    full = {**os.environ, "NO_COLOR": "1", "COLUMNS": "200", **(env or {})}
    full.pop("TOOLLOOP_STATE_DIR", None)
    return subprocess.run([sys.executable, "-m", "toolloop_cli", *args], cwd=cwd, capture_output=True, env=full,
                          timeout=120, stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def journal(tmp_path_factory):
    """A journal with a finished sequential run (labelled), a parallel run paused for an approval,
    and a finished routed run; its WAL folded into the file, so pages can be damaged in place."""
    from modelserver import ModelServer

    base = tmp_path_factory.mktemp("journal")
    (base / "seq.yml").write_text(json.dumps({
        "version": 1, "registry": str(REG), "subagent": "t", "mode": "sequential",
        "calls": [{"tool": "echo", "args": {"n": 1}, "call_key": "one"},
                  {"tool": "echo", "args": {"n": 2}, "call_key": "two"}]}))
    (base / "gated.yml").write_text(json.dumps({
        "version": 1, "registry": str(REG), "subagent": "t", "mode": "parallel", "max_concurrency": 1,
        "lanes": [{"item_key": "small", "calls": [{"tool": "pay", "args": {"amount": 50}}]},
                  {"item_key": "big", "calls": [{"tool": "pay", "call_key": "pay", "args": {"amount": 500}}]}]}))
    assert _cli(base, "run", "seq.yml", "--label", "ticket=A-1").returncode == 0
    assert _cli(base, "run", "gated.yml").returncode == 4
    (base / "reg.yml").write_text(f"""
version: 1
app_root: {APP}
subagents:
  t:
    runner_defaults: {{tool_timeout_s: 10}}
    tools:
      log_run:
        callable: testapp.tools:log_run
        description: Logs each execution to a file.
        input_schema: {{type: object, required: [log, key], properties: {{log: {{type: string}}, key: {{type: string}}}}}}
        output_schema: {{type: object, required: [key]}}
""")
    server = ModelServer().start()
    try:
        profile = openai_profile(server.openai_base)
        (base / "routed.yml").write_text(f"""
version: 1
registry: reg.yml
subagent: t
mode: routed
goal: Log things.
router_profile: {profile}
final_profile: {profile}
budget: {{max_iterations: 6, max_tokens: 100000, max_tool_calls: 4, timeout_s: 60}}
final_schema: {{type: object, required: [answer]}}
""")
        call = json.dumps({"action": "call", "tool": "log_run", "args": {"log": str(base / "log.txt"), "key": "a"},
                           "reason": "a"})
        server.script(call, '{"action": "final", "reason": "enough"}', '{"answer": "a"}')
        assert _cli(base, "run", "routed.yml", env={"TL_TEST_KEY": "sk-damage-canary-0123456789"}).returncode == 0
    finally:
        server.stop()
    con = sqlite3.connect(base / ".toolloop" / "state.db")
    runs = {mode: rid for rid, mode in con.execute("SELECT run_id, mode FROM runs")}
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()
    return base, {"seq": runs["sequential"], "gated": runs["parallel"], "routed": runs["routed"]}


#: every command that reads the journal, on the run it reads
READERS = {
    "runs list": ["runs", "list"],
    "runs show": ["runs", "show", "{seq}"],
    "runs show (table)": ["runs", "show", "{seq}", "--format", "table"],
    "runs show (routed)": ["runs", "show", "{routed}", "--format", "table"],
    "runs show --contract": ["runs", "show", "{seq}", "--contract"],
    "runs verify": ["runs", "verify", "{seq}"],
    "runs export": ["runs", "export", "{routed}"],
    "runs prune": ["runs", "prune", "--keep", "5"],
    "approvals list": ["approvals", "list"],
    "approve": ["approve", "{gated}", "pay", "--item", "big", "--approve"],
    "steer": ["steer", "{routed}", "left"],
    "abort": ["abort", "{gated}"],
    "resume": ["resume", "{gated}"],
    "replay": ["replay", "{routed}", "--offline"],
}


def damaged(journal, tmp_path, how) -> tuple[Path, dict]:
    """A copy of the journal with ``how`` done to it: SQL (formatted with the run ids) or a
    function of the database file's path."""
    base, runs = journal
    (tmp_path / "st").mkdir()
    db = tmp_path / "st" / "state.db"
    shutil.copy(base / ".toolloop" / "state.db", db)
    if callable(how):
        how(db)
    else:
        con = sqlite3.connect(db, isolation_level=None)
        try:
            con.execute(how.format(**runs))
        finally:
            con.close()
    return db, runs


def read(journal, db: Path, runs: dict, command: str) -> str:
    """Run a reading command on the damaged copy: one line, exit 2; that line."""
    argv = [a.format(**runs) for a in READERS[command]]
    proc = _cli(journal[0], *argv, "--state-dir", str(db.parent))
    err = proc.stderr.decode()
    assert proc.returncode == 2, (command, proc.returncode, err)
    assert "Traceback" not in err and err.count("\n") == 1, err
    assert err.startswith(f"toolloop: error: the state database {db} is damaged"), err
    assert err.endswith("; restore it from a copy, or use another --state-dir\n"), err
    return err


def test_every_reading_command_names_a_dropped_table(journal, tmp_path):
    db, runs = damaged(journal, tmp_path, "DROP TABLE receipts")
    for command in READERS:
        assert read(journal, db, runs, command) == (
            f"toolloop: error: the state database {db} is damaged: its table 'receipts' is missing; restore it from"
            " a copy, or use another --state-dir\n"), command


def _page_of(table: str, garbage: bytes = b"\xa5"):
    """Overwrite the root page of ``table`` (the file's first page for the schema itself)."""
    def damage(db: Path) -> None:
        con = sqlite3.connect(db)
        size = con.execute("PRAGMA page_size").fetchone()[0]
        root = 1 if table == "sqlite_master" else con.execute(
            "SELECT rootpage FROM sqlite_master WHERE name=?", (table,)).fetchone()[0]
        con.close()
        data = bytearray(db.read_bytes())
        start = (root - 1) * size + (100 if root == 1 else 0)  # page 1 keeps the file header
        data[start:root * size] = garbage * (root * size - start)
        db.write_bytes(bytes(data))
    return damage


# (what is damaged, how, the commands that read it, what the message says, the run it names)
CASES = [
    ("a renamed table", "ALTER TABLE approvals RENAME TO approvals_old", ["approvals list", "approve", "resume"],
     "its table 'approvals' is missing", None),
    ("a dropped column", "ALTER TABLE runs DROP COLUMN labels", ["runs list", "runs show"],
     "its table 'runs' has no column 'labels'", None),
    ("a malformed page", _page_of("receipts"), ["runs show", "runs verify", "runs export", "resume", "replay"],
     "database disk image is malformed", None),
    ("a malformed schema page", _page_of("sqlite_master"), ["runs list", "approve"], "", None),
    ("receipt JSON", "UPDATE receipts SET record='{{\"type\": \"receipt\",' WHERE run_id='{seq}' AND seq=1",
     ["runs show", "runs verify"], "receipt seq 1 does not parse as JSON", "seq"),
    ("a receipt that is not an object", "UPDATE receipts SET record='[1]' WHERE run_id='{gated}'",
     ["resume"], "receipt seq 0 is not a JSON object", "gated"),
    ("a receipt without its keys", "UPDATE receipts SET record='{{}}' WHERE run_id='{seq}' AND seq=0",
     ["runs show", "runs verify"], "receipt seq 0 has no valid 'type'", "seq"),
    ("a receipt without one of its keys",
     "UPDATE receipts SET record=json_remove(record, '$.attempts') WHERE run_id='{seq}' AND seq=0",
     ["runs show (table)"], "receipt seq 0 has no valid 'attempts'", "seq"),
    ("a record that says it is a receipt",
     "UPDATE records SET record=json_set(record, '$.type', 'receipt') WHERE run_id='{routed}' AND n=0",
     ["runs show (routed)", "runs export"], "record 0 is a 'receipt' record", "routed"),
    ("a summary without its counts", "UPDATE runs SET summary=json_remove(summary, '$.counts') WHERE run_id='{seq}'",
     ["runs show (table)"], "the run's summary has no valid 'counts'", "seq"),
    ("record JSON", "UPDATE records SET record='{{' WHERE run_id='{routed}' AND n=0",
     ["runs export", "replay"], "record 0 does not parse as JSON", "routed"),
    ("model answer JSON", "UPDATE model_answers SET record='nope' WHERE run_id='{routed}' AND n=1",
     ["runs export", "replay"], "model answer 1 does not parse as JSON", "routed"),
    ("a model answer without its token counts",
     "UPDATE model_answers SET record=json_remove(record, '$.input_tokens') WHERE run_id='{routed}' AND n=2",
     ["runs export", "replay"], "model answer 2 has no valid 'input_tokens'", "routed"),
    ("options JSON", "UPDATE runs SET options='[1]' WHERE run_id='{gated}'",
     ["runs list", "approvals list", "resume", "abort"], "the run's options is not a JSON object", "gated"),
    ("labels JSON", "UPDATE runs SET labels='{{\"ticket\": 5}}' WHERE run_id='{seq}'",
     ["runs list", "runs show"], "the run's labels are not all text", "seq"),
    ("counts JSON", "UPDATE runs SET counts='{{\"ok\": \"two\"}}' WHERE run_id='{seq}'",
     ["runs list"], "the run's counts are not all integers", "seq"),
    ("summary JSON", "UPDATE runs SET summary='not json' WHERE run_id='{seq}'",
     ["runs show", "runs verify", "runs prune"], "the run's summary does not parse as JSON", "seq"),
    ("contract JSON", "UPDATE runs SET contract='{{' WHERE run_id='{seq}'",
     ["runs show --contract"], "the run's contract snapshot does not parse as JSON", "seq"),
    ("lane payload JSON", "UPDATE lanes SET payload='{{' WHERE run_id='{gated}' AND lane=1",
     ["resume"], "the payload of lane 1 does not parse as JSON", "gated"),
    ("a lane payload that is not an object", "UPDATE lanes SET payload='\"x\"' WHERE run_id='{gated}' AND lane=0",
     ["resume"], "the payload of lane 0 is not a JSON object", "gated"),
    ("a call in a lane that is not there", "UPDATE calls SET lane=7 WHERE run_id='{gated}' AND seq=1",
     ["resume"], "call seq 1 is in lane 7, which the journal does not hold", "gated"),
    ("call arguments JSON", "UPDATE calls SET args='{{' WHERE run_id='{gated}' AND seq=1",
     ["approvals list", "resume"], "the arguments of call seq 1 does not parse as JSON", "gated"),
    ("approval arguments JSON", "UPDATE approvals SET args='{{' WHERE run_id='{gated}'",
     ["approve"], "the approved arguments of call 'pay' does not parse as JSON", "gated"),
    ("an approval time that is text", "UPDATE approvals SET requested_at='yesterday' WHERE run_id='{gated}'",
     ["approvals list", "approve"], "column 'requested_at' holds text where a time belongs", "gated"),
    ("an approval time out of range", "UPDATE approvals SET requested_at=1e300 WHERE run_id='{gated}'",
     ["approvals list"], "column 'requested_at' holds 1e+300, which is not a time", "gated"),
    ("a start time that is bytes", "UPDATE runs SET started_at=x'ff00' WHERE run_id='{seq}'",
     ["runs list"], "column 'started_at' holds bytes where a time belongs", "seq"),
    ("text that is not UTF-8", "UPDATE receipts SET record=CAST(x'7b22ff' AS TEXT) WHERE run_id='{seq}'",
     ["runs show"], "column 'record' holds bytes that are not UTF-8 text", None),
    ("a negative schema version", "PRAGMA user_version=-1", ["runs list", "resume"],
     "its schema version is -1, which no toolloop writes", None),
]


@pytest.mark.parametrize("what,how,commands,says,run", CASES, ids=[c[0] for c in CASES])
def test_each_kind_of_damage_is_named_by_the_commands_that_read_it(journal, tmp_path, what, how, commands, says, run):
    db, runs = damaged(journal, tmp_path, how)
    for command in commands:
        err = read(journal, db, runs, command)
        assert says in err, (command, err)
        if run is not None:
            assert f"run {runs[run]}" in err, (command, err)


def test_the_message_names_the_file_the_run_and_the_record(journal, tmp_path):
    db, runs = damaged(journal, tmp_path, "UPDATE receipts SET record='{{\"type\": \"receipt\",' WHERE"
                                          " run_id='{seq}' AND seq=1")
    assert read(journal, db, runs, "runs show") == (
        f"toolloop: error: the state database {db} is damaged (run {runs['seq']}): receipt seq 1 does not parse as"
        " JSON (unexpected end of data: line 1 column 20 (char 19)); restore it from a copy, or use another --state-dir\n")


def test_a_schema_version_from_a_newer_toolloop_is_not_damage(journal, tmp_path):
    db, runs = damaged(journal, tmp_path, "PRAGMA user_version=2147483647")
    proc = _cli(journal[0], "runs", "list", "--state-dir", str(db.parent))
    assert proc.returncode == 1 and b"Traceback" not in proc.stderr
    assert b"has schema version 2147483647, newer than this toolloop understands" in proc.stderr


def test_a_parsed_record_that_does_not_hash_to_its_link_is_a_mismatch_not_damage(journal, tmp_path):
    db, runs = damaged(journal, tmp_path, "UPDATE receipts SET record=replace(record, '\"n\":2', '\"n\":3')"
                                          " WHERE run_id='{seq}' AND seq=1")
    base = journal[0]
    verified = _cli(base, "runs", "verify", runs["seq"], "--state-dir", str(db.parent))
    assert verified.returncode == 1 and b"receipt seq 1 (call_key 'two') does not match its link 1" in verified.stderr
    shown = _cli(base, "runs", "show", runs["seq"], "--state-dir", str(db.parent), "--format", "jsonl")
    assert shown.returncode == 0  # it still reads: only the chain says it was changed


# -- the read layer itself, in the process -----------------------------------------------------

@pytest.mark.parametrize("column,value,reader,names", [
    ("receipts.record", "nope", lambda s, r: s.receipts_of(r), "receipt seq 0 does not parse as JSON"),
    ("records.record", "[]", lambda s, r: s.records_of(r), "record 0 is not a JSON object"),
    ("model_answers.record", "{", lambda s, r: s.model_answers_of(r), "model answer 0 does not parse as JSON"),
    ("lanes.payload", "{", lambda s, r: s.lanes_of(r), "the payload of lane 0 does not parse as JSON"),
    ("calls.args", "{", lambda s, r: list(s.calls_of(r)), "the arguments of call seq 0 does not parse as JSON"),
    ("runs.options", "1", lambda s, r: s.get_run(r), "the run's options is not a JSON object"),
    ("runs.summary", "{", lambda s, r: s.list_runs(), "the run's summary does not parse as JSON"),
    ("runs.labels", "[]", lambda s, r: s.list_runs({"a": "b"}), "the run's labels is not a JSON object"),
    ("runs.contract", "{", lambda s, r: s.contract_of(r), "the run's contract snapshot does not parse as JSON"),
    ("approvals.args", "{", lambda s, r: s.approval(r, None, "c"), "the approved arguments of call 'c' does not parse"),
    ("approvals.answered_at", "soon", lambda s, r: s.approval(r, None, "c"), "column 'answered_at' holds text"),
    ("controls.at", "now", lambda s, r: s.chain_of(r), "column 'at' holds text where a time belongs"),
    ("chain.ref", "x", lambda s, r: s.chain_of(r), "column 'ref' holds text where an integer belongs"),
])
def test_every_json_column_and_typed_value_is_read_through_one_layer(tmp_path, column, value, reader, names):
    store = Store(tmp_path)
    rid = "r1"
    store.create_run({"run_id": rid, "mode": "parallel", "plan_path": "p", "plan_sha256": "x", "registry_path": "r",
                      "contract_sha256": "c", "options": {}, "total_calls": 1, "contract": {"a": 1}})
    store.finish_run(rid, "stopped", {"ok": 1}, {"type": "summary", "run_id": rid, "mode": "parallel",
                                                 "status": "stopped", "counts": {"ok": 1}, "duration_ms": 1.0})
    store.journal_calls(rid, [(0, "k", {"p": 1}, None)], [(0, 0, "k", "c", "t", '{"a": 1}', "h")])
    from test_store import receipt_record

    store.put_records([{**receipt_record(0), "run_id": rid}], [({"type": "decision", "run_id": rid}, 0)])
    store.put_model_answer({"type": "model_answer", "run_id": rid, "n": 0, "role": "router", "request_sha256": "h",
                            "model": "m", "text": "{}", "input_tokens": 1, "output_tokens": 1})
    store.request_approval(rid, None, "c", "h")
    store.answer_approval(rid, None, "c", "approved", args={"a": 1})
    store.put("k", "t", {"v": 1})
    store.add_control(rid, "steer", "m")
    table, col = column.split(".")
    store.db.execute(f"UPDATE {table} SET {col}=?", (value,))
    with pytest.raises(StateError) as caught:
        reader(store, rid)
    store.close()
    message = str(caught.value)
    assert names in message and message.startswith(f"the state database {tmp_path / 'state.db'} is damaged")
    assert f"(run {rid}" in message


def test_a_damaged_cache_entry_is_the_cache_readers_miss_not_damage_to_the_journal(tmp_path):
    store = Store(tmp_path)
    store.put("k", "t", {"v": 1})
    for value in ("{", "NaN"):
        store.db.execute("UPDATE cache SET result=?", (value,))
        with pytest.raises(ValueError) as caught:
            store.get("k")
        assert not isinstance(caught.value, StateError)
    store.close()


def test_a_negative_schema_version_and_a_missing_table_are_named_when_the_database_is_opened(tmp_path):
    Store(tmp_path).close()
    con = sqlite3.connect(tmp_path / "state.db", isolation_level=None)
    con.execute("PRAGMA user_version=-3")
    con.close()
    with pytest.raises(StateError, match="its schema version is -3, which no toolloop writes"):
        Store(tmp_path)
    con = sqlite3.connect(tmp_path / "state.db", isolation_level=None)
    con.execute("PRAGMA user_version=0")  # set back by hand: the migrations find their tables there already
    con.close()
    with pytest.raises(StateError, match=r"it is not a usable toolloop state database \(duplicate column name"):
        Store(tmp_path)


def test_damage_met_while_a_run_goes_on_ends_it_with_the_same_error(tmp_path):
    """A run that finds the journal damaged mid-way (its receipts table gone after the database
    was opened) stops with the damage error (exit 2 at the command line), not an internal error,
    and its run is marked interrupted."""
    from toolloop_cli.engine.run import RunOptions, execute_plan
    from toolloop_cli.plan.admit import admit_plan

    plan = tmp_path / "plan.yml"
    plan.write_text(json.dumps({"version": 1, "registry": str(REG), "subagent": "t", "mode": "sequential",
                                "calls": [{"tool": "echo", "args": {"n": 1}}]}))
    store = Store(tmp_path / "st")
    con = sqlite3.connect(tmp_path / "st" / "state.db", isolation_level=None)
    con.execute("ALTER TABLE receipts RENAME TO gone")
    con.close()
    with pytest.raises(StateError, match="no such table: receipts"):
        execute_plan(admit_plan(plan), store, lambda _record: None, RunOptions(handle_signals=False))
    assert [r["status"] for r in store.list_runs()] == ["interrupted"]
    store.close()


def test_the_web_api_answers_a_damaged_read_with_500_and_the_same_message(journal, tmp_path):
    from servekit import Served

    db, runs = damaged(journal, tmp_path, "UPDATE receipts SET record='nope' WHERE run_id='{seq}' AND seq=0")
    served = Served(journal[0], "--state-dir", str(db.parent))
    try:
        with served.client() as client:
            assert client.get("/api/runs").status_code == 200  # the runs themselves still read
            res = client.get(f"/api/runs/{runs['seq']}/records")
            assert res.status_code == 500
            assert res.json() == {"error": f"the state database {db} is damaged (run {runs['seq']}): receipt seq 0 does"
                                           " not parse as JSON (invalid literal, expected 'null': line 1 column 1 (char 0));"
                                           " restore it from a copy, or use another --state-dir"}
            page = client.get(f"/runs/{runs['seq']}")
            assert page.status_code == 500 and "is damaged" in page.text
    finally:
        assert served.stop() == 0, "\n".join(served.log)
    assert not any("internal error" in line for line in served.log), served.log


def test_bytes_sqlite_cannot_decode_as_its_own_text_are_damage(tmp_path):
    """A damaged page can make SQLite hand back undecodable text where no column is read (a
    pragma's answer, an error message): Python raises UnicodeDecodeError, which is damage too."""
    from toolloop_cli.store.db import reading

    with pytest.raises(StateError, match="not UTF-8 text") as caught:
        with reading(tmp_path / "state.db"):
            b"\x83".decode()
    assert str(tmp_path / "state.db") in str(caught.value)
