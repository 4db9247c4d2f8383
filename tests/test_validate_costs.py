"""What ``validate`` leaves out of its cost: tools of one registry that declare the same schema
share one check and one compiled validator (every finding still reported at each tool's own
place), and the tool's version is read only for the format that shows it (SARIF)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from toolloop_cli.contract import tools
from toolloop_cli.contract.registry import load_registry

PKG = "pkg_share"


@pytest.fixture(autouse=True)
def _app(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / f"{PKG}.py").write_text("def a(text):\n    return {}\n\ndef b(text):\n    return {}\n")
    yield
    import sys

    sys.modules.pop(PKG, None)


def _registry(tmp_path, tools_text: str) -> tuple:
    text = (f"version: 1\napp_root: {tmp_path}\nsubagents:\n  main:\n    runner_defaults: {{tool_timeout_s: 5}}\n"
            "    tools:\n" + textwrap.indent(textwrap.dedent(tools_text).lstrip("\n"), "      "))
    (tmp_path / "reg.yml").write_text(text)
    return load_registry(tmp_path / "reg.yml")


def _tool(tid: str, fn: str, input_schema: str, output_schema: str = "{type: object}", extra: str = "") -> str:
    return (f"{tid}:\n  callable: {PKG}:{fn}\n  description: d\n  input_schema: {input_schema}\n"
            f"  output_schema: {output_schema}\n{extra}")


def test_equal_schemas_share_one_validator(tmp_path):
    shared = "{type: object, required: [text], properties: {text: {type: string}}}"
    contract, problems = _registry(tmp_path, _tool("one", "a", shared) + _tool("two", "b", shared))
    assert [p for p in problems if p.level == "error"] == []
    one, two = contract.subagents["main"].tools["one"], contract.subagents["main"].tools["two"]
    assert one.input_validator is two.input_validator  # compiled once
    assert one.output_validator is two.output_validator
    assert one.input_validator.is_valid({"text": "x"}) and not one.input_validator.is_valid({"text": 1})


def test_schemas_that_differ_only_in_how_a_value_is_written_are_not_shared(tmp_path):
    # 1 and 1.0 are equal in Python, so a key built from the values would share them; the text differs
    contract, _ = _registry(tmp_path, _tool("one", "a", "{type: object, properties: {n: {const: 1}}}")
                            + _tool("two", "b", "{type: object, properties: {n: {const: 1.0}}}"))
    one, two = contract.subagents["main"].tools["one"], contract.subagents["main"].tools["two"]
    assert one.input_validator is not two.input_validator


def test_a_masking_validator_is_not_shared_with_a_plain_one(tmp_path):
    shared = "{type: object, properties: {text: {type: string}}}"
    contract, _ = _registry(tmp_path, _tool("one", "a", shared) + _tool("two", "b", shared, extra="  redact: [/text]\n"))
    one, two = contract.subagents["main"].tools["one"], contract.subagents["main"].tools["two"]
    assert one.input_validator is not two.input_validator
    assert "[REDACTED]" in str([e.message for e in two.input_validator.iter_errors({"text": 5})])
    assert "[REDACTED]" not in str([e.message for e in one.input_validator.iter_errors({"text": 5})])


def test_a_shared_wrong_schema_is_reported_at_every_tool(tmp_path):
    wrong = "{type: objekt}"
    _, problems = _registry(tmp_path, _tool("one", "a", wrong) + _tool("two", "b", wrong))
    bad = [(p.code, p.line, p.col, p.message) for p in problems if p.code == "TL320"]
    assert len(bad) == 2
    assert bad[0][1] != bad[1][1]  # each at its own tool's line
    assert bad[0][3] == bad[1][3] and bad[0][3].startswith("input_schema is not a valid JSON Schema")


def test_the_memo_is_bounded(monkeypatch):
    monkeypatch.setattr(tools, "_OUTCOMES", {})
    monkeypatch.setattr(tools, "_PROPERTIES", {})
    monkeypatch.setattr(tools, "_OUTCOMES_MAX", 3)
    for n in range(10):
        schema = {"type": "object", "properties": {f"p{n}": {"type": "string"}}}
        text = tools._json_text(schema)
        tools._schema_outcome(schema, text, False)
        tools._properties(type("T", (), {"input_schema": schema, "output_schema": None})(),
                          {"input_schema": text, "output_schema": None})
        assert 0 < len(tools._OUTCOMES) <= 3 and 0 < len(tools._PROPERTIES) <= 3


def test_a_shared_schema_redacts_its_write_only_properties_at_every_tool(tmp_path):
    shared = "{type: object, properties: {text: {type: string}, api_token: {type: string, writeOnly: true}}}"
    contract, problems = _registry(tmp_path, _tool("one", "a", shared) + _tool("two", "b", shared))
    assert [p.code for p in problems if p.code == "TL342"] == []  # covered by writeOnly, at both tools
    for tid in ("one", "two"):
        tool = contract.subagents["main"].tools[tid]
        assert tool.redact == ("/api_token",)
        assert "[REDACTED]" in str([e.message for e in tool.input_validator.iter_errors({"api_token": 5})])


def test_a_shared_secret_looking_property_is_warned_about_at_every_tool(tmp_path):
    shared = "{type: object, properties: {api_token: {type: string}}}"
    _, problems = _registry(tmp_path, _tool("one", "a", shared) + _tool("two", "b", shared))
    warned = [(p.line, p.col) for p in problems if p.code == "TL342"]
    assert len(warned) == 2 and warned[0] != warned[1]


def _validate(tmp_path, *args: str) -> tuple[int, str, bool]:
    probe = ("import sys, json\nsys.argv = ['toolloop', *json.loads(sys.argv[1])]\n"
             "from toolloop_cli.cli.app import main\n"
             "try:\n    main()\nfinally:\n"
             "    sys.stderr.write('\\n' + json.dumps('importlib.metadata' in sys.modules))\n")
    done = subprocess.run([sys.executable, "-c", probe, json.dumps(args)], cwd=tmp_path, capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(tmp_path)})
    return done.returncode, done.stdout, json.loads(done.stderr.splitlines()[-1])


def test_the_version_is_read_only_for_sarif(tmp_path):
    _registry(tmp_path, _tool("one", "a", "{type: object}"))
    for fmt in ("text", "json", "github"):
        code, _, imported = _validate(tmp_path, "validate", "reg.yml", "--format", fmt)
        assert (code, imported) == (0, False), fmt
    from toolloop_cli.cli.common import version

    code, out, imported = _validate(tmp_path, "validate", "reg.yml", "--format", "sarif")
    assert (code, imported) == (0, True)
    assert json.loads(out)["runs"][0]["tool"]["driver"]["version"] == version()
