"""Help shows an argument of several values as its usage line does (``PATH...``), and every other
argument as typer shows it (name and type)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


def _help(*command: str) -> list[str]:
    done = subprocess.run([sys.executable, "-m", "toolloop_cli", *command, "--help"], capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "100", "NO_COLOR": "1"}, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    start = lines.index("Arguments:")
    return [line.strip() for line in lines[start + 1:lines.index("", start)]]


@pytest.mark.parametrize("command,usage,shown", [
    ("validate", "PATH...", ["PATH...  Registries, plans, suites, or folders holding them (*.yml, *.yaml).",
                               "[required]"]),
    ("test", "SUITE...", ["SUITE...  Suite files (kind: suite).  [required]"]),
])
def test_a_list_argument_is_shown_as_name_and_dots(command, usage, shown):
    assert _help(command) == shown
    done = subprocess.run([sys.executable, "-m", "toolloop_cli", command, "--help"], capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "100"}, timeout=120)
    assert done.stdout.splitlines()[0].endswith(f"{command} [OPTIONS] {usage}")
    assert "list[" not in done.stdout


def test_other_arguments_keep_their_type():
    assert _help("run") == ["PLAN <path>  Plan YAML file.  [required]"]
    assert _help("runs", "show") == ["RUN_ID <str>  Run id (a unique prefix is enough).  [required]"]


@pytest.mark.parametrize("command,usage", [
    (["run"], "run [OPTIONS] PLAN"),
    (["call"], "call [OPTIONS] REGISTRY SUBAGENT TOOL"),
    (["runs", "show"], "runs show [OPTIONS] RUN_ID"),
    (["init"], "init [OPTIONS] [DIR]"),
])
def test_a_usage_line_writes_arguments_as_unix_tools_do(command, usage):
    """A required argument by its bare name, an optional one in brackets; no braces, which a
    shell reader takes for a set of choices."""
    done = subprocess.run([sys.executable, "-m", "toolloop_cli", *command, "--help"], capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "100", "NO_COLOR": "1"}, timeout=120)
    assert done.stdout.splitlines()[0] == f"Usage: python -m toolloop_cli {usage}"
    if "[" not in usage.replace("[OPTIONS]", ""):  # a missing argument's usage error shows the same line
        missing = subprocess.run([sys.executable, "-m", "toolloop_cli", *command], capture_output=True, text=True,
                                 env={**os.environ, "COLUMNS": "100", "NO_COLOR": "1"}, timeout=120)
        assert missing.returncode == 2 and missing.stderr.splitlines()[0] == f"Usage: python -m toolloop_cli {usage}"
