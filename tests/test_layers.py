"""The package's layers hold (import-linter contracts in pyproject.toml): the contract imports
nothing above it (nor the router, the providers or trio), nothing imports the command line,
render runs nothing, serve and lint never run the engine, every engine module stays in its
layer, the router is pure and the providers know nothing of runs."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT

LINT = shutil.which("lint-imports") or str(Path(sys.executable).parent / "lint-imports")


def test_import_contracts_hold():
    proc = subprocess.run([LINT, "--no-cache"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert " 0 broken" in proc.stdout and "kept" in proc.stdout


def test_the_router_imports_no_runtime(tmp_path):
    """Importing the whole router package loads neither trio, httpx nor the engine."""
    code = ("import sys, toolloop_cli.router as r; r.router_messages; "
            "bad = [m for m in ('trio', 'httpx', 'anyio', 'toolloop_cli.engine', 'toolloop_cli.store') if m in sys.modules]; "
            "print(bad)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_contract_loads_no_event_loop():
    """Importing every module of the contract (what admission and lint read) loads neither trio,
    httpx, the router nor the engine: MCP's server host is loaded only when a server is listed."""
    code = ("import sys, pkgutil, importlib, toolloop_cli.contract as c; "
            "[importlib.import_module('toolloop_cli.contract.' + m.name) for m in pkgutil.iter_modules(c.__path__)"
            " if m.name != 'mcp_servers']; "
            "bad = [m for m in ('trio', 'httpx', 'toolloop_cli.router', 'toolloop_cli.engine') if m in sys.modules]; "
            "print(bad)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


#: (file to change, the line added, the contract that must then break)
BAD_IMPORTS = [
    ("serve/api.py", "from ..engine import call", "serve reads runs and never runs the engine"),
    ("serve/auth.py", "from ..plan import admit", "serve reads runs and never runs the engine"),
    ("lint/check.py", "from ..engine import call", "lint checks files and never runs them"),
    ("lint/suppress.py", "from ..store import Store", "lint checks files and never runs them"),
    ("contract/compiled.py", "import trio", "the contract is data"),
    ("contract/problems.py", "from ..router import views", "the contract is data"),
    ("contract/envelope.py", "from ..providers import base", "the contract is data"),
    ("engine/settle.py", "from . import session", "the engine's layers"),
    ("engine/stray.py", "X = 1", "the engine's layers"),
    ("suite/expect.py", "from ..engine import launch", "a suite is loaded and judged without running anything"),
]


@pytest.mark.parametrize("where,line,contract", BAD_IMPORTS, ids=[f"{w}:{l}" for w, l, _ in BAD_IMPORTS])
def test_a_bad_import_breaks_its_contract(tmp_path, where, line, contract):
    """Each contract can fail: a copy of the package with one bad import added (or an engine
    module in no layer) breaks the contract that forbids it."""
    shutil.copytree(ROOT / "toolloop_cli", tmp_path / "toolloop_cli",
                    ignore=shutil.ignore_patterns("__pycache__", "static", "templates", "prompts"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    target = tmp_path / "toolloop_cli" / where
    target.write_text((target.read_text() if target.exists() else "") + f"\n{line}\n")
    proc = subprocess.run([LINT, "--no-cache"], cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode != 0, proc.stdout
    summary = " ".join(proc.stdout.split("Contracts:")[0].split())
    parts = re.split(r"\b(KEPT|BROKEN)\b", summary)  # name, status, name, status, ...
    broken = [name for name, status in zip(parts[::2], parts[1::2]) if status == "BROKEN"]
    assert any(contract in name for name in broken), proc.stdout
