"""A command imports what it uses: a one-call plan and ``validate`` of tools without a sandbox
import neither the sandbox module nor ``pickle`` (the process pool's wire format), and a call
through a process worker still gets its reply. (What a sandboxed tool gets, refused or applied,
is tests/test_sandbox.py's; the sandbox findings, tests/test_findings.py's.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

WATCHED = ("pickle", "toolloop_cli.contract.sandbox", "toolloop_cli.engine.executors.sandbox")


def run_watching(tmp_path: Path, *args: str, watched: tuple[str, ...] = WATCHED) -> tuple[int, dict, str]:
    """``toolloop ARGS`` in a fresh interpreter: its exit code, which of the ``watched`` modules it
    imported, and its standard output."""
    probe = ("import sys, json\nsys.argv = ['toolloop', *json.loads(sys.argv[1])]\n"
             "from toolloop_cli.cli.app import main\n"
             "try:\n    main()\nfinally:\n"
             f"    sys.stderr.write('\\n' + json.dumps({{m: m in sys.modules for m in {watched!r}}}))\n")
    done = subprocess.run([sys.executable, "-c", probe, json.dumps(args)], cwd=tmp_path, capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(tmp_path)}, timeout=120)
    return done.returncode, json.loads(done.stderr.splitlines()[-1]), done.stdout


def _files(tmp_path: Path, isolation: str = "async") -> None:
    (tmp_path / "app.py").write_text("async def noop():\n    return {}\n\ndef plain():\n    return {'pid': 1}\n")
    tool = ("{callable: 'app:noop', description: does nothing, timeout_s: 5, input_schema: {}, output_schema: {}}"
            if isolation == "async" else
            f"{{callable: 'app:plain', isolation: {isolation}, description: does nothing, timeout_s: 30,"
            " input_schema: {}, output_schema: {}}")
    (tmp_path / "reg.yml").write_text(f"version: 1\nsubagents:\n  b:\n    tools:\n      t: {tool}\n")
    (tmp_path / "one.yml").write_text(
        "version: 1\nregistry: reg.yml\nsubagent: b\nmode: sequential\ncalls:\n  - {tool: t, args: {}}\n")


def test_a_one_call_plan_and_validate_import_no_sandbox_and_no_pickle(tmp_path):
    _files(tmp_path)
    code, imported, out = run_watching(tmp_path, "run", "one.yml", "--format", "jsonl", "--state-dir", str(tmp_path / "s"))
    assert code == 0, out
    receipt = json.loads(out.splitlines()[0])
    assert receipt["status"] == "ok" and receipt["isolation"] is None
    assert imported == dict.fromkeys(WATCHED, False)
    code, imported, out = run_watching(tmp_path, "validate", "reg.yml", "one.yml")
    assert code == 0, out
    assert imported == dict.fromkeys(WATCHED, False)


def test_a_process_worker_still_gets_its_reply(tmp_path):
    _files(tmp_path, isolation="process")
    code, imported, out = run_watching(tmp_path, "run", "one.yml", "--format", "jsonl", "--state-dir", str(tmp_path / "s"))
    assert code == 0, out
    receipt = json.loads(out.splitlines()[0])
    assert (receipt["status"], receipt["result"], receipt["isolation"]) == ("ok", {"pid": 1}, None)
    assert imported["pickle"] is True and imported["toolloop_cli.contract.sandbox"] is False
