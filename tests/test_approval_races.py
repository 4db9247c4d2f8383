"""Races on one approval: two `toolloop approve` at once, then two `toolloop resume` at once, many
times over. Each time exactly one answer is taken and the gated write runs exactly once."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from conftest import APP, write

RACES = 8


def toolloop(cwd, *args):
    return subprocess.Popen([sys.executable, "-m", "toolloop_cli", *args], cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env={**os.environ, "NO_COLOR": "1"})


def test_racing_answers_and_resumes_run_a_gated_write_exactly_once(tmp_path):
    write(tmp_path / "reg.yml", f"""
        version: 1
        app_root: {APP}
        subagents:
          t:
            runner_defaults: {{tool_timeout_s: 10}}
            tools:
              pay:
                callable: testapp.tools:marker
                description: Writes a line per execution; a person approves each call.
                effect: write
                approval: required
                input_schema: {{type: object, required: [path], properties: {{path: {{type: string}}}}}}
                output_schema: {{}}
    """)
    answers_taken = []
    executions = []
    for i in range(RACES):
        target = tmp_path / f"paid-{i}.txt"
        plan = write(tmp_path / f"plan-{i}.yml", json.dumps({
            "version": 1, "registry": "reg.yml", "subagent": "t", "mode": "sequential",
            "calls": [{"call_key": "pay", "tool": "pay", "args": {"path": str(target)}}]}))
        out, _ = toolloop(tmp_path, "run", str(plan), "--format", "jsonl").communicate(timeout=120)
        run_id = json.loads(out.decode().splitlines()[-1])["run_id"]
        approvals = [toolloop(tmp_path, "approve", run_id, "pay", "--approve", "--approver", f"p{k}")
                     for k in range(2)]
        codes = sorted(p.wait(timeout=120) for p in approvals)
        answers_taken.append(codes.count(0))
        resumes = [toolloop(tmp_path, "resume", run_id, "--format", "jsonl") for _ in range(2)]
        for p in resumes:
            p.communicate(timeout=120)
        executions.append(target.read_text().count("ran") if target.exists() else 0)
    assert answers_taken == [1] * RACES  # one approve won each race, the other changed nothing
    assert executions == [1] * RACES  # and the write ran exactly once every time
