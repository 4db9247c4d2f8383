"""Running in production: run labels, the contract snapshot a run keeps, and the hash chain over a
run's records (``runs verify``), through the real command and a real SQLite file edited by hand."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading

import pytest
from conftest import APP, jsonl, write
from modelserver import Reply
from regkit import openai_profile, registry_yaml
from test_resume import wait_for

from toolloop_cli._canonical import sha256_of

REG = APP / "registry.yml"
KEY = "sk-ops-canary"
FINAL = '{"action": "final", "reason": "enough"}'


def plan(tmp_path, calls: list[dict], name: str = "plan.yml", registry: str | None = None):
    return write(tmp_path / name, json.dumps({"version": 1, "registry": registry or str(REG), "subagent": "t",
                                              "mode": "sequential", "calls": calls}))


def gated(tmp_path):
    return write(tmp_path / "gated.yml", json.dumps({
        "version": 1, "registry": str(REG), "subagent": "t", "mode": "parallel", "max_concurrency": 1,
        "lanes": [{"item_key": "small", "calls": [{"tool": "pay", "args": {"amount": 50}}]},
                  {"item_key": "big", "calls": [{"tool": "pay", "call_key": "pay", "args": {"amount": 500}},
                                                {"tool": "echo", "args": {"after": True}}]}]}))


def db(tmp_path) -> sqlite3.Connection:
    return sqlite3.connect(tmp_path / ".toolloop" / "state.db", isolation_level=None)


def links(tmp_path, run_id: str) -> list[tuple]:
    with db(tmp_path) as con:
        return con.execute("SELECT n, kind, ref, record_sha256, link_sha256 FROM chain WHERE run_id=? ORDER BY n",
                           (run_id,)).fetchall()


# -- labels ---------------------------------------------------------------------------------------

def test_labels_go_with_the_run_into_summary_audit_and_list_and_never_into_payloads(cli, tmp_path):
    p = plan(tmp_path, [{"tool": "echo", "args": {"n": 1}}, {"tool": "echo", "args": {"n": 2}}])
    audit = tmp_path / "audit.jsonl"
    ran = cli("run", str(p), "--format", "jsonl", "--label", "ticket=OPS-42", "--label", "team=infra",
              "--audit", str(audit))
    assert ran.returncode == 0, ran.stderr.decode()
    *receipts, summary = jsonl(ran.stdout)
    assert summary["labels"] == {"ticket": "OPS-42", "team": "infra"}
    assert [r["result"] for r in receipts] == [{"received": {"n": 1}}, {"received": {"n": 2}}]
    assert all("OPS-42" not in json.dumps(r) for r in receipts)  # not in arguments or results
    events = [json.loads(line) for line in audit.read_text().splitlines()]
    assert events and all(e["labels"] == {"ticket": "OPS-42", "team": "infra"} for e in events)
    plain = cli("run", str(p), "--format", "jsonl")
    assert jsonl(plain.stdout)[-1]["labels"] == {}
    other = cli("run", str(p), "--format", "jsonl", "--label", "ticket=OPS-43", "--label", "team=infra")

    def listed(*labels: str) -> list[str]:
        args = [a for label in labels for a in ("--label", label)]
        proc = cli("runs", "list", "--format", "jsonl", *args)
        assert proc.returncode == 0, proc.stderr.decode()
        return [r["run_id"] for r in jsonl(proc.stdout)]

    first, second = summary["run_id"], jsonl(other.stdout)[-1]["run_id"]
    assert listed("team=infra") == [second, first]  # newest first
    assert listed("team=infra", "ticket=OPS-42") == [first]  # every label must match
    assert listed("ticket=OPS-42", "team=other") == []
    assert listed("nobody=here") == []
    assert len(listed()) == 3
    rows = jsonl(cli("runs", "list", "--format", "jsonl", "--label", "ticket=OPS-43").stdout)
    assert rows[0]["labels"] == {"ticket": "OPS-43", "team": "infra"}


@pytest.mark.parametrize("bad", ["nokey", "=value", " x=1", "a b=1", "k=line\nbreak", "-k=v"])
def test_a_label_that_is_not_key_value_is_a_usage_error(cli, tmp_path, bad):
    p = plan(tmp_path, [{"tool": "echo", "args": {}}])
    proc = cli("run", str(p), "--label", bad)
    assert proc.returncode == 2, proc.stderr.decode()
    assert b"--label" in proc.stderr and b"Traceback" not in proc.stderr
    assert proc.stdout == b""
    assert not (tmp_path / ".toolloop" / "state.db").exists()  # nothing ran
    listing = cli("runs", "list", "--label", bad)
    assert listing.returncode == 2 and b"Traceback" not in listing.stderr


def test_a_label_key_given_twice_with_two_values_is_a_usage_error(cli, tmp_path):
    p = plan(tmp_path, [{"tool": "echo", "args": {}}])
    proc = cli("run", str(p), "--label", "a=1", "--label", "a=2")
    assert proc.returncode == 2 and b"given twice" in proc.stderr


def test_resume_keeps_the_run_labels_and_extends_its_chain(cli, tmp_path):
    paused = cli("run", str(gated(tmp_path)), "--format", "jsonl", "--label", "campaign=spring")
    assert paused.returncode == 4, paused.stderr.decode()
    before = jsonl(paused.stdout)[-1]
    rid = before["run_id"]
    old_links = links(tmp_path, rid)
    assert before["chain_sha256"] == old_links[-1][4]
    assert cli("approve", rid, "pay", "--item", "big", "--approve").returncode == 0
    resumed = cli("resume", rid, "--format", "jsonl")
    assert resumed.returncode == 0, resumed.stderr.decode()
    after = jsonl(resumed.stdout)[-1]
    assert after["labels"] == {"campaign": "spring"}
    new_links = links(tmp_path, rid)
    assert new_links[:len(old_links)] == old_links and len(new_links) == len(old_links) + 4
    # the approval request is a link; its answer and its use are links too, then the receipts
    assert ("approval", 0) in [(k, ref) for _n, k, ref, _r, _l in old_links]
    assert [(k, ref) for _n, k, ref, _r, _l in new_links[len(old_links):]] == [
        ("approval", 0), ("approval", 0), ("receipt", 1), ("receipt", 2)]
    assert after["chain_sha256"] == new_links[-1][4] != before["chain_sha256"]
    verified = cli("runs", "verify", rid)
    assert verified.returncode == 0, verified.stderr.decode()
    assert verified.stdout.decode().count("\n") == 1 and after["chain_sha256"] in verified.stdout.decode()


# -- contract snapshot ----------------------------------------------------------------------------

def test_runs_show_contract_prints_the_registry_the_run_used_after_the_file_changed(cli, tmp_path):
    reg = write(tmp_path / "reg.yml", f"""
        version: 1
        app_root: {APP}
        subagents:
          t:
            runner_defaults: {{tool_timeout_s: 10}}
            tools:
              echo:
                callable: testapp.tools:echo
                description: The first wording.
                input_schema: {{type: object}}
                output_schema: {{}}
    """)
    ran = cli("run", str(plan(tmp_path, [{"tool": "echo", "args": {}}], registry="reg.yml")), "--format", "jsonl")
    assert ran.returncode == 0, ran.stderr.decode()
    summary = jsonl(ran.stdout)[-1]
    reg.write_text(reg.read_text().replace("The first wording.", "A later wording."))
    shown = cli("runs", "show", summary["run_id"], "--contract")
    assert shown.returncode == 0, shown.stderr.decode()
    snapshot = json.loads(shown.stdout)
    tool = snapshot["registry"]["subagents"]["t"]["tools"]["echo"]
    assert tool["description"] == "The first wording." and tool["callable"] == "testapp.tools:echo"
    assert snapshot["contract_sha256"] == summary["contract_sha256"] == sha256_of(snapshot["registry"])
    reg.unlink()
    assert json.loads(cli("runs", "show", summary["run_id"], "--contract").stdout) == snapshot


def test_a_run_journaled_without_a_snapshot_says_so(cli, tmp_path):
    ran = cli("run", str(plan(tmp_path, [{"tool": "echo", "args": {}}])), "--format", "jsonl")
    rid = jsonl(ran.stdout)[-1]["run_id"]
    with db(tmp_path) as con:
        con.execute("UPDATE runs SET contract=NULL")
    shown = cli("runs", "show", rid, "--contract")
    assert shown.returncode == 1 and b"no contract snapshot" in shown.stderr and b"Traceback" not in shown.stderr


# -- tamper evidence ------------------------------------------------------------------------------

@pytest.fixture
def finished(cli, tmp_path):
    p = plan(tmp_path, [{"tool": "echo", "call_key": "one", "args": {"n": 1}},
                        {"tool": "echo", "call_key": "two", "args": {"n": 2}},
                        {"tool": "echo", "call_key": "three", "args": {"n": 3}}])
    ran = cli("run", str(p), "--format", "jsonl")
    assert ran.returncode == 0, ran.stderr.decode()
    summary = jsonl(ran.stdout)[-1]
    ok = cli("runs", "verify", summary["run_id"][:12])  # a unique prefix is enough
    assert ok.returncode == 0, ok.stderr.decode()
    assert ok.stdout.decode().startswith(f"run {summary['run_id']}: hash chain holds (3 links")
    return summary


def verify_fails(cli, run_id: str) -> str:
    proc = cli("runs", "verify", run_id)
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert b"Traceback" not in proc.stderr and proc.stdout == b""
    return proc.stderr.decode()


def test_the_chain_links_every_receipt_in_commit_order_with_the_head_in_the_summary(tmp_path, finished):
    from toolloop_cli.chain import link_sha256, record_sha256

    chain = links(tmp_path, finished["run_id"])
    with db(tmp_path) as con:
        texts = dict(con.execute("SELECT seq, record FROM receipts"))
    previous = ""
    for n, kind, ref, digest, link in chain:  # recomputed here from the documented formula
        assert kind == "receipt" and digest == record_sha256(texts[ref])
        assert link == link_sha256(previous, kind, ref, digest)
        previous = link
    assert finished["chain_sha256"] == previous


def test_an_edited_receipt_is_named(cli, tmp_path, finished):
    with db(tmp_path) as con:
        con.execute("""UPDATE receipts SET record=replace(record, '"n":2', '"n":20') WHERE seq=1""")
    err = verify_fails(cli, finished["run_id"])
    assert "receipt seq 1 (call_key 'two') does not match its link 1" in err


def test_an_edited_link_a_deleted_receipt_an_added_one_and_an_edited_summary_are_named(cli, tmp_path, finished):
    rid = finished["run_id"]
    with db(tmp_path) as con:
        con.execute("UPDATE chain SET record_sha256=? WHERE n=0", ("0" * 64,))
    assert "link 0 (receipt seq 0) does not follow from the link before it" in verify_fails(cli, rid)
    with db(tmp_path) as con:  # the attacker recomputes the whole chain: the summary's head gives it away
        from toolloop_cli.chain import link_sha256, record_sha256

        texts = dict(con.execute("SELECT seq, record FROM receipts"))
        texts[0] = texts[0].replace('"n":1', '"n":10')
        con.execute("UPDATE receipts SET record=? WHERE seq=0", (texts[0],))
        previous = ""
        for n in range(3):
            digest = record_sha256(texts[n])
            previous = link_sha256(previous, "receipt", n, digest)
            con.execute("UPDATE chain SET record_sha256=?, link_sha256=? WHERE n=?", (digest, previous, n))
    assert "the summary's chain_sha256" in verify_fails(cli, rid)

    # a fresh run for the other edits
    ran = cli("run", str(plan(tmp_path, [{"tool": "echo", "args": {}}, {"tool": "echo", "args": {}}], "p2.yml")),
              "--format", "jsonl")
    rid = jsonl(ran.stdout)[-1]["run_id"]
    with db(tmp_path) as con:
        row = con.execute("SELECT record FROM receipts WHERE run_id=? AND seq=1", (rid,)).fetchone()
        con.execute("DELETE FROM receipts WHERE run_id=? AND seq=1", (rid,))
    assert "receipt seq 1 is missing from the journal (link 1)" in verify_fails(cli, rid)
    with db(tmp_path) as con:
        con.execute("INSERT INTO receipts (run_id, seq, status, record) VALUES (?,?,?,?)", (rid, 1, "ok", row[0]))
        con.execute("INSERT INTO receipts (run_id, seq, status, record) VALUES (?,?,?,?)",
                    (rid, 7, "ok", row[0].replace('"seq":1', '"seq":7')))
    assert "receipt seq 7 (call_key '1') has no link in the chain" in verify_fails(cli, rid)
    with db(tmp_path) as con:
        con.execute("DELETE FROM receipts WHERE run_id=? AND seq=7", (rid,))
    assert cli("runs", "verify", rid).returncode == 0  # restored exactly: it holds again
    with db(tmp_path) as con:
        summary = json.loads(con.execute("SELECT summary FROM runs WHERE run_id=?", (rid,)).fetchone()[0])
        summary["chain_sha256"] = "f" * 64
        con.execute("UPDATE runs SET summary=? WHERE run_id=?", (json.dumps(summary), rid))
    assert "the summary's chain_sha256 ffffffffffff" in verify_fails(cli, rid)


def test_verify_refuses_an_unknown_run_and_a_run_without_a_chain(cli, tmp_path, finished):
    unknown = cli("runs", "verify", "nope")
    assert unknown.returncode == 2 and b"no run 'nope'" in unknown.stderr
    with db(tmp_path) as con:
        con.execute("DELETE FROM chain")
    assert "no hash chain" in verify_fails(cli, finished["run_id"])


# -- routed runs: decisions and model answers are links too; a resumed loop extends the chain -----

def routed(tmp_path, server):
    write(tmp_path / "reg.yml", registry_yaml("log_run"))
    profile = openai_profile(server.openai_base)
    return write(tmp_path / "routed.yml", f"""
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


def log_call(key: str, log: str) -> str:
    return json.dumps({"action": "call", "tool": "log_run", "args": {"log": log, "key": key}, "reason": key})


def test_a_routed_run_chains_decisions_receipts_and_model_answers(cli, tmp_path, model_server):
    log = str(tmp_path / "log.txt")
    p = routed(tmp_path, model_server)
    model_server.script(log_call("a", log), FINAL, '{"answer": "a"}')
    ran = cli("run", str(p), "--format", "jsonl", env={"TL_TEST_KEY": KEY})
    assert ran.returncode == 0, ran.stderr.decode()
    summary = jsonl(ran.stdout)[-1]
    kinds = [k for _n, k, _r, _d, _l in links(tmp_path, summary["run_id"])]
    assert sorted(set(kinds)) == ["model_answer", "receipt", "record"]
    assert kinds.count("model_answer") == 3 and kinds.count("record") == 2 and kinds.count("receipt") == 1
    assert kinds.index("model_answer") < kinds.index("record")  # commit order: the answer before its decision
    assert cli("runs", "verify", summary["run_id"]).returncode == 0
    with db(tmp_path) as con:
        con.execute("UPDATE model_answers SET record=replace(record, 'enough', 'changed') WHERE n=2")
    assert "model answer 2 does not match" in verify_fails(cli, summary["run_id"])


def committed_receipts(tmp_path) -> int:
    con = db(tmp_path)
    try:
        return con.execute("SELECT count(*) FROM receipts").fetchone()[0]
    finally:
        con.close()


def test_a_routed_run_killed_and_resumed_still_verifies(cli, tmp_path, model_server):
    log = str(tmp_path / "log.txt")
    p = routed(tmp_path, model_server)
    arrived = threading.Event()

    def second_turn(_request):
        arrived.set()
        return Reply(FINAL, hold=threading.Event())

    model_server.script(log_call("a", log), Reply(handler=second_turn))
    env = {**os.environ, "TL_TEST_KEY": KEY, "NO_COLOR": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "toolloop_cli", "run", str(p), "--format", "jsonl",
                             "--label", "ticket=R-1"], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert arrived.wait(60), "the run never asked for its second turn"
    # the request does not wait for the journal: kill once the first call's receipt is committed
    wait_for(lambda: committed_receipts(tmp_path) > 0, "the first call's receipt to be committed")
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    rid = json.loads(cli("runs", "list", "--format", "jsonl").stdout.decode().splitlines()[0])["run_id"]
    before = links(tmp_path, rid)
    model_server.script(FINAL, '{"answer": "a"}')
    done = cli("resume", rid, "--format", "jsonl", env={"TL_TEST_KEY": KEY})
    assert done.returncode == 0, done.stderr.decode()
    summary = jsonl(done.stdout)[-1]
    after = links(tmp_path, rid)
    assert after[:len(before)] == before and "reset" in [k for _n, k, _r, _d, _l in after[len(before):]]
    assert summary["labels"] == {"ticket": "R-1"} and summary["chain_sha256"] == after[-1][4]
    verified = cli("runs", "verify", rid)
    assert verified.returncode == 0, verified.stderr.decode()
    with db(tmp_path) as con:  # a decision recorded again by the resumed loop is checked, too
        con.execute("UPDATE records SET record=replace(record, '\"reason\":\"a\"', '\"reason\":\"b\"')"
                    " WHERE run_id=? AND n=0", (rid,))
    assert "decision record 0 (iteration 1) does not match" in verify_fails(cli, rid)


def test_a_child_run_carries_its_parents_labels_and_its_own_chain(cli, tmp_path, model_server):
    from test_child_plans import call as child_call
    from test_child_plans import plan as child_plan
    from test_child_plans import setup as child_setup

    child_setup(tmp_path, model_server)
    p = child_plan(tmp_path, {"mode": "sequential", "calls": [{"tool": "research", "args": {"question": "why?"}}]})
    model_server.script(child_call("echo", {"q": 1}), FINAL, '{"answer": "because"}')
    ran = cli("run", str(p), "--format", "jsonl", "--label", "team=research", env={"TL_TEST_KEY": KEY})
    assert ran.returncode == 0, ran.stderr.decode()
    receipt, summary = jsonl(ran.stdout)
    child = receipt["child_run_id"]
    shown = jsonl(cli("runs", "show", child, "--format", "jsonl").stdout)
    assert shown[-1]["labels"] == summary["labels"] == {"team": "research"}
    assert shown[-1]["chain_sha256"] == links(tmp_path, child)[-1][4] != summary["chain_sha256"]
    for rid in (child, summary["run_id"]):
        verified = cli("runs", "verify", rid)
        assert verified.returncode == 0, verified.stderr.decode()
    listed = jsonl(cli("runs", "list", "--format", "jsonl", "--label", "team=research").stdout)
    assert {r["run_id"] for r in listed} == {child, summary["run_id"]}
