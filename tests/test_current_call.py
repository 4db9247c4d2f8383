"""current_call(): the running call's identity in sync, trio, asyncio and retried calls, with an
idempotency key that is the same on every attempt and after a resume."""

from __future__ import annotations

import pytest

from test_calls_common import admitted, run_plan
from toolloop_cli import current_call
from toolloop_cli.engine.identity import idempotency_key


def itool(fn: str, **extra) -> dict:
    return {"callable": f"testapp.identity_tools:{fn}", "description": fn, "input_schema": {}, "output_schema": {},
            **extra}


def test_outside_a_call_it_says_so():
    with pytest.raises(LookupError):
        current_call()


@pytest.mark.parametrize("fn, extra", [("who_sync", {}), ("who_trio", {}), ("who_asyncio", {}),
                                       ("who_sync", {"isolation": "process"})])
def test_every_worker_kind_sees_its_call(tmp_path, fn, extra):
    plan = admitted(tmp_path, {"w": itool(fn, **extra)},
                    lanes=[{"item_key": "doc-1", "calls": [{"call_key": "first", "tool": "w", "args": {}}]}])
    got, _, _ = run_plan(plan, mock=False)
    result = got[0]["result"]
    assert result == {"run_id": "run-test", "seq": 0, "item_key": "doc-1", "call_key": "first", "attempt": 1,
                      "labels": {}, "idempotency_key": idempotency_key("run-test", 0)}


def test_the_key_is_the_same_on_every_attempt(tmp_path):
    from testapp import identity_tools

    identity_tools.SEEN.clear()
    tools = {"w": itool("who_sync", retry={"max_attempts": 2, "backoff_s": 0, "on": ["error"]})}
    plan = admitted(tmp_path, tools, calls=[{"tool": "w", "args": {"fail_first": True}}])
    got, _, _ = run_plan(plan, mock=False)
    assert got[0]["status"] == "ok" and got[0]["attempts"] == 2
    assert [s["attempt"] for s in identity_tools.SEEN] == [1, 2]
    assert len({s["idempotency_key"] for s in identity_tools.SEEN}) == 1
    assert idempotency_key("run-a", 3) != idempotency_key("run-a", 4) != idempotency_key("run-b", 4)


def test_a_write_killed_after_it_applied_is_not_applied_twice_by_retry_interrupted(tmp_path, cli):
    import json
    import os
    import signal
    import subprocess
    import sys

    from conftest import APP, write

    ledger, fifo = tmp_path / "ledger.jsonl", tmp_path / "applied.fifo"
    os.mkfifo(fifo)
    write(tmp_path / "reg.yml", f"""
        version: 1
        app_root: {APP}
        subagents:
          t:
            runner_defaults: {{tool_timeout_s: 120}}
            tools:
              pay:
                callable: testapp.identity_tools:pay_then_wait
                description: Applies a payment keyed by the idempotency key.
                effect: write
                input_schema: {{type: object}}
                output_schema: {{}}
    """)
    plan = write(tmp_path / "plan.yml", json.dumps({"version": 1, "registry": "reg.yml", "subagent": "t",
                                                    "mode": "sequential", "calls": [{"tool": "pay", "args": {
                                                        "ref": "INV-1", "ledger": str(ledger), "fifo": str(fifo)}}]}))
    proc = subprocess.Popen([sys.executable, "-m", "toolloop_cli", "run", str(plan), "--format", "jsonl"],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    with open(fifo) as f:  # opens once the tool has applied the payment
        assert f.read() == "applied\n"
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    run_id = json.loads(cli("runs", "list", "--format", "jsonl").stdout.decode().splitlines()[0])["run_id"]
    interrupted = json.loads(cli("resume", run_id, "--format", "jsonl").stdout.decode().splitlines()[0])
    assert interrupted["status"] == "interrupted"
    again = json.loads(cli("resume", run_id, "--retry-interrupted", "--format", "jsonl").stdout.decode().splitlines()[0])
    assert again["status"] == "ok" and again["result"] == {"ref": "INV-1", "replayed": True}
    assert len(ledger.read_text().splitlines()) == 1  # applied exactly once
