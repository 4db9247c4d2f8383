"""A resumed routed run that runs a call again (``--retry-failed``, ``--retry-interrupted``): the
model answers recorded after that call were given on what the model was told of its recorded
receipt. When the new receipt tells the model something else, those answers are not the run's:
they are set aside (``went_past``, exported, verified) and the models are asked anew from the next
request on. When it tells the same (the call failed again the same way), they are reused. A real
model server on 127.0.0.1 and real processes killed where a crash would stop them; the budgets in
process through ``Launch`` with scripted providers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

from conftest import jsonl, write
from modelserver import Reply
from regkit import RecordSink as Sink, openai_profile, registry_yaml, routed_plan_yaml, state_rows as rows
from test_resume import wait_for
from test_store import read_log
from toolloop_cli.engine.launch import Launch, RunOptions
from toolloop_cli.providers.scripted import ScriptedProvider

KEY = "sk-retried-canary"
GIVE_UP = json.dumps({"action": "final", "reason": "the lookup failed: give up"})
FOUND = json.dumps({"action": "final", "reason": "the lookup found it"})
ANSWER = '{"answer": "a"}'


def decide(tool: str, **args: object) -> str:
    return json.dumps({"action": "call", "tool": tool, "args": args, "reason": tool})


def setup(tmp_path, server, *tools: str, extra: dict | None = None):
    write(tmp_path / "reg.yml", registry_yaml(*tools, extra=extra))
    return write(tmp_path / "plan.yml", routed_plan_yaml(openai_profile(server.openai_base), "Look things up."))


def toolloop(tmp_path, *args: str) -> subprocess.Popen:
    env = {**os.environ, "TL_TEST_KEY": KEY, "NO_COLOR": "1"}
    return subprocess.Popen([sys.executable, "-m", "toolloop_cli", *args, "--format", "jsonl"], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def killed_at_the_final_answer(tmp_path, server, *args: str) -> None:
    """Run ``toolloop ARGS`` and kill it while it waits for the final answer (the request after the
    replies already scripted), once its router answers are committed (a model request does not
    wait for the journal: the kill waits for the router's final decision, committed after them);
    the final answer never is."""
    arrived = threading.Event()

    def final(_request):
        arrived.set()
        return Reply(ANSWER, hold=threading.Event())

    server.script(Reply(handler=final))
    proc = toolloop(tmp_path, *args)
    try:
        assert arrived.wait(60), proc.communicate(timeout=60)
        wait_for(lambda: rows(tmp_path, "SELECT 1 FROM records WHERE type='decision'"
                                        " AND json_extract(record, '$.action')='final'") != [],
                 "the router's final decision to be committed")
    finally:
        proc.kill()
        proc.communicate()


def run_id_of(tmp_path) -> str:
    return rows(tmp_path, "SELECT run_id FROM runs")[0][0]


def shown(server, index: int) -> str:
    """The last message of the model request the server got at ``index``."""
    return server.requests[index].json["messages"][-1]["content"]


def test_a_retried_call_that_now_succeeds_is_shown_to_the_model_instead_of_its_recorded_give_up(
        tmp_path, model_server, cli):
    log, marker = str(tmp_path / "log"), str(tmp_path / "marker")
    plan = setup(tmp_path, model_server, "flaky")
    # turn 1's lookup fails; told so, the model gives up at turn 2; the run dies before its final answer
    model_server.script(decide("flaky", log=log, key="a", marker=marker), GIVE_UP)
    killed_at_the_final_answer(tmp_path, model_server, "run", str(plan))
    run_id = run_id_of(tmp_path)
    assert [n for (n,) in rows(tmp_path, "SELECT n FROM model_answers ORDER BY n")] == [1, 2]

    # resumed with the failed lookup run again: it succeeds, so the recorded give-up (given on the
    # failure) is not the run's: turn 2 is asked anew, on the success
    asked = len(model_server.requests)
    model_server.script(FOUND, ANSWER)
    done = cli("resume", run_id, "--retry-failed", "--format", "jsonl", env={"TL_TEST_KEY": KEY})
    assert done.returncode == 0, done.stderr.decode()
    assert read_log(tmp_path / "log") == ["a", "a"]
    assert len(model_server.requests) == asked + 2  # turn 2 and the final answer
    told = shown(model_server, asked)
    assert 'tool="flaky" status="ok"' in told and "first try fails" not in told, told
    records = jsonl(done.stdout)
    assert [(r["type"], r.get("reason") or r.get("status")) for r in records[:-1]] == [
        ("decision", "flaky"), ("receipt", "ok"), ("decision", "the lookup found it")]
    assert records[-1]["outcome"] == "final" and records[-1]["final"] == {"answer": "a"}
    assert records[-1]["loop"]["model_calls"] == 3

    # the give-up is set aside, not lost: out of the run's answers, exported under went_past, verified
    assert rows(tmp_path, "SELECT kind, ref FROM went_past ORDER BY n") == [("model_answer", 2)]
    exported = jsonl(cli("runs", "export", run_id).stdout)
    assert [r["text"] for r in exported if r.get("type") == "model_answer"] == [
        decide("flaky", log=log, key="a", marker=marker), FOUND, ANSWER]
    (moved,) = exported[0]["went_past"]
    assert moved["kind"] == "model_answer" and moved["ref"] == 2 and moved["record"]["text"] == GIVE_UP
    assert cli("runs", "verify", run_id).returncode == 0
    again = cli("runs", "show", run_id, "--format", "jsonl")
    assert again.returncode == 0 and b"give up" not in again.stdout


def test_a_retried_call_that_fails_again_the_same_way_keeps_the_recorded_answers(tmp_path, model_server, cli):
    plan = setup(tmp_path, model_server, "boom")
    model_server.script(decide("boom", message="no such record"), GIVE_UP)
    killed_at_the_final_answer(tmp_path, model_server, "run", str(plan))
    run_id = run_id_of(tmp_path)
    (first,) = rows(tmp_path, "SELECT record FROM receipts")

    # the lookup runs again and fails as before: the model would be told the same, so its recorded
    # give-up stands and only the final answer is asked
    asked = len(model_server.requests)
    model_server.script(ANSWER)
    done = cli("resume", run_id, "--retry-failed", "--format", "jsonl", env={"TL_TEST_KEY": KEY})
    assert done.returncode == 0, done.stderr.decode()
    assert len(model_server.requests) == asked + 1
    records = jsonl(done.stdout)
    receipt = records[1]
    assert receipt["status"] == "error" and receipt["attempts"] >= 1
    assert receipt["receipt_id"] != json.loads(first[0])["receipt_id"]  # it ran again: a new receipt
    assert records[2]["reason"] == "the lookup failed: give up"
    assert records[-1]["outcome"] == "final" and records[-1]["loop"]["model_calls"] == 3
    assert rows(tmp_path, "SELECT kind, ref FROM went_past") == []
    assert cli("runs", "verify", run_id).returncode == 0


def test_a_write_run_again_with_retry_interrupted_is_shown_to_the_model(tmp_path, model_server, cli):
    extra = {"log_gate": "effect: write  # toolloop: ignore[TL353] (nothing to approve in a test)"}
    plan = setup(tmp_path, model_server, "log_gate", extra=extra)
    log, gate = str(tmp_path / "log"), str(tmp_path / "gate")
    # the write starts and the run dies in it: no later answer can be journaled (the journal
    # commits in order, and the call's receipt was never handed to it), so nothing recorded was
    # given on it
    model_server.script(decide("log_gate", log=log, key="w", gate=gate))
    first = toolloop(tmp_path, "run", str(plan))
    try:
        wait_for(lambda: read_log(tmp_path / "log") == ["w"] or first.poll() is not None, "the write to start")
        assert first.poll() is None, first.communicate()
    finally:
        first.kill()
        first.communicate()
    run_id = run_id_of(tmp_path)
    assert rows(tmp_path, "SELECT n FROM model_answers") == [(1,)]
    assert rows(tmp_path, "SELECT seq FROM receipts") == [] and rows(tmp_path, "SELECT seq FROM starts") == [(0,)]

    # resumed: the write is interrupted (it may have happened), the model is told so and gives up;
    # the run dies again before its final answer
    model_server.script(GIVE_UP)
    killed_at_the_final_answer(tmp_path, model_server, "resume", run_id)
    assert read_log(tmp_path / "log") == ["w"]
    (told,) = [json.loads(r)["status"] for (r,) in rows(tmp_path, "SELECT record FROM receipts")]
    assert told == "interrupted"

    # resumed with --retry-interrupted: the write runs and is ok, which the model was never told:
    # its give-up is set aside and it is asked anew
    (tmp_path / "gate").touch()
    asked = len(model_server.requests)
    model_server.script(FOUND, ANSWER)
    done = cli("resume", run_id, "--retry-interrupted", "--format", "jsonl", env={"TL_TEST_KEY": KEY})
    assert done.returncode == 0, done.stderr.decode()
    assert read_log(tmp_path / "log") == ["w", "w"]
    assert 'tool="log_gate" status="ok"' in shown(model_server, asked)
    records = jsonl(done.stdout)
    assert [r["status"] for r in records if r["type"] == "receipt"] == ["ok"]
    assert [r["reason"] for r in records if r["type"] == "decision"][1] == "the lookup found it"
    assert rows(tmp_path, "SELECT kind, ref FROM went_past ORDER BY n") == [("model_answer", 2)]
    assert cli("runs", "verify", run_id).returncode == 0


# -- the budgets: of the run's own answers ---------------------------------------------------------


def go(tmp_path, provider: ScriptedProvider, run_id: str | None = None, **resume: object) -> tuple[list[dict], dict]:
    launch = Launch(tmp_path / "state")
    prepared = (launch.resume(run_id, **resume) if run_id is not None  # type: ignore[arg-type]
                else launch.admit(str(tmp_path / "plan.yml"), RunOptions()))
    sink = Sink()
    result = launch.start(prepared, sink, handle_signals=False, providers={"openai": provider})
    return sink.got, result.summary


def pausing_plan(tmp_path, max_iterations: int, extra: str = "") -> None:
    """A routed plan for the scripted provider (in process) that pauses when its budget runs out
    after ``max_iterations`` turns; ``extra``: more of the plan (already indented)."""
    write(tmp_path / "plan.yml", f"""
        version: 1
        registry: reg.yml
        subagent: t
        mode: routed
        goal: Find x.
        router_profile: {{provider: openai, model: m}}
        final_profile: {{provider: openai, model: m}}
        budget: {{max_iterations: {max_iterations}, max_tokens: 100000, max_tool_calls: 10, timeout_s: 60, on_exceeded: pause}}
        final_schema: {{type: object, required: [answer]}}
{extra}    """)


def test_answers_set_aside_are_not_charged_and_the_run_finishes_on_the_new_ones(tmp_path):
    write(tmp_path / "reg.yml", registry_yaml("echo", "flaky"))
    pausing_plan(tmp_path, 2)
    log, marker = str(tmp_path / "log"), str(tmp_path / "marker")
    lookup = decide("flaky", log=log, key="a", marker=marker)
    _records, summary = go(tmp_path, ScriptedProvider([lookup, decide("echo", key="stale")], tokens=(100, 50)))
    run_id = summary["run_id"]
    assert summary["outcome"] == "paused" and summary["loop"]["tokens"] == {"input": 200, "output": 100}

    fresh = ScriptedProvider([FOUND, ANSWER], tokens=(7, 3))
    records, summary = go(tmp_path, fresh, run_id, retry_failed=True, raises={"max_iterations": 6})
    assert summary["outcome"] == "final" and summary["final"] == {"answer": "a"}, summary
    loop = summary["loop"]
    # turn 1's reused answer and the two new ones; turn 2's answer set aside is not the run's, nor
    # the call it made
    assert loop["model_calls"] == 3 and loop["iterations"] == 2
    assert loop["tokens"] == {"input": 100 + 7 + 7, "output": 50 + 3 + 3}
    assert loop["tool_calls"] == 1 and set(loop["per_tool"]) == {"flaky"}
    assert [(r["tool"], r["status"]) for r in records if r["type"] == "receipt"] == [("flaky", "ok")]


# -- what the model is shown, after the observation guardrails ---------------------------------------

def counted_plan(tmp_path, guards: str) -> None:
    """A lookup that fails with another message each time it runs (``failure 1``, ``failure 2``…),
    and a run that pauses after two turns."""
    write(tmp_path / "reg.yml", registry_yaml("echo", "boom").replace("testapp.tools:boom", "testapp.tools:fail_then_ok"))
    pausing_plan(tmp_path, 2, f"        {guards}\n")


def test_another_error_goes_past_unless_the_guardrails_show_the_model_the_same(tmp_path):
    for shown_as, guards in (("another error", ""), ("the same", "guardrails: {observations: [testapp.guards:block_errors]}")):
        here = tmp_path / shown_as.replace(" ", "_")
        counted_plan(here, guards)
        lookup = decide("boom", path=str(here / "count"), failures=5)
        _records, summary = go(here, ScriptedProvider([lookup, decide("echo", key="recorded")]))
        run_id = summary["run_id"]
        assert summary["outcome"] == "paused", summary

        fresh = ScriptedProvider([decide("echo", key="fresh"), FOUND, ANSWER])
        records, summary = go(here, fresh, run_id, retry_failed=True, raises={"max_iterations": 6})
        assert summary["outcome"] == "final", summary
        receipts = [r for r in records if r["type"] == "receipt"]
        assert receipts[0]["error"]["message"].endswith("failure 2")  # it ran again, and failed otherwise
        echoed = [r["args"]["key"] for r in receipts[1:]]
        if shown_as == "another error":  # the model is asked anew from turn 2, on the new error
            assert echoed == ["fresh"] and len(fresh.requests) == 3
        else:  # both errors are withheld alike: turn 2's recorded answer and call are the run's
            assert echoed == ["recorded", "fresh"] and len(fresh.requests) == 3


# -- a supervisor pause the old path was resumed past -----------------------------------------------

def test_a_pause_the_recorded_path_was_resumed_past_pauses_the_new_path_again(tmp_path):
    write(tmp_path / "reg.yml", registry_yaml("echo", "flaky"))
    pausing_plan(tmp_path, 4, """        supervisor:
          rules:
            - {when: no_progress, count: 1}
          on_violation: pause
""")
    def lookup(n: int) -> str:  # fails the first time; then {"key": "a"} whatever the log
        return decide("flaky", log=str(tmp_path / f"log{n}"), key="a", marker=str(tmp_path / "marker"))

    # the lookup fails, then its result repeats at turn 3: the supervisor pauses the run there
    _records, summary = go(tmp_path, ScriptedProvider([lookup(1), lookup(2), lookup(3)]))
    run_id = summary["run_id"]
    assert summary["outcome"] == "paused" and summary["paused_by"]["kind"] == "supervisor", summary
    # a person resumes it past that pause; it stops again at its turn budget, before turn 4's call
    _records, summary = go(tmp_path, ScriptedProvider([decide("echo", key="y")]), run_id)
    assert summary["outcome"] == "paused" and summary["paused_by"]["kind"] == "budget", summary

    # resumed with --retry-failed: the lookup now succeeds, so the recorded turns 2-4 are set aside;
    # on the new path the result repeats at turn 3 too, and that pause is this path's own
    fresh = ScriptedProvider([decide("echo", key="x"), lookup(3), FOUND, ANSWER])
    _records, summary = go(tmp_path, fresh, run_id, retry_failed=True, raises={"max_iterations": 6})
    assert summary["outcome"] == "paused" and summary["paused_by"]["kind"] == "supervisor", summary
    assert summary["loop"]["iterations"] == 3 and len(fresh.requests) == 2
