"""Routed plans admitted into a RoutedSpec: every file read at admission, nothing asked of a
model; the shipped example's fixture agrees with its plan."""

from __future__ import annotations

import json

import pytest
import trio

from conftest import APP, ROOT, write
from toolloop_cli.errors import ConfigError
from toolloop_cli.plan.admit import admit_plan
from toolloop_cli.providers import ModelRequest, Price, Profile
from toolloop_cli.router import check_final, parse_decision, route_of
from toolloop_cli.router.supervisor import Rule

EXAMPLE = ROOT / "plans" / "routed-example.yml"
REG = APP / "registry.yml"


def plan(tmp_path, body: str, name: str = "plan.yml"):
    return write(tmp_path / name, f"version: 1\nregistry: {REG}\n" + body)


def answers(tmp_path, name, *records):
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"type": "model_answer", "run_id": "r", "model": "m", "request_sha256": None,
                                        "input_tokens": 10, "output_tokens": 2, **r}) + "\n" for r in records))
    return path


FULL = """
subagent: restricted
mode: routed
goal: Count things.
context: {customer: ACME}
inputs: {type: object, required: [customer], properties: {customer: {type: string}}}
instructions: guide.md
router_profile: {provider: openai, model: m1, base_url: "http://127.0.0.1:9/v1", api_key_env: LOOP_KEY,
                 temperature: 0, max_output_tokens: 300, price: {input_per_mtok: 0.4, output_per_mtok: 1.6}}
final_profile: {provider: replay, fixture: rec/answers.jsonl, price: {input_per_mtok: 1, output_per_mtok: 2}}
budget: {max_iterations: 5, max_tokens: 9000, max_tool_calls: 50, timeout_s: 30, max_cost_usd: 0.25}
final_schema: {type: object, required: [total], properties: {total: {type: number}, outcome: {type: string}}}
outcomes: [resolved, escalate]
routes: {resolved: reply, timeout: ops}
guardrails:
  observations: [testapp.tools:echo]
  final: [testapp.tools:marker]
supervisor:
  rules:
    - {when: tool_repeated, count: 3, tool: echo}
    - {when: budget_fraction, gt: 0.8}
    - {when: iteration_reached, gte: 4}
    - {when: effect_count, effect: write, count: 0}
  judge: {profile: {provider: replay, fixture: rec/answers.jsonl, price: {input_per_mtok: 1, output_per_mtok: 1}},
          prompt: judge.md}
  every_n_iterations: 2
  on_violation: steer
  on_judge_error: pause
  steer_message: Decide with what you have.
"""


def test_every_field_of_a_routed_plan_is_admitted(tmp_path):
    write(tmp_path / "guide.md", "Prefer echo.\n")
    write(tmp_path / "judge.md", "Flag repeated lookups.\n")
    answers(tmp_path, "rec/answers.jsonl", {"n": 1, "role": "judge", "text": "{}"}, {"n": 2, "role": "final", "text": "{}"})
    spec = admit_plan(plan(tmp_path, FULL)).routed
    assert spec is not None
    assert (spec.goal, spec.context, spec.instructions) == ("Count things.", {"customer": "ACME"}, "Prefer echo.\n")
    assert spec.router_profile == Profile("openai", "m1", "http://127.0.0.1:9/v1", "LOOP_KEY", 0.0, 300, Price(0.4, 1.6))
    fixture = str(tmp_path / "rec/answers.jsonl")
    assert spec.final_profile == Profile("replay", price=Price(1.0, 2.0), fixture=fixture)
    assert (spec.budget.max_iterations, spec.budget.max_tokens, spec.budget.timeout_s, spec.budget.max_cost_usd) == (5, 9000, 30, 0.25)
    assert spec.budget.max_tool_calls == 3  # capped by the subagent's runner_defaults.max_calls
    assert spec.final_validator.is_valid({"total": 3}) and not spec.final_validator.is_valid({"total": "3"})
    assert spec.inputs_validator.is_valid({"customer": "x"}) and not spec.inputs_validator.is_valid({})
    assert spec.outcomes == ("resolved", "escalate") and spec.routes == {"resolved": "reply", "timeout": "ops"}
    assert [g.ref for g in spec.observation_guards] == ["testapp.tools:echo"]
    assert spec.final_guards[0].fn.__name__ == "marker"
    sv = spec.supervisor
    assert sv.rules == (Rule(0, "tool_repeated", "steer", count=3, tool="echo"), Rule(1, "budget_fraction", "steer", gt=0.8),
                        Rule(2, "iteration_reached", "steer", gte=4), Rule(3, "effect_count", "steer", count=0, effect="write"))
    assert (sv.every_n_iterations, sv.on_violation, sv.on_judge_error, sv.steer_message) == (2, "steer", "pause",
                                                                                           "Decide with what you have.")
    assert sv.judge.prompt == "Flag repeated lookups.\n" and sv.judge.profile.provider == "replay"
    assert set(spec.profiles()) == {"router", "final", "judge"}
    assert spec.prompts.judge is not None and "JSON" in spec.prompts.router.sections["system"]
    assert spec.tools == ("echo",) and [(t.id, t.effect) for t in spec.tool_views] == [("echo", "read")]


def test_default_allowlist_is_the_subagents(tmp_path):
    spec = admit_plan(plan(tmp_path, "subagent: t\nmode: routed\ngoal: g\n"
                           "router_profile: {provider: openai, model: a}\nfinal_profile: {provider: anthropic, model: b}\n"
                           "budget: {max_iterations: 1, max_tokens: 10, max_tool_calls: 1, timeout_s: 1}\n")).routed
    from toolloop_cli.contract.registry import load_registry

    contract, _ = load_registry(REG)
    assert spec.tools == contract.subagents["t"].allowed_tools
    assert spec.supervisor is None and spec.outcomes is None and spec.routes == {} and spec.context == {}
    assert spec.prompts.judge is None


def test_replay_profiles_share_one_fixture_in_recorded_order(tmp_path):
    write(tmp_path / "judge.md", "Judge.\n")
    answers(tmp_path, "a.jsonl", {"n": 1, "role": "router", "text": "r1"}, {"n": 2, "role": "judge", "text": "j1"},
            {"n": 3, "role": "final", "text": "f1"})
    body = ("subagent: t\nmode: routed\ngoal: g\nrouter_profile: {provider: replay, fixture: a.jsonl}\n"
            "final_profile: {provider: replay, fixture: a.jsonl}\n"
            "budget: {max_iterations: 1, max_tokens: 10, max_tool_calls: 1, timeout_s: 1}\n"
            "supervisor: {judge: {profile: {provider: replay, fixture: a.jsonl}, prompt: judge.md}, on_violation: abort}\n")
    spec = admit_plan(plan(tmp_path, body)).routed
    (tmp_path / "a.jsonl").unlink()  # read at admission: the run needs the file no more
    providers = spec.make_providers(env={})

    async def main():
        return [(await providers[role].complete(ModelRequest([], None, role=role), 1)).text
                for role in ("router", "judge", "final")]

    assert trio.run(main) == ["r1", "j1", "f1"]


def test_a_rejected_routed_plan_asks_no_model(cli, tmp_path, model_server):
    """Missing instructions: exit 3 before any request reaches the (loopback) model server."""
    model_server.script("{}")
    path = plan(tmp_path, "subagent: t\nmode: routed\ngoal: g\ninstructions: missing.md\n"
                f"router_profile: {{provider: openai, model: a, base_url: '{model_server.openai_base}', api_key_env: K}}\n"
                f"final_profile: {{provider: openai, model: b, base_url: '{model_server.openai_base}', api_key_env: K}}\n"
                "budget: {max_iterations: 1, max_tokens: 10, max_tool_calls: 1, timeout_s: 1}\n")
    r = cli("run", str(path), env={"K": "sk-never-sent"})
    assert r.returncode == 3
    err = r.stderr.decode()
    assert "TL416" in err and "instructions file not found: 'missing.md'" in err and "Traceback" not in err
    assert model_server.requests == [] and model_server.pending == 1


def test_problems_in_several_places_are_all_reported(tmp_path):
    write(tmp_path / "bad.jsonl", '{"type": "model_answer", "n": 1}\n')
    body = ("subagent: t\nmode: routed\ngoal: g\nrouter_profile: {provider: replay, fixture: bad.jsonl}\n"
            "final_profile: {provider: openai}\nroutes: {nowhere: x}\n"
            "budget: {max_iterations: 1, max_tokens: 10, max_tool_calls: 1, timeout_s: 1, max_cost_usd: 1}\n")
    with pytest.raises(ConfigError) as exc:
        admit_plan(plan(tmp_path, body))
    got = sorted((p.code, p.file.rsplit("/", 1)[-1]) for p in exc.value.problems)
    assert got == [("TL410", "plan.yml"), ("TL410", "plan.yml"), ("TL410", "plan.yml"), ("TL419", "plan.yml"),
                   ("TL421", "bad.jsonl")]


# ---------------------------------------------------------------------------------------------
# the shipped example


def test_the_example_plan_admits_with_its_fixture():
    admitted = admit_plan(EXAMPLE)
    spec = admitted.routed
    assert spec.tools == ("transform", "count_words")
    assert spec.router_profile.provider == spec.final_profile.provider == "replay"
    assert spec.instructions and "count_words" in spec.instructions


def test_the_example_fixture_agrees_with_the_plan():
    """Every recorded router answer is a valid decision on an allowed tool with valid
    arguments, and the recorded final answer passes the plan's checks and routes."""
    spec = admit_plan(EXAMPLE).routed
    (recorded,) = spec.fixtures.values()
    from toolloop_cli.contract.registry import load_registry

    contract, _ = load_registry(ROOT / "registries" / "demo.yml")
    tools = contract.subagents["worker-a"].tools
    router = [a for a in recorded if a.role == "router"]
    decisions = [parse_decision(a.text) for a in router]
    assert [d.action for d in decisions] == ["call", "call", "final"]
    for d in decisions[:-1]:
        assert d.tool in spec.tools and tools[d.tool].input_validator.is_valid(d.args)
    (final,) = [a for a in recorded if a.role == "final"]
    answer, errors = check_final(final.text, spec.final_validator, spec.outcomes)
    assert errors is None and answer == {"shout": "HELLO FROM TOOLLOOP", "words": 3, "outcome": "done"}
    assert route_of("final", answer, spec.routes) == "publish"
    assert sum(a.input_tokens + a.output_tokens for a in recorded) < spec.budget.max_tokens
