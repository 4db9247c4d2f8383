"""Child runs across sessions and levels: a child paused for approval and resumed on its own, then
its parent (its answer taken, its writes made once); a child's context rebuilt from the journal
(never from a redacted value); a grandchild nested to max_depth; child runs replayed (real HTTP on
127.0.0.1, real subprocesses, a real state database)."""

from __future__ import annotations

import json
import sqlite3

import pytest

from conftest import APP, jsonl, write
from regkit import openai_profile, registry_yaml

KEY = "sk-childruns-canary"
FINAL = '{"action": "final", "reason": "enough"}'
SECRET = "hunter2-question-canary"


def call(tool: str, args: dict) -> str:
    return json.dumps({"action": "call", "tool": tool, "args": args, "reason": "r"})


def profile(server) -> str:
    return openai_profile(server.openai_base)


def child_plan(tmp_path, server, name: str, tools: str, *, inputs: bool = True, write_only: bool = False) -> None:
    p = profile(server)
    question = "{type: string, writeOnly: true}" if write_only else "{type: string}"
    required = f"inputs: {{type: object, required: [question], properties: {{question: {question}}}}}" if inputs else ""
    write(tmp_path / name, f"""
        version: 1
        registry: reg.yml
        subagent: t
        mode: routed
        goal: Research one question.
        {required}
        allowed_tools: {tools}
        router_profile: {p}
        final_profile: {p}
        budget: {{max_iterations: 4, max_tokens: 100000, max_tool_calls: 3, timeout_s: 60}}
        final_schema: {{type: object, required: [answer], properties: {{answer: {{type: string}}}}}}
    """)


def registry(tmp_path, *, max_depth: int = 1, research_extra: str = "") -> None:
    write(tmp_path / "reg.yml", f"""
        version: 1
        app_root: {APP}
        subagents:
          t:
            runner_defaults: {{max_depth: {max_depth}, tool_timeout_s: 60}}
            tools:
              echo:
                callable: testapp.tools:echo
                description: Returns its arguments.
                input_schema: {{type: object}}
                output_schema: {{}}
              gated:
                callable: testapp.tools:marker
                description: Writes a file; a person approves.
                effect: write
                approval: required
                input_schema: {{type: object, required: [path], properties: {{path: {{type: string}}}}}}
                output_schema: {{}}
              research:
                plan: research.yml
                description: Research one question and return an answer.
                {research_extra}
              deeper:
                plan: deeper.yml
                description: Research one question more deeply.
    """)


def sequential_parent(tmp_path, question: str = "why?"):
    return write(tmp_path / "plan.yml", json.dumps({
        "version": 1, "registry": "reg.yml", "subagent": "t", "mode": "sequential",
        "calls": [{"tool": "research", "args": {"question": question}}]}))


def run_record(tmp_path, run_id: str) -> dict:
    db = sqlite3.connect(tmp_path / ".toolloop" / "state.db")
    try:
        options, status, summary = db.execute("SELECT options, status, summary FROM runs WHERE run_id=?",
                                              (run_id,)).fetchone()
    finally:
        db.close()
    return {"options": json.loads(options), "status": status, "summary": json.loads(summary) if summary else None}


def paused_child(tmp_path, model_server, cli, target: str, question: str = "why?") -> tuple[str, str]:
    """A sequential parent whose child waits for approval of a write: (parent id, child id)."""
    model_server.script(call("gated", {"path": target}))
    paused = cli("run", str(sequential_parent(tmp_path, question)), "--format", "jsonl", env={"TL_TEST_KEY": KEY})
    assert paused.returncode == 4, paused.stderr.decode()
    parent = jsonl(paused.stdout)[-1]["run_id"]
    child = paused.stderr.decode().split("runs child run ")[1].split(",")[0]
    return parent, child


def test_a_child_resumed_on_its_own_gives_its_answer_to_its_parent_without_running_again(tmp_path, model_server, cli):
    child_plan(tmp_path, model_server, "research.yml", "[gated]")
    child_plan(tmp_path, model_server, "deeper.yml", "[echo]")
    registry(tmp_path)
    target = tmp_path / "written.txt"
    parent, child = paused_child(tmp_path, model_server, cli, str(target))

    approved = cli("approve", child, "1", "--approve")
    assert approved.returncode == 0, approved.stderr.decode()
    hint = approved.stderr.decode()
    # the command that finishes everything is the parent's resume, which resumes the child first
    assert f"toolloop resume {parent}" in hint and f"resume {child}" not in hint, hint
    assert f"child run of {parent}" in hint, hint

    model_server.script(FINAL, '{"answer": "done"}')
    alone = cli("resume", child, "--format", "jsonl", env={"TL_TEST_KEY": KEY})  # the context from the journal
    assert alone.returncode == 0, alone.stderr.decode()
    summary = jsonl(alone.stdout)[-1]
    assert summary["final"] == {"answer": "done"} and summary["parent_run_id"] == parent
    assert f"toolloop resume {parent}" in alone.stderr.decode()  # what to run next
    assert target.read_text() == "ran\n"
    # what the model saw after the resume still holds the context journaled with the child
    assert "why?" in json.dumps(model_server.requests[-1].json["messages"])
    asked = len(model_server.requests)

    done = cli("resume", parent, "--format", "jsonl", env={"TL_TEST_KEY": KEY})
    assert done.returncode == 0, done.stderr.decode()
    receipt, parent_summary = jsonl(done.stdout)
    assert receipt["status"] == "ok" and receipt["child_run_id"] == child
    assert receipt["result"] == {"answer": "done"} and parent_summary["status"] == "ok"
    assert target.read_text() == "ran\n"  # the child's write happened once
    assert len(model_server.requests) == asked  # the finished child was not run again
    runs = jsonl(cli("runs", "list", "--format", "jsonl").stdout)
    assert len(runs) == 2  # no new child run
    assert {r["run_id"]: r["parent_run_id"] for r in runs} == {parent: None, child: parent}


def test_a_parent_resumed_after_its_child_never_runs_the_childs_writes_again(tmp_path, model_server, cli):
    child_plan(tmp_path, model_server, "research.yml", "[gated]", inputs=False)
    child_plan(tmp_path, model_server, "deeper.yml", "[echo]")
    registry(tmp_path)
    target = tmp_path / "written.txt"
    parent, child = paused_child(tmp_path, model_server, cli, str(target))
    assert cli("approve", child, "1", "--approve").returncode == 0
    model_server.script(FINAL, '{"answer": "done"}')
    assert cli("resume", child, env={"TL_TEST_KEY": KEY}).returncode == 0
    assert target.read_text() == "ran\n"
    asked = len(model_server.requests)
    # what a second child run would be answered, if one were started: the same write, approved
    model_server.script(call("gated", {"path": str(target)}), FINAL, '{"answer": "again"}')
    done = cli("resume", parent, "--approve", "all", "--format", "jsonl", env={"TL_TEST_KEY": KEY})
    assert done.returncode == 0, done.stderr.decode()
    assert jsonl(done.stdout)[0]["result"] == {"answer": "done"}
    assert target.read_text() == "ran\n" and len(model_server.requests) == asked


def test_a_child_that_failed_on_its_own_gives_its_parent_an_error_receipt_without_running_again(tmp_path, model_server,
                                                                                            cli):
    child_plan(tmp_path, model_server, "research.yml", "[gated]")
    child_plan(tmp_path, model_server, "deeper.yml", "[echo]")
    registry(tmp_path)
    parent, child = paused_child(tmp_path, model_server, cli, str(tmp_path / "w.txt"))
    assert cli("approve", child, "1", "--reject").returncode == 0
    model_server.script('{"action": "abort", "reason": "refused"}')
    assert cli("resume", child, "--format", "jsonl", env={"TL_TEST_KEY": KEY}).returncode == 1
    asked = len(model_server.requests)
    done = cli("resume", parent, "--format", "jsonl", env={"TL_TEST_KEY": KEY})
    receipt = jsonl(done.stdout)[0]
    assert done.returncode == 1 and receipt["status"] == "error" and receipt["error"]["kind"] == "aborted"
    assert receipt["child_run_id"] == child and len(model_server.requests) == asked


def researcher_parent(tmp_path, model_server, name: str = "top.yml", timeout_s: int = 60):
    """A routed plan whose one tool is the ``research`` child plan."""
    p = profile(model_server)
    return write(tmp_path / name, f"""
        version: 1
        registry: reg.yml
        subagent: t
        mode: routed
        goal: Ask the researcher.
        allowed_tools: [research]
        router_profile: {p}
        final_profile: {p}
        budget: {{max_iterations: 4, max_tokens: 100000, max_tool_calls: 3, timeout_s: {timeout_s}}}
        final_schema: {{type: object}}
    """)


def test_a_routed_parent_resumed_as_approve_says_resumes_its_child_once(tmp_path, model_server, cli):
    child_plan(tmp_path, model_server, "research.yml", "[gated]")
    child_plan(tmp_path, model_server, "deeper.yml", "[echo]")
    registry(tmp_path)
    top = researcher_parent(tmp_path, model_server)
    target = tmp_path / "written.txt"
    model_server.script(call("research", {"question": "q"}), call("gated", {"path": str(target)}))
    paused = cli("run", str(top), "--format", "jsonl", env={"TL_TEST_KEY": KEY})
    assert paused.returncode == 4, paused.stderr.decode()
    parent = jsonl(paused.stdout)[-1]["run_id"]
    child = paused.stderr.decode().split("runs child run ")[1].split(",")[0]
    hint = cli("approve", child, "1", "--approve").stderr.decode()
    command = hint.split("continue with: ")[1].split()[:3]
    assert command == ["toolloop", "resume", parent], hint
    model_server.script(FINAL, '{"answer": "done"}', FINAL, '{"total": 1}')
    done = cli(*command[1:], "--format", "jsonl", env={"TL_TEST_KEY": KEY})
    assert done.returncode == 0, done.stderr.decode()
    receipt = next(r for r in jsonl(done.stdout) if r["type"] == "receipt")
    assert receipt["child_run_id"] == child and receipt["result"] == {"answer": "done"}
    assert target.read_text() == "ran\n"
    assert run_record(tmp_path, child)["status"] == "ok"


@pytest.mark.parametrize("how", ["redact", "writeOnly"])
def test_a_child_whose_context_held_a_redacted_value_is_resumed_only_by_its_parent(tmp_path, model_server, cli, how):
    child_plan(tmp_path, model_server, "research.yml", "[gated]", write_only=how == "writeOnly")
    child_plan(tmp_path, model_server, "deeper.yml", "[echo]")
    registry(tmp_path, research_extra="redact: [/question]" if how == "redact" else "")
    target = tmp_path / "written.txt"
    parent, child = paused_child(tmp_path, model_server, cli, str(target), question=SECRET)
    journaled = run_record(tmp_path, child)["options"]
    assert journaled["context"] == {"question": "[REDACTED]"} and journaled["context_redacted"] == ["/question"]
    assert SECRET not in json.dumps(journaled)

    assert cli("approve", child, "1", "--approve").returncode == 0
    alone = cli("resume", child, env={"TL_TEST_KEY": KEY})
    assert alone.returncode == 3, alone.stderr.decode()
    assert "/question" in alone.stderr.decode() and parent in alone.stderr.decode()
    assert "Traceback" not in alone.stderr.decode()
    replayed = cli("replay", child)
    assert replayed.returncode == 3 and "/question" in replayed.stderr.decode()

    model_server.script(FINAL, '{"answer": "done"}')  # the parent supplies the context again
    done = cli("resume", parent, "--format", "jsonl", env={"TL_TEST_KEY": KEY})
    assert done.returncode == 0, done.stderr.decode()
    assert target.read_text() == "ran\n"
    receipt = jsonl(done.stdout)[0]
    assert receipt["args"] == {"question": "[REDACTED]"} and SECRET not in done.stdout.decode()
    assert SECRET in json.dumps(model_server.requests[-2].json["messages"])


def three_levels(tmp_path, model_server, max_depth: int) -> None:
    child_plan(tmp_path, model_server, "research.yml", "[deeper]")
    child_plan(tmp_path, model_server, "deeper.yml", "[echo]")
    registry(tmp_path, max_depth=max_depth)


def test_a_grandchild_runs_to_max_depth_and_every_level_is_journaled_and_finished(tmp_path, model_server, cli):
    three_levels(tmp_path, model_server, max_depth=2)
    model_server.script(call("deeper", {"question": "deep?"}),  # the child asks the grandchild
                        call("echo", {"seen": "deep?"}), FINAL, '{"answer": "bottom"}',  # the grandchild
                        FINAL, '{"answer": "top"}')  # the child again
    proc = cli("run", str(sequential_parent(tmp_path)), "--format", "jsonl", env={"TL_TEST_KEY": KEY})
    assert proc.returncode == 0, proc.stderr.decode()
    receipt, summary = jsonl(proc.stdout)
    assert receipt["status"] == "ok" and receipt["result"] == {"answer": "top"}
    child = receipt["child_run_id"]
    shown = jsonl(cli("runs", "show", child, "--format", "jsonl").stdout)
    inner = next(r for r in shown if r["type"] == "receipt")
    assert inner["tool"] == "deeper" and inner["status"] == "ok" and inner["result"] == {"answer": "bottom"}
    grandchild = inner["child_run_id"]
    below = jsonl(cli("runs", "show", grandchild, "--format", "jsonl").stdout)
    assert [r["type"] for r in below] == ["decision", "receipt", "decision", "summary"]
    assert below[1]["result"] == {"received": {"seen": "deep?"}}
    levels = [(summary["run_id"], None), (child, summary["run_id"]), (grandchild, child)]
    for run_id, parent in levels:
        rec = run_record(tmp_path, run_id)
        assert rec["status"] == "ok" and rec["summary"] is not None and rec["summary"]["status"] == "ok"
        assert rec["summary"].get("parent_run_id") == parent
    assert run_record(tmp_path, grandchild)["options"]["depth"] == 2
    assert shown[-1]["loop"]["by_part"]["children"]["tokens"] == 3 * 15  # the grandchild's three requests
    for run_id, _parent in levels:
        assert cli("runs", "verify", run_id).returncode == 0


def test_a_grandchild_past_max_depth_is_refused_at_admission(tmp_path, model_server, cli):
    three_levels(tmp_path, model_server, max_depth=1)
    proc = cli("run", str(sequential_parent(tmp_path)), env={"TL_TEST_KEY": KEY})
    assert proc.returncode == 3, proc.stderr.decode()
    err = proc.stderr.decode()
    assert "TL422" in err and "depth 2" in err and "max_depth (1)" in err
    assert model_server.requests == []


def test_a_grandchild_paused_for_approval_is_resumed_through_the_top_run(tmp_path, model_server, cli):
    child_plan(tmp_path, model_server, "research.yml", "[deeper]")
    child_plan(tmp_path, model_server, "deeper.yml", "[gated]")
    registry(tmp_path, max_depth=2)
    target = tmp_path / "written.txt"
    model_server.script(call("deeper", {"question": "d"}), call("gated", {"path": str(target)}))
    paused = cli("run", str(sequential_parent(tmp_path)), "--format", "jsonl", env={"TL_TEST_KEY": KEY})
    assert paused.returncode == 4, paused.stderr.decode()
    top = jsonl(paused.stdout)[-1]["run_id"]
    waiting = jsonl(cli("approvals", "list", "--format", "jsonl").stdout)
    assert len(waiting) == 1 and waiting[0]["tool"] == "gated"
    grandchild = waiting[0]["run_id"]
    hint = cli("approve", grandchild, "1", "--approve").stderr.decode()
    assert f"continue with: toolloop resume {top}" in hint, hint
    model_server.script(FINAL, '{"answer": "low"}', FINAL, '{"answer": "high"}')
    done = cli("resume", top, "--format", "jsonl", env={"TL_TEST_KEY": KEY})
    assert done.returncode == 0, done.stderr.decode()
    assert jsonl(done.stdout)[0]["result"] == {"answer": "high"}
    assert target.read_text() == "ran\n"
    assert run_record(tmp_path, grandchild)["status"] == "ok"


def test_a_parent_replays_its_child_from_the_recording_and_a_child_replays_on_its_own(tmp_path, model_server, cli):
    child_plan(tmp_path, model_server, "research.yml", "[echo]")
    child_plan(tmp_path, model_server, "deeper.yml", "[echo]")
    registry(tmp_path)
    top = researcher_parent(tmp_path, model_server)
    model_server.script(call("research", {"question": "q"}), call("echo", {"x": 1}), FINAL, '{"answer": "a"}',
                        FINAL, '{"total": 1}')
    first = cli("run", str(top), "--format", "jsonl", env={"TL_TEST_KEY": KEY})
    assert first.returncode == 0, first.stderr.decode()
    records = jsonl(first.stdout)
    child = next(r for r in records if r["type"] == "receipt")["child_run_id"]
    asked = len(model_server.requests)
    again = cli("replay", records[-1]["run_id"], "--format", "jsonl")  # the read-only plan tool: recorded
    assert again.returncode == 0, again.stderr.decode()
    assert b"no difference" in again.stderr and len(model_server.requests) == asked
    alone = cli("replay", child, "--format", "jsonl")  # its context from the journal
    assert alone.returncode == 0, alone.stderr.decode()
    assert b"no difference" in alone.stderr and len(model_server.requests) == asked


def test_a_child_still_running_when_its_parent_ends_is_cancelled_with_its_summary_and_the_receipt_says_so(
        tmp_path, model_server, cli):
    import subprocess
    import sys
    import threading

    from modelserver import Reply

    registry(tmp_path)
    child_plan(tmp_path, model_server, "research.yml", "[echo]")
    child_plan(tmp_path, model_server, "deeper.yml", "[echo]")
    researcher_parent(tmp_path, model_server, "parent.yml", timeout_s=600)
    arrived, release = threading.Event(), threading.Event()

    def held(_request):  # the child's first model request: the child is running
        arrived.set()
        release.wait(120)
        return Reply(call("echo", {"late": True}))

    model_server.script(call("research", {"question": "why?"}), Reply(handler=held))
    proc = subprocess.Popen([sys.executable, "-m", "toolloop_cli", "run", "parent.yml", "--format", "jsonl"],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**__import__("os").environ, "TL_TEST_KEY": KEY})
    try:
        while not arrived.wait(0.2):  # the parent runs until its child asks the model
            assert proc.poll() is None, proc.communicate()[1].decode()
        runs = jsonl(cli("runs", "list", "--format", "jsonl").stdout)
        parent = next(r["run_id"] for r in runs if r["parent_run_id"] is None)
        child = next(r["run_id"] for r in runs if r["parent_run_id"] == parent)
        assert cli("abort", parent, "--message", "enough").returncode == 0
        out, err = proc.communicate(timeout=120)
    finally:
        release.set()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    records = jsonl(out)
    summary = records[-1]
    assert summary["outcome"] == "aborted", err.decode()
    (receipt,) = [r for r in records if r["type"] == "receipt"]
    assert receipt["tool"] == "research" and receipt["status"] == "cancelled"
    assert receipt["child_run_id"] == child
    assert f"its child run {child} was cancelled with it and ended interrupted" in receipt["error"]["message"]
    # the child is no longer running: it ended interrupted, with its summary journaled
    ended = run_record(tmp_path, child)
    assert ended["status"] == "interrupted" and ended["summary"]["status"] == "interrupted"
    assert ended["summary"]["parent_run_id"] == parent
    listed = {r["run_id"]: r["status"] for r in jsonl(cli("runs", "list", "--format", "jsonl").stdout)}
    assert listed[child] == "interrupted"


def test_a_childs_running_call_gets_its_receipt_when_the_parents_time_runs_out(tmp_path):
    # the parent's timeout_s runs out (on the mock clock) while its child's call sleeps: the child's
    # call is cut short with its receipt, the child ends interrupted, and the parent's receipt says so
    import trio.testing

    from toolloop_cli.engine.run import RunOptions, execute_plan
    from toolloop_cli.plan.admit import admit_plan
    from toolloop_cli.store import Store

    def fixture(name: str, *texts: str) -> str:
        lines = [json.dumps({"type": "model_answer", "n": i, "role": "router", "model": "m", "text": t,
                             "input_tokens": 1, "output_tokens": 1}) for i, t in enumerate(texts, start=1)]
        (tmp_path / name).write_text("\n".join(lines) + "\n")
        return f"{{provider: replay, fixture: {name}}}"

    write(tmp_path / "reg.yml", registry_yaml("nap", "research", tool_timeout_s=300, max_depth=1))
    child = fixture("child.jsonl", call("nap", {"seconds": 100}))
    write(tmp_path / "research.yml", f"""
        version: 1
        registry: reg.yml
        subagent: t
        mode: routed
        goal: Research one question.
        allowed_tools: [nap]
        router_profile: {child}
        final_profile: {child}
        budget: {{max_iterations: 4, max_tokens: 100000, max_tool_calls: 3, timeout_s: 600}}
        final_schema: {{type: object}}
    """)
    parent = fixture("parent.jsonl", call("research", {"question": "why?"}))
    path = write(tmp_path / "parent.yml", f"""
        version: 1
        registry: reg.yml
        subagent: t
        mode: routed
        goal: Ask the researcher.
        allowed_tools: [research]
        router_profile: {parent}
        final_profile: {parent}
        budget: {{max_iterations: 4, max_tokens: 100000, max_tool_calls: 3, timeout_s: 5}}
        final_schema: {{type: object}}
    """)
    store = Store(tmp_path / "state")
    got: list = []
    try:
        result = execute_plan(admit_plan(str(path)), store, got.append,
                              RunOptions(handle_signals=False, clock=trio.testing.MockClock(autojump_threshold=0)))
        (receipt,) = [r for r in got if r["type"] == "receipt"]
        child_id = receipt["child_run_id"]
        assert child_id
        child_run = store.get_run(child_id)
        child_receipts = store.receipts_of(child_id)
    finally:
        store.close()
    assert result.summary["outcome"] == "timeout"
    assert receipt["tool"] == "research" and receipt["status"] == "cancelled"
    assert receipt["error"]["message"].endswith(f"its child run {child_id} was cancelled with it and ended interrupted")
    assert child_run["status"] == "interrupted" and child_run["summary"] is not None
    assert [(r["tool"], r["status"]) for r in child_receipts] == [("nap", "cancelled")]
    assert child_receipts[0]["error"]["message"] == ("the call of its parent that started this run was cancelled while"
                                                     " this call was running; it was cancelled")
