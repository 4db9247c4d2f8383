"""What App code may do wherever it runs (trio task, worker thread, asyncio loop, worker process):
raise anything, BaseException subclasses included, stop the loop it runs on, import slowly or
not at all, fork. Each ends in one clear receipt, and the run, its loops and its workers go on."""

from __future__ import annotations

import os
import select
import signal

import pytest

from test_calls_common import admitted, run_plan, tool

BASE_KINDS = ["SystemExit", "KeyboardInterrupt", "GeneratorExit", "BaseException", "AppInterrupt"]
RAISERS = {
    "thread": tool("raise_any"),
    "trio": tool("raise_any_trio"),
    "asyncio": tool("raise_any_asyncio"),
    "process": tool("raise_any", isolation="process"),
}


def lanes_of(*calls: dict) -> list[dict]:
    return [{"item_key": str(i), "calls": [c]} for i, c in enumerate(calls)]


def slow_module(**extra) -> dict:
    """A process tool in ``testapp.slow_import``, whose import the environment slows or breaks."""
    return {**tool("echo", isolation="process", **extra), "callable": "testapp.slow_import:ready"}


def gone_within(pid: int, seconds: float) -> bool:
    """Whether process ``pid`` has ended (or ends within ``seconds``): its pidfd turns readable."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        return bool(select.select([fd], [], [], seconds)[0])
    finally:
        os.close(fd)


def kill_if_alive(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


# --- raising anything -------------------------------------------------------------------------


@pytest.mark.parametrize("where", list(RAISERS))
def test_a_tool_raising_any_base_exception_gets_an_error_receipt_and_the_run_goes_on(tmp_path, where, capfd):
    tools = {"raise": RAISERS[where], "echo": tool("echo")}
    calls = [{"tool": "raise", "args": {"kind": k, "message": f"{k} from {where}"}} for k in BASE_KINDS]
    plan = admitted(tmp_path, tools, lanes=lanes_of(*calls, {"tool": "echo", "args": {"after": where}}), mc=1)
    got, _, state = run_plan(plan, mock=False)
    assert [(r["status"], r["error"]) for r in got[:-1]] == [
        ("error", {"kind": k, "message": f"{k} from {where}"}) for k in BASE_KINDS]
    assert (got[-1]["status"], got[-1]["result"]) == ("ok", {"received": {"after": where}})
    assert state.counts["error"] == len(BASE_KINDS)
    err = capfd.readouterr().err
    assert "Traceback" not in err and "from " + where not in err


def test_an_exception_without_a_message_is_named_by_its_kind(tmp_path):
    plan = admitted(tmp_path, {"raise": RAISERS["trio"]}, calls=[{"tool": "raise", "args": {"kind": "SystemExit"}}])
    got, _, _ = run_plan(plan)
    assert got[0]["error"] == {"kind": "SystemExit", "message": "SystemExit"}


def test_trio_cancellation_still_stops_a_trio_tool(tmp_path):
    # the deadline's Cancelled goes through the trio executor untouched: a timeout, not an error
    plan = admitted(tmp_path, {"hang": tool("hang_async", timeout_s=1)}, calls=[{"tool": "hang", "args": {}}])
    got, _, _ = run_plan(plan)
    assert (got[0]["status"], got[0]["error"]["kind"]) == ("timeout", "timeout")


def test_ctrl_c_delivered_by_trio_still_stops_a_library_run(tmp_path):
    # without toolloop's own signal handling (a library run), trio raises KeyboardInterrupt inside
    # whatever runs on its loop: that one is a signal to the program, not the tool's failure
    plan = admitted(tmp_path, {"sigint": tool("sigint_self")}, calls=[{"tool": "sigint", "args": {}}])
    with pytest.raises(BaseException) as info:
        run_plan(plan)
    assert info.type is KeyboardInterrupt or info.group_contains(KeyboardInterrupt)


@pytest.mark.parametrize("fn", ["child_pauses", "child_pauses_trio", "child_pauses_asyncio"])
def test_the_engines_own_signal_goes_through_app_code(tmp_path, fn):
    # a child run that paused, raised through a router's dispatch(): the lane pauses with it
    plan = admitted(tmp_path, {"p": tool(fn), "echo": tool("echo")}, lanes=[
        {"item_key": "a", "calls": [{"call_key": "k", "tool": "p", "args": {"run_id": "child-1"}},
                                    {"call_key": "next", "tool": "echo", "args": {}}]}])
    got, _, state = run_plan(plan, mock=False)
    assert got == []  # no receipt: the call waits with its child
    assert state.paused == [("a", "k", "child-1")]


# --- the asyncio loop survives ----------------------------------------------------------------


def test_the_shared_asyncio_loop_survives_a_coroutine_raising_system_exit(tmp_path):
    tools = {"raise": RAISERS["asyncio"], "sleep": tool("asyncio_sleep", timeout_s=2)}
    plan = admitted(tmp_path, tools, lanes=lanes_of(
        {"tool": "raise", "args": {"kind": "SystemExit", "message": "bye"}},
        {"tool": "raise", "args": {"kind": "KeyboardInterrupt", "message": "stop"}},
        {"tool": "sleep", "args": {"seconds": 0.01}}), mc=1)
    got, _, _ = run_plan(plan, mock=False)
    assert [(r["status"], (r["error"] or {}).get("kind")) for r in got] == [
        ("error", "SystemExit"), ("error", "KeyboardInterrupt"), ("ok", None)]
    assert got[2]["result"] == {"slept": 0.01, "loop": "asyncio"}


def test_the_shared_asyncio_loop_survives_a_callback_raising_system_exit(tmp_path):
    tools = {"exit": tool("asyncio_exit_in_callback", timeout_s=2), "sleep": tool("asyncio_sleep", timeout_s=2)}
    plan = admitted(tmp_path, tools, lanes=lanes_of(
        {"tool": "exit", "args": {}}, {"tool": "sleep", "args": {"seconds": 0.01}}), mc=1)
    got, _, _ = run_plan(plan, mock=False)
    assert [(r["status"], r["result"]) for r in got] == [
        ("ok", {"scheduled": True}), ("ok", {"slept": 0.01, "loop": "asyncio"})]


# --- worker processes -------------------------------------------------------------------------


def test_a_worker_process_reports_a_base_exception_prints_nothing_and_is_reused(tmp_path, capfd):
    tools = {"raise": RAISERS["process"], "who": tool("whoami", isolation="process")}
    plan = admitted(tmp_path, tools, calls=[
        {"tool": "raise", "args": {"kind": "KeyboardInterrupt", "message": "quiet", "with_pid": True}}])
    plan2 = admitted(tmp_path, tools, name="plan2.yml", lanes=lanes_of(
        {"tool": "raise", "args": {"kind": "KeyboardInterrupt", "message": "quiet", "with_pid": True}},
        {"tool": "raise", "args": {"kind": "GeneratorExit", "message": "quiet", "with_pid": True}},
        {"tool": "who", "args": {}}), mc=1)
    got, _, _ = run_plan(plan, mock=False)
    assert got[0]["error"]["kind"] == "KeyboardInterrupt"
    got, _, _ = run_plan(plan2, mock=False)
    pid = got[2]["result"]["pid"]
    assert [(r["status"], r["error"]) for r in got[:2]] == [
        ("error", {"kind": "KeyboardInterrupt", "message": f"quiet in {pid}"}),
        ("error", {"kind": "GeneratorExit", "message": f"quiet in {pid}"})]
    err = capfd.readouterr().err
    assert "Traceback" not in err and "quiet" not in err


def test_importing_the_module_is_not_the_calls_time(tmp_path, monkeypatch):
    # the worker's import takes longer than the tool's timeout, and the call still succeeds
    plan = admitted(tmp_path, {"slow": slow_module(timeout_s=0.3)}, calls=[{"tool": "slow", "args": {"n": 1}}])
    monkeypatch.setenv("TOOLLOOP_TEST_IMPORT_DELAY", "1.0")  # the workers' import only: this process has it
    got, _, _ = run_plan(plan, mock=False)
    assert (got[0]["status"], got[0]["result"]["received"]) == ("ok", {"n": 1})
    assert got[0]["result"]["pid"] != os.getpid()


def test_a_module_that_fails_to_import_in_the_worker_is_an_error_with_its_kind(tmp_path, monkeypatch):
    tools = {"slow": slow_module(), "who": tool("whoami", isolation="process")}
    plan = admitted(tmp_path, tools, lanes=lanes_of({"tool": "slow", "args": {}}, {"tool": "who", "args": {}}), mc=1)
    monkeypatch.setenv("TOOLLOOP_TEST_IMPORT_FAIL", "no database here")
    got, _, _ = run_plan(plan, mock=False)
    assert got[0]["status"] == "error" and got[0]["error"]["kind"] == "ValueError"
    assert "testapp.slow_import" in got[0]["error"]["message"]
    assert "no database here" in got[0]["error"]["message"]
    assert got[1]["status"] == "ok"


def test_an_import_slower_than_its_own_limit_is_an_import_timeout_and_the_worker_is_killed(tmp_path, monkeypatch):
    from toolloop_cli.engine import procpool

    pidfile = tmp_path / "worker.pid"
    plan = admitted(tmp_path, {"slow": slow_module(timeout_s=0.3)}, calls=[{"tool": "slow", "args": {}}])
    # long enough that a loaded machine's worker starts importing (and writes its pid) within it
    monkeypatch.setattr(procpool, "IMPORT_LIMIT_S", 3)
    monkeypatch.setenv("TOOLLOOP_TEST_IMPORT_DELAY", "60")
    monkeypatch.setenv("TOOLLOOP_TEST_IMPORT_PIDFILE", str(pidfile))
    got, _, _ = run_plan(plan, mock=False)
    assert got[0]["status"] == "error"
    assert got[0]["error"] == {
        "kind": "import_timeout",
        "message": "importing module 'testapp.slow_import' in a worker process took longer than 3s"}
    assert gone_within(int(pidfile.read_text()), 0)


def test_a_timeout_kills_the_whole_process_group_of_a_worker_that_forked(tmp_path):
    pidfile = tmp_path / "child.pid"
    plan = admitted(tmp_path, {"fork": tool("fork_sleep", isolation="process", timeout_s=0.5)},
                    calls=[{"tool": "fork", "args": {"path": str(pidfile), "seconds": 60}}])
    got, _, _ = run_plan(plan, mock=False)
    assert (got[0]["status"], got[0]["abandoned"]) == ("timeout", False)
    child = int(pidfile.read_text())
    try:
        assert gone_within(child, 10), "the forked child outlived its worker"
    finally:
        kill_if_alive(child)


def test_children_a_process_tool_left_running_end_with_the_run(tmp_path):
    pidfile = tmp_path / "child.pid"
    plan = admitted(tmp_path, {"fork": tool("fork_sleep", isolation="process")},
                    calls=[{"tool": "fork", "args": {"path": str(pidfile), "seconds": 60, "wait": False}}])
    got, _, _ = run_plan(plan, mock=False)
    child = int(pidfile.read_text())
    assert (got[0]["status"], got[0]["result"]) == ("ok", {"child": child})
    try:
        assert gone_within(child, 10), "the forked child outlived the run"
    finally:
        kill_if_alive(child)
