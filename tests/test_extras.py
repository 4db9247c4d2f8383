"""A registry or plan that needs an extra that is not installed is refused at admission with the
exact install line (exit 3), and validate reports it; the extras are hidden by a module on
PYTHONPATH that fails to import as a missing package does."""

from __future__ import annotations

import json

from conftest import APP, write

REG = APP / "registry.yml"


def hide(tmp_path, module: str) -> dict:
    write(tmp_path / "hidden" / module / "__init__.py",
          f"raise ModuleNotFoundError(\"No module named '{module}'\", name='{module}')\n")
    return {"PYTHONPATH": str(tmp_path / "hidden")}


def test_an_approval_expression_without_the_cel_extra_is_refused_with_the_install_line(cli, tmp_path):
    plan = write(tmp_path / "plan.yml", json.dumps({
        "version": 1, "registry": str(REG), "subagent": "t", "mode": "sequential",
        "calls": [{"tool": "pay", "args": {"amount": 500}}]}))
    env = hide(tmp_path, "celpy")
    ran = cli("run", str(plan), "--format", "jsonl", env=env)
    assert ran.returncode == 3, ran.stderr.decode()
    assert b"TL350" in ran.stderr and b"pip install 'toolloop-cli[approval]'" in ran.stderr
    assert b"Traceback" not in ran.stderr
    checked = cli("validate", str(REG), env=env)
    assert checked.returncode == 1 and b"pip install 'toolloop-cli[approval]'" in checked.stdout
    assert cli("run", str(plan), "--format", "jsonl", "--approve", "all").returncode == 0  # with the extra: it runs
