"""The command line at its edges: ``call`` names its run, ``toolloop`` and ``python -m
toolloop_cli`` resolve callables alike, and paths no file system takes are usage errors or
findings, never an internal error."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import DEMO, jsonl, write


def test_call_prints_its_run_id_on_standard_error_before_the_call_runs(cli):
    proc = cli("call", str(DEMO), "worker-a", "transform", "--args", '{"text": "hi"}', "--format", "jsonl")
    assert proc.returncode == 0, proc.stderr
    run_id = jsonl(proc.stdout)[-1]["run_id"]
    assert proc.stderr.decode() == f"toolloop: run {run_id}\n"
    shown = cli("runs", "show", run_id, "--format", "jsonl")
    assert shown.returncode == 0 and jsonl(shown.stdout)[0]["run_id"] == run_id


def _entry_points(tmp_path: Path) -> dict[str, list[str]]:
    """The two ways toolloop is started: the installed script (a copy of it in a folder of its
    own, with a module beside it) and ``python -m toolloop_cli``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "toolloop"
    script.write_text(f"#!{sys.executable}\nimport sys\nfrom toolloop_cli.cli.app import main\nsys.exit(main())\n")
    script.chmod(0o755)
    (bin_dir / "beside_script.py").write_text("def f(**kw):\n    return kw\n")
    return {"script": [str(script)], "module": [sys.executable, "-m", "toolloop_cli"]}


@pytest.mark.parametrize("how", ["script", "module"])
def test_callables_resolve_from_app_root_alone_however_toolloop_is_started(tmp_path, how):
    started = _entry_points(tmp_path)[how]
    work = tmp_path / "work"
    (work / "app").mkdir(parents=True)
    (work / "in_current_folder.py").write_text("def f(**kw):\n    return kw\n")
    (work / "app" / "in_app_root.py").write_text("def f(**kw):\n    return kw\n")
    tools = "".join(
        f"      {name}:\n        callable: {module}:f\n        description: d\n"
        "        input_schema: {}\n        output_schema: {}\n"
        for name, module in (("a", "in_app_root"), ("b", "in_current_folder"), ("c", "beside_script")))
    write(work / "reg.yml", "version: 1\napp_root: app\nsubagents:\n  w:\n    runner_defaults: {tool_timeout_s: 5}\n"
          "    tools:\n" + tools)
    env = {**os.environ, "NO_COLOR": "1"}
    proc = subprocess.run([*started, "validate", "reg.yml", "--format", "json"], cwd=work, env=env,
                          capture_output=True, timeout=120)
    import json

    findings = json.loads(proc.stdout)
    assert proc.returncode == 1, proc.stderr
    assert sorted((f["code"], f["path"]) for f in findings) == [
        ("TL306", "subagents.w.tools.b.callable"), ("TL306", "subagents.w.tools.c.callable")]


# ---------------------------------------------------------------------------------------------
# paths no file system takes: a NUL byte (only a file can carry one), a name or a path too long

LONG_NAME = "x" * 5000  # past any file system's 255-byte name
DEEP_PATH = "d/" * 3000 + "x"  # past PATH_MAX in short names


def _project(tmp_path: Path) -> Path:
    """The shipped demo registry and plans, copied so they can be changed."""
    from conftest import ROOT

    shutil.copytree(ROOT / "plans", tmp_path / "plans")
    shutil.copytree(ROOT / "registries", tmp_path / "registries")
    return tmp_path


def _judged(plan: str, prompt: str) -> str:
    return plan + ("supervisor:\n  judge: {profile: {provider: replay, fixture: fixtures/routed-example.jsonl},"
                   f" prompt: {prompt}}}\n  on_violation: abort\n")


#: (key, how to put a path into the routed example plan or the demo registry, the finding's code)
FILE_PATHS = {
    "instructions": ("plan", lambda plan, bad: plan.replace("instructions: prompts/routed-example.md",
                                                           f"instructions: {bad}"), "TL416"),
    "fixture": ("plan", lambda plan, bad: plan.replace("router_profile: {provider: replay, fixture: fixtures/",
                                                      f"router_profile: {{provider: replay, fixture: {bad}, x: ")
                .replace(", x: routed-example.jsonl}", "}"), "TL416"),
    "judge prompt": ("plan", _judged, "TL416"),
    "registry": ("plan", lambda plan, bad: plan.replace("registry: ../registries/demo.yml", f"registry: {bad}"),
                 "TL412"),
    "plan tool": ("registry", lambda reg, bad: reg.replace("plan: ../plans/agents/shout.yml", f"plan: {bad}"),
                  "TL315"),
}


@pytest.mark.parametrize("bad", ['"a\\0b.yml"', LONG_NAME, DEEP_PATH], ids=["NUL", "long-name", "long-path"])
@pytest.mark.parametrize("key", sorted(FILE_PATHS))
def test_a_path_in_a_file_that_no_file_system_takes_is_a_finding_at_its_key(cli, tmp_path, key, bad):
    project = _project(tmp_path)
    where, change, code = FILE_PATHS[key]
    if where == "plan":
        target = project / "plans" / "routed-example.yml"
        plan = target
    else:
        target = project / "registries" / "demo.yml"
        plan = project / "plans" / "agents.yml"
    before = target.read_text()
    target.write_text(change(before, bad))
    assert target.read_text() != before
    needle = bad if bad != LONG_NAME else "xxxx"
    line = next(i for i, text in enumerate(target.read_text().splitlines(), 1) if needle[:8] in text
                and not text.lstrip().startswith("#"))
    shown = str(target.relative_to(tmp_path))
    checked = cli("validate", str(plan.relative_to(tmp_path)))
    ran = cli("run", str(plan.relative_to(tmp_path)), "--format", "jsonl")
    for proc, exit_code in ((checked, 1), (ran, 3)):
        err = proc.stderr.decode() + (proc.stdout.decode() if proc is checked else "")
        assert proc.returncode == exit_code, err
        assert "internal error" not in err and "Traceback" not in err
        [finding] = [f for f in err.splitlines() if f" error {code} " in f]
        assert finding.startswith(f"{shown}:{line}:"), finding
        assert ("NUL byte" in finding) if bad.startswith('"') else ("longer than the file system takes" in finding)
        assert len(finding) < 600  # the path is quoted as an excerpt, not whole


@pytest.mark.parametrize("args, message", [
    (["run", "{long}"], "toolloop: error: plan {shown}: the path is longer than the file system takes\n"),
    (["call", "{long}", "w", "t"], "toolloop: error: registry {shown}: the path is longer than the file system takes\n"),
    (["validate", "{long}"], "toolloop: error: {shown}: the path is longer than the file system takes\n"),
    (["validate", "{plan}", "--registry", "{long}"],
     "toolloop: error: --registry {shown}: the path is longer than the file system takes\n"),
    (["validate", "{plan}", "--app-root", "{long}"],
     "toolloop: error: --app-root {shown}: the path is longer than the file system takes\n"),
    (["run", "{plan}", "--registry", "{long}"], "TL412"),
    (["run", "{plan}", "--app-root", "{long}"], "TL312"),
])
def test_a_path_flag_that_no_file_system_takes_is_a_usage_error(cli, args, message):
    from conftest import ROOT

    from toolloop_cli._text import excerpt

    plan = str(ROOT / "plans" / "sequential.yml")
    proc = cli(*[a.replace("{long}", LONG_NAME).replace("{plan}", plan) for a in args])
    err = proc.stderr.decode()
    if message.startswith("TL"):
        assert proc.returncode == 3 and f" error {message} " in err and "longer than the file system" in err, err
    else:
        assert proc.returncode == 2, err
        assert err == message.replace("{shown}", excerpt(LONG_NAME))


@pytest.mark.parametrize("command", [
    ["runs", "list"], ["runs", "show", "r"], ["runs", "export", "r"], ["runs", "verify", "r"],
    ["runs", "prune", "--keep", "1"], ["approvals", "list"], ["approve", "r", "k", "--approve"], ["resume", "r"],
    ["replay", "r"], ["steer", "r", "go on"], ["abort", "r"],
])
def test_a_state_dir_that_no_file_system_takes_is_a_usage_error(cli, command):
    from toolloop_cli._text import excerpt

    proc = cli(*command, "--state-dir", LONG_NAME)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.decode() == (f"toolloop: error: cannot open the state database in {excerpt(LONG_NAME)}:"
                                    " the path is longer than the file system takes\n")


@pytest.mark.parametrize("special", ["/dev/zero", "fifo"])
@pytest.mark.parametrize("key", ["instructions", "fixture", "judge prompt"])
def test_a_plan_file_that_names_a_device_or_a_pipe_is_a_finding_never_read(tmp_path, key, special):
    """/dev/zero never ends and a pipe nobody writes to blocks its reader for ever."""
    from toolloop_cli.errors import ConfigError
    from toolloop_cli.plan.admit import admit_plan

    project = _project(tmp_path)
    os.mkfifo(project / "plans" / "fifo")
    target = project / "plans" / "routed-example.yml"
    target.write_text(FILE_PATHS[key][1](target.read_text(), special))
    with pytest.raises(ConfigError) as rejected:
        admit_plan(target)
    [finding] = [p for p in rejected.value.problems if p.code == "TL416"]
    assert "it is not a regular file (a device, a pipe or a socket)" in finding.message
    assert finding.file.endswith("routed-example.yml") and finding.line > 1


def test_every_state_dir_option_says_where_the_journal_is_by_default(cli):
    import typer.main

    from toolloop_cli.cli.app import app

    def walk(command, path=()):
        yield path, command
        for name, sub in sorted(getattr(command, "commands", {}).items()):
            if not getattr(sub, "hidden", False):
                yield from walk(sub, (*path, name))

    vague = [" ".join(path) for path, command in walk(typer.main.get_command(app))
             for p in getattr(command, "params", []) if "--state-dir" in getattr(p, "opts", ())
             and "TOOLLOOP_STATE_DIR" not in (p.help or "")]
    assert vague == []
    shown = cli("call", "--help", env={"COLUMNS": "200"}).stdout.decode()
    assert "Folder of state.db (default .toolloop, or TOOLLOOP_STATE_DIR)." in " ".join(shown.split())


def test_counts_in_messages_are_plural_only_when_they_are_not_one():
    from toolloop_cli._text import counted

    assert [counted(n, "error") for n in (0, 1, 2)] == ["0 errors", "1 error", "2 errors"]
    assert counted(1, "MCP schema") == "1 MCP schema" and counted(3, "child", "children") == "3 children"


def test_validate_counts_what_it_checked_as_a_sentence_lists_it():
    from toolloop_cli.cli.lint_cmds import count_line

    assert count_line(3, 6, [], 3, suites=1) == "checked 3 registries, 6 plans and 1 suite: no problems (3 ignored)"
    assert count_line(1, 1, [], 0) == "checked 1 registry and 1 plan: no problems"
    assert count_line(0, 0, [], 0) == "checked nothing: no problems"
