"""``run`` flags that must not be ignored, what a rejected plan still prints, and live progress on a
terminal's standard error while records go to a file or a pipe."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
import time

import jsonschema
import pytest

from conftest import APP, jsonl, write
from toolloop_cli.record_schema import receipt_schema

REG = APP / "registry.yml"


def plan(tmp_path, body: dict, name: str = "plan.yml"):
    return write(tmp_path / name, json.dumps({"version": 1, "registry": str(REG), "subagent": "t", **body}))


SEQUENTIAL = {"mode": "sequential", "calls": [{"tool": "echo", "args": {"n": 1}}]}
LANES = b'{"item_key": "x", "calls": [{"tool": "echo", "args": {}}]}\n'


@pytest.mark.parametrize("extra", [(), ("--stream",)])
def test_lanes_with_a_sequential_plan_is_a_usage_error(cli, tmp_path, extra):
    p = plan(tmp_path, SEQUENTIAL)
    (tmp_path / "lanes.jsonl").write_bytes(LANES)
    for source in ("lanes.jsonl", "-"):
        r = cli("run", str(p), "--lanes", source, *extra, input=LANES)
        assert r.returncode == 2, r.stderr
        assert r.stdout == b""
        assert r.stderr.decode() == (f"toolloop: error: --lanes adds lanes to a parallel plan, and {p} is a sequential"
                                     " plan\n  hint: remove --lanes, or make the plan 'mode: parallel'\n")
    assert not (tmp_path / ".toolloop").exists()  # nothing was journaled


def test_lanes_with_a_parallel_plan_still_run(cli, tmp_path):
    p = plan(tmp_path, {"mode": "parallel", "max_concurrency": 2, "lanes": []})
    r = cli("run", str(p), "--lanes", "-", "--stream", input=LANES)
    assert r.returncode == 0, r.stderr
    assert [rec["item_key"] for rec in jsonl(r.stdout)[:-1]] == ["x"]


@pytest.mark.parametrize("fmt", ["jsonl", "json"])
def test_a_rejected_plan_ends_standard_output_with_a_rejected_summary(cli, tmp_path, fmt):
    p = plan(tmp_path, {"mode": "sequential", "calls": [{"tool": "ecko", "args": {}}]})
    r = cli("run", str(p), "--format", fmt)
    assert r.returncode == 3
    records = jsonl(r.stdout) if fmt == "jsonl" else json.loads(r.stdout)
    (summary,) = records
    assert summary["type"] == "summary" and summary["status"] == "rejected"
    assert summary["mode"] == "sequential" and summary["run_id"] is None and summary["contract_sha256"] is None
    assert set(summary["counts"].values()) == {0}
    jsonschema.Draft202012Validator(receipt_schema()).validate(summary)
    assert "error TL402" in r.stderr.decode()
    # a table shows nothing on standard output: the findings on standard error say it all
    r = cli("run", str(p), "--format", "table")
    assert r.returncode == 3 and r.stdout == b""


def test_a_rejected_call_ends_with_a_rejected_summary(cli):
    r = cli("call", str(REG), "t", "nope", "--args", "{}", "--format", "jsonl")
    assert r.returncode == 3
    (summary,) = jsonl(r.stdout)
    assert (summary["status"], summary["mode"]) == ("rejected", "sequential")


def run_with_stderr_on_a_terminal(tmp_path, *args: str) -> tuple[int, bytes, str]:
    """Run with standard error on a pseudo-terminal and standard output to a pipe."""
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "toolloop_cli", *args], cwd=tmp_path, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=slave, env={**os.environ, "NO_COLOR": "1", "COLUMNS": "100"})
    os.close(slave)
    screen = b""
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(master, 4096)
                except OSError:  # the child closed its end
                    break
                if not chunk:
                    break
                screen += chunk
            elif proc.poll() is not None:
                break
        out = proc.stdout.read()
        proc.wait(timeout=30)
    finally:
        proc.kill()
        os.close(master)
    return proc.returncode, out, screen.decode(errors="replace")


def test_progress_shows_on_a_terminal_while_records_go_to_a_pipe(tmp_path):
    p = plan(tmp_path, {"mode": "parallel", "max_concurrency": 2, "lanes": [
        {"item_key": f"k{i}", "calls": [{"tool": "echo", "args": {"i": i}}]} for i in range(3)]})
    code, out, screen = run_with_stderr_on_a_terminal(tmp_path, "run", str(p))
    assert code == 0, screen
    assert [r["type"] for r in jsonl(out)] == ["receipt"] * 3 + ["summary"]  # records untouched
    assert "parallel" in screen and "3/3" in screen and "0 failed" in screen
    code, out, screen = run_with_stderr_on_a_terminal(tmp_path, "run", str(p), "--no-progress")
    assert code == 0
    assert "3/3" not in screen and "failed" not in screen
    assert [r["type"] for r in jsonl(out)] == ["receipt"] * 3 + ["summary"]


def test_a_routed_run_shows_turns_calls_and_tokens_against_its_budget(tmp_path):
    from conftest import ROOT

    code, out, screen = run_with_stderr_on_a_terminal(tmp_path, "run", str(ROOT / "plans" / "routed-example.yml"))
    assert code == 0, screen
    assert jsonl(out)[-1]["outcome"] == "final"  # records untouched
    # the example's budget: 6 turns, 4 tool calls, 20,000 tokens, 60 s; the router asked 3 times
    assert "turn 3/6 · tool calls 2/4 · router tokens 2,666/20,000" in screen, screen
    assert "of 0:01:00" in screen
    assert "/0 " not in screen and "0 failed" not in screen  # no batch counter without a total


@pytest.mark.parametrize("command", ["run", "validate"])
def test_no_lane_at_a_time_is_a_usage_error(cli, tmp_path, command):
    p = plan(tmp_path, {"mode": "parallel", "max_concurrency": 2, "lanes": [
        {"item_key": "a", "calls": [{"tool": "echo", "args": {}}]}]})
    r = cli(command, str(p), "-j", "0")
    assert r.returncode == 2
    assert r.stderr.decode().startswith("toolloop: error: -j/--max-concurrency 0: at least one lane must run at a time")
    assert not (tmp_path / ".toolloop").exists()  # nothing ran
