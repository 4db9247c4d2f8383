"""What a recording can and cannot give back: the manifest that starts ``runs export``, a replay
that runs out of recorded answers (``fixture exhausted at turn N``, never the network), and forks
of a recorded routed run (``replay --from N``: recorded turns before N, live from N with the plan
given, writes denied from N unless ``--execute-writes``). In process through ``engine/launch.py``
with a scripted provider, a real state database and the test App's real tools; a few CLI
subprocesses for what users see."""

from __future__ import annotations

import json
import sqlite3

import jsonschema
import pytest

from conftest import APP, jsonl, write
from modelserver import Reply
from regkit import RecordSink as Records, openai_profile, registry_yaml
from toolloop_cli.engine.launch import Launch, RunOptions
from toolloop_cli.engine.replay import exhausted_turn, export_records
from toolloop_cli.errors import ConfigError, UsageError
from toolloop_cli.providers.scripted import ScriptedProvider
from toolloop_cli.record_schema import receipt_schema
from toolloop_cli.store import Store

REG = APP / "registry.yml"
KEY = "sk-fork-canary-51c0"
FINAL = '{"action": "final", "reason": "enough"}'


def call(tool: str, args: dict, reason: str = "r") -> str:
    return json.dumps({"action": "call", "tool": tool, "args": args, "reason": reason})


def plan_file(tmp_path, name: str = "plan.yml", *, tools: str = "[echo, marker, secret_echo, log_run]",
              server=None, budget: str = "{max_iterations: 6, max_tokens: 100000, max_tool_calls: 5, timeout_s: 30}",
              extra: str = ""):
    if server is None:
        profile = "{provider: openai, model: m, api_key_env: TL_TEST_KEY}"
    else:
        profile = openai_profile(server.openai_base)
    return write(tmp_path / name, f"""
        version: 1
        registry: {REG}
        subagent: t
        mode: routed
        goal: Find x.
        allowed_tools: {tools}
        router_profile: {profile}
        final_profile: {profile}
        budget: {budget}
        final_schema: {{type: object, required: [answer]}}
        {extra}
    """)



def state(tmp_path):
    return tmp_path / "state"


def run_live(tmp_path, plan, *replies, options: RunOptions | None = None) -> list[dict]:
    """A routed run of ``plan`` in process, its model answered by ``replies``."""
    launch = Launch(state(tmp_path))
    prepared = launch.admit(plan, options or RunOptions())
    sink = Records()
    launch.start(prepared, sink, handle_signals=False, providers={"openai": ScriptedProvider(list(replies))})
    return sink.got


def fork(tmp_path, run_id: str, turn: int, *replies, plan=None, execute_writes: bool = False,
         provider: ScriptedProvider | None = None) -> list[dict]:
    launch = Launch(state(tmp_path))
    prepared = launch.fork(run_id, turn, plan=plan, execute_writes=execute_writes)
    sink = Records()
    provider = provider or ScriptedProvider(list(replies))
    launch.start(prepared, sink, handle_signals=False, providers={"openai": provider})
    return sink.got


def exported(tmp_path, run_id: str) -> list[dict]:
    store = Store(state(tmp_path), create=False)
    try:
        return export_records(store, store.get_run(run_id))
    finally:
        store.close()


@pytest.fixture(autouse=True)
def _key(monkeypatch):
    monkeypatch.setenv("TL_TEST_KEY", KEY)


# --- the export's manifest ---------------------------------------------------------------------


def test_an_export_starts_with_a_manifest_naming_what_it_cannot_reproduce(tmp_path):
    plan = plan_file(tmp_path)
    records = run_live(tmp_path, plan, call("secret_echo", {"user": "ann", "password": "pw-0b7e"}),
                       call("echo", {"x": 1}), FINAL, '{"answer": "done"}')
    run_id = records[-1]["run_id"]
    lines = exported(tmp_path, run_id)
    manifest, body = lines[0], lines[1:]
    assert manifest["type"] == "manifest" and manifest["run_id"] == run_id
    assert manifest["plan"] == str(plan) and manifest["contract_sha256"] == records[-1]["contract_sha256"]
    assert isinstance(manifest["toolloop_version"], str) and manifest["toolloop_version"]
    answers = [r for r in body if r["type"] == "model_answer"]
    assert len(answers) == 4 and manifest["counts"] == {"records": len(body) - 4, "model_answers": 4}
    assert [r for r in body if r["type"] != "model_answer"] == records  # the records as the run printed them
    not_captured = manifest["not_captured"]
    assert not_captured["child_runs"] == [] and not_captured["env"] == ["TL_TEST_KEY"]
    # every redacted value is named by its line (0-based: the manifest is line 0) and pointer
    where = {(body[at["record"] - 1]["type"], at["pointer"]) for at in not_captured["redacted"]}
    assert ("model_answer", "/text") in where  # the proposal's password, replaced in the reply
    assert ("decision", "/args/password") in where
    assert ("receipt", "/args/password") in where and ("receipt", "/result/token") in where
    for at in not_captured["redacted"]:
        line = lines[at["record"]]
        value = line
        for token in at["pointer"][1:].split("/"):
            value = value[token]
        assert "[REDACTED]" in value
    assert "pw-0b7e" not in json.dumps(lines) and KEY not in json.dumps(lines)
    validator = jsonschema.Draft202012Validator(receipt_schema())
    for line in lines:
        validator.validate(line)


def child_setup(tmp_path, *questions: str):
    """A sequential parent that asks its ``research`` child plan each question."""
    write(tmp_path / "reg.yml", registry_yaml("echo", "research", max_depth=1))
    profile = "{provider: openai, model: m, api_key_env: CHILD_KEY}"
    write(tmp_path / "research.yml", f"""
        version: 1
        registry: reg.yml
        subagent: t
        mode: routed
        goal: Research one question.
        inputs: {{type: object, required: [question]}}
        allowed_tools: [echo]
        router_profile: {profile}
        final_profile: {profile}
        budget: {{max_iterations: 3, max_tokens: 100000, max_tool_calls: 2, timeout_s: 30}}
        final_schema: {{type: object, required: [answer]}}
    """)
    parent = write(tmp_path / "plan.yml", json.dumps({
        "version": 1, "registry": "reg.yml", "subagent": "t", "mode": "sequential",
        "calls": [{"tool": "research", "args": {"question": q}} for q in questions]}))
    return parent


def test_a_manifest_names_the_child_runs_exported_on_their_own(tmp_path):
    parent = child_setup(tmp_path, "why?", "how?")
    records = run_live(tmp_path, parent, FINAL, '{"answer": "a"}', FINAL, '{"answer": "b"}')
    children = [r["child_run_id"] for r in records if r["type"] == "receipt"]
    assert len(set(children)) == 2 and None not in children
    manifest = exported(tmp_path, records[-1]["run_id"])[0]
    assert manifest["not_captured"]["child_runs"] == children
    assert manifest["not_captured"]["env"] == []  # the parent read no key: its children did
    assert exported(tmp_path, children[0])[0]["not_captured"]["env"] == ["CHILD_KEY"]


# --- forks: replay --from N ------------------------------------------------------------------


def recorded_run(tmp_path, log, **plan) -> tuple[str, list[dict]]:
    """A recorded run: turn 1 logs 'a', turn 2 logs 'b', turn 3 says final."""
    records = run_live(tmp_path, plan_file(tmp_path, **plan), call("log_run", {"log": log, "key": "a"}),
                       call("log_run", {"log": log, "key": "b"}), FINAL, '{"answer": "recorded"}')
    assert records[-1]["outcome"] == "final"
    return records[-1]["run_id"], records


def test_a_fork_takes_the_recorded_turns_before_n_and_goes_on_live_from_n(tmp_path):
    log = tmp_path / "log.txt"
    run_id, recorded = recorded_run(tmp_path, str(log))
    live = ScriptedProvider([call("echo", {"x": 2}), FINAL, '{"answer": "forked"}'])
    records = fork(tmp_path, run_id, 2, provider=live)
    summary = records[-1]
    assert summary["run_id"] != run_id and summary["outcome"] == "final" and summary["final"] == {"answer": "forked"}
    assert summary["forked_from"] == {"run_id": run_id, "iteration": 2}
    assert log.read_text().split() == ["a", "b"]  # turn 1's call took its recorded result: it did not run
    # turn 1 as recorded, then the live turns
    assert [(r["type"], r.get("iteration"), r.get("tool")) for r in records[:-1]] == [
        ("decision", 1, "log_run"), ("receipt", 1, "log_run"), ("decision", 2, "echo"), ("receipt", 2, "echo"),
        ("decision", 3, None)]
    assert records[1]["result"] == recorded[1]["result"] and records[1]["run_id"] == summary["run_id"]
    assert records[3]["result"] == {"received": {"x": 2}}
    assert len(live.requests) == 3  # only the live turns and the closeout asked the model
    validator = jsonschema.Draft202012Validator(receipt_schema())
    for record in records:
        validator.validate(record)
    assert KEY not in json.dumps(records)
    assert "log_run" in live.requests[0].messages[-1]["content"]  # the live turn saw turn 1's observation
    # the recorded turn's usage is charged: 3 recorded-then-live router answers and a closeout
    assert summary["loop"]["iterations"] == 3 and summary["loop"]["model_calls"] == 4
    store = Store(state(tmp_path), create=False)
    try:
        journaled = store.get_run(summary["run_id"])
        assert journaled["options"]["forked_from"] == {"run_id": run_id, "iteration": 2}
        assert len(store.model_answers_of(summary["run_id"])) == 4  # the fork's journal holds every answer
    finally:
        store.close()


def test_a_fork_denies_writes_from_turn_n_unless_execute_writes(tmp_path):
    log, target = tmp_path / "log.txt", tmp_path / "written.txt"
    run_id, _ = recorded_run(tmp_path, str(log))
    writes = (call("marker", {"path": str(target)}), FINAL, '{"answer": "forked"}')
    denied = fork(tmp_path, run_id, 2, *writes)
    receipt = next(r for r in denied if r["type"] == "receipt" and r["tool"] == "marker")
    assert receipt["status"] == "denied" and receipt["iteration"] == 2
    assert receipt["error"]["message"] == "not executed in a fork; pass --execute-writes"
    assert not target.exists() and denied[-1]["status"] == "ok"  # the model saw the denial and went on
    done = fork(tmp_path, run_id, 2, *writes, execute_writes=True)
    receipt = next(r for r in done if r["type"] == "receipt" and r["tool"] == "marker")
    assert receipt["status"] == "ok" and target.read_text() == "ran\n"


def test_a_fork_goes_on_with_the_plan_given_and_refuses_one_that_no_longer_admits_the_recorded_turns(tmp_path):
    log = tmp_path / "log.txt"
    run_id, _ = recorded_run(tmp_path, str(log))
    other = plan_file(tmp_path, "other.yml", tools="[log_run, echo]",
                      budget="{max_iterations: 2, max_tokens: 100000, max_tool_calls: 5, timeout_s: 30}")
    records = fork(tmp_path, run_id, 2, call("echo", {"x": 2}), plan=other)
    summary = records[-1]
    assert summary["outcome"] == "max_iterations"  # the given plan's budget: two turns
    assert summary["forked_from"] == {"run_id": run_id, "iteration": 2}
    store = Store(state(tmp_path), create=False)
    try:
        assert store.get_run(summary["run_id"])["plan_path"] == str(other)
    finally:
        store.close()
    # a plan without the tool a recorded turn called cannot replay that turn
    narrow = plan_file(tmp_path, "narrow.yml", tools="[echo]")
    with pytest.raises(ConfigError) as refused:
        Launch(state(tmp_path)).fork(run_id, 2, plan=narrow)
    [problem] = refused.value.problems
    assert problem.file == str(narrow)
    assert "turn 1 called 'log_run', which the plan no longer allows" in problem.message
    # forking from turn 1 replays no recorded turn: any routed plan will do
    assert fork(tmp_path, run_id, 1, FINAL, '{"answer": "x"}', plan=narrow)[-1]["outcome"] == "final"


def test_a_fork_from_a_turn_the_run_did_not_have_is_a_usage_error(tmp_path):
    run_id, _ = recorded_run(tmp_path, str(tmp_path / "log.txt"))
    for turn in (0, 4):
        with pytest.raises(UsageError, match=r"has 3 turn\(s\); --from takes a turn from 1 to 3"):
            Launch(state(tmp_path)).fork(run_id, turn)
    batch = write(tmp_path / "batch.yml", json.dumps({
        "version": 1, "registry": str(REG), "subagent": "t", "mode": "sequential",
        "calls": [{"tool": "echo", "args": {"x": 1}}]}))
    batch_id = run_live(tmp_path, batch)[-1]["run_id"]
    with pytest.raises(UsageError, match="is a sequential run; replay --from forks routed runs"):
        Launch(state(tmp_path)).fork(batch_id, 1)


def test_a_fork_paused_for_approval_resumes_as_the_fork_it_is(tmp_path):
    log, target = tmp_path / "log.txt", tmp_path / "written.txt"
    run_id, _ = recorded_run(tmp_path, str(log), tools="[echo, marker, log_run, pay]")
    # from turn 2 writes may run; a gated one waits for a person, and with none here the fork pauses
    paused = fork(tmp_path, run_id, 2, call("pay", {"amount": 500}), execute_writes=True)
    fork_id = paused[-1]["run_id"]
    assert paused[-1]["status"] == "stopped" and paused[-1]["forked_from"] == {"run_id": run_id, "iteration": 2}
    store = Store(state(tmp_path))
    try:
        assert store.answer_approval(fork_id, None, "2", "approved", approver="test")
    finally:
        store.close()
    launch = Launch(state(tmp_path))
    prepared = launch.resume(fork_id)
    sink = Records()
    live = ScriptedProvider([call("marker", {"path": str(target)}), FINAL, '{"answer": "resumed"}'])
    launch.start(prepared, sink, handle_signals=False, providers={"openai": live})
    summary = sink.got[-1]
    assert summary["run_id"] == fork_id and summary["final"] == {"answer": "resumed"}
    assert summary["forked_from"] == {"run_id": run_id, "iteration": 2}  # still a fork, and says so
    pay = next(r for r in sink.got if r["type"] == "receipt" and r["tool"] == "pay")
    assert pay["status"] == "ok" and pay["approval"]["decision"] == "approved"
    assert target.read_text() == "ran\n"  # --execute-writes holds for the resumed fork too
    assert log.read_text().split() == ["a", "b"]  # turn 1 never ran in the fork, nor on its resume
    assert len(live.requests) == 3  # the fork's own answers were reused: turns 3 and 4 and the closeout asked


def test_a_resumed_fork_still_denies_writes(tmp_path):
    log, target = tmp_path / "log.txt", tmp_path / "written.txt"
    run_id, _ = recorded_run(tmp_path, str(log))
    # a fork killed at its first live turn (the model did not answer): resumed, it is still a fork
    broken = fork(tmp_path, run_id, 2)
    fork_id = broken[-1]["run_id"]
    assert broken[-1]["outcome"] == "provider_error"
    launch = Launch(state(tmp_path))
    prepared = launch.resume(fork_id)
    sink = Records()
    live = ScriptedProvider([call("marker", {"path": str(target)}), FINAL, '{"answer": "resumed"}'])
    launch.start(prepared, sink, handle_signals=False, providers={"openai": live})
    marker = next(r for r in sink.got if r["type"] == "receipt" and r["tool"] == "marker")
    assert marker["status"] == "denied" and not target.exists()
    assert sink.got[-1]["forked_from"] == {"run_id": run_id, "iteration": 2}


# --- a recording that runs out ---------------------------------------------------------------


def test_a_replay_that_runs_out_of_recorded_answers_ends_provider_error_and_never_reaches_the_network(
        tmp_path, model_server):
    # recorded with the model answering once, then failing: the recording holds turn 1 only
    plan = plan_file(tmp_path, server=model_server)
    records = run_live(tmp_path, plan, call("echo", {"x": 1}))
    run_id = records[-1]["run_id"]
    assert records[-1]["outcome"] == "provider_error"
    launch = Launch(state(tmp_path))
    prepared = launch.replay(run_id)
    sink = Records()
    launch.start(prepared, sink, handle_signals=False)
    summary = sink.got[-1]
    assert summary["outcome"] == "provider_error" and summary["error"]["kind"] == "provider_error"
    assert "fixture exhausted at turn 2" in summary["error"]["message"] and exhausted_turn(summary) == 2
    assert exhausted_turn(records[-1]) is None  # the recording's own provider error was no exhaustion
    assert model_server.requests == []  # the profiles name this server: the replay never asked it


def test_a_fixture_that_runs_out_ends_provider_error_at_the_turn_that_asked(tmp_path, model_server):
    one_turn = "{max_iterations: 1, max_tokens: 100000, max_tool_calls: 5, timeout_s: 30}"
    records = run_live(tmp_path, plan_file(tmp_path, budget=one_turn), call("echo", {"x": 1}))
    assert records[-1]["outcome"] == "max_iterations"
    fixture = tmp_path / "fixtures" / "one.jsonl"
    fixture.parent.mkdir()
    fixture.write_text("".join(json.dumps(r) + "\n" for r in exported(tmp_path, records[-1]["run_id"])))
    replayed = write(tmp_path / "replayed.yml", f"""
        version: 1
        registry: {REG}
        subagent: t
        mode: routed
        goal: Find x.
        allowed_tools: [echo]
        router_profile: {{provider: replay, fixture: fixtures/one.jsonl}}
        final_profile: {{provider: replay, fixture: fixtures/one.jsonl}}
        budget: {{max_iterations: 4, max_tokens: 100000, max_tool_calls: 5, timeout_s: 30}}
        final_schema: {{type: object, required: [answer]}}
    """)
    summary = run_live(tmp_path, replayed)[-1]
    assert summary["outcome"] == "provider_error" and summary["status"] == "failed"
    assert summary["error"]["message"].startswith("router profile: fixture exhausted at turn 2 (")
    assert summary["loop"]["tool_calls"] == 1  # turn 1 ran as recorded
    assert model_server.requests == []


def test_a_child_run_forks_like_any_routed_run_with_its_context_from_the_journal(tmp_path):
    parent = child_setup(tmp_path, "why-7d1e?")
    records = run_live(tmp_path, parent, call("echo", {"x": 1}), FINAL, '{"answer": "a"}')
    child = records[0]["child_run_id"]
    live = ScriptedProvider([call("echo", {"x": 2}), FINAL, '{"answer": "b"}'])
    forked = fork(tmp_path, child, 2, provider=live)
    summary = forked[-1]
    assert summary["final"] == {"answer": "b"} and summary["forked_from"] == {"run_id": child, "iteration": 2}
    assert "why-7d1e?" in json.dumps(live.requests[0].messages)  # the child's context, read from its journal
    assert [r["tool"] for r in forked if r["type"] == "receipt"] == ["echo", "echo"]


# --- what users see ----------------------------------------------------------------------------


def test_replay_from_on_the_command_line_forks_and_exits_as_a_run(tmp_path, model_server, cli):
    log, target = tmp_path / "log.txt", tmp_path / "written.txt"
    plan = plan_file(tmp_path, server=model_server)
    model_server.script(call("log_run", {"log": str(log), "key": "a"}), FINAL, '{"answer": "recorded"}')
    first = cli("run", str(plan), "--format", "jsonl", env={"TL_TEST_KEY": KEY})
    assert first.returncode == 0, first.stderr.decode()
    run_id = jsonl(first.stdout)[-1]["run_id"]
    exported_lines = jsonl(cli("runs", "export", run_id).stdout)
    assert exported_lines[0]["type"] == "manifest" and exported_lines[0]["not_captured"]["env"] == ["TL_TEST_KEY"]

    model_server.script(call("marker", {"path": str(target)}), FINAL, '{"answer": "forked"}')
    forked = cli("replay", run_id, "--from", "2", "--format", "jsonl", env={"TL_TEST_KEY": KEY})
    assert forked.returncode == 0, forked.stderr.decode()
    records = jsonl(forked.stdout)
    assert records[-1]["forked_from"] == {"run_id": run_id, "iteration": 2}
    assert next(r for r in records if r.get("tool") == "marker" and r["type"] == "receipt")["status"] == "denied"
    assert not target.exists() and log.read_text().split() == ["a"]
    assert f"fork of {run_id} from turn 2 as {records[-1]['run_id']}".encode() in forked.stderr

    # the fork's model fails: the fork exits 1 as a run would, not as a divergence check
    model_server.script(Reply(status=400, text="no such model"))
    failing = cli("replay", run_id, "--from", "1", "--format", "jsonl", env={"TL_TEST_KEY": KEY})
    assert failing.returncode == 1 and jsonl(failing.stdout)[-1]["outcome"] == "provider_error"

    narrow = plan_file(tmp_path, "narrow.yml", tools="[echo]", server=model_server)
    refused = cli("replay", run_id, "--from", "2", "--plan", str(narrow), "--format", "jsonl")
    assert refused.returncode == 3 and b"no longer admits the recorded turns" in refused.stderr
    assert b"cannot be forked; nothing ran" in refused.stderr
    usage = cli("replay", run_id, "--plan", str(narrow))
    assert usage.returncode == 2 and b"--plan is for a fork: give --from N too" in usage.stderr


def test_a_fork_goes_past_a_supervisor_pause_the_recording_was_resumed_from(tmp_path):
    log = tmp_path / "log.txt"
    plan = plan_file(tmp_path, extra="supervisor: {rules: [{when: iteration_reached, gte: 1}], on_violation: pause}")
    paused = run_live(tmp_path, plan, call("log_run", {"log": str(log), "key": "a"}))
    assert paused[-1]["outcome"] == "paused"
    run_id = paused[-1]["run_id"]
    launch = Launch(state(tmp_path))
    prepared = launch.resume(run_id)
    sink = Records()
    launch.start(prepared, sink, handle_signals=False,
                 providers={"openai": ScriptedProvider([call("echo", {"x": 1}), FINAL, '{"answer": "r"}'])})
    assert sink.got[-1]["outcome"] == "final"
    forked = fork(tmp_path, run_id, 2, FINAL, '{"answer": "f"}')
    assert forked[-1]["outcome"] == "final" and forked[-1]["final"] == {"answer": "f"}
    assert log.read_text().split() == ["a"]


def test_a_fork_of_a_child_run_resumes_with_the_childs_context(tmp_path):
    parent = child_setup(tmp_path, "why-3f0a?")
    records = run_live(tmp_path, parent, call("echo", {"x": 1}), FINAL, '{"answer": "a"}')
    child = records[0]["child_run_id"]
    broken = fork(tmp_path, child, 2)  # the live model fails at once: the fork ends, resumable
    fork_id = broken[-1]["run_id"]
    assert broken[-1]["outcome"] == "provider_error"
    launch = Launch(state(tmp_path))
    prepared = launch.resume(fork_id)
    sink = Records()
    live = ScriptedProvider([FINAL, '{"answer": "b"}'])
    launch.start(prepared, sink, handle_signals=False, providers={"openai": live})
    assert sink.got[-1]["final"] == {"answer": "b"} and sink.got[-1]["forked_from"]["run_id"] == child
    assert "why-3f0a?" in json.dumps(live.requests[0].messages)


def test_a_fork_of_a_run_whose_chain_does_not_hold_is_refused(tmp_path):
    run_id, _ = recorded_run(tmp_path, str(tmp_path / "log.txt"))
    db = sqlite3.connect(state(tmp_path) / "state.db")
    with db:  # a recorded answer edited by hand: its link no longer holds
        db.execute("UPDATE model_answers SET record=replace(record, 'enough', 'changed') WHERE run_id=?", (run_id,))
    runs_before = db.execute("SELECT count(*) FROM runs").fetchone()[0]
    db.close()
    with pytest.raises(ConfigError) as refused:
        Launch(state(tmp_path)).fork(run_id, 3)
    assert f"run {run_id} cannot be forked: the journal does not match its hash chain" in refused.value.problems[0].message
    db = sqlite3.connect(state(tmp_path) / "state.db")
    assert db.execute("SELECT count(*) FROM runs").fetchone()[0] == runs_before  # no fork was started
    db.close()


def test_a_fork_whose_plan_changed_a_recorded_calls_schema_is_refused(tmp_path):
    run_id, _ = recorded_run(tmp_path, str(tmp_path / "log.txt"))
    write(tmp_path / "changed.yml", f"""
        version: 1
        app_root: {APP}
        subagents:
          t:
            runner_defaults: {{tool_timeout_s: 10}}
            tools:
              log_run:
                callable: testapp.tools:log_run
                description: Logs each execution to a file, now at a level.
                input_schema: {{type: object, required: [log, key, level], properties: {{level: {{type: integer}}}}}}
                output_schema: {{}}
    """)
    plan = plan_file(tmp_path, "changed-plan.yml", tools="[log_run]")
    plan.write_text(plan.read_text().replace(str(REG), str(tmp_path / "changed.yml")))
    with pytest.raises(ConfigError) as refused:
        Launch(state(tmp_path)).fork(run_id, 3, plan=plan)
    message = refused.value.problems[0].message
    assert "turn 1 called 'log_run' with arguments its input schema no longer takes" in message
    assert "turn 2 called 'log_run' with arguments its input schema no longer takes" in message


def test_a_replay_and_a_fork_carry_the_recorded_runs_labels(tmp_path):
    log = tmp_path / "log.txt"
    records = run_live(tmp_path, plan_file(tmp_path), call("log_run", {"log": str(log), "key": "a"}), FINAL,
                       '{"answer": "recorded"}', options=RunOptions(labels={"ticket": "T-9"}))
    run_id = records[-1]["run_id"]
    assert records[-1]["labels"] == {"ticket": "T-9"}
    forked = fork(tmp_path, run_id, 2, FINAL, '{"answer": "forked"}')[-1]
    launch = Launch(state(tmp_path))
    sink = Records()
    launch.start(launch.replay(run_id, offline=True), sink, handle_signals=False)
    replayed = sink.got[-1]
    assert forked["run_id"] != replayed["run_id"] != run_id
    assert forked["labels"] == replayed["labels"] == {"ticket": "T-9"}
