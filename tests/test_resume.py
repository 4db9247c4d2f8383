"""toolloop resume: ok calls never run again, failed and interrupted calls only on request,
at-most-once writes, the same contract, one resumer at a time."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from conftest import jsonl
from test_store import parallel_plan, read_log, sequential_plan, state_registry

STABLE = ("run_id", "seq", "subagent", "tool", "item_key", "call_key", "status", "attempts", "cache", "args_sha256",
          "args", "result", "error")


def stable(records: list[dict]) -> list[dict]:
    return [{k: r[k] for k in STABLE} for r in records if r["type"] == "receipt"]


def popen(tmp_path: Path, *args: str) -> subprocess.Popen:
    env = {**os.environ, "NO_COLOR": "1"}
    env.pop("TOOLLOOP_STATE_DIR", None)
    return subprocess.Popen([sys.executable, "-m", "toolloop_cli", *args], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def wait_for(predicate, what: str, limit: float = 30.0) -> None:
    deadline = time.monotonic() + limit
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def last_run_id(tmp_path: Path) -> str:
    import sqlite3

    con = sqlite3.connect(tmp_path / ".toolloop" / "state.db")
    try:
        return con.execute("SELECT run_id FROM runs ORDER BY started_at DESC LIMIT 1").fetchone()[0]
    finally:
        con.close()


def kill_when_logged(tmp_path: Path, proc: subprocess.Popen, log: Path, lines: int) -> None:
    wait_for(lambda: len(read_log(log)) >= lines or proc.poll() is not None, f"{lines} executions")
    assert proc.poll() is None, proc.communicate()
    proc.kill()
    proc.communicate()


def test_resume_of_a_finished_run_prints_it_again_and_runs_nothing(cli, tmp_path):
    state_registry(tmp_path)
    log = tmp_path / "log"
    plan = parallel_plan(tmp_path, [
        {"item_key": f"i{i}", "calls": [{"call_key": "r", "tool": "read", "args": {"log": str(log), "key": f"k{i}"}}]}
        for i in range(3)
    ])
    first = cli("run", str(plan), "--format", "jsonl")
    assert first.returncode == 0
    before = read_log(log)
    again = cli("resume", jsonl(first.stdout)[0]["run_id"], "--format", "jsonl")
    assert again.returncode == 0, again.stderr
    assert read_log(log) == before
    out, prev = jsonl(again.stdout), jsonl(first.stdout)
    assert out[:-1] == prev[:-1]  # the very same receipts
    assert out[-1]["type"] == "summary" and out[-1]["status"] == "ok" and out[-1]["counts"]["ok"] == 3


def test_failed_calls_run_again_only_with_retry_failed(cli, tmp_path):
    state_registry(tmp_path)
    log = tmp_path / "log"
    plan = parallel_plan(tmp_path, [
        {"item_key": "a", "calls": [
            {"call_key": "f", "tool": "fail_once", "args": {"log": str(log), "key": "a-f", "marker": str(tmp_path / "m")}},
            {"call_key": "r", "tool": "read", "args": {"log": str(log), "key": "a-r"}}]},
        {"item_key": "b", "calls": [{"call_key": "r", "tool": "read", "args": {"log": str(log), "key": "b-r"}}]},
    ])
    first = cli("run", str(plan), "--format", "jsonl")
    assert first.returncode == 1
    assert [r["status"] for r in jsonl(first.stdout)[:-1]] == ["error", "skipped", "ok"]
    run_id = jsonl(first.stdout)[0]["run_id"]

    plain = cli("resume", run_id, "--format", "jsonl")
    assert plain.returncode == 1
    assert stable(jsonl(plain.stdout)) == stable(jsonl(first.stdout))
    assert sorted(read_log(log)) == ["a-f", "b-r"]

    retried = cli("resume", run_id[:12], "--retry-failed", "--format", "jsonl")  # a unique prefix will do
    assert retried.returncode == 0, retried.stderr
    out = jsonl(retried.stdout)
    assert [r["status"] for r in out[:-1]] == ["ok", "ok", "ok"]
    assert out[2] == jsonl(first.stdout)[2]  # the ok receipt, untouched
    assert out[-1]["status"] == "ok"
    assert sorted(read_log(log)) == ["a-f", "a-f", "a-r", "b-r"]
    # completion_seq goes on from where the run left off
    assert min(out[0]["completion_seq"], out[1]["completion_seq"]) > max(r["completion_seq"] for r in jsonl(first.stdout)[:-1])


def test_a_changed_registry_is_refused(cli, tmp_path):
    reg = state_registry(tmp_path)
    log = tmp_path / "log"
    plan = sequential_plan(tmp_path, [
        {"tool": "fail_once", "args": {"log": str(log), "key": "f", "marker": str(tmp_path / "m")}}])
    first = cli("run", str(plan), "--format", "jsonl")
    assert first.returncode == 1
    run_id = jsonl(first.stdout)[0]["run_id"]
    reg.write_text(reg.read_text().replace("Fails the first time.", "Fails once."))
    r = cli("resume", run_id, "--retry-failed")
    assert r.returncode == 3
    err = r.stderr.decode()
    assert "TL370" in err and f"changed since run {run_id} started" in err and "--accept-contract-change" in err
    assert err.endswith(f"toolloop: run {run_id} cannot be resumed; nothing ran\n")
    assert r.stdout == b""
    assert read_log(log) == ["f"]
    # the refusal released the run: with the registry back, resume proceeds
    reg.write_text(reg.read_text().replace("Fails once.", "Fails the first time."))
    assert cli("resume", run_id, "--retry-failed").returncode == 0


def test_unknown_run(cli, tmp_path):
    state_registry(tmp_path)
    plan = sequential_plan(tmp_path, [{"tool": "read", "args": {"log": str(tmp_path / "log"), "key": "k"}}])
    assert cli("run", str(plan)).returncode == 0
    r = cli("resume", "nope")
    assert r.returncode == 2
    assert r.stderr.decode() == "toolloop: error: no run 'nope' in .toolloop/state.db (see 'toolloop runs list')\n"


def test_in_flight_write_is_interrupted_read_and_idempotent_run_again(tmp_path, cli):
    state_registry(tmp_path)
    log, gate = tmp_path / "log", tmp_path / "gate"
    plan = parallel_plan(tmp_path, [
        {"item_key": k, "calls": [
            {"call_key": "c0", "tool": tool, "args": {"log": str(log), "key": k, "gate": str(gate)}},
            {"call_key": "c1", "tool": "read", "args": {"log": str(log), "key": f"{k}-after"}}]}
        for k, tool in (("w", "gate_write"), ("r", "gate_read"), ("i", "gate_idem"))
    ])
    proc = popen(tmp_path, "run", str(plan), "--format", "jsonl")
    kill_when_logged(tmp_path, proc, log, 3)  # all three are in flight
    run_id = last_run_id(tmp_path)
    gate.touch()

    first = cli("resume", run_id, "--format", "jsonl")
    assert first.returncode == 1, first.stderr
    out = jsonl(first.stdout)
    assert [(r["item_key"], r["call_key"], r["status"]) for r in out[:-1]] == [
        ("w", "c0", "interrupted"), ("w", "c1", "skipped"),
        ("r", "c0", "ok"), ("r", "c1", "ok"),
        ("i", "c0", "ok"), ("i", "c1", "ok"),
    ]
    assert "--retry-interrupted" in out[0]["error"]["message"]
    assert out[1]["error"]["message"] == "call 'c0' in this lane ended interrupted"
    assert out[-1]["status"] == "failed" and out[-1]["counts"]["interrupted"] == 1
    assert sorted(read_log(log)) == sorted(["w", "r", "i", "r", "i", "r-after", "i-after"])  # the write ran once

    second = cli("resume", run_id, "--format", "jsonl")  # still interrupted: never run silently
    assert second.returncode == 1
    assert stable(jsonl(second.stdout)) == stable(out)
    assert read_log(log).count("w") == 1

    third = cli("resume", run_id, "--retry-interrupted", "--format", "jsonl")
    assert third.returncode == 0, third.stderr
    assert [r["status"] for r in jsonl(third.stdout)[:-1]] == ["ok"] * 6
    assert read_log(log).count("w") == 2 and read_log(log).count("w-after") == 1


def test_resume_rebuilds_redacted_arguments_from_the_plan(cli, tmp_path):
    import sqlite3

    state_registry(tmp_path)
    log = tmp_path / "log"
    plan = sequential_plan(tmp_path, [
        {"call_key": "f", "tool": "fail_once", "args": {"log": str(log), "key": "f", "marker": str(tmp_path / "m")}},
        {"call_key": "s", "tool": "secret", "args": {"user": "ada", "password": "hunter2"}},
    ])
    first = cli("run", str(plan), "--format", "jsonl")
    assert first.returncode == 1
    run_id = jsonl(first.stdout)[0]["run_id"]
    db = (tmp_path / ".toolloop" / "state.db").read_bytes()
    assert b"hunter2" not in db  # the journal never holds the secret
    r = cli("resume", run_id, "--retry-failed", "--format", "jsonl")
    assert r.returncode == 0, r.stderr
    out = jsonl(r.stdout)
    assert out[1]["status"] == "ok" and out[1]["args"]["password"] != "hunter2"
    con = sqlite3.connect(tmp_path / ".toolloop" / "state.db")
    assert not any(b"hunter2" in rec.encode() for (rec,) in con.execute("SELECT record FROM receipts"))
    con.close()


def test_redacted_arguments_that_cannot_be_rebuilt_are_interrupted(cli, tmp_path):
    state_registry(tmp_path)
    log = tmp_path / "log"
    plan = sequential_plan(tmp_path, [
        {"call_key": "f", "tool": "fail_once", "args": {"log": str(log), "key": "f", "marker": str(tmp_path / "m")}},
        {"call_key": "s", "tool": "secret", "args": {"user": "ada", "password": "hunter2"}},
    ])
    first = cli("run", str(plan), "--format", "jsonl")
    run_id = jsonl(first.stdout)[0]["run_id"]
    plan.unlink()
    r = cli("resume", run_id, "--retry-failed", "--format", "jsonl")
    assert r.returncode == 1
    out = jsonl(r.stdout)
    assert [x["status"] for x in out[:-1]] == ["ok", "interrupted"]
    assert "cannot be rebuilt" in out[1]["error"]["message"]


def test_envelope_stop_still_stops_the_lane_on_resume(cli, tmp_path):
    state_registry(tmp_path)
    reg = tmp_path / "reg.yml"
    reg.write_text(reg.read_text() + """
      produce:
        callable: testapp.tools:producer
        description: Producer status read through an envelope.
        input_schema: {type: object, additionalProperties: false, required: [status], properties: {status: {type: string}}}
        output_schema: {type: object}
        control_envelope:
          version: 1
          role: production
          graph: {status_field: state, continue_statuses: [success], stop_statuses: [failed]}
""")
    log = tmp_path / "log"
    plan = parallel_plan(tmp_path, [
        {"item_key": "a", "calls": [{"call_key": "p", "tool": "produce", "args": {"status": "failed"}},
                                    {"call_key": "r", "tool": "read", "args": {"log": str(log), "key": "a"}}]},
        {"item_key": "b", "calls": [
            {"call_key": "f", "tool": "fail_once", "args": {"log": str(log), "key": "b", "marker": str(tmp_path / "m")}}]},
    ])
    first = cli("run", str(plan), "--format", "jsonl")
    assert [r["status"] for r in jsonl(first.stdout)[:-1]] == ["ok", "skipped", "error"]
    r = cli("resume", jsonl(first.stdout)[0]["run_id"], "--retry-failed", "--format", "jsonl")
    assert [x["status"] for x in jsonl(r.stdout)[:-1]] == ["ok", "skipped", "ok"]
    assert "a" not in read_log(log)


def test_two_resumers_one_proceeds(tmp_path):
    state_registry(tmp_path)
    log, gate = tmp_path / "log", tmp_path / "gate"
    plan = parallel_plan(tmp_path, [
        {"item_key": f"i{i}", "calls": [
            {"call_key": "g", "tool": "gate_read", "args": {"log": str(log), "key": f"g{i}", "gate": str(gate)}}]}
        for i in range(2)
    ])
    run = popen(tmp_path, "run", str(plan), "--format", "jsonl")
    kill_when_logged(tmp_path, run, log, 2)  # the run dies holding its lease
    run_id = last_run_id(tmp_path)
    a = popen(tmp_path, "resume", run_id, "--format", "jsonl")
    b = popen(tmp_path, "resume", run_id, "--format", "jsonl")
    # the one that lost exits at once, while the winner waits at the gate
    wait_for(lambda: a.poll() is not None or b.poll() is not None, "one resumer to give up")
    loser, winner = (a, b) if a.poll() is not None else (b, a)
    out, err = loser.communicate()
    assert loser.returncode == 1
    assert out == b""
    assert err.decode().startswith(f"toolloop: error: run {run_id} is already being run or resumed by process"
                                   f" {winner.pid}; wait for it to finish")
    assert winner.poll() is None
    gate.touch()
    out, err = winner.communicate(timeout=60)
    assert winner.returncode == 0, err
    assert [r["status"] for r in jsonl(out)[:-1]] == ["ok", "ok"]


def test_resume_refused_while_the_run_is_alive(cli, tmp_path):
    state_registry(tmp_path)
    log, gate = tmp_path / "log", tmp_path / "gate"
    plan = sequential_plan(tmp_path, [{"tool": "gate_read", "args": {"log": str(log), "key": "g", "gate": str(gate)}}])
    run = popen(tmp_path, "run", str(plan), "--format", "jsonl")
    try:
        wait_for(lambda: read_log(log) == ["g"], "the call to start")
        r = cli("resume", last_run_id(tmp_path))
        assert r.returncode == 1
        assert f"is already being run or resumed by process {run.pid}" in r.stderr.decode()
    finally:
        gate.touch()
        run.communicate(timeout=60)
    assert run.returncode == 0
    listed = jsonl(cli("runs", "list", "--format", "jsonl").stdout)
    assert listed[0]["status"] == "ok"


def test_sigint_cancelled_read_runs_again_cancelled_write_is_interrupted(cli, tmp_path):
    state_registry(tmp_path)
    log, gate = tmp_path / "log", tmp_path / "gate"
    plan = parallel_plan(tmp_path, [
        {"item_key": "w", "calls": [{"call_key": "c", "tool": "gate_write",
                                     "args": {"log": str(log), "key": "w", "gate": str(gate)}}]},
        {"item_key": "r", "calls": [{"call_key": "c", "tool": "gate_read",
                                     "args": {"log": str(log), "key": "r", "gate": str(gate)}}]},
    ])
    proc = popen(tmp_path, "run", str(plan), "--format", "jsonl")
    wait_for(lambda: len(read_log(log)) == 2, "both calls to start")
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert [r["status"] for r in jsonl(out)[:-1]] == ["cancelled", "cancelled"]
    gate.touch()
    r = cli("resume", jsonl(out)[0]["run_id"], "--format", "jsonl")
    assert [x["status"] for x in jsonl(r.stdout)[:-1]] == ["interrupted", "ok"]
    assert r.returncode == 1
    assert sorted(read_log(log)) == ["r", "r", "w"]


def test_a_lane_payload_holding_a_secret_is_withheld_and_rebuilt(cli, tmp_path):
    import sqlite3

    state_registry(tmp_path)
    log = tmp_path / "log"
    plan = parallel_plan(tmp_path, [{"item_key": "a", "payload": {"user": "ada", "password": "hunter2"}, "calls": [
        {"call_key": "f", "tool": "fail_once", "args": {"log": str(log), "key": "f", "marker": str(tmp_path / "m")}},
        {"call_key": "s", "tool": "secret"}]}])
    first = cli("run", str(plan), "--format", "jsonl")
    assert [r["status"] for r in jsonl(first.stdout)[:-1]] == ["error", "skipped"]
    db = tmp_path / ".toolloop" / "state.db"
    con = sqlite3.connect(db)
    assert con.execute("SELECT payload, length(payload_sha256) FROM lanes").fetchone() == (None, 64)
    con.close()
    assert not any(b"hunter2" in f.read_bytes() for f in db.parent.iterdir())
    r = cli("resume", jsonl(first.stdout)[0]["run_id"], "--retry-failed", "--format", "jsonl")
    assert r.returncode == 0, r.stderr
    assert [x["status"] for x in jsonl(r.stdout)[:-1]] == ["ok", "ok"]
    assert jsonl(r.stdout)[1]["result"]["user"] == "ada"


def test_a_halted_run_is_continued_by_resume(cli, tmp_path):
    state_registry(tmp_path)
    log = tmp_path / "log"
    plan = parallel_plan(tmp_path, [
        {"item_key": "a", "calls": [
            {"call_key": "f", "tool": "fail_once", "args": {"log": str(log), "key": "a", "marker": str(tmp_path / "m")}}]},
    ] + [{"item_key": k, "calls": [{"call_key": "r", "tool": "read", "args": {"log": str(log), "key": k}}]}
         for k in ("b", "c")], mc=1)
    first = cli("run", str(plan), "--format", "jsonl", "--halt", "now,fail=1")
    assert first.returncode == 4, first.stderr
    out = jsonl(first.stdout)
    assert [r["status"] for r in out[:-1]] == ["error", "skipped", "skipped"] and out[-1]["status"] == "stopped"
    run_id = out[-1]["run_id"]
    assert first.stderr.decode().endswith(f"toolloop: stopped early; resume with: toolloop resume {run_id}\n")

    resumed = cli("resume", run_id, "--format", "jsonl")
    assert resumed.returncode == 1  # the failure stands; the halt policy is the run's own
    assert [r["status"] for r in jsonl(resumed.stdout)[:-1]] == ["error", "ok", "ok"]
    assert read_log(log) == ["a", "b", "c"]
    again = cli("resume", run_id, "--retry-failed", "--format", "jsonl")
    assert again.returncode == 0
    assert read_log(log) == ["a", "b", "c", "a"]


def test_calls_dispatched_by_a_kept_call_are_printed_again_after_it(cli, tmp_path):
    reg = state_registry(tmp_path)
    reg.write_text(reg.read_text() + """
      router:
        callable: testapp.tools:route_sync
        description: Dispatches one call.
        dispatch: [read]
        input_schema: {type: object}
        output_schema: {type: object}
""")
    log = tmp_path / "log"
    plan = sequential_plan(tmp_path, [
        {"call_key": "route", "tool": "router", "args": {"target": "read", "args": {"log": str(log), "key": "child"}}},
        {"call_key": "f", "tool": "fail_once", "args": {"log": str(log), "key": "f", "marker": str(tmp_path / "m")}},
    ])
    first = cli("run", str(plan), "--format", "jsonl")
    assert first.returncode == 1, first.stderr
    out = jsonl(first.stdout)
    assert [(r["tool"], r["status"]) for r in out[:-1]] == [("router", "ok"), ("read", "ok"), ("fail_once", "error")]
    assert out[1]["parent_receipt_id"] == out[0]["receipt_id"]
    r = cli("resume", out[0]["run_id"], "--retry-failed", "--format", "jsonl")
    assert r.returncode == 0, r.stderr
    again = jsonl(r.stdout)
    assert again[:2] == out[:2]
    assert [(x["tool"], x["status"]) for x in again[:-1]] == [("router", "ok"), ("read", "ok"), ("fail_once", "ok")]
    assert again[-1]["counts"]["ok"] == 3
    assert read_log(log) == ["child", "f", "f"]
    assert cli("runs", "show", out[0]["run_id"], "--format", "jsonl").stdout == r.stdout
