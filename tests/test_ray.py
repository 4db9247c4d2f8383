"""Calls on a Ray cluster (--executor ray), against a real local Ray started once for this module
with a small object store: receipts as with --executor local, timeouts that kill the task, a worker
lost during a write, source limits, Ctrl-C, and what happens without Ray or without a cluster."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from conftest import ROOT, jsonl, write
from test_calls_common import plan_file, tool
from toolloop_cli.engine.executors import kind_of
from toolloop_cli.engine.run import RunOptions, execute_plan
from toolloop_cli.plan.admit import admit_plan
from toolloop_cli.store import Store

ray = pytest.importorskip("ray")  # the Ray tests need the ray extra (installed by the test extra)

CLUSTER = r"""
import logging, sys, ray
ray.init(address="local", num_cpus=2, object_store_memory=80 * 1024 * 1024, include_dashboard=False,
         logging_level=logging.ERROR)
print(ray.get_runtime_context().gcs_address, flush=True)
sys.stdin.read()
ray.shutdown()
"""

# An App of our own, shipped to the workers from a fresh folder: tools whose effects a test can see.
RAYAPP = '''
import os, signal, time


def where(**kwargs):
    return {"pid": os.getpid()}


async def where_trio():
    import trio

    await trio.sleep(0)
    return {"pid": os.getpid()}


def who():
    from toolloop_cli import current_call

    me = current_call()
    return {"run_id": me.run_id, "seq": me.seq, "attempt": me.attempt, "key": me.idempotency_key,
            "labels": dict(me.labels)}


def pid_file(path, seconds):
    with open(path, "w") as fh:
        fh.write(str(os.getpid()))
    time.sleep(seconds)
    return {"slept": seconds}


def pid_fifo_once(fifo, marker):
    """First call: say its pid through a FIFO, then sleep until killed; later calls return at once."""
    if os.path.exists(marker):
        return {"again": True}
    open(marker, "w").close()
    with open(fifo, "w") as fh:
        fh.write(str(os.getpid()))
    time.sleep(120)
    return {"again": False}


def crash_once(log, marker):
    """Logs each run; the first one kills its own process mid-call."""
    with open(log, "a") as fh:
        fh.write(f"{os.getpid()}\\n")
    if not os.path.exists(marker):
        open(marker, "w").close()
        os.kill(os.getpid(), signal.SIGKILL)
    return {"done": True}


def crash(log):
    with open(log, "a") as fh:
        fh.write(f"{os.getpid()}\\n")
    os.kill(os.getpid(), signal.SIGKILL)


def bounded(log, key, seconds):
    with open(log, "a") as fh:
        fh.write(f"start {key}\\n")
    time.sleep(seconds)
    with open(log, "a") as fh:
        fh.write(f"end {key}\\n")
    return {"key": key}
'''


@pytest.fixture(scope="module")
def cluster():
    """The address of a local Ray (2 CPUs, an 80 MB object store), owned by a helper process, reached
    on 127.0.0.1, without token authentication (a driver reads RAY_AUTH_MODE when it imports ray,
    before any fixture could set it)."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    proc = subprocess.Popen([sys.executable, "-c", CLUSTER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, env={**env, "RAY_AUTH_MODE": "disabled"})
    address = proc.stdout.readline().strip()
    assert address, "the test cluster did not start"
    yield "127.0.0.1:" + address.rpartition(":")[2]
    proc.stdin.close()
    proc.wait(timeout=120)


@pytest.fixture(scope="module")
def rayapp(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("rayapp")
    write(root / "rayapp" / "__init__.py", "")
    write(root / "rayapp" / "tools.py", RAYAPP)
    return root


def app_plan(tmp_path: Path, root: Path, tools: dict, lanes: list[dict], mc: int = 4) -> Path:
    registry = {"version": 1, "app_root": str(root),
                "subagents": {"g": {"runner_defaults": {"tool_timeout_s": 30}, "tools": tools}}}
    write(tmp_path / "registry.yml", json.dumps(registry))
    plan = {"version": 1, "registry": str(tmp_path / "registry.yml"), "subagent": "g", "mode": "parallel",
            "max_concurrency": mc, "lanes": lanes}
    return write(tmp_path / "plan.yml", json.dumps(plan))


def app_tool(fn: str, **extra) -> dict:
    return {"callable": f"rayapp.tools:{fn}", "description": fn, "input_schema": {}, "output_schema": {}, **extra}


def run_in_process(plan: Path, state: Path, **options) -> tuple[list[dict], dict]:
    store = Store(state)
    got: list[dict] = []
    try:
        execute_plan(admit_plan(plan), store, got.append, RunOptions(handle_signals=False, **options))
    finally:
        store.close()
    return [r for r in got if r["type"] == "receipt"], got[-1]


def running(pid: int) -> bool:
    """Whether process ``pid`` exists and has not ended (a zombie has ended)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


VARYING = ("run_id", "receipt_id", "started_at", "finished_at", "duration_ms", "parallel_batch_id",
           "completion_seq")  # times, ids, and the order calls happened to finish in


def steady(records: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in VARYING} for r in records]


# --- which calls go to the cluster ------------------------------------------------------------


def test_sync_and_asyncio_callables_go_to_ray_and_the_rest_stays_in_the_head(tmp_path):
    from test_calls_common import contract_of

    c = contract_of(tmp_path, {"sync": tool("echo"), "iso": tool("echo", isolation="process"),
                               "aio": tool("asyncio_library"), "trio": tool("hold"),
                               "router": tool("route_sync", dispatch=["sync"])})
    tools = c.subagents["g"].tools
    assert {k: kind_of(t, "ray") for k, t in tools.items()} == {
        "sync": "ray", "iso": "ray", "aio": "ray", "trio": "trio", "router": "thread"}
    assert {k: kind_of(t) for k, t in tools.items()} == {
        "sync": "thread", "iso": "process", "aio": "asyncio", "trio": "trio", "router": "thread"}


# --- receipts ---------------------------------------------------------------------------------


def test_receipts_are_those_of_a_local_run_apart_from_times_and_ids(tmp_path, cluster):
    counter = tmp_path / "counter.txt"
    tools = {
        "echo": tool("echo"), "iso": tool("echo", isolation="process"), "boom": tool("boom"),
        "not_json": tool("not_json"), "big": tool("big"), "wrong": tool("echo", output_schema={"required": ["x"]}),
        "secret": tool("secret_echo", redact=["/password"]), "cached": tool("echo", cacheable=True),
        "flaky": tool("fail_then_ok", retry={"max_attempts": 3, "on": ["error"], "backoff_s": 0}),
        "aio": tool("asyncio_library"), "trio": tool("hold"),
    }
    lanes = [
        {"item_key": "a", "calls": [{"tool": "echo", "args": {"x": 1}},
                                    {"tool": "iso", "args": {"y": "two"}}]},
        {"item_key": "b", "calls": [{"tool": "boom", "args": {"message": "no luck"}}, {"tool": "echo", "args": {}}]},
        {"item_key": "c", "calls": [{"tool": "not_json", "args": {}}]},
        {"item_key": "d", "calls": [{"tool": "big", "args": {"n": 5000}}]},
        {"item_key": "e", "calls": [{"tool": "wrong", "args": {"z": 1}}]},
        {"item_key": "f", "calls": [{"tool": "secret", "args": {"user": "ann", "password": "fail-hunter2"}}]},
        {"item_key": "g", "calls": [{"tool": "secret", "args": {"user": "bob", "password": "hunter3"}}]},
        {"item_key": "h", "calls": [{"tool": "cached", "args": {"k": 1}}, {"tool": "cached", "args": {"k": 1}}]},
        {"item_key": "i", "calls": [{"tool": "flaky", "args": {"path": str(counter), "failures": 1}}]},
        {"item_key": "j", "calls": [{"tool": "aio", "args": {}}, {"tool": "trio", "args": {"key": "t"}}]},
    ]
    plan = plan_file(tmp_path, tools, lanes=lanes, mc=4)
    local, local_summary = run_in_process(plan, tmp_path / "local", output_cap_bytes=4096)
    counter.unlink()
    remote, remote_summary = run_in_process(plan, tmp_path / "ray", output_cap_bytes=4096, executor="ray",
                                            ray_address=cluster)
    assert steady(remote) == steady(local)
    # every kind of outcome is in there
    assert {(r["status"], (r["error"] or {}).get("kind")) for r in remote} >= {
        ("ok", None), ("error", "RuntimeError"), ("invalid_output", "not_json"),
        ("invalid_output", "output_too_large"), ("invalid_output", "schema"), ("error", "PermissionError"),
        ("skipped", "skipped")}
    assert "hunter2" not in json.dumps(remote)
    assert [r["cache"] for r in remote if r["tool"] == "cached"] == ["miss", "hit"]
    assert [r["attempts"] for r in remote if r["tool"] == "flaky"] == [2]
    assert (local_summary["executor"], remote_summary["executor"]) == ("local", "ray")
    drop = ("run_id", "duration_ms", "executor", "chain_sha256")
    assert {k: v for k, v in remote_summary.items() if k not in drop} == \
           {k: v for k, v in local_summary.items() if k not in drop}


def test_calls_run_in_ray_workers_isolated_ones_each_in_a_process_of_its_own(tmp_path, cluster, rayapp):
    from toolloop_cli.engine.identity import idempotency_key

    tools = {"where": app_tool("where"), "iso": app_tool("where", isolation="process"),
             "trio": app_tool("where_trio"), "who": app_tool("who")}
    lanes = [{"item_key": "s", "calls": [{"tool": "where", "args": {"n": i}} for i in range(3)]},
             {"item_key": "i", "calls": [{"tool": "iso", "args": {"n": i}} for i in range(3)]},
             {"item_key": "t", "calls": [{"tool": "trio", "args": {}}, {"tool": "who", "args": {}}]}]
    got, summary = run_in_process(app_plan(tmp_path, rayapp, tools, lanes), tmp_path / "state", executor="ray",
                                  ray_address=cluster)
    assert summary["status"] == "ok", got
    who = next(r for r in got if r["tool"] == "who")
    # current_call() in the worker: the identity the head gave the call, out of band
    assert who["result"] == {"run_id": summary["run_id"], "seq": who["seq"], "attempt": 1,
                             "key": idempotency_key(summary["run_id"], who["seq"]), "labels": {}}
    pids = {t: [r["result"]["pid"] for r in got if r["tool"] == t] for t in ("where", "iso", "trio")}
    assert os.getpid() not in pids["where"] + pids["iso"]
    assert len(set(pids["iso"])) == 3  # max_calls=1: a fresh worker process for every call
    assert pids["trio"] == [os.getpid()]  # trio callables stay in the head


# --- timeouts and lost workers ------------------------------------------------------------------


def test_a_timeout_kills_the_task_and_the_run_goes_on(tmp_path, cluster, rayapp):
    tools = {"sleepy": app_tool("pid_file", timeout_s=1), "where": app_tool("where")}
    pidf = tmp_path / "pid"
    lanes = [{"item_key": "a", "calls": [{"tool": "sleepy", "args": {"path": str(pidf), "seconds": 120}}]},
             {"item_key": "b", "calls": [{"tool": "where", "args": {}}]}]
    got, summary = run_in_process(app_plan(tmp_path, rayapp, tools, lanes), tmp_path / "state", executor="ray",
                                  ray_address=cluster)
    assert [(r["status"], r["abandoned"], r["error"]) for r in got] == [
        ("timeout", False, {"kind": "timeout", "message": "no result within 1s"}), ("ok", False, None)]
    pid = int(pidf.read_text())
    assert pid != os.getpid() and not running(pid)  # the task's worker process was killed


def test_a_worker_lost_during_a_write_is_interrupted_and_resume_runs_it_once(tmp_path, cluster, rayapp, cli):
    write_log, read_log = tmp_path / "write.log", tmp_path / "read.log"
    tools = {"write": app_tool("crash_once", effect="write"), "read": app_tool("crash"),
             "where": app_tool("where")}
    lanes = [{"item_key": "w", "calls": [{"tool": "write", "args": {"log": str(write_log),
                                                                     "marker": str(tmp_path / "m")}},
                                         {"tool": "where", "args": {}}]},
             {"item_key": "r", "calls": [{"tool": "read", "args": {"log": str(read_log)}}]}]
    plan = app_plan(tmp_path, rayapp, tools, lanes)
    first = cli("run", str(plan), "--executor", "ray", "--ray-address", cluster, "--format", "jsonl")
    recs = jsonl(first.stdout)
    assert first.returncode == 1, first.stderr.decode()
    by = {(r["item_key"], r["tool"]): r for r in recs if r["type"] == "receipt"}
    assert by[("w", "write")]["status"] == "interrupted"
    assert by[("w", "write")]["error"]["kind"] == "worker_lost"
    assert "--retry-interrupted" in by[("w", "write")]["error"]["message"]
    assert by[("w", "where")]["status"] == "skipped"
    assert (by[("r", "read")]["status"], by[("r", "read")]["error"]["kind"]) == ("error", "worker_lost")
    assert len(write_log.read_text().split()) == 1 and len(read_log.read_text().split()) == 1
    run_id = recs[-1]["run_id"]

    kept = cli("resume", run_id, "--format", "jsonl")  # an interrupted write is never run again unasked
    assert kept.returncode == 1 and len(write_log.read_text().split()) == 1
    again = cli("resume", run_id, "--retry-interrupted", "--format", "jsonl")
    recs = jsonl(again.stdout)
    by = {(r["item_key"], r["tool"]): r for r in recs if r["type"] == "receipt"}
    assert (by[("w", "write")]["status"], by[("w", "where")]["status"]) == ("ok", "ok"), again.stderr.decode()
    assert by[("r", "read")]["status"] == "error"  # a failed read waits for --retry-failed
    assert recs[-1]["executor"] == "ray"  # the run's executor (and cluster) unless resume says otherwise
    assert len(write_log.read_text().split()) == 2  # the crash, then exactly one run on purpose


# --- back-pressure ------------------------------------------------------------------------------


def one_at_a_time(log: Path, calls: int) -> None:
    """Every start in ``log`` is followed by its own end: never two calls at once."""
    lines = log.read_text().split("\n")[:-1]
    assert len(lines) == 2 * calls
    for start, end in zip(lines[::2], lines[1::2]):
        assert start.startswith("start ") and end == "end " + start.split()[1], lines


def test_source_limits_and_max_concurrency_hold_across_the_cluster(tmp_path, cluster, rayapp):
    # the cluster has room for two calls at once: the head is what keeps them to one
    limited, bounded = tmp_path / "limited.log", tmp_path / "bounded.log"
    tools = {"one": app_tool("bounded", concurrency={"max_in_flight": 1}), "free": app_tool("bounded")}
    lanes = [{"item_key": str(i), "calls": [{"tool": "one", "args": {"log": str(limited), "key": str(i),
                                                                       "seconds": 0.2}}]} for i in range(4)]
    got, summary = run_in_process(app_plan(tmp_path / "a", rayapp, tools, lanes, mc=4), tmp_path / "state",
                                  executor="ray", ray_address=cluster)
    assert summary["status"] == "ok", got
    one_at_a_time(limited, 4)  # max_in_flight: 1, with -j 4
    lanes = [{"item_key": str(i), "calls": [{"tool": "free", "args": {"log": str(bounded), "key": str(i),
                                                                        "seconds": 0.2}}]} for i in range(3)]
    got, summary = run_in_process(app_plan(tmp_path / "b", rayapp, tools, lanes, mc=1), tmp_path / "state",
                                  executor="ray", ray_address=cluster)
    assert summary["status"] == "ok", got
    one_at_a_time(bounded, 3)  # no limit, -j 1: never more tasks submitted than lanes run at once


# --- the command line ---------------------------------------------------------------------------


def test_the_example_parallel_plan_runs_on_a_local_ray_started_for_the_run(cli):
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    proc = cli("run", str(ROOT / "plans" / "parallel.yml"), "--executor", "ray", "--format", "jsonl", env=env)
    recs = jsonl(proc.stdout)
    assert proc.returncode == 0, proc.stderr.decode()
    assert [r["status"] for r in recs[:-1]] == ["ok"] * 6
    assert recs[-1]["executor"] == "ray" and recs[-1]["status"] == "ok"
    local = cli("run", str(ROOT / "plans" / "parallel.yml"), "--format", "jsonl", "--state-dir", "other")
    assert steady(recs[:-1]) == steady(jsonl(local.stdout)[:-1])


def test_ctrl_c_leaves_the_journal_intact_and_no_task_running(tmp_path, cluster, rayapp):
    fifo, marker = tmp_path / "fifo", tmp_path / "marker"
    os.mkfifo(fifo)
    tools = {"slow": app_tool("pid_fifo_once"), "where": app_tool("where")}
    lanes = [{"item_key": "a", "calls": [{"tool": "where", "args": {}},
                                         {"tool": "slow", "args": {"fifo": str(fifo), "marker": str(marker)}}]}]
    plan = app_plan(tmp_path, rayapp, tools, lanes)
    env = {**os.environ, "NO_COLOR": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "toolloop_cli", "run", str(plan), "--executor", "ray",
                             "--ray-address", cluster, "--format", "jsonl"], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    seen: dict = {}

    def read_pid() -> None:
        with open(fifo) as fh:  # blocks until the call in the Ray worker writes its pid
            seen["pid"] = int(fh.read())

    reader = threading.Thread(target=read_pid, daemon=True)
    reader.start()
    reader.join(timeout=120)
    if "pid" not in seen:
        proc.kill()
        raise AssertionError(proc.communicate()[1].decode())
    assert running(seen["pid"])
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err.decode()
    assert not running(seen["pid"])  # the task was killed with the run, not left on the cluster
    recs = jsonl(out)
    assert [(r["tool"], r["status"]) for r in recs[:-1]] == [("where", "ok"), ("slow", "cancelled")]
    assert recs[-1]["status"] == "interrupted"
    run_id = recs[-1]["run_id"]
    shown = subprocess.run([sys.executable, "-m", "toolloop_cli", "runs", "show", run_id, "--format", "jsonl"],
                           cwd=tmp_path, env=env, capture_output=True)
    assert [r for r in jsonl(shown.stdout) if r["type"] == "receipt"] == recs[:-1]
    # resume may choose another executor: the cancelled call runs again here, in this process
    done = subprocess.run([sys.executable, "-m", "toolloop_cli", "resume", run_id, "--executor", "local",
                           "--format", "jsonl"], cwd=tmp_path, env=env, capture_output=True)
    recs = jsonl(done.stdout)
    assert done.returncode == 0, done.stderr.decode()
    assert [r["status"] for r in recs[:-1]] == ["ok", "ok"] and recs[1]["result"] == {"again": True}
    assert recs[-1]["executor"] == "local"


def test_without_ray_installed_the_flag_is_a_usage_error_with_the_install_line(tmp_path, cli):
    blocker = write(tmp_path / "noray" / "sitecustomize.py", "import sys\nsys.modules['ray'] = None\n")
    env = {"PYTHONPATH": str(blocker.parent)}
    plan = str(ROOT / "plans" / "parallel.yml")
    proc = cli("run", plan, "--executor", "ray", "--format", "jsonl", env=env)
    assert proc.returncode == 2 and proc.stdout == b""
    assert proc.stderr.decode().splitlines() == [
        "toolloop: error: --executor ray needs Ray, which is not installed here: pip install 'toolloop-cli[ray]'"]
    assert jsonl(cli("runs", "list", "--format", "jsonl").stdout) == []  # nothing was journaled
    local = cli("run", plan, "--format", "jsonl", env=env)  # the default never imports ray
    assert local.returncode == 0 and jsonl(local.stdout)[-1]["executor"] == "local"


def test_a_cluster_that_cannot_be_reached_is_an_error_and_journals_nothing(tmp_path, cli):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = cli("run", str(ROOT / "plans" / "parallel.yml"), "--executor", "ray", "--ray-address",
               f"127.0.0.1:{port}", "--format", "jsonl")
    assert proc.returncode == 2 and proc.stdout == b""
    assert f"cannot reach the Ray cluster at 127.0.0.1:{port}" in proc.stderr.decode()
    assert "Traceback" not in proc.stderr.decode()
    assert jsonl(cli("runs", "list", "--format", "jsonl").stdout) == []
    client = cli("run", str(ROOT / "plans" / "parallel.yml"), "--executor", "ray", "--ray-address", "ray://h:10001")
    assert client.returncode == 2 and "Ray Client addresses (ray://) are not supported" in client.stderr.decode()


# --- joining a cluster: bounded, and signals always work -------------------------------------


class Silent:
    """A listener that accepts connections and never says a word (not Ray, or a Ray that hangs),
    on one port of each of ``hosts``; ``accepted`` is set once ``count`` connections came in."""

    def __init__(self, *hosts: str, count: int = 1):
        self.socks: list[socket.socket] = []
        self.port = 0
        for host in dict.fromkeys(hosts):
            sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
            sock.bind((host, self.port))
            sock.listen(64)
            self.port = sock.getsockname()[1]
            self.socks.append(sock)
            threading.Thread(target=self._accept, args=(sock,), daemon=True).start()
        self.count = count
        self.conns: list[socket.socket] = []
        self.accepted = threading.Event()

    def _accept(self, sock: socket.socket) -> None:
        while True:
            try:
                conn, _ = sock.accept()
            except OSError:
                return
            self.conns.append(conn)
            if len(self.conns) >= self.count:
                self.accepted.set()

    def close(self) -> None:
        for conn in self.conns + self.socks:
            conn.close()


def dialled_host() -> str:
    """The host Ray dials for 127.0.0.1 on this machine (its own address; loopback on a machine
    that has no other)."""
    import ray.util

    return ray.util.get_node_ip_address()


def test_a_cluster_that_listens_on_loopback_only_is_a_clear_error_not_a_hang(tmp_path, cli):
    """Ray dials this machine's own address for 127.0.0.1: a check that reached loopback passed,
    then Ray retried for ever. The address Ray dials is the one checked, and the error says so."""
    silent = Silent("127.0.0.1")
    try:
        proc = cli("run", str(ROOT / "plans" / "parallel.yml"), "--executor", "ray", "--ray-address",
                   f"127.0.0.1:{silent.port}", "--format", "jsonl", env={"TOOLLOOP_RAY_CONNECT_TIMEOUT_S": "3"})
    finally:
        silent.close()
    err = proc.stderr.decode()
    assert proc.returncode == 2 and proc.stdout == b"", err
    assert err.startswith(f"toolloop: error: cannot reach the Ray cluster at 127.0.0.1:{silent.port}"), err
    if dialled_host() != "127.0.0.1":
        assert f"Ray dials {dialled_host()}:{silent.port}" in err and "--node-ip-address" in err
    else:  # loopback is what Ray dials here: the listener answers, and the deadline ends the wait
        assert "no answer from Ray within 3s" in err
    assert "Traceback" not in err
    assert jsonl(cli("runs", "list", "--format", "jsonl").stdout) == []


def test_joining_a_listener_that_never_speaks_ray_ends_at_the_connect_deadline(tmp_path, cli):
    silent = Silent("127.0.0.1", dialled_host())  # whichever of the two Ray dials, it hangs there
    try:
        proc = cli("run", str(ROOT / "plans" / "parallel.yml"), "--executor", "ray", "--ray-address",
                   f"127.0.0.1:{silent.port}", "--format", "jsonl", env={"TOOLLOOP_RAY_CONNECT_TIMEOUT_S": "2"})
    finally:
        silent.close()
    err = proc.stderr.decode()
    assert proc.returncode == 2 and proc.stdout == b"", err
    assert f"cannot reach the Ray cluster at 127.0.0.1:{silent.port}" in err
    assert "no answer from Ray within 2s" in err and "TOOLLOOP_RAY_CONNECT_TIMEOUT_S" in err
    assert "Traceback" not in err
    assert jsonl(cli("runs", "list", "--format", "jsonl").stdout) == []
    bad = cli("run", str(ROOT / "plans" / "parallel.yml"), "--executor", "ray", "--ray-address",
              f"127.0.0.1:{silent.port}", env={"TOOLLOOP_RAY_CONNECT_TIMEOUT_S": "soon"})
    assert bad.returncode == 2 and "TOOLLOOP_RAY_CONNECT_TIMEOUT_S=soon is not a number of seconds" in bad.stderr.decode()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_while_joining_a_cluster_ends_with_130_and_the_journal_intact(tmp_path, cli, sig):
    """Ray's connect blocks in native code: Ctrl-C and SIGTERM were never seen, and only SIGKILL
    ended toolloop. A resume of a journaled run, interrupted while it joins, leaves it as it was."""
    plan = write(tmp_path / "plan.yml", json.dumps({
        "version": 1, "registry": str(ROOT / "registries" / "demo.yml"), "subagent": "worker-a",
        "mode": "sequential", "calls": [{"tool": "transform", "args": {"text": "a"}},
                                        {"tool": "fail", "args": {"reason": "once"}}]}))
    first = cli("run", str(plan), "--format", "jsonl")
    run_id = jsonl(first.stdout)[-1]["run_id"]
    before = cli("runs", "show", run_id, "--format", "jsonl").stdout
    assert jsonl(before), first.stderr.decode()
    silent = Silent("127.0.0.1", dialled_host(), count=2)  # toolloop's check, then Ray itself
    # Ray's own waits made long, as on the cluster where the connect never came back
    env = {**os.environ, "NO_COLOR": "1", "TOOLLOOP_RAY_CONNECT_TIMEOUT_S": "600",
           "RAY_gcs_rpc_server_connect_timeout_s": "600", "RAY_gcs_server_request_timeout_seconds": "600"}
    proc = subprocess.Popen([sys.executable, "-m", "toolloop_cli", "resume", run_id, "--retry-failed",
                             "--executor", "ray", "--ray-address", f"127.0.0.1:{silent.port}", "--format", "jsonl"],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert silent.accepted.wait(180), "toolloop never tried to join the cluster"
        # a person whose first Ctrl-C went unseen presses it again (toolloop says to): a signal that
        # lands while Ray's native connect starts is at times not delivered to Python; the bug this
        # guards against ignored every signal for as long as Ray waited (600 s here)
        for _attempt in range(4):
            proc.send_signal(sig)
            try:
                out, err = proc.communicate(timeout=30)
                break
            except subprocess.TimeoutExpired:
                continue
        else:
            proc.kill()
            raise AssertionError(f"{sig.name} did not end toolloop: {proc.communicate()[1].decode()[-2000:]}")
    finally:
        proc.kill()
        silent.close()
    assert proc.returncode == 130, err.decode()
    assert "Traceback" not in err.decode() and ("interrupted" in err.decode() or "stopping now" in err.decode()), err.decode()
    assert jsonl(cli("runs", "show", run_id, "--format", "jsonl").stdout) == jsonl(before)
    verify = cli("runs", "verify", run_id)
    assert verify.returncode == 0, verify.stderr.decode()
