"""Timeouts in the three worker kinds: trio tasks are cancelled, threads are
abandoned (and never waited for), worker processes are killed (TERM, grace, KILL) and reaped;
coroutines written for asyncio run on an asyncio loop."""

from __future__ import annotations

import os
import time

import pytest

from conftest import jsonl
from test_calls_common import admitted, contract_of, plan_file, run_plan, tool


@pytest.fixture(autouse=True)
def _reset():
    from testapp import tools

    tools.reset_governed()


def lanes_of(*calls: dict) -> list[dict]:
    return [{"item_key": str(i), "calls": [c]} for i, c in enumerate(calls)]


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


# --- trio -------------------------------------------------------------------------------------


def test_async_trio_callable_is_cancelled_at_its_deadline_without_wall_time(tmp_path):
    plan = admitted(tmp_path, {"s": tool("sleep_async", timeout_s=2)}, lanes=lanes_of(
        {"tool": "s", "args": {"seconds": 3600}}, {"tool": "s", "args": {"seconds": 1}}))
    t0 = time.perf_counter()
    got, _, _ = run_plan(plan)
    assert time.perf_counter() - t0 < 2
    assert [(r["status"], r["abandoned"]) for r in got] == [("timeout", False), ("ok", False)]
    assert got[0]["error"] == {"kind": "timeout", "message": "no result within 2s"}


def test_a_result_that_arrives_after_the_deadline_is_refused(tmp_path):
    # the callable moves the clock past its deadline and returns without a checkpoint
    plan = admitted(tmp_path, {"late": tool("late_result", timeout_s=1)},
                    calls=[{"tool": "late", "args": {"seconds": 5}}])
    got, _, _ = run_plan(plan)
    assert got[0]["status"] == "timeout" and got[0]["result"] is None


# --- threads ----------------------------------------------------------------------------------


def test_sync_callable_times_out_abandoned_and_the_run_goes_on(tmp_path):
    plan = admitted(tmp_path, {"s": tool("sleep_sync", timeout_s=0.2), "e": tool("echo")}, lanes=lanes_of(
        {"tool": "s", "args": {"seconds": 5}}, {"tool": "e", "args": {"x": 1}}))
    t0 = time.perf_counter()
    got, _, _ = run_plan(plan, mock=False)
    assert time.perf_counter() - t0 < 2
    assert [(r["status"], r["abandoned"]) for r in got] == [("timeout", True), ("ok", False)]


def test_the_command_never_waits_for_an_abandoned_thread(tmp_path, cli):
    plan = plan_file(tmp_path, {"s": tool("sleep_sync", timeout_s=0.5)},
                     calls=[{"tool": "s", "args": {"seconds": 30}}])
    t0 = time.perf_counter()
    proc = cli("run", str(plan), "--format", "jsonl", timeout=25)
    elapsed = time.perf_counter() - t0
    recs = jsonl(proc.stdout)
    assert proc.returncode == 1, proc.stderr.decode()
    assert elapsed < 8, elapsed
    assert recs[0]["type"] == "receipt" and recs[0]["status"] == "timeout" and recs[0]["abandoned"] is True
    assert recs[-1]["type"] == "summary" and recs[-1]["counts"]["timeout"] == 1


# --- processes --------------------------------------------------------------------------------


def test_process_worker_is_killed_at_the_deadline_and_reaped(tmp_path):
    pidfile = tmp_path / "pid"
    tools = {"warm": tool("whoami", isolation="process"),
             "p": tool("pid_sleep", isolation="process", timeout_s=0.5)}
    plan = admitted(tmp_path, tools, calls=[
        {"tool": "warm", "args": {}},  # imports the App in the worker first
        {"tool": "p", "args": {"path": str(pidfile), "seconds": 30}},
    ])
    t0 = time.perf_counter()
    got, _, _ = run_plan(plan, mock=False)
    assert time.perf_counter() - t0 < 5
    assert [(r["status"], r["abandoned"]) for r in got] == [("ok", False), ("timeout", False)]
    pid = int(pidfile.read_text())
    assert pid == got[0]["result"]["pid"]  # the warm worker was reused
    assert pid != os.getpid()
    assert gone(pid)


def test_a_worker_deaf_to_term_is_killed_after_the_grace_period(tmp_path):
    from toolloop_cli.engine.procpool import TERM_GRACE_S

    pidfile = tmp_path / "pid"
    tools = {"warm": tool("whoami", isolation="process"),
             "p": tool("pid_sleep", isolation="process", timeout_s=0.3)}
    plan = admitted(tmp_path, tools, calls=[
        {"tool": "warm", "args": {}},
        {"tool": "p", "args": {"path": str(pidfile), "seconds": 30, "ignore_term": True}},
    ])
    got, _, _ = run_plan(plan, mock=False)
    r = got[1]
    assert r["status"] == "timeout" and r["abandoned"] is False
    assert r["duration_ms"] >= (0.3 + TERM_GRACE_S) * 1000 * 0.9
    assert gone(int(pidfile.read_text()))


def test_warm_workers_are_reused_and_closed_when_the_run_ends(tmp_path):
    plan = admitted(tmp_path, {"w": tool("whoami", isolation="process")},
                    calls=[{"tool": "w", "args": {"n": i}} for i in range(5)])
    got, _, _ = run_plan(plan, mock=False)
    pids = {r["result"]["pid"] for r in got}
    assert [r["result"]["received"] for r in got] == [{"n": i} for i in range(5)]
    assert len(pids) == 1 and os.getpid() not in pids
    assert gone(pids.pop())


def test_process_worker_failures_are_receipts(tmp_path):
    tools = {"boom": tool("boom", isolation="process"), "exit": tool("exit_now", isolation="process"),
             "nj": tool("not_json", isolation="process"), "big": tool("big", isolation="process"),
             "w": tool("whoami", isolation="process")}
    plan = admitted(tmp_path, tools, lanes=lanes_of(
        {"tool": "boom", "args": {"message": "no luck"}},
        {"tool": "exit", "args": {"code": 7}},
        {"tool": "nj", "args": {}},
        {"tool": "big", "args": {"n": 2_000_000}},
        {"tool": "w", "args": {}},
    ), mc=5)
    got, _, _ = run_plan(plan, mock=False, output_cap_bytes=1_000_000)
    assert [(r["status"], (r["error"] or {}).get("kind")) for r in got] == [
        ("error", "RuntimeError"), ("error", "worker_died"), ("invalid_output", "not_json"),
        ("invalid_output", "output_too_large"), ("ok", None)]
    assert got[0]["error"]["message"] == "no luck"
    assert "exit code 7" in got[1]["error"]["message"]


# --- asyncio ----------------------------------------------------------------------------------


def test_asyncio_coroutines_are_detected_or_marked():
    import tempfile
    from pathlib import Path

    c = contract_of(Path(tempfile.mkdtemp()), {
        "a": tool("asyncio_library"), "b": tool("asyncio_sleep"), "m": tool("asyncio_marked"),
        "t": tool("trio_library"), "h": tool("hold"), "s": tool("echo")})
    assert {k: t.runtime for k, t in c.subagents["g"].tools.items()} == {
        "a": "asyncio", "b": "asyncio", "m": "asyncio", "t": "trio", "h": "trio", "s": "trio"}


def test_asyncio_coroutines_run_on_asyncio_and_are_cancelled_at_the_deadline(tmp_path):
    tools = {"lib": tool("asyncio_library"), "marked": tool("asyncio_marked"), "trio": tool("trio_library"),
             "sleep": tool("asyncio_sleep", timeout_s=0.2)}
    plan = admitted(tmp_path, tools, lanes=lanes_of(
        {"tool": "lib", "args": {}}, {"tool": "marked", "args": {}}, {"tool": "trio", "args": {}},
        {"tool": "sleep", "args": {"seconds": 30}}, {"tool": "sleep", "args": {"seconds": 0.01}}), mc=5)
    t0 = time.perf_counter()
    got, _, _ = run_plan(plan, mock=False)
    assert time.perf_counter() - t0 < 3
    assert [r["result"] for r in got[:3]] == [{"library": "asyncio"}, {"library": "asyncio"}, {"library": "trio"}]
    assert (got[3]["status"], got[3]["abandoned"]) == ("timeout", False)
    assert got[4]["result"] == {"slept": 0.01, "loop": "asyncio"}
