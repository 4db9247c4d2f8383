"""A resumed routed run that goes another way than its first attempt: the answers the first
attempt journaled after the point where the paths part are not the run's, and no reader of the
journal (a later resume, ``runs export``, ``Store.model_answers_of``; ``runs verify`` still holds)
takes them as its own. They are not deleted either: a receipt records an effect that happened, so
the answers and receipts went past are moved to a table of their own, exported under the
manifest's ``went_past`` and checked by ``runs verify`` like any other record. Runs in process through ``Launch`` with scripted providers."""

from __future__ import annotations

import json
import sqlite3

from conftest import jsonl, write
from regkit import RecordSink as Sink, registry_yaml
from toolloop_cli.engine.launch import Launch, RunOptions
from toolloop_cli.providers.scripted import ScriptedProvider
from toolloop_cli.store import Store

FINAL = '{"action": "final", "reason": "enough"}'


def call(tool: str, **args: object) -> str:
    return json.dumps({"action": "call", "tool": tool, "args": args, "reason": "look"})



def plan_file(tmp_path) -> str:
    write(tmp_path / "reg.yml", registry_yaml("echo", "flaky"))
    return str(write(tmp_path / "plan.yml", """
        version: 1
        registry: reg.yml
        subagent: t
        mode: routed
        goal: Find x.
        allowed_tools: [echo, flaky]
        router_profile: {provider: openai, model: m}
        final_profile: {provider: openai, model: m}
        budget: {max_iterations: 3, max_tokens: 100000, max_tool_calls: 10, timeout_s: 60, on_exceeded: pause}
        final_schema: {type: object, required: [answer]}
    """))


def go(tmp_path, provider: ScriptedProvider, run_id: str | None = None, **resume: object) -> tuple[list[dict], dict]:
    launch = Launch(tmp_path / "state")
    prepared = (launch.resume(run_id, **resume) if run_id is not None  # type: ignore[arg-type]
                else launch.admit(plan_file(tmp_path), RunOptions()))
    sink = Sink()
    result = launch.start(prepared, sink, handle_signals=False, providers={"openai": provider})
    return sink.got, result.summary


def answers_of(tmp_path, run_id: str) -> list[tuple[int, str]]:
    store = Store(tmp_path / "state")
    try:
        return [(a["n"], a["text"]) for a in store.model_answers_of(run_id)]
    finally:
        store.close()


def test_answers_a_resumed_run_went_past_are_not_the_runs(tmp_path, cli):
    log, marker = str(tmp_path / "log.txt"), str(tmp_path / "marker")
    first_turns = [call("flaky", log=log, key="a", marker=marker), call("flaky", log=log + "2", key="a", marker=marker),
                   call("echo", key="stale")]
    _records, summary = go(tmp_path, ScriptedProvider(first_turns))
    run_id = summary["run_id"]
    assert summary["outcome"] == "paused" and summary["paused_by"]["budget"] == "max_iterations"
    assert [t for _n, t in answers_of(tmp_path, run_id)] == first_turns

    # resumed with the failed call run again: it is ok now, which the model was never told, so the
    # answers recorded after it (turns 2 and 3, given on the failure) are not this run's: the model
    # is asked anew from turn 2 and the run finishes on its new answers
    second = ScriptedProvider([call("echo", key="fresh"), FINAL, '{"answer": 1}'])
    records, summary = go(tmp_path, second, run_id, retry_failed=True, raises={"max_iterations": 6})
    assert summary["outcome"] == "final", summary
    assert len(second.requests) == 3  # turn 2, turn 3 and the final answer: nothing stale reused
    shown = second.requests[0].messages[-1]["content"]
    # turn 2 is asked on the success, never on the failure
    assert 'tool="flaky" status="ok"' in shown and "first try fails" not in shown, shown
    decisions = [r for r in records if r["type"] == "decision"]
    assert decisions[1]["args"] == {"key": "fresh"}
    # the calls of the turns the run went past are not this run's either: turn 2's call runs
    receipts = [r for r in records if r["type"] == "receipt"]
    assert [(r["tool"], r["status"]) for r in receipts] == [("flaky", "ok"), ("echo", "ok")]
    assert receipts[1]["args"] == {"key": "fresh"} and receipts[1]["result"] == {"received": {"key": "fresh"}}
    texts = [t for _n, t in answers_of(tmp_path, run_id)]
    assert texts == [first_turns[0], call("echo", key="fresh"), FINAL, '{"answer": 1}']

    state = str(tmp_path / "state")
    exported = jsonl(cli("runs", "export", run_id, "--state-dir", state).stdout)
    assert [r["text"] for r in exported if r.get("type") == "model_answer"] == texts
    # no answer, request, receipt or record of the run's own is of the path gone
    assert "stale" not in json.dumps(exported[1:])
    # but what that path did is kept: the answer and the receipt of the call it made (an effect
    # that happened), under the manifest's went_past
    moved = exported[0]["went_past"]
    assert [(m["kind"], m["ref"]) for m in moved] == [("model_answer", 2), ("model_answer", 3), ("receipt", 1),
                                                      ("receipt", 2)], moved
    assert [m["record"]["text"] for m in moved[:2]] == first_turns[1:]
    stale = moved[3]["record"]
    assert stale["type"] == "receipt" and stale["status"] == "ok" and stale["args"] == {"key": "stale"}
    assert moved[2]["record"]["args"]["log"] == log + "2" and stale["seq"] == 2
    assert all(isinstance(m["at"], str) for m in moved)
    assert cli("runs", "verify", run_id, "--state-dir", state).returncode == 0
    shown = cli("runs", "show", run_id, "--state-dir", state, "--format", "jsonl")
    assert shown.returncode == 0 and b'"stale"' not in shown.stdout

    # a moved record is checked like any other: changed, or gone, the chain no longer holds
    db = sqlite3.connect(tmp_path / "state" / "state.db")
    try:
        with db:
            db.execute("UPDATE went_past SET record=replace(record, '\"stale\"', '\"fresh\"') WHERE kind='receipt'")
        tampered = cli("runs", "verify", run_id, "--state-dir", state)
        assert tampered.returncode == 1 and b"does not match its link" in tampered.stderr, tampered.stderr
        with db:
            db.execute("DELETE FROM went_past WHERE kind='receipt'")
        gone = cli("runs", "verify", run_id, "--state-dir", state)
        assert gone.returncode == 1 and b"missing from the journal" in gone.stderr, gone.stderr
    finally:
        db.close()
