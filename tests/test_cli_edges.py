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
