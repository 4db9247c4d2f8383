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
    ("validate", "{PATH}...", ["PATH...  Registries, plans, suites, or folders holding them (*.yml, *.yaml).",
                               "[required]"]),
    ("test", "{SUITE}...", ["SUITE...  Suite files (kind: suite).  [required]"]),
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
