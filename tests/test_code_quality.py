"""The code has no undefined names, unused imports or syntax errors (ruff's pyflakes rules)."""

from __future__ import annotations

import shutil
import subprocess
import sys

from conftest import ROOT


def test_pyflakes_rules_pass():
    ruff = shutil.which("ruff") or str(__import__("pathlib").Path(sys.executable).parent / "ruff")
    proc = subprocess.run([ruff, "check", "--select", "F,E9", "--no-cache", "toolloop_cli", "tests", "scripts", "bench"],
                          cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
