"""Numbers in YAML are read as YAML 1.2 and JSON read them, in registries, plans and their lanes
alike; a finding about a value of the wrong type names quotes only where the file has them."""

from __future__ import annotations

import io
import json
import textwrap

import pytest

from conftest import APP
from toolloop_cli.contract.registry import load_registry
from toolloop_cli.contract.source import load_yaml
from toolloop_cli.plan.admit import admit_plan

REGISTRY = f"""
version: 1
app_root: {json.dumps(str(APP))}
subagents:
  w:
    runner_defaults: {{tool_timeout_s: 5}}
    tools:
      echo:
        callable: testapp.tools:echo
        description: Returns its arguments.
        input_schema: {{type: object, properties: {{x: {{type: number}}}}}}
        output_schema: {{}}
        timeout_s: {{timeout}}
"""


def registry(tmp_path, timeout: str):
    path = tmp_path / "reg.yml"
    path.write_text(textwrap.dedent(REGISTRY).replace("{timeout}", timeout), encoding="utf-8")
    return load_registry(path)


@pytest.mark.parametrize("text, number", [
    ("3e1", 30.0), ("1e-5", 1e-5), ("1.5e3", 1500.0), ("2E+2", 200.0), ("-.5", -0.5), ("+1e0", 1.0),
    ("1.5", 1.5), ("30", 30), ("0x1F", 31),
])
def test_yaml_1_2_floats_are_numbers(text, number):
    data, _smap, issues = load_yaml(f"a: {text}\n", "f.yml")
    assert issues == []
    assert data["a"] == number and type(data["a"]) is type(number)


@pytest.mark.parametrize("text", ['"3e1"', "'1e-5'", "3e1x", "e5", "1e", "1.5.3", "2024-01-01"])
def test_text_that_is_not_a_number_stays_text(text):
    data, _smap, issues = load_yaml(f"a: {text}\n", "f.yml")
    assert issues == [] and isinstance(data["a"], str)


def test_an_exponent_past_a_double_is_a_finding_not_infinity():
    _data, _smap, issues = load_yaml("a: 1e999\n", "f.yml")
    assert [(i.code, i.message) for i in issues] == [("TL105", "'1e999' is not a JSON number")]


def test_a_registry_reads_an_exponent_as_a_number(tmp_path):
    contract, problems = registry(tmp_path, "3e1")
    assert problems == []
    assert contract.subagents["w"].tools["echo"].timeout_s == 30.0


def test_plans_and_their_lanes_read_an_exponent_as_a_number(tmp_path):
    registry(tmp_path, "3e1")
    plan = tmp_path / "plan.yml"
    plan.write_text("version: 1\nregistry: reg.yml\nsubagent: w\nmode: parallel\nmax_concurrency: 2\n"
                    "lanes:\n  - item_key: a\n    calls: [{tool: echo, args: {x: 1e-5}}]\n", encoding="utf-8")
    streamed = b'{"item_key": "b", "calls": [{"tool": "echo", "args": {"x": 1e-5}}]}\n'
    admitted = admit_plan(plan, lanes=io.BytesIO(streamed), lanes_name="lanes.jsonl")
    assert [c.args for c in admitted.calls] == [{"x": 1e-5}, {"x": 1e-5}]


def test_a_number_hint_names_quotes_only_when_the_value_has_them(tmp_path):
    _contract, problems = registry(tmp_path, "thirty")
    [p] = problems
    assert p.code == "TL203" and p.message == "'timeout_s' must be a number, found 'thirty'"
    assert "quote" not in p.hint and p.hint == "write a number, e.g. 30 or 1.5"
    _contract, problems = registry(tmp_path, '"30"')
    [p] = problems
    assert p.code == "TL203" and p.hint == "write the number without quotes"


def test_a_whole_number_hint_names_quotes_only_when_the_value_has_them(tmp_path):
    path = tmp_path / "reg.yml"
    path.write_text(textwrap.dedent(REGISTRY).replace("{timeout}", "5") + "        max_calls: many\n",
                    encoding="utf-8")
    _contract, problems = load_registry(path)
    [p] = problems
    assert p.message == "'max_calls' must be a whole number, found 'many'"
    assert p.hint == "write a whole number, e.g. 30"
