"""The seams are typed: mypy, strict, passes on the modules pyproject.toml's ``[tool.mypy]``
lists (the gates, settlement, the session and the runner's handle, the budget ledger, the
executors, the providers and the router), and the configuration is strict enough to refuse
what it is meant to refuse."""

from __future__ import annotations

import subprocess
import sys
import tomllib

from conftest import ROOT

SEAMS = {
    "toolloop_cli/engine/gates.py",
    "toolloop_cli/engine/settle.py",
    "toolloop_cli/engine/session.py",
    "toolloop_cli/engine/options.py",
    "toolloop_cli/engine/signals.py",
    "toolloop_cli/engine/handle.py",
    "toolloop_cli/engine/budget.py",
    "toolloop_cli/engine/taint.py",
    "toolloop_cli/engine/executors",
    "toolloop_cli/providers",
    "toolloop_cli/router",
    "toolloop_cli/mcpserve",
}


def _mypy(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"), *args],
                          cwd=ROOT, capture_output=True, text=True)


def test_the_seams_are_checked_strictly():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    assert set(config["files"]) == SEAMS
    assert config["strict"] is True


def test_mypy_strict_passes_on_the_seams():
    proc = _mypy()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Success: no issues found" in proc.stdout


def test_the_configuration_refuses_loose_annotations(tmp_path):
    """A bare generic, an unannotated function and an Any returned as a str each fail the check."""
    probe = tmp_path / "probe.py"
    probe.write_text("from typing import Any\n\n\n"
                     "def bare(x: dict) -> None:\n    pass\n\n\n"
                     "def untyped(x):\n    return x\n\n\n"
                     "def leaks(x: Any) -> str:\n    return x\n")
    proc = _mypy(str(probe))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    for code in ("[type-arg]", "[no-untyped-def]", "[no-any-return]"):
        assert code in proc.stdout, proc.stdout
