"""`run --lanes - --stream` runs in bounded memory: a run of many lanes peaks no higher than one
of few (whole process, ``ru_maxrss``). Nothing here is timed.

Lanes are read, admitted and journaled a page at a time, run within a window of the emission point,
and their item keys are looked up in the journal rather than held, so nothing a lane leaves behind
stays in memory. Holding as little as 0.15 KB a lane (an in-memory index of item keys) takes the
large run to 1.2x the small one's peak or more, which the bound below catches.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

LARGE = 100_000  # the largest count that keeps this test well under half a minute on two busy cores
SMALL = 10_000
BOUND = 1.1

APP = "async def noop():\n    return {}\n"


def _setup(tmp_path):
    (tmp_path / "noopapp.py").write_text(APP)
    (tmp_path / "reg.yml").write_text(json.dumps({
        "version": 1, "app_root": str(tmp_path), "subagents": {"s": {
            "runner_defaults": {"tool_timeout_s": 30},
            "tools": {"noop": {"callable": "noopapp:noop", "description": "Do nothing.",
                               "input_schema": {"type": "object"}, "output_schema": {"type": "object"}}}}}}))
    (tmp_path / "plan.yml").write_text(json.dumps({
        "version": 1, "registry": "reg.yml", "subagent": "s", "mode": "parallel", "max_concurrency": 16, "lanes": []}))


def _peak_kib(tmp_path, n: int) -> int:
    lanes = tmp_path / f"lanes{n}.jsonl"
    with open(lanes, "w") as fh:
        for i in range(n):
            fh.write(f'{{"item_key": "k{i}", "calls": [{{"tool": "noop", "args": {{}}}}]}}\n')
    out = tmp_path / f"out{n}.jsonl"
    with open(lanes, "rb") as stdin, open(out, "wb") as stdout:
        proc = subprocess.Popen([sys.executable, "-m", "toolloop_cli", "run", "plan.yml", "--lanes", "-", "--stream",
                                 "--format", "jsonl", "--state-dir", f"state{n}"],
                                cwd=tmp_path, stdin=stdin, stdout=stdout, stderr=subprocess.PIPE)
        err = proc.stderr.read()  # type: ignore[union-attr]
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    assert proc.returncode == 0, err.decode()[-2000:]
    with open(out, "rb") as fh:
        fh.seek(-4096, os.SEEK_END)
        summary = json.loads(fh.read().splitlines()[-1])
    assert summary["type"] == "summary" and summary["counts"]["ok"] == n  # every lane ran
    return usage.ru_maxrss


def test_streamed_lanes_run_in_memory_that_does_not_grow_with_their_number(tmp_path):
    _setup(tmp_path)
    small = _peak_kib(tmp_path, SMALL)
    large = _peak_kib(tmp_path, LARGE)
    assert large < BOUND * small, f"peak RSS {large} KiB for {LARGE} lanes against {small} KiB for {SMALL}"
