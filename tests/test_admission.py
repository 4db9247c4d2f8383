"""Whole-plan admission: every problem at once, with plan lines; nothing runs."""

from __future__ import annotations

import io

import pytest

from conftest import APP, write
from toolloop_cli.errors import ConfigError
from toolloop_cli.plan.admit import admit_plan

REG = APP / "registry.yml"


def plan(tmp_path, body: str, name: str = "plan.yml"):
    return write(tmp_path / name, f"version: 1\nregistry: {REG}\n" + body)


def problems(path, **kw):
    with pytest.raises(ConfigError) as exc:
        admit_plan(path, **kw)
    return [(p.code, p.line, p.message) for p in exc.value.problems]


def test_sequential_plan_is_admitted_with_default_call_keys(tmp_path):
    p = plan(tmp_path, """
        subagent: t
        mode: sequential
        calls:
          - {tool: echo, args: {a: 1}}
          - {tool: echo, call_key: named, args: {b: 2}}
    """.replace("\n        ", "\n"))
    admitted = admit_plan(p)
    calls = list(admitted.calls)
    assert [c.call_key for c in calls] == ["0", "named"]
    assert [c.seq for c in calls] == [0, 1]
    assert calls[0].args == {"a": 1}


def test_every_problem_is_reported_at_once_with_lines(tmp_path):
    p = plan(tmp_path, """subagent: t
mode: parallel
max_concurrency: 0
lanes:
  - item_key: a
    calls:
      - {tool: ech, args: {}}
      - {tool: hold, args: {key: 1}}
  - item_key: a
    calls:
      - {call_key: x, tool: echo, args: {}}
      - {call_key: x, tool: echo, args: {}}
""")
    found = problems(p)
    codes = [c for c, _, _ in found]
    assert codes == ["TL409", "TL402", "TL404", "TL405", "TL406"]
    by_code = {c: (line, msg) for c, line, msg in found}
    assert by_code["TL402"][0] == 9 and "did you mean" not in by_code["TL402"][1]
    assert by_code["TL404"][0] == 10
    assert by_code["TL405"][0] == 11
    assert by_code["TL406"][0] == 14
    assert by_code["TL409"][0] == 5


def test_misspelled_tool_gets_a_hint(tmp_path):
    p = plan(tmp_path, "subagent: t\nmode: sequential\ncalls:\n  - {tool: ecko, args: {}}\n")
    with pytest.raises(ConfigError) as exc:
        admit_plan(p)
    (prob,) = exc.value.problems
    assert prob.code == "TL402" and prob.hint == "did you mean 'echo'?" and (prob.line, prob.col) == (6, 12)


def test_allowlist_and_limits(tmp_path):
    p = plan(tmp_path, """subagent: restricted
mode: sequential
calls:
  - {tool: hidden, args: {}}
  - {tool: echo, args: {}}
  - {tool: echo, args: {}}
  - {tool: echo, args: {}}
""")
    found = problems(p)
    assert [(c, line) for c, line, _ in found] == [("TL407", 5), ("TL403", 6)]
    assert "allows 3" in found[0][2]


def test_tool_max_calls(tmp_path):
    p = plan(tmp_path, "subagent: t\nmode: sequential\ncalls:\n" + "  - {tool: limited, args: {}}\n" * 3)
    (found,) = problems(p)
    assert found[0] == "TL408" and "3 times" in found[2]


def test_missing_max_concurrency_and_flag_wins(tmp_path):
    body = "subagent: t\nmode: parallel\nlanes:\n  - {item_key: a, calls: [{tool: echo, args: {}}]}\n"
    p = plan(tmp_path, body)
    assert [c for c, _, _ in problems(p)] == ["TL409"]
    assert admit_plan(p, max_concurrency=3).max_concurrency == 3
    assert [c for c, _, _ in problems(p, max_concurrency=0)] == ["TL409"]


def test_exact_arguments_no_injection(tmp_path):
    # hold's schema is closed: an extra field is refused, not dropped or renamed
    p = plan(tmp_path, "subagent: t\nmode: sequential\ncalls:\n  - {tool: hold, args: {key: a, extra: 1}}\n")
    (found,) = problems(p)
    assert found[0] == "TL404" and "extra" in found[2]


def test_unknown_subagent_and_mode_keys(tmp_path):
    p = plan(tmp_path, "subagent: nobody\nmode: sequential\ncalls: []\n")
    assert [c for c, _, _ in problems(p)] == ["TL401"]
    p = plan(tmp_path, "subagent: t\nmode: sequential\ncalls: []\nlanes: []\n", "p2.yml")
    assert [c for c, _, _ in problems(p)] == ["TL205"]


def test_registry_not_found(tmp_path):
    p = write(tmp_path / "plan.yml", "version: 1\nregistry: nowhere.yml\nsubagent: t\nmode: sequential\ncalls: []\n")
    (found,) = problems(p)
    assert found[0] == "TL412" and found[1] == 2


def test_lanes_stream_problems_carry_their_line(tmp_path):
    p = plan(tmp_path, "subagent: t\nmode: parallel\nmax_concurrency: 2\nlanes: []\n")
    stream = io.BytesIO(
        b'{"item_key": "a", "calls": [{"tool": "echo", "args": {}}]}\n'
        b"not json\n"
        b'{"item_key": "a", "calls": [{"tool": "echo", "args": {}}]}\n'
        b'{"item_key": "b", "calls": [{"tool": "nope"}]}\n'
        b'{"item_key": "c", "calls": [], "bogus": 1}\n'
    )
    with pytest.raises(ConfigError) as exc:
        admit_plan(p, lanes=stream, lanes_name="lanes.jsonl")
    got = [(x.file, x.line, x.code) for x in exc.value.problems]
    assert got == [
        ("lanes.jsonl", 2, "TL414"),
        ("lanes.jsonl", 3, "TL405"),
        ("lanes.jsonl", 4, "TL402"),
        ("lanes.jsonl", 5, "TL201"),
        ("lanes.jsonl", 5, "TL203"),
    ]


def test_lanes_stream_admits_in_order(tmp_path):
    p = plan(tmp_path, "subagent: t\nmode: parallel\nmax_concurrency: 2\nlanes:\n  - {item_key: first, calls: [{tool: echo, args: {}}]}\n")
    stream = io.BytesIO(b"".join(b'{"item_key": "k%d", "calls": [{"tool": "echo", "args": {"i": %d}}, {"tool": "echo"}]}\n' % (i, i) for i in range(50)))
    admitted = admit_plan(p, lanes=stream)
    assert [lane.item_key for lane in admitted.lanes] == ["first"] + [f"k{i}" for i in range(50)]
    assert [c.seq for c in admitted.calls] == list(range(101))
    assert admitted.lanes[1].calls[1].args == {}


ROUTED = """subagent: t
mode: routed
goal: Count things.
allowed_tools: [echo, hidden, nothere]
router_profile: {provider: openai, model: m1, api_key_env: KEY}
budget: {max_iterations: 3, max_tokens: 100, max_tool_calls: 2, timeout_s: 10}
"""


def test_routed_plans_are_admitted_with_explicit_profiles(tmp_path):
    p = plan(tmp_path, ROUTED.replace("allowed_tools: [echo, hidden, nothere]", "allowed_tools: [echo]")
             + "final_profile: {provider: openai, model: recorded}\n")
    admitted = admit_plan(p)
    assert admitted.mode == "routed" and admitted.total_calls == 0


def test_routed_plan_problems(tmp_path):
    p = plan(tmp_path, ROUTED.replace("provider: openai", "provider: openia"))
    found = problems(p)
    assert ("TL402", 6) in [(c, line) for c, line, _ in found]  # nothere
    codes = sorted(c for c, _, _ in found)
    assert codes == ["TL402", "TL410", "TL410"]  # unknown provider, no final_profile
    assert any("unknown provider 'openia'" in m for _, _, m in found)
    assert any("final_profile" in m for _, _, m in found)


def test_routed_budget_fields_are_all_required(tmp_path):
    p = plan(tmp_path, ROUTED.replace("max_tool_calls: 2, ", "") + "final_profile: {provider: replay, model: r}\n")
    found = problems(p)
    assert [(c, m) for c, _, m in found] == [("TL202", "required key 'max_tool_calls' is missing")]


def test_mode_key_mistakes_do_not_hide_the_rest_of_the_plan(tmp_path):
    p = plan(tmp_path, "subagent: t\nmode: sequential\nlanes: []\ncalls:\n  - {tool: echo, args: 5}\n")
    assert sorted(c for c, _, _ in problems(p)) == ["TL203", "TL205"]


def test_routed_final_schema_is_checked(tmp_path):
    p = plan(tmp_path, ROUTED.replace("allowed_tools: [echo, hidden, nothere]", "allowed_tools: [ecko]")
             + "final_profile: {provider: openai, model: r}\nfinal_schema: {type: objekt, properties: {a: {$ref: 'http://x/y'}}}\n")
    with pytest.raises(ConfigError) as exc:
        admit_plan(p)
    got = {(x.code, x.hint) for x in exc.value.problems}
    assert ("TL402", "did you mean 'echo'?") in got
    assert {c for c, _ in got} == {"TL402", "TL320", "TL321"}


def test_a_registry_given_as_a_plan_and_the_reverse(tmp_path):
    from toolloop_cli.contract.registry import load_registry

    with pytest.raises(ConfigError) as exc:
        admit_plan(REG)
    (p,) = exc.value.problems
    assert (p.code, p.message) == ("TL106", "this file is a registry, not a plan")
    plan_path = plan(tmp_path, "subagent: t\nmode: sequential\ncalls: []\n")
    contract, found = load_registry(plan_path)
    assert contract is None
    assert [(x.code, x.message, x.hint) for x in found] == [
        ("TL106", "this file is a plan, not a registry", "pass the registry first: toolloop validate REGISTRY PLAN")]
