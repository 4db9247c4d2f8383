"""Approval prompts on a terminal: a real pseudo-terminal for standard input and error."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
import time

from conftest import APP, jsonl, write

REG = APP / "registry.yml"


def run_with_terminal(tmp_path, answers: list[str], *extra: str):
    plan = write(tmp_path / "plan.yml", json.dumps({
        "version": 1, "registry": str(REG), "subagent": "t", "mode": "sequential",
        "calls": [{"tool": "pay", "call_key": "pay", "args": {"amount": 500}}, {"tool": "echo", "args": {}}]}))
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "toolloop_cli", "run", str(plan), "--format", "jsonl", *extra],
                            cwd=tmp_path, stdin=slave, stdout=subprocess.PIPE, stderr=slave,
                            env={**os.environ, "NO_COLOR": "1"})
    os.close(slave)
    seen = b""
    deadline = time.monotonic() + 60
    pending = list(answers)
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(master, 4096)
                except OSError:
                    break
                seen += chunk
                if pending and seen.rstrip().endswith((b"? ", b"?", b":", b": ")):
                    os.write(master, pending.pop(0).encode() + b"\n")
        if proc.poll() is None:  # past the deadline: end it so the reads below cannot block
            proc.kill()
        out = proc.stdout.read()
        proc.wait(timeout=30)
    finally:
        proc.kill()
        os.close(master)
    return proc.returncode, jsonl(out), seen.decode(errors="replace")


def test_a_person_approves_at_the_terminal(tmp_path):
    code, records, screen = run_with_terminal(tmp_path, ["a"])
    assert code == 0, screen
    assert "approval needed: tool 'pay' (args.amount > 100)" in screen and '"amount": 500' in screen
    assert [r["status"] for r in records[:-1]] == ["ok", "ok"]


def test_a_person_edits_the_arguments_which_are_checked_again(tmp_path):
    code, records, screen = run_with_terminal(tmp_path, ["e", '{"amount": "lots"}', "e", '{"amount": 90}'])
    assert code == 0, screen
    assert "fail the input schema" in screen
    assert records[0]["args"] == {"amount": 90} and records[0]["status"] == "ok"


def test_a_person_rejects_with_a_message(tmp_path):
    code, records, screen = run_with_terminal(tmp_path, ["r", "not today"])
    assert code == 1, screen
    assert [r["status"] for r in records[:-1]] == ["denied", "skipped"]
    assert records[0]["error"]["message"].endswith("not today")


def test_the_prompt_shows_control_characters_escaped_and_refuses_unusable_edits(monkeypatch, capsys):
    import io
    import re
    from types import SimpleNamespace

    from toolloop_cli.cli.prompt import TerminalApprover

    tool = SimpleNamespace(id="pay\x1b[2J", approval_text="args.amount > 100", input_validator=None)
    deep = '{"x": ' + "[" * 150 + "]" * 150 + "}"
    monkeypatch.setattr(sys, "stdin", io.StringIO(f"e\n{deep}\ne\n{{\"n\": NaN}}\na\n"))
    args = {"note": "\u202eevil\x9b", "n": 2 ** 70}
    assert TerminalApprover()._ask(tool, "k\x1b]0;t\x07", "c", args) == ("run", args)
    screen = capsys.readouterr().err
    assert not re.search("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202e]", screen), screen
    assert "tool 'pay\\x1b[2J'" in screen and "\\u202eevil\\x9b" in screen and "1180591620717411303424" in screen
    assert "cannot be used: it nests deeper than 100 levels" in screen and "not JSON" in screen
