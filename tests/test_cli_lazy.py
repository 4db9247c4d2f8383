"""The command line the program runs builds only the command it runs, and reads exactly as the
whole app built by typer: every help text, the root's listing, a misspelt command's suggestion, a
bad option, shell completion."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import typer.main
import typer.testing
from typer.testing import CliRunner

from toolloop_cli.cli._lazy_group import LazyCommands
from toolloop_cli.cli.app import COMMANDS, app, command_line


def _paths(command, path=()):
    yield path
    for name, sub in getattr(command, "commands", {}).items():
        yield from _paths(sub, (*path, name))


WHOLE = typer.main.get_command(app)
PATHS = list(_paths(WHOLE))


@pytest.fixture(autouse=True)
def _click_commands(monkeypatch):
    """typer's runner takes a Typer app; these tests hand it the click commands themselves."""
    monkeypatch.setattr(typer.testing, "_get_command", lambda command: command)


def _both(args: list[str]) -> tuple[tuple[int, str], tuple[int, str]]:
    runner = CliRunner()
    env = {"COLUMNS": "100", "NO_COLOR": "1"}
    whole = runner.invoke(WHOLE, args, prog_name="toolloop", env=env)
    lazy = runner.invoke(command_line(), args, prog_name="toolloop", env=env)
    return (whole.exit_code, whole.output), (lazy.exit_code, lazy.output)


def test_every_command_is_in_the_table_in_typers_order():
    assert list(WHOLE.commands) == list(COMMANDS)
    assert len(PATHS) > 20 and ("runs", "export") in PATHS and ("__complete-run-ids",) in PATHS


@pytest.mark.parametrize("path", PATHS, ids=lambda p: " ".join(p) or "toolloop")
def test_each_help_text_is_the_whole_apps(path):
    whole, lazy = _both([*path, "--help"])
    assert whole[0] == 0 and whole[1].startswith("Usage: toolloop")
    assert lazy == whole


@pytest.mark.parametrize("args", [
    [], ["runz"], ["runs"], ["runs", "lsit"], ["--bogus"], ["run"], ["run", "--bogus"],
    ["runs", "list", "--bogus"], ["mcp"], ["approvals", "list", "--format", "xml"], ["--version"],
], ids=" ".join)
def test_mistakes_and_the_root_read_as_the_whole_apps(args):
    whole, lazy = _both(args)
    assert lazy == whole
    assert whole[1]  # something was said


def test_completion_offers_what_the_whole_app_offers():
    runner = CliRunner()
    for words in ("toolloop r", "toolloop runs ", "toolloop run --fo"):
        env = {"_TOOLLOOP_COMPLETE": "complete_zsh", "_TYPER_COMPLETE_ARGS": words}
        whole = runner.invoke(WHOLE, [], prog_name="toolloop", env=env)
        lazy = runner.invoke(command_line(), [], prog_name="toolloop", env=env)
        assert lazy.output == whole.output and whole.output.strip(), words


def test_a_command_runs_with_only_itself_built():
    root = command_line()
    result = CliRunner().invoke(root, ["validate", "--help"], prog_name="toolloop")
    assert result.exit_code == 0
    assert root.commands.built() == ["validate"]
    root = command_line()
    CliRunner().invoke(root, ["runs", "list", "--help"], prog_name="toolloop")
    assert root.commands.built() == ["runs"]


def test_a_fresh_run_builds_and_imports_only_its_command(tmp_path):
    """In a fresh interpreter, ``toolloop validate FILE`` reads the parameters of two functions
    (the root's options and validate's; typer reads each twice), not those of every command, and
    imports no other command's module."""
    registry = tmp_path / "registry.yml"
    registry.write_text("version: 1\nsubagents: {}\n")
    probe = (
        "import atexit, json, sys\n"
        "import typer.main\n"
        "read = []\n"
        "own = typer.main.get_params_from_function\n"
        "def counted(func):\n"
        "    read.append(func.__name__)\n"
        "    return own(func)\n"
        "typer.main.get_params_from_function = counted\n"
        "atexit.register(lambda: sys.stderr.write(json.dumps({'read': read, 'modules': sorted(\n"
        "    m for m in sys.modules if m.startswith('toolloop_cli.cli.'))}) + '\\n'))\n"
        "from toolloop_cli.cli.app import main\n"
        f"sys.argv = ['toolloop', 'validate', {str(registry)!r}]\n"
        "main()\n")
    proc = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    seen = json.loads(proc.stderr.strip().splitlines()[-1])
    functions = {name for name in seen["read"] if not name.endswith(("_callback", "_version"))}  # options' callbacks
    assert functions == {"_root", "validate"}, seen["read"]
    others = {"toolloop_cli.cli.run_cmds", "toolloop_cli.cli.runs_cmds", "toolloop_cli.cli.mcp_cmd",
              "toolloop_cli.cli.approvals_cmds", "toolloop_cli.cli.routed_cmds", "toolloop_cli.cli.serve_cmd",
              "toolloop_cli.cli.test_cmd", "toolloop_cli.cli.init_cmd", "toolloop_cli.cli.prune_cmd"}
    assert "toolloop_cli.cli.lint_cmds" in seen["modules"]
    assert others.isdisjoint(seen["modules"]), seen["modules"]


def test_lazy_commands_builds_each_once_in_order():
    made: list[str] = []

    def maker(name):
        def make():
            made.append(name)
            return f"<{name}>"
        return make

    commands = LazyCommands({"b": maker("b"), "a": maker("a")})
    assert list(commands) == ["b", "a"] and len(commands) == 2 and made == []
    assert commands.get("a") == "<a>" and commands["a"] == "<a>" and made == ["a"]
    assert commands.get("zzz") is None and "zzz" not in commands
    with pytest.raises(KeyError):
        commands["zzz"]
    commands["c"] = "<c>"
    del commands["b"]
    assert list(commands) == ["a", "c"] and commands.built() == ["a", "c"]


def test_a_key_error_while_building_is_not_no_such_command():
    def broken():
        raise KeyError("inside")

    commands = LazyCommands({"x": broken})
    with pytest.raises(KeyError, match="inside"):
        commands.get("x")
