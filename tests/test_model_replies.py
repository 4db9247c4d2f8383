"""Whatever a model replies is input: a decision, a final answer or a judge's verdict that nests a
thousand levels deep, arguments nesting past what any call may take, text with a lone surrogate
in a value, a key, a reason or a tool name. Each is a ``malformed`` rejection, a repair and then
``parse_error``, or a judge error; never an internal error, and the journal stays readable
(the model's replies are untrusted input). Real HTTP on 127.0.0.1, the real command."""

from __future__ import annotations

import json

import pytest

from conftest import write
from modelserver import Reply
from test_routed_governance import KEY, call, of_type, run, setup
from toolloop_cli.contract.schemas import compile_validator, schema_errors
from toolloop_cli.router.closeout import check_final
from toolloop_cli.router.decisions import Decision, parse_decision
from toolloop_cli.router.judge import parse_verdict
from toolloop_cli.router.views import Malformed

LONE = "\\ud800"  # as a model writes it: a JSON escape of a lone surrogate


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def decision(tool: str = "\"echo\"", args: str = '{"a": 1}', reason: str = '"r"') -> str:
    return f'{{"action": "call", "tool": {tool}, "args": {args}, "reason": {reason}}}'


HOSTILE_DECISIONS = {
    "a reply nesting 1,000 levels": decision(args=f'{{"x": {nested(1000)}}}'),
    "arguments nesting 600 levels": decision(args=f'{{"x": {nested(600)}}}'),
    "arguments nesting 101 levels": decision(args=f'{{"x": {nested(100)}}}'),
    "a lone surrogate in a value": decision(args=f'{{"a": "{LONE}"}}'),
    "a lone surrogate in a key": decision(args=f'{{"{LONE}": 1}}'),
    "a lone surrogate in the reason": decision(reason=f'"{LONE}"'),
    "a lone surrogate in the tool name": decision(tool=f'"echo{LONE}"'),
    "a number past a double": decision(args='{"a": 1e400}'),
    "a final decision with a lone surrogate": f'{{"action": "final", "reason": "{LONE}"}}',
}


@pytest.mark.parametrize("reply", HOSTILE_DECISIONS.values(), ids=HOSTILE_DECISIONS.keys())
def test_a_hostile_decision_is_malformed_and_says_why(reply):
    parsed = parse_decision(reply)
    assert isinstance(parsed, Malformed), parsed
    assert "cannot be used" in parsed.why or "nests deeper than 101 levels" in parsed.why
    parsed.why.encode("utf-8")  # the reason itself can be journaled and shown to the model


def test_arguments_as_deep_as_a_lane_may_nest_are_a_decision():
    parsed = parse_decision(decision(args=f'{{"x": {nested(99)}}}'))
    assert isinstance(parsed, Decision) and parsed.tool == "echo"


@pytest.mark.parametrize("answer", [f'{{"answer": {nested(1000)}}}', f'{{"answer": "{LONE}"}}',
                                    f'{{"{LONE}": 1}}', '{"answer": 1e999}'])
def test_a_hostile_final_answer_is_an_error_for_the_repair(answer):
    final, errors = check_final(answer, {"type": "object"}, None)
    assert final is None and errors and all(e.encode("utf-8") for e in errors)


@pytest.mark.parametrize("verdict", [f'{{"verdict": "continue", "reason": {nested(1000)}}}',
                                     f'{{"verdict": "continue", "reason": "{LONE}"}}',
                                     f'{{"verdict": "{LONE}", "reason": "x"}}'])
def test_a_hostile_verdict_is_malformed(verdict):
    assert isinstance(parse_verdict(verdict), Malformed)


@pytest.mark.parametrize("instance, why", [
    ({"x": json.loads(nested(600))}, "nests deeper than 100 levels"),
    ({"x": "\ud800"}, "lone surrogate"),
    ({"\udfff": 1}, "lone surrogate"),
    ({1: 2}, "not JSON"),
])
def test_the_schema_validator_answers_for_any_value(instance, why):
    """Arguments from an App's dispatch() or an approver's edit reach the validator unread."""
    validator = compile_validator({"type": "object", "properties": {"x": {"type": "string", "pattern": "a"}}}, mask=False)
    assert validator.is_valid(instance) is False
    [message] = schema_errors(validator, instance)
    assert why in message


def test_hostile_decisions_in_a_run_are_rejections_and_the_journal_stays_readable(tmp_path, model_server, cli):
    plan = setup(tmp_path, model_server,
                 budget="{max_iterations: 12, max_tokens: 1000000, max_tool_calls: 4, timeout_s: 60}")
    hostile = list(HOSTILE_DECISIONS.values())
    # never three malformed replies in a row: a valid call between every pair keeps the loop going
    script = [hostile[0], hostile[1], call("echo", {"a": 1}), hostile[3], hostile[4], call("echo", {"a": 2}),
              hostile[5], hostile[6], '{"action": "final", "reason": "done"}',
              f'{{"answer": {nested(1000)}}}', f'{{"answer": "{LONE}"}}']
    model_server.script(*script)
    proc, records = run(cli, plan)
    err = proc.stderr.decode()
    assert proc.returncode == 1, err
    assert "internal error" not in err and "Traceback" not in err
    decisions = of_type(records, "decision")
    assert [d["rejected"] for d in decisions] == ["malformed", "malformed", None, "malformed", "malformed", None,
                                                 "malformed", "malformed", None]
    assert [r["status"] for r in of_type(records, "receipt")] == ["ok", "ok"]
    summary = records[-1]
    assert summary["outcome"] == "parse_error" and summary["status"] == "failed"
    # every request the model got was JSON, and each rejection was shown to it
    assert len(model_server.requests) == len(script)
    second = json.dumps(model_server.requests[1].json["messages"])
    assert "nests deeper than 101 levels" in second
    run_id = summary["run_id"]
    for command in (("runs", "show", run_id), ("runs", "export", run_id), ("runs", "verify", run_id)):
        shown = cli(*command, "--format", "jsonl") if command[1] != "verify" else cli(*command)
        assert shown.returncode == 0, (command, shown.stderr)


def test_a_hostile_judge_verdict_is_a_judge_error(tmp_path, model_server, cli):
    write(tmp_path / "judge.md", "Judge whether the agent stays on task.")
    profile = f"{{provider: openai, model: judge-m, base_url: '{model_server.openai_base}', api_key_env: TL_TEST_KEY}}"
    extra = f"""supervisor:
          judge: {{profile: {profile}, prompt: judge.md}}
          on_violation: abort
          on_judge_error: ignore"""
    plan = setup(tmp_path, model_server, extra=extra)
    model_server.script(call("echo", {"a": 1}), f'{{"verdict": "continue", "reason": {nested(1000)}}}',
                        call("echo", {"a": 2}), f'{{"verdict": "{LONE}", "reason": "x"}}',
                        '{"action": "final", "reason": "done"}', Reply('{"answer": 1}'))
    proc, records = run(cli, plan)
    err = proc.stderr.decode()
    assert proc.returncode == 0, err
    judged = [s for s in of_type(records, "supervisor") if s["rule"] == "judge"]
    assert len(judged) == 2 and all("malformed" in s["reason"] or "nests" in s["reason"] or "cannot be used"
                                    in s["reason"] for s in judged), judged
    assert records[-1]["outcome"] == "final" and KEY not in proc.stdout.decode()
