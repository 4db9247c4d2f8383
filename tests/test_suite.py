"""Regression suites in process (``toolloop_cli.suite``): a case recorded live then replayed from
its fixture with no network and no key, every kind of expectation failing with its name and its
wanted and got values, tools recorded or live, faults, fixtures that run out or lack a result,
pauses, repeats, batch cases, labels, JUnit XML and the findings of a rejected suite."""

from __future__ import annotations

import json
import socket
from xml.etree import ElementTree as ET

import pytest

from conftest import APP, write
from toolloop_cli.errors import ConfigError
from toolloop_cli.providers.scripted import ScriptedProvider
from toolloop_cli.store import Store
from toolloop_cli.suite.case import CaseSettings
from toolloop_cli.suite.expect import calls_failures, check_run, subset_failures
from toolloop_cli.suite.junit import junit_xml
from toolloop_cli.suite.load import load_suite
from toolloop_cli.suite.models import CallExpect, ExpectDecl
from toolloop_cli.suite.runner import load_suites, run_suites

REG = APP / "registry.yml"
KEY_VAR = "TL_SUITE_TEST_KEY"
CALL_LOG = '{"action": "call", "tool": "log_run", "args": {"log": "LOG", "key": "a"}, "reason": "log it"}'
FINAL = '{"action": "final", "reason": "enough"}'
ANSWER = '{"answer": 1, "outcome": "done"}'


def routed_plan(tmp_path, *, goal: str = "Find x.", extra: str = "") -> str:
    return str(write(tmp_path / "plan.yml", f"""
        version: 1
        registry: {REG}
        subagent: t
        mode: routed
        goal: {goal}
        context: {{who: test}}
        inputs: {{type: object, properties: {{who: {{type: string}}}}, required: [who]}}
        allowed_tools: [echo, log_run, boom]
        router_profile: {{provider: openai, model: m, base_url: 'http://127.0.0.1:9/v1', api_key_env: {KEY_VAR},
                         price: {{input_per_mtok: 1000, output_per_mtok: 1000}}}}
        final_profile: {{provider: openai, model: m, base_url: 'http://127.0.0.1:9/v1', api_key_env: {KEY_VAR},
                        price: {{input_per_mtok: 1000, output_per_mtok: 1000}}}}
        budget: {{max_iterations: 6, max_tokens: 100000, max_tool_calls: 3, timeout_s: 30}}
        final_schema: {{type: object, required: [answer], properties: {{answer: {{type: integer}}, outcome: {{type: string}}}}}}
        outcomes: [done]
        routes: {{done: publish}}
        {extra}
    """))


def suite_file(tmp_path, cases: str, name: str = "suite.yml"):
    return write(tmp_path / name, "version: 1\nkind: suite\ncases:\n" + cases)


def settings(tmp_path, provider=None, **more) -> CaseSettings:
    return CaseSettings(state_dir=str(tmp_path / "state"), providers={"openai": provider} if provider else None,
                        hooks={"handle_signals": False}, **more)


def run(paths, s: CaseSettings, **kw):
    got: list[dict] = []
    summary, interrupted = run_suites(load_suites(paths, recording=kw.get("record", False)), s, got.append, **kw)
    assert not interrupted
    return [r for r in got if r["type"] == "test"], summary


def recorded_case(tmp_path, monkeypatch, *, case_extra: str = "", record_extra: str = "",
                  goal: str = "Find x.") -> tuple:
    """A suite whose one case was recorded live (scripted model, real tools) with --record, with
    ``record_extra`` keys; ``case_extra`` keys are added after the recording."""
    log = tmp_path / "tool.log"
    monkeypatch.setenv(KEY_VAR, "sk-suite-canary-1")
    routed_plan(tmp_path, goal=goal)
    CALL = CALL_LOG.replace("LOG", str(log))
    case = "  - name: logs\n    plan: plan.yml\n    fixture: fixtures/logs.jsonl\n" + record_extra
    path = suite_file(tmp_path, case)
    tests, _ = run([path], settings(tmp_path, ScriptedProvider([CALL, FINAL, ANSWER])), record=True)
    assert tests[0]["status"] == "pass", tests
    # recorded live: the tool ran once (and again in the check after it under tools: live)
    assert log.read_text().count("\n") == (2 if "tools: live" in record_extra else 1)
    path = suite_file(tmp_path, case + case_extra)
    return path, log


# -- recording, replay, no network -----------------------------------------------------------------

def test_record_writes_the_fixture_from_a_live_run_then_the_case_replays_it(tmp_path, monkeypatch):
    path, log = recorded_case(tmp_path, monkeypatch)
    fixture = [json.loads(line) for line in (tmp_path / "fixtures" / "logs.jsonl").read_text().splitlines()]
    kinds = [r["type"] for r in fixture]
    assert kinds.count("model_answer") == 3 and "receipt" in kinds and kinds[-1] == "summary"
    assert kinds[0] == "manifest" and fixture[0]["counts"] == {"records": len(kinds) - 4, "model_answers": 3}
    assert all(isinstance(a["request"], str) and "Find x." in a["request"] for a in fixture
               if a["type"] == "model_answer" and a["role"] == "router")
    tests, summary = run([path], settings(tmp_path))
    assert tests[0]["status"] == "pass" and summary["passed"] == 1
    assert log.read_text().count("\n") == 1  # tools: recorded (the default): the tool did not run again


def test_a_fixture_case_sends_no_request_and_needs_no_key(tmp_path, monkeypatch, model_server):
    path, log = recorded_case(tmp_path, monkeypatch)
    monkeypatch.delenv(KEY_VAR)
    opened: list = []

    def guard(self, address, *a):  # noqa: ANN001 - socket.socket.connect's own signature
        opened.append(address)
        raise OSError("the test forbids network connections")

    monkeypatch.setattr(socket.socket, "connect", guard)
    monkeypatch.setattr(socket, "create_connection", lambda *a, **k: guard(None, a))
    tests, _ = run([path], settings(tmp_path))
    assert tests[0]["status"] == "pass", tests
    assert opened == [] and model_server.requests == []


def test_each_case_is_a_journaled_run_labelled_suite_and_case(tmp_path, monkeypatch):
    path, _ = recorded_case(tmp_path, monkeypatch)
    tests, _ = run([path], settings(tmp_path))
    store = Store(tmp_path / "state", create=False)
    try:
        run_rec = store.get_run(tests[0]["run_ids"][0])
        labelled = store.list_runs(labels={"toolloop.test": "suite.yml:logs"}) if hasattr(store, "list_runs") else None
    finally:
        store.close()
    assert run_rec["labels"] == {"toolloop.test": "suite.yml:logs"}
    assert run_rec["summary"]["status"] == "ok"
    if labelled is not None:
        assert tests[0]["run_ids"][0] in [r["run_id"] for r in labelled]


def test_tools_live_runs_read_tools_and_recorded_takes_their_results(tmp_path, monkeypatch):
    path, log = recorded_case(tmp_path, monkeypatch, record_extra="    tools: live\n")
    tests, _ = run([path], settings(tmp_path))
    assert tests[0]["status"] == "pass"
    assert log.read_text().count("\n") == 3  # the read tool ran again


def test_a_call_with_no_recorded_result_fails_the_recorded_case_and_does_not_run(tmp_path, monkeypatch):
    path, log = recorded_case(tmp_path, monkeypatch)
    fx = tmp_path / "fixtures" / "logs.jsonl"
    fx.write_text("".join(line + "\n" for line in fx.read_text().splitlines() if '"type":"receipt"' not in line))
    tests, _ = run([path], settings(tmp_path))
    assert tests[0]["status"] == "fail"
    assert {"expect": "fixture", "wanted": "a recorded result for log_run",
            "got": "no recorded result for log_run at turn 1"} in tests[0]["failures"]
    assert log.read_text().count("\n") == 1


def test_a_fixture_that_runs_out_fails_the_case_with_the_turn(tmp_path, monkeypatch):
    path, _ = recorded_case(tmp_path, monkeypatch)
    fx = tmp_path / "fixtures" / "logs.jsonl"
    lines = fx.read_text().splitlines()
    last = max(i for i, line in enumerate(lines) if '"type":"model_answer"' in line)
    fx.write_text("".join(line + "\n" for i, line in enumerate(lines) if i != last))
    tests, _ = run([path], settings(tmp_path))
    assert tests[0]["status"] == "fail"
    assert [f["got"] for f in tests[0]["failures"] if f["expect"] == "fixture"] == ["fixture exhausted at turn 2"]


def test_faults_replace_the_nth_call_of_a_tool_under_recorded_and_live(tmp_path, monkeypatch):
    faults = ("    faults: [{tool: log_run, call: 1, status: timeout}]\n"
              "    expect: {calls: [{tool: log_run, status: timeout}], outcome: final}\n")
    path, log = recorded_case(tmp_path, monkeypatch, case_extra=faults)
    tests, _ = run([path], settings(tmp_path))
    assert tests[0]["status"] == "pass", tests
    path = suite_file(tmp_path, "  - {name: live, plan: plan.yml, fixture: fixtures/logs.jsonl, tools: live,\n"
                                "     faults: [{tool: log_run, call: 1, status: error, message: down}],\n"
                                "     expect: {calls: [{tool: log_run, status: error}]}}\n", "live.yml")
    tests, _ = run([path], settings(tmp_path))
    assert tests[0]["status"] == "pass", tests
    assert log.read_text().count("\n") == 1  # the fault replaced the call: the tool did not run


def test_context_replaces_the_plans_context(tmp_path, monkeypatch):
    path, _ = recorded_case(tmp_path, monkeypatch, record_extra="    context: {who: somebody-else}\n",
                            case_extra="    expect: {requests_unchanged: true}\n")
    tests, _ = run([path], settings(tmp_path))
    assert tests[0]["status"] == "pass"  # recorded with the case's context
    store = Store(tmp_path / "state", create=False)
    try:
        answers = store.model_answers_of(tests[0]["run_ids"][0])
    finally:
        store.close()
    assert "somebody-else" in answers[0]["request"] and "who: test" not in answers[0]["request"]


# -- every kind of expectation, failing ------------------------------------------------------------

def test_every_expectation_that_fails_says_its_name_and_wanted_and_got(tmp_path, monkeypatch):
    expect = ("    expect:\n"
              "      outcome: budget_exceeded\n"
              "      route: review\n"
              "      final: {answer: 2, outcome: done, missing: x}\n"
              "      calls: [{tool: log_run, status: ok}, {tool: log_run, args: {key: b}}]\n"
              "      never: [log_run]\n"
              "      max_tool_calls: 0\n"
              "      max_tokens: 10\n"
              "      max_cost_usd: 0.01\n"
              "      requests_unchanged: true\n")
    path, log = recorded_case(tmp_path, monkeypatch, case_extra=expect)
    # a changed goal: every request differs from the recording
    routed_plan(tmp_path, goal="Find y.")
    tests, _ = run([path], settings(tmp_path))
    t = tests[0]
    assert t["status"] == "fail"
    receipt = {"tool": "log_run", "status": "ok", "args": {"log": str(log), "key": "a"}}
    by_name = {f["expect"]: (f["wanted"], f["got"]) for f in t["failures"]}
    assert by_name["outcome"] == ("budget_exceeded", "final")
    assert by_name["route"] == ("review", "publish")
    assert by_name["final.answer"] == (2, 1)
    assert by_name["final.missing"] == ("x", {"missing": True})
    assert "final.outcome" not in by_name
    assert by_name["calls[1]"] == ({"tool": "log_run", "args": {"key": "b"}}, [])
    assert by_name["never[0]"] == ("no call of log_run", [receipt])
    assert by_name["max_tool_calls"] == (0, 1)
    assert by_name["max_tokens"] == (10, 45)
    assert by_name["max_cost_usd"] == (0.01, pytest.approx(0.045))
    wanted, got = by_name["requests_unchanged"]
    assert wanted != got and len(wanted) == 64
    assert "-" in t["diff"] and "Find x." in t["diff"] and "+" in t["diff"] and "Find y." in t["diff"]
    assert t["diff"].startswith("--- recorded request 1\n+++ request 1\n")


def test_a_run_that_pauses_fails_unless_paused_is_expected(tmp_path, monkeypatch):
    path, _ = recorded_case(tmp_path, monkeypatch)
    routed_plan(tmp_path, extra="supervisor: {rules: [{when: iteration_reached, gte: 1}], on_violation: pause}")
    path = suite_file(tmp_path, "  - {name: pauses, plan: plan.yml, fixture: fixtures/logs.jsonl}\n"
                                "  - {name: expected, plan: plan.yml, fixture: fixtures/logs.jsonl,"
                                " expect: {outcome: paused}}\n", "pause.yml")
    tests, _ = run([path], settings(tmp_path))
    assert tests[0]["status"] == "fail"
    assert tests[0]["failures"] == [{"expect": "outcome", "wanted": "a run that does not pause", "got": "paused"}]
    assert tests[1]["status"] == "pass", tests[1]


def test_a_case_whose_plan_is_rejected_errors(tmp_path, monkeypatch):
    path, _ = recorded_case(tmp_path, monkeypatch, case_extra="    context: {who: 5}\n")
    tests, summary = run([path], settings(tmp_path))
    assert tests[0]["status"] == "error" and tests[0]["run_ids"] == []
    assert tests[0]["failures"][0]["expect"] == "run" and "TL417" in tests[0]["failures"][0]["got"]
    assert summary["errors"] == 1


def test_repeat_reports_how_many_runs_passed_and_k_keeps_matching_cases(tmp_path, monkeypatch):
    path, _ = recorded_case(tmp_path, monkeypatch)
    tests, summary = run([path], settings(tmp_path), repeat=3)
    assert (tests[0]["runs"], tests[0]["passed"], len(set(tests[0]["run_ids"]))) == (3, 3, 3)
    tests, summary = run([path], settings(tmp_path), pattern="nothing-like-it")
    assert tests == [] and summary["passed"] == 0


def test_repeat_passes_a_case_only_when_every_run_did(tmp_path, monkeypatch):
    path, _ = recorded_case(tmp_path, monkeypatch, case_extra="    expect: {never: [log_run]}\n")
    tests, _ = run([path], settings(tmp_path), repeat=2)
    assert (tests[0]["status"], tests[0]["runs"], tests[0]["passed"]) == ("fail", 2, 0)


def test_a_batch_case_runs_live_and_is_judged_by_its_receipts(tmp_path):
    write(tmp_path / "batch.yml", f"""
        version: 1
        registry: {REG}
        subagent: t
        mode: sequential
        calls:
          - {{tool: echo, args: {{x: 1}}}}
          - {{tool: boom, args: {{message: nope}}}}
    """)
    path = suite_file(tmp_path, "  - name: batch\n    plan: batch.yml\n    expect:\n"
                                "      calls: [{tool: echo, status: ok, args: {x: 1}}, {tool: boom, status: error}]\n"
                                "      never: [log_run]\n      max_tool_calls: 2\n"
                                "  - {name: too-few, plan: batch.yml, expect: {max_tool_calls: 1}}\n")
    tests, _ = run([path], settings(tmp_path))
    assert [t["status"] for t in tests] == ["pass", "fail"]
    assert tests[1]["failures"] == [{"expect": "max_tool_calls", "wanted": 1, "got": 2}]


# -- a rejected suite ------------------------------------------------------------------------------

def test_a_rejected_suite_has_findings_with_file_line_and_column(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # FILE is shown relative to the current folder
    routed_plan(tmp_path)
    write(tmp_path / "batch.yml", f"version: 1\nregistry: {REG}\nsubagent: t\nmode: sequential\n"
                                  "calls: [{tool: echo, args: {}}]\n")
    path = suite_file(tmp_path, """
  - name: a
    plan: plan.yml
    fixture: nowhere.jsonl
    expect: {outcom: final, never: [ech0]}
  - name: b
    plan: missing.yml
  - name: c
    plan: batch.yml
    context: {x: 1}
    expect: {outcome: final, calls: [{tool: echo}]}
  - name: c
    plan: plan.yml
    faults: [{tool: echo, call: 1, status: timeout}]
""".lstrip("\n"))
    suite, problems = load_suite(path)
    assert suite is None
    got = [(p.code, p.line, p.col, p.message) for p in problems]
    assert ("TL201", 7, 14, "unknown key 'outcom'") in got
    assert any(p.code == "TL201" and p.hint == "did you mean 'outcome'?" for p in problems)
    with pytest.raises(ConfigError) as exc:
        load_suites([path])
    found = {(p.code, p.file, p.line, p.col) for p in exc.value.problems}
    assert found >= {("TL201", "suite.yml", 7, 14)}
    # the keys are fixed; each other finding in its place
    path.write_text(path.read_text().replace("outcom:", "outcome:"))
    _, problems = load_suite(path)
    got = {(p.code, p.line, p.col) for p in problems}
    assert ("TL501", 6, 14) in got  # the fixture
    assert ("TL502", 7, 38) in got  # never: [ech0]
    assert ("TL501", 9, 11) in got  # the plan
    assert ("TL503", 12, 5) in got and ("TL503", 13, 14) in got  # a batch case's context and outcome
    assert ("TL504", 14, 11) in got  # the name used twice
    assert ("TL503", 16, 5) in got  # faults without a fixture
    assert all(p.file == "suite.yml" for p in problems)


def test_a_file_that_is_not_a_suite_is_one_finding(tmp_path):
    path = write(tmp_path / "s.yml", "version: 1\nkind: registry\ncases: []\n")
    _, problems = load_suite(path)
    assert [(p.code, p.line, p.col) for p in problems] == [("TL106", 2, 7)]


# -- the checks, as pure functions -----------------------------------------------------------------

def test_final_is_a_subset_at_every_depth_lists_compared_whole_and_true_is_not_one():
    got = {"a": {"b": 1, "c": 2}, "l": [1, 2], "t": True}
    assert subset_failures("final", {"a": {"b": 1}, "l": [1, 2]}, got) == []
    assert subset_failures("final", {"l": [1]}, got) == [{"expect": "final.l", "wanted": [1], "got": [1, 2]}]
    assert subset_failures("final", {"t": 1}, got) == [{"expect": "final.t", "wanted": 1, "got": True}]
    assert subset_failures("final", {"a": {"b": 2}}, got) == [{"expect": "final.a.b", "wanted": 2, "got": 1}]
    assert subset_failures("final", {"a": 1}, None) == [{"expect": "final", "wanted": {"a": 1}, "got": None}]


def test_calls_is_a_subsequence_in_order():
    receipts = [{"tool": "a", "status": "ok", "args": {"n": 1}}, {"tool": "b", "status": "ok", "args": {}},
                {"tool": "a", "status": "error", "args": {"n": 2}}]
    assert calls_failures([CallExpect(tool="a"), CallExpect(tool="a", status="error")], receipts) == []
    assert calls_failures([CallExpect(tool="b"), CallExpect(tool="a", args={"n": 1})], receipts) == [
        {"expect": "calls[1]", "wanted": {"tool": "a", "args": {"n": 1}},
         "got": [{"tool": "a", "status": "error", "args": {"n": 2}}]}]


def test_a_run_with_no_summary_or_interrupted_errors():
    assert check_run(ExpectDecl(), None, [], []).status == "error"
    assert check_run(ExpectDecl(), {"status": "interrupted"}, [], []).status == "error"
    assert check_run(None, {"status": "ok", "outcome": "final", "loop": {}}, [], []).status == "pass"


def test_junit_xml_has_a_testsuite_per_file_and_failure_and_error_elements():
    recs = [
        {"type": "test", "suite": "a.yml", "name": "ok", "status": "pass", "runs": 1, "passed": 1, "failures": [],
         "duration_ms": 10},
        {"type": "test", "suite": "a.yml", "name": "bad", "status": "fail", "runs": 1, "passed": 0,
         "failures": [{"expect": "route", "wanted": "a", "got": "b\x1b"}], "duration_ms": 10},
        {"type": "test", "suite": "b.yml", "name": "broken", "status": "error", "runs": 1, "passed": 0,
         "failures": [{"expect": "run", "wanted": "a run that starts", "got": "no"}], "duration_ms": 10},
        {"type": "test_summary", "passed": 1, "failed": 1, "errors": 1, "duration_ms": 30},
    ]
    root = ET.fromstring(junit_xml(recs))
    suites = root.findall("testsuite")
    assert [(s.get("name"), s.get("tests"), s.get("failures"), s.get("errors")) for s in suites] == [
        ("a.yml", "2", "1", "0"), ("b.yml", "1", "0", "1")]
    bad = suites[0].findall("testcase")[1]
    assert bad.find("failure").get("message") == 'route: wanted "a", got "b\\u001b"'
    assert suites[1].find("testcase").find("error") is not None
    assert suites[0].findall("testcase")[0].find("failure") is None


# -- live cases, approvals, secrets ----------------------------------------------------------------

PAY = '{"action": "call", "tool": "pay", "args": {"amount": 500}, "reason": "pay it"}'


def test_a_case_without_a_fixture_runs_live_with_gates_answered_none_by_default(tmp_path, monkeypatch):
    monkeypatch.setenv(KEY_VAR, "sk-suite-canary-1")
    routed_plan(tmp_path)
    plan = tmp_path / "plan.yml"
    plan.write_text(plan.read_text().replace("allowed_tools: [echo, log_run, boom]", "allowed_tools: [echo, pay]"))
    path = suite_file(tmp_path, "  - {name: live, plan: plan.yml, expect: {calls: [{tool: pay, status: denied}]}}\n")
    tests, _ = run([path], settings(tmp_path, ScriptedProvider([PAY, FINAL, ANSWER])))
    assert tests[0]["status"] == "pass", tests
    tests, _ = run([path], settings(tmp_path, ScriptedProvider([PAY, FINAL, ANSWER]), approve="all"))
    assert tests[0]["status"] == "fail"
    assert tests[0]["failures"][0]["expect"] == "calls[0]"
    assert tests[0]["failures"][0]["got"][0]["status"] == "ok"


def test_a_recorded_case_reuses_the_recorded_approval_answers(tmp_path, monkeypatch):
    monkeypatch.setenv(KEY_VAR, "sk-suite-canary-1")
    routed_plan(tmp_path)
    plan = tmp_path / "plan.yml"
    plan.write_text(plan.read_text().replace("allowed_tools: [echo, log_run, boom]", "allowed_tools: [echo, pay]"))
    path = suite_file(tmp_path, "  - {name: pays, plan: plan.yml, fixture: fixtures/pays.jsonl, tools: live,\n"
                                "     expect: {calls: [{tool: pay, status: ok}]}}\n")
    tests, _ = run([path], settings(tmp_path, ScriptedProvider([PAY, FINAL, ANSWER]), approve="all"), record=True)
    assert tests[0]["status"] == "pass", tests
    tests, _ = run([path], settings(tmp_path))  # approve none: only the recorded answer lets it through
    assert tests[0]["status"] == "pass", tests
    store = Store(tmp_path / "state", create=False)
    try:
        (receipt,) = store.receipts_of(tests[0]["run_ids"][0])
    finally:
        store.close()
    assert receipt["approval"]["decision"] == "approved"


def test_a_recorded_fixture_holds_no_key(tmp_path, monkeypatch):
    """The model's key, repeated in its answer, is scrubbed from the fixture --record writes."""
    key = "sk-suite-canary-1"
    monkeypatch.setenv(KEY_VAR, key)
    routed_plan(tmp_path)
    path = suite_file(tmp_path, "  - {name: k, plan: plan.yml, fixture: fixtures/k.jsonl}\n")
    final = '{"action": "final", "reason": "the key is ' + key + '"}'
    got: list[dict] = []
    summary, _ = run_suites(load_suites([path], recording=True),
                            settings(tmp_path, ScriptedProvider([final, ANSWER])), got.append, record=True)
    assert summary["passed"] == 1, got
    data = (tmp_path / "fixtures" / "k.jsonl").read_bytes()
    assert key.encode() not in data and b"model_answer" in data
    assert key not in json.dumps(got)


def test_a_live_case_whose_key_is_unset_errors(tmp_path, monkeypatch):
    monkeypatch.delenv(KEY_VAR, raising=False)
    routed_plan(tmp_path)
    path = suite_file(tmp_path, "  - {name: live, plan: plan.yml}\n"
                                "  - {name: expected, plan: plan.yml, expect: {outcome: provider_error}}\n")
    tests, summary = run([path], settings(tmp_path))
    assert [t["status"] for t in tests] == ["error", "pass"]
    (why,) = tests[0]["failures"]
    assert why["expect"] == "run" and KEY_VAR in why["got"] and "not set" in why["got"]
    assert (summary["passed"], summary["errors"]) == (1, 1)


def test_a_case_tells_nobody_even_when_its_plan_says_notify(tmp_path, monkeypatch):
    import sys

    from toolloop_cli.engine.launch import RunOptions
    from toolloop_cli.engine.run import execute_plan
    from toolloop_cli.plan.admit import admit_plan

    told = tmp_path / "told.txt"
    path, log = recorded_case(tmp_path, monkeypatch)
    script = f"import sys; open({str(told)!r}, 'a').write(sys.stdin.read())"
    plan = routed_plan(tmp_path, extra=f"notify: {{command: [{sys.executable}, -c, {json.dumps(script)}], on: [finished]}}")
    tests, _ = run([path], settings(tmp_path))
    assert tests[0]["status"] == "pass"
    assert not told.exists()
    # the same plan run as a run (not a case) does tell: the command works
    store = Store(tmp_path / "state2")
    try:
        execute_plan(admit_plan(plan), store, lambda r: None,
                     RunOptions(handle_signals=False,
                                providers={"openai": ScriptedProvider([CALL_LOG.replace("LOG", str(log)), FINAL, ANSWER])}))
    finally:
        store.close()
    assert json.loads(told.read_text())["event"] == "finished"
