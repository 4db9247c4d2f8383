"""The package's layers hold (import-linter contracts in pyproject.toml): the contract imports
nothing above it, nothing imports the command line, render runs nothing, the engine's modules
stay in their layers, the router is pure and the providers know nothing of runs."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from conftest import ROOT


def test_import_contracts_hold():
    lint = shutil.which("lint-imports") or str(Path(sys.executable).parent / "lint-imports")
    proc = subprocess.run([lint, "--no-cache"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert " 0 broken" in proc.stdout and "kept" in proc.stdout


def test_the_router_imports_no_runtime(tmp_path):
    """Importing the whole router package loads neither trio, httpx nor the engine."""
    code = ("import sys, toolloop_cli.router as r; r.router_messages; "
            "bad = [m for m in ('trio', 'httpx', 'anyio', 'toolloop_cli.engine', 'toolloop_cli.store') if m in sys.modules]; "
            "print(bad)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
