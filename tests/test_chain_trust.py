"""What the hash chain protects: approval requests and answers and operator controls are
links of the run's chain; ``resume`` and ``replay`` refuse a run whose chain does not hold, so an
approval edited in the database is never acted on; a running run ignores an answer or a control
whose link does not hold; ``runs verify --expect`` compares the chain with a head kept elsewhere.
Through the real command and a real SQLite file edited by hand."""

from __future__ import annotations

import json
import sqlite3

import pytest
from conftest import APP, jsonl, write

from toolloop_cli.chain import link_sha256, record_sha256

REGISTRY = f"""
version: 1
app_root: {APP}
subagents:
  t:
    runner_defaults: {{tool_timeout_s: 10}}
    tools:
      wire:
        callable: testapp.tools:marker
        description: Wires money (writes a marker file); a person approves every call.
        effect: write
        approval: {{when: "true"}}
        input_schema: {{type: object, required: [path], properties: {{path: {{type: string}}}}}}
        output_schema: {{}}
      echo:
        callable: testapp.tools:echo
        description: Returns its arguments.
        input_schema: {{type: object}}
        output_schema: {{}}
"""


def paused(cli, tmp_path) -> tuple[str, dict]:
    """A parallel run paused for the approval of its write, in lane 'big'."""
    write(tmp_path / "reg.yml", REGISTRY)
    write(tmp_path / "plan.yml", json.dumps({
        "version": 1, "registry": "reg.yml", "subagent": "t", "mode": "parallel", "max_concurrency": 1,
        "lanes": [{"item_key": "small", "calls": [{"tool": "echo", "args": {"n": 1}}]},
                  {"item_key": "big", "calls": [{"tool": "wire", "call_key": "pay",
                                                 "args": {"path": str(tmp_path / "wired")}}]}]}))
    r = cli("run", "plan.yml", "--format", "jsonl")
    assert r.returncode == 4, r.stderr.decode()
    summary = jsonl(r.stdout)[-1]
    return summary["run_id"], summary


def sql(tmp_path, statement: str, params: tuple = ()) -> list[tuple]:
    con = sqlite3.connect(tmp_path / ".toolloop" / "state.db", isolation_level=None)
    try:
        return con.execute(statement, params).fetchall()
    finally:
        con.close()


def chain(tmp_path, run_id: str) -> list[tuple]:
    return sql(tmp_path, "SELECT n, kind, ref, record_sha256, link_sha256 FROM chain WHERE run_id=? ORDER BY n",
               (run_id,))


def fails(proc, code: int) -> str:
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    err = proc.stderr.decode()
    assert "Traceback" not in err
    return err


# -- approvals ------------------------------------------------------------------------------------

def test_an_approval_set_in_the_database_is_never_acted_on(cli, tmp_path):
    rid, _summary = paused(cli, tmp_path)
    assert ("approval", 0) in [(k, ref) for _n, k, ref, _d, _l in chain(tmp_path, rid)]  # the request is a link
    sql(tmp_path, "UPDATE approvals SET state='approved', approver='mallory' WHERE run_id=?", (rid,))
    link = max(n for n, k, _r, _d, _l in chain(tmp_path, rid) if k == "approval")

    verified = fails(cli("runs", "verify", rid), 1)
    assert f"approval request 0 (item_key 'big', call_key 'pay') does not match its link {link}" in verified

    resumed = cli("resume", rid, "--format", "jsonl")
    err = fails(resumed, 3)
    assert err.splitlines() == [
        f"<journal>:1:1: error TL370 run {rid} cannot be resumed: the journal does not match its hash chain:"
        f" approval request 0 (item_key 'big', call_key 'pay') does not match its link {link} (the journal was"
        f" changed after it was written; see 'toolloop runs verify {rid}', and run the plan again as a new run)",
        f"toolloop: run {rid} cannot be resumed; nothing ran",
    ]
    assert not (tmp_path / "wired").exists()  # the gated write never ran
    assert sql(tmp_path, "SELECT state FROM approvals") == [("approved",)]  # the evidence stays


def test_an_answer_given_with_approve_is_linked_and_acted_on(cli, tmp_path):
    rid, summary = paused(cli, tmp_path)
    assert cli("approve", rid, "pay", "--item", "big", "--approve", "--approver", "ann").returncode == 0
    kinds = [(k, ref) for _n, k, ref, _d, _l in chain(tmp_path, rid)]
    assert kinds[-1] == ("approval", 0) and kinds.count(("approval", 0)) == 2  # asked, then answered
    # answered while the run is paused: a link after the summary's head, and the chain holds
    held = cli("runs", "verify", rid)
    assert held.returncode == 0, held.stderr.decode()
    assert summary["chain_sha256"] != chain(tmp_path, rid)[-1][4]
    done = cli("resume", rid, "--format", "jsonl")
    assert done.returncode == 0, done.stderr.decode()
    assert (tmp_path / "wired").read_text() == "ran\n"
    assert [(k, ref) for _n, k, ref, _d, _l in chain(tmp_path, rid)][-2:] == [("approval", 0), ("receipt", 1)]
    assert cli("runs", "verify", rid).returncode == 0


def test_a_rewritten_chain_cannot_hide_an_answer_after_the_summary_from_a_receipt(cli, tmp_path):
    """Only answers and controls may follow the summary's head; a receipt added there by hand and
    linked with a recomputed link is named."""
    rid, summary = paused(cli, tmp_path)
    text = sql(tmp_path, "SELECT record FROM receipts WHERE run_id=? AND seq=0", (rid,))[0][0]
    forged = text.replace('"seq":0', '"seq":5')
    head = chain(tmp_path, rid)[-1]
    digest = record_sha256(forged)
    sql(tmp_path, "INSERT INTO receipts (run_id, seq, status, record) VALUES (?,?,?,?)", (rid, 5, "ok", forged))
    sql(tmp_path, "INSERT INTO chain VALUES (?,?,?,?,?,?)",
        (rid, head[0] + 1, "receipt", 5, digest, link_sha256(head[4], "receipt", 5, digest)))
    err = fails(cli("runs", "verify", rid), 1)
    assert f"the summary's chain_sha256 {summary['chain_sha256'][:12]}… is not the chain's head" in err


def test_a_running_run_ignores_an_answer_whose_link_does_not_hold(tmp_path):
    """The check made where an answer is acted on (a resume that passed the chain check, a loop
    still going), not only at the start of a resume."""
    from toolloop_cli._canonical import sha256_of
    from toolloop_cli.engine.approvals import Approvals
    from toolloop_cli.store import Store

    store = Store(tmp_path)
    warned: list[str] = []
    approvals = Approvals(store, "r1", warn=warned.append)
    h1 = sha256_of({"x": 1})
    assert approvals.decide("big", "pay", {"x": 1}, h1) == ("wait", None, None)  # asked: a pending request
    store.answer_approval("r1", "big", "pay", "approved", approver="ann")
    store.db.execute("UPDATE approvals SET approver='mallory' WHERE run_id='r1'")  # changed after it was linked
    assert approvals.decide("big", "pay", {"x": 1}, h1) == ("wait", None, None)
    assert warned == ["the answer to call 'pay' (lane 'big') of run r1 does not match its link in the run's hash"
                      " chain (it was changed in the database): ignored, the call waits; see 'toolloop runs"
                      " verify r1'"]
    assert store.approval("r1", "big", "pay")["state"] == "approved"  # left as evidence, never used
    store.db.execute("UPDATE approvals SET approver='ann' WHERE run_id='r1'")  # put back exactly: it holds
    verdict = approvals.decide("big", "pay", {"x": 1}, h1)
    assert verdict[0] == "run" and verdict[2] == "ann"
    store.close()


def test_an_answer_journaled_before_answers_were_links_is_asked_again(tmp_path):
    from toolloop_cli.engine.approvals import Approvals
    from toolloop_cli.store import Store

    store = Store(tmp_path)
    store.db.execute("INSERT INTO approvals (run_id, item_key, call_key, args_sha256, state, approver)"
                     " VALUES ('r1', '', 'pay', 'h1', 'approved', 'old')")  # as an older toolloop left it
    warned: list[str] = []
    assert Approvals(store, "r1", warn=warned.append).decide(None, "pay", {}, "h1") == ("wait", None, None)
    assert warned == ["the answer to call 'pay' of run r1 was journaled before answers were links of the run's"
                      " hash chain: it is asked again"]
    row = store.approval("r1", None, "pay")
    assert row["state"] == "pending" and row["n"] == 0 and store.link_holds("r1", "approval", 0)
    store.close()


def test_approve_all_pending_links_every_answer_in_its_transaction(tmp_path):
    from toolloop_cli.chain import verify
    from toolloop_cli.store import Store

    store = Store(tmp_path)
    for item in ("a", "b", "c"):
        store.request_approval("r1", item, "pay", "h")
    assert store.answer_all_pending("r1", "rejected", message="no", approver="ann") == [
        ("a", "pay"), ("b", "pay"), ("c", "pay")]
    links, current = store.chain_of("r1")
    assert [(link.kind, link.ref) for link in links] == [("approval", i) for i in (0, 1, 2, 0, 1, 2)]
    assert verify(links, current).ok
    assert all(store.link_holds("r1", "approval", i) for i in range(3))
    assert not store.answer_approval("r1", "a", "pay", "approved")  # answered once (compare-and-set)
    assert len(store.chain_of("r1")[0]) == 6  # a refused answer adds no link
    store.close()


# -- operator controls ----------------------------------------------------------------------------

def test_a_control_written_in_the_database_is_refused_on_resume_and_one_from_abort_is_honoured(cli, tmp_path):
    rid, _summary = paused(cli, tmp_path)
    sql(tmp_path, "INSERT INTO controls (run_id, n, kind, message, at, linked) VALUES (?, 0, 'abort', 'x', 1.0, 1)",
        (rid,))
    assert "operator control 0 (kind 'abort') has no link in the chain" in fails(cli("runs", "verify", rid), 1)
    assert "operator control 0 (kind 'abort') has no link in the chain" in fails(cli("resume", rid), 3)
    sql(tmp_path, "DELETE FROM controls")
    aborted = cli("abort", rid, "--message", "not today")
    assert aborted.returncode == 0, aborted.stderr.decode()
    assert chain(tmp_path, rid)[-1][1:3] == ("control", 0)
    assert cli("runs", "verify", rid).returncode == 0  # linked after the paused run's summary: it holds


def test_a_running_run_ignores_a_control_whose_link_does_not_hold(tmp_path):
    from toolloop_cli.engine.controls import control_holds
    from toolloop_cli.store import Store

    store = Store(tmp_path)
    store.add_control("r1", "steer", "go left")
    warned: list[str] = []
    assert control_holds(store, "r1", 0, "steer", warned.append) and warned == []
    store.db.execute("UPDATE controls SET message='delete everything'")
    assert not control_holds(store, "r1", 0, "steer", warned.append)
    store.db.execute("INSERT INTO controls (run_id, n, kind, message, at) VALUES ('r1', 1, 'abort', NULL, 1.0)")
    assert not control_holds(store, "r1", 1, "abort", warned.append)  # no link of its own
    assert warned[0].startswith("operator control 0 (steer) of run r1 has no link in the run's hash chain that holds")
    assert len(warned) == 2
    store.db.execute("UPDATE controls SET message='go left' WHERE n=0")
    store.consume_control("r1", 0, 3)  # read by the run: linked again, with the turn it was read at
    assert control_holds(store, "r1", 0, "steer", None)
    assert [link.kind for link in store.chain_of("r1")[0]] == ["control", "control"]
    store.close()


# -- replay ---------------------------------------------------------------------------------------

def test_replay_refuses_a_routed_run_whose_chain_does_not_hold(cli, tmp_path, model_server):
    from test_ops_journal import FINAL, KEY, log_call, routed

    p = routed(tmp_path, model_server)
    model_server.script(log_call("a", str(tmp_path / "log.txt")), FINAL, '{"answer": "a"}')
    ran = cli("run", str(p), "--format", "jsonl", env={"TL_TEST_KEY": KEY})
    assert ran.returncode == 0, ran.stderr.decode()
    rid = jsonl(ran.stdout)[-1]["run_id"]
    n = sql(tmp_path, "SELECT n FROM model_answers WHERE run_id=? AND record LIKE '%enough%'", (rid,))[0][0]
    sql(tmp_path, "UPDATE model_answers SET record=replace(record, 'enough', 'changed') WHERE run_id=? AND n=?",
        (rid, n))
    link = [k for k, kind, ref, _d, _l in chain(tmp_path, rid) if (kind, ref) == ("model_answer", n)][-1]
    err = fails(cli("replay", rid, "--offline"), 3)
    assert (f"run {rid} cannot be replayed: the journal does not match its hash chain: model answer {n} does not"
            f" match its link {link}") in err
    assert f"toolloop: run {rid} cannot be replayed; nothing ran" in err
    assert len(sql(tmp_path, "SELECT run_id FROM runs")) == 1  # no replay run was started


# -- runs verify --expect -------------------------------------------------------------------------

def rewrite_chain(tmp_path, run_id: str, edit) -> str:
    """What someone who can write the whole database does: edit a receipt, recompute every link
    and the summary's head. Returns the new head."""
    texts = dict(sql(tmp_path, "SELECT seq, record FROM receipts WHERE run_id=?", (run_id,)))
    rows = chain(tmp_path, run_id)
    previous = ""
    for n, kind, ref, digest, _link in rows:
        if kind == "receipt":
            texts[ref] = edit(texts[ref])
            digest = record_sha256(texts[ref])
            sql(tmp_path, "UPDATE receipts SET record=? WHERE run_id=? AND seq=?", (texts[ref], run_id, ref))
        previous = link_sha256(previous, kind, ref, digest)
        sql(tmp_path, "UPDATE chain SET record_sha256=?, link_sha256=? WHERE run_id=? AND n=?",
            (digest, previous, run_id, n))
    summary = json.loads(sql(tmp_path, "SELECT summary FROM runs WHERE run_id=?", (run_id,))[0][0])
    summary["chain_sha256"] = previous
    sql(tmp_path, "UPDATE runs SET summary=? WHERE run_id=?", (json.dumps(summary), run_id))
    return previous


def test_verify_expect_takes_the_head_of_any_summary_of_the_run_and_catches_a_rewritten_chain(cli, tmp_path):
    rid, first = paused(cli, tmp_path)
    assert cli("approve", rid, "pay", "--item", "big", "--approve").returncode == 0
    done = cli("resume", rid, "--format", "jsonl")
    assert done.returncode == 0, done.stderr.decode()
    last = jsonl(done.stdout)[-1]
    links = chain(tmp_path, rid)
    at = {link: n for n, _k, _r, _d, link in links}
    for head in (first["chain_sha256"], last["chain_sha256"], last["chain_sha256"].upper()):
        ok = cli("runs", "verify", rid, "--expect", head)
        assert ok.returncode == 0, ok.stderr.decode()
        assert ok.stdout.decode() == (f"run {rid}: hash chain holds ({len(links)} links, head {last['chain_sha256']});"
                                      f" --expect is link {at[head.lower()]}\n")

    new_head = rewrite_chain(tmp_path, rid, lambda text: text.replace('"n":1', '"n":1000'))
    assert cli("runs", "verify", rid).returncode == 0  # recomputed links hold on their own...
    for kept in (first["chain_sha256"], last["chain_sha256"]):  # ...but not through a head kept elsewhere
        err = fails(cli("runs", "verify", rid, "--expect", kept), 1)
        assert err.splitlines()[0] == (
            f"toolloop: error: run {rid}: the journal does not match its hash chain: the head given with --expect,"
            f" {kept[:12]}…, is not a link of the chain (whose head is {new_head[:12]}…): the journal was rewritten"
            " after that head was printed, or it is another run's")


@pytest.mark.parametrize("given", ["abc", "g" * 64, "0" * 63])
def test_verify_expect_takes_a_sha256(cli, tmp_path, given):
    err = fails(cli("runs", "verify", "whatever", "--expect", given), 2)
    assert err == ("toolloop: error: --expect takes a SHA-256 in hex (64 characters), the chain_sha256 of one of the"
                   " run's summaries\n")
